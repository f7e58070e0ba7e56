//! Linux: the no-replace rename (`renameat2`), the identity facts of `/proc`, and waiting with
//! the process's one inotify instance and the holder's pidfd.

use super::{at_names, no_exchange, no_exclusive_rename, owned, read_small};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The filesystem `dir` is on, from `/proc/self/mountinfo`: the mount whose device is the
/// directory's (`major:minor`, as `st_dev` gives it), its type (`ext4`, `fuse.bindfs`, `nfs4`)
/// and its superblock options (`local_lock=flock` on a per-client NFS mount).
pub(super) fn filesystem(dir: &OwnedFd) -> Option<(String, String)> {
    let st = super::fstat(dir.as_raw_fd()).ok()?;
    let device = format!("{}:{}", libc::major(st.st_dev), libc::minor(st.st_dev));
    let file = std::fs::File::open("/proc/self/mountinfo").ok()?;
    let table = super::read_to_limit(file, 1 << 24, 0).ok()?;
    mount_of(&String::from_utf8_lossy(&table), &device)
}

/// The type and superblock options of the last mount of `device` in a mountinfo table (the
/// last is the one on top).
fn mount_of(table: &str, device: &str) -> Option<(String, String)> {
    table
        .lines()
        .filter(|line| line.split(' ').nth(2) == Some(device))
        .filter_map(|line| {
            let (_, after) = line.split_once(" - ")?;
            let mut fields = after.split(' ');
            let kind = fields.next()?.to_owned();
            let _source = fields.next();
            Some((kind, fields.next().unwrap_or("").to_owned()))
        })
        .next_back()
}

/// `renameat2(RENAME_NOREPLACE)`; [`io::ErrorKind::Unsupported`] where the kernel or the
/// filesystem does not know the flag (asked again next time: another filesystem may know it).
pub(super) fn rename_exclusive(at: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    // Interrupted (NFS `intr` mounts): tried again. Had the rename happened, the retry fails
    // and the caller checks whether the target is its own.
    at_names(at, from, to, |at, f, t| {
        // SAFETY: both names are NUL-terminated and relative to the open directory `at`;
        // renameat2 takes no pointers beyond them.
        unsafe { libc::syscall(libc::SYS_renameat2, at, f, at, t, libc::RENAME_NOREPLACE) as _ }
    })
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => no_exclusive_rename(),
        _ => e,
    })
}

/// `renameat2(RENAME_EXCHANGE)`; [`io::ErrorKind::Unsupported`] where the kernel or the
/// filesystem refuses the flag (`EINVAL`: FUSE, NFS, older kernels).
pub(super) fn exchange(at: &OwnedFd, a: &str, b: &str) -> io::Result<()> {
    // An interrupted exchange did not happen (the filesystems that do it are local), so it
    // is tried again like any call.
    at_names(at, a, b, |at, f, t| {
        // SAFETY: both names are NUL-terminated and relative to the open directory `at`;
        // renameat2 takes no pointers beyond them.
        unsafe { libc::syscall(libc::SYS_renameat2, at, f, at, t, libc::RENAME_EXCHANGE) as _ }
    })
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => no_exchange(),
        _ => e,
    })
}

/// The names in the directory open at `fresh` (see [`list_opened`]).
pub(super) fn list(fresh: OwnedFd, each: &mut dyn FnMut(&[u8])) -> io::Result<()> {
    list_opened(&fresh, each)
}

/// The names in the directory open at `fresh` (a descriptor of the caller's own, not read
/// yet: its offset moves), each passed to `each`, read with `getdents64` straight into a
/// buffer of our own: two calls for a small directory, where the C library's stream
/// (`fdopendir`) adds an `fstat` and two `fcntl`s (a release lists the queue on its way to the
/// handoff).
pub(super) fn list_opened(fresh: &OwnedFd, each: &mut dyn FnMut(&[u8])) -> io::Result<()> {
    // Room for about a hundred entries of the protocol's names per call; more take more calls.
    let mut buf = vec![0u8; 8192];
    loop {
        let n = super::retry(|| {
            // SAFETY: `fresh` is open and `buf` is writable for its whole length.
            unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fresh.as_raw_fd(),
                    buf.as_mut_ptr(),
                    buf.len(),
                ) as libc::c_int
            }
        })? as usize;
        if n == 0 {
            return Ok(());
        }
        // Each record: d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), then d_name,
        // NUL-terminated, padded to d_reclen. Read by offsets, never trusted past `n`.
        let mut at = 0;
        while at + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen < 19 || at + reclen > n {
                return Err(io::Error::other("getdents64 returned a malformed record"));
            }
            let name = &buf[at + 19..at + reclen];
            let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            each(&name[..len]);
            at += reclen;
        }
    }
}

/// Field 22 (`starttime`, clock ticks since boot) of `/proc/<pid>/stat`.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&read_small(&format!("/proc/{pid}/stat"))?)
}

/// Parses field 22 out of a `/proc/<pid>/stat` line; the command name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// `/proc/sys/kernel/random/boot_id`: a UUID the kernel draws at each boot.
pub(super) fn boot_id() -> Option<String> {
    read_small("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned())
}

/// When this kernel booted: now, less the time since boot (`CLOCK_BOOTTIME`, which counts
/// suspended time too).
pub(super) fn booted() -> Option<std::time::SystemTime> {
    // SAFETY: timespec is plain data; all-zero is valid, and clock_gettime overwrites it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut t) } != 0 {
        return None;
    }
    let up = std::time::Duration::new(u64::try_from(t.tv_sec).ok()?, t.tv_nsec as u32);
    std::time::SystemTime::now().checked_sub(up)
}

/// The pid namespace (`/proc/self/ns/pid` link target, such as `pid:[4026531836]`).
pub(super) fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()?
        .into_os_string()
        .into_string()
        .ok()
}

/// A waiter's registrations: a watch in the process's inotify instance (with an eventfd that
/// whoever reads the instance's events uses to wake this waiter) and, for a pid-judged holder,
/// a pidfd. Dropping it removes the watch once no other waiter of the process shares it.
#[derive(Debug)]
pub struct Watch {
    inotify: Option<inotify::Registration>,
    pidfd: Option<OwnedFd>,
    /// A holder judged by pid whose exit no pidfd reports (a kernel before 5.3, a sandbox that
    /// refuses `pidfd_open`, a pid already gone): looked at again every [`RECHECK`].
    recheck: bool,
}

/// How often a waiter looks again at a holder whose exit it cannot be woken for.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Registers a waiter: an inotify watch on `lock` (its rename, removal, mode change, and the
/// last close of the holder's beacon: its release or its death), and a pidfd for `pid` unless
/// the holder has a beacon (whose close inotify already reports).
pub(super) fn watch(lock: &OwnedFd, pid: Option<u32>, beacon: bool) -> io::Result<Option<Watch>> {
    let inotify = inotify::register(lock.as_raw_fd());
    let pidfd = pid.filter(|_| !beacon).and_then(|pid| {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        (fd >= 0).then(|| owned(fd as libc::c_int))
    });
    if inotify.is_none() && pidfd.is_none() {
        return Ok(None);
    }
    let recheck = pid.is_some() && !beacon && pidfd.is_none();
    Ok(Some(Watch {
        inotify,
        pidfd,
        recheck,
    }))
}

impl Watch {
    /// For a holder judged by pid without a pidfd; never for a beacon, whose last close
    /// inotify sees, whoever closes it.
    pub(super) fn recheck(&self) -> Option<std::time::Duration> {
        self.recheck.then_some(RECHECK)
    }

    /// The descriptors a sleeper polls for this watch: the shared inotify instance, this
    /// waiter's eventfd, the holder's pidfd (-1 where there is none; poll skips it).
    pub(super) fn fds(&self) -> [RawFd; 3] {
        let (instance, waker) = self
            .inotify
            .as_ref()
            .map_or((-1, -1), |r| (r.instance, r.waker.as_raw_fd()));
        let pidfd = self.pidfd.as_ref().map_or(-1, |f| f.as_raw_fd());
        [instance, waker, pidfd]
    }

    /// Given which of [`Watch::fds`] poll found ready, whether this waiter should look again
    /// (`false`: the events were another waiter's, sleep on).
    pub(super) fn woken(&self, ready: [bool; 3]) -> bool {
        if ready[2] {
            return true; // the holder exited (or its pidfd says something)
        }
        let Some(reg) = &self.inotify else {
            return true;
        };
        if ready[0] {
            inotify::dispatch();
        }
        reg.changed()
    }
}

/// One inotify instance for the whole process (closing an instance waits for an SRCU grace
/// period in the kernel, up to tens of milliseconds, and each user may have only 128 of them,
/// so instances are neither made per wait nor kept per thread). Waiters add a watch on the lock
/// directory they wait for (shared, counted, when several wait for the same one), each with an
/// eventfd of its own; whichever waiter finds the instance readable reads every queued event
/// and wakes the waiters of the watches they name. A forked child makes its own instance (see
/// [`PerProcess`](crate::sys::PerProcess)).
mod inotify {
    use super::super::{check, owned};
    use crate::sys::PerProcess;
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// The events that may mean a lock directory changed hands: the final close of the
    /// holder's beacon (its release or its death: the moment the kernel drops its flock), a
    /// release's rename, a removal, a mode change.
    const MASK: u32 = libc::IN_CLOSE_NOWRITE
        | libc::IN_CLOSE_WRITE
        | libc::IN_MOVE_SELF
        | libc::IN_DELETE_SELF
        | libc::IN_ATTRIB;

    struct Watched {
        /// Tells this watch apart from a later one that got the same number.
        generation: u64,
        /// Bumped by every event on it.
        epoch: u64,
        /// The eventfds of the waiters sharing it.
        wakers: Vec<RawFd>,
    }

    struct Instance {
        fd: OwnedFd,
        watches: HashMap<libc::c_int, Watched>,
        generations: u64,
    }

    static INSTANCE: PerProcess<Option<Instance>> = PerProcess::new(|| None);

    /// One waiter's share of a watch.
    #[derive(Debug)]
    pub(super) struct Registration {
        pub(super) instance: RawFd,
        wd: libc::c_int,
        generation: u64,
        seen: AtomicU64,
        pub(super) waker: OwnedFd,
    }

    /// Watches the directory open as `dir` (through `/proc/self/fd/N`, so the very inode that
    /// was judged, whatever its name is now). `None` when inotify is not available.
    pub(super) fn register(dir: RawFd) -> Option<Registration> {
        // SAFETY: eventfd with valid flags returns a new descriptor or -1.
        let waker =
            owned(check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).ok()?);
        let path = CString::new(format!("/proc/self/fd/{dir}")).ok()?;
        let mut slot = INSTANCE.lock();
        if slot.is_none() {
            // SAFETY: inotify_init1 with valid flags returns a new descriptor or -1.
            let fd =
                check(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) }).ok()?;
            *slot = Some(Instance {
                fd: owned(fd),
                watches: HashMap::new(),
                generations: 0,
            });
        }
        let inst = slot.as_mut().expect("just made");
        // SAFETY: the instance is open and `path` is NUL-terminated.
        let wd = unsafe { libc::inotify_add_watch(inst.fd.as_raw_fd(), path.as_ptr(), MASK) };
        if wd < 0 {
            return None;
        }
        inst.generations += 1;
        let fresh = inst.generations;
        let watched = inst.watches.entry(wd).or_insert(Watched {
            generation: fresh,
            epoch: 0,
            wakers: Vec::new(),
        });
        watched.wakers.push(waker.as_raw_fd());
        Some(Registration {
            instance: inst.fd.as_raw_fd(),
            wd,
            generation: watched.generation,
            seen: AtomicU64::new(watched.epoch),
            waker,
        })
    }

    /// Tells the waiters of watch `w` that its directory may have changed.
    fn wake(w: &mut Watched) {
        w.epoch += 1;
        for &waker in &w.wakers {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes to a waiter's eventfd; the waiter removes it from this
            // list (under the instance's lock) before closing it.
            unsafe { libc::write(waker, (&one as *const u64).cast(), 8) };
        }
    }

    /// Reads every queued event, bumps the watches they name and wakes their waiters. When
    /// events were lost (the queue overflowed while no waiter read it: a stopped or busy
    /// process, a storm of readers) or the instance cannot be read, every waiter is woken to
    /// look again: any of them may have missed its lock's release.
    pub(super) fn dispatch() {
        let mut slot = INSTANCE.lock();
        let Some(inst) = slot.as_mut() else {
            return;
        };
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into a local buffer of the given length from the non-blocking
            // instance.
            let n = unsafe { libc::read(inst.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => return, // drained
                    Some(libc::EINTR) => continue,
                    _ => {
                        inst.watches.values_mut().for_each(wake);
                        return;
                    }
                }
            }
            if n == 0 {
                return;
            }
            let mut at = 0;
            while at + std::mem::size_of::<libc::inotify_event>() <= n as usize {
                // SAFETY: the kernel wrote whole events; the header is read unaligned from the
                // byte buffer.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                at += std::mem::size_of::<libc::inotify_event>() + ev.len as usize;
                if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                    inst.watches.values_mut().for_each(wake);
                    continue;
                }
                if ev.len > 0 {
                    // About an entry inside (a reader of owner.json closing it), not the
                    // lock directory itself: nothing a waiter waits for.
                    continue;
                }
                if let Some(w) = inst.watches.get_mut(&ev.wd) {
                    wake(w);
                }
                if ev.mask & libc::IN_IGNORED != 0 {
                    // The kernel dropped the watch (its inode died): forget the number.
                    inst.watches.remove(&ev.wd);
                }
            }
        }
    }

    impl Registration {
        /// Whether an event on this watch was seen since the last call (and consumes the
        /// waiter's wake-up).
        pub(super) fn changed(&self) -> bool {
            let mut buf = 0u64;
            // SAFETY: reads 8 bytes into a local u64 from our non-blocking eventfd.
            let woken =
                unsafe { libc::read(self.waker.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) }
                    == 8;
            let slot = INSTANCE.lock();
            let epoch = slot
                .as_ref()
                .and_then(|i| i.watches.get(&self.wd))
                .filter(|w| w.generation == self.generation)
                .map(|w| w.epoch);
            let changed = woken || epoch != Some(self.seen.load(Relaxed));
            if let Some(e) = epoch {
                self.seen.store(e, Relaxed);
            }
            changed
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let mut slot = INSTANCE.lock();
            let Some(inst) = slot.as_mut().filter(|i| i.fd.as_raw_fd() == self.instance) else {
                return;
            };
            let waker = self.waker.as_raw_fd();
            let last = match inst.watches.get_mut(&self.wd) {
                Some(w) if w.generation == self.generation => {
                    w.wakers.retain(|&f| f != waker);
                    w.wakers.is_empty()
                }
                _ => false,
            };
            if last {
                inst.watches.remove(&self.wd);
                // SAFETY: removes a watch of our open instance; one the kernel already dropped
                // just fails.
                unsafe { libc::inotify_rm_watch(inst.fd.as_raw_fd(), self.wd) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::sys::{Real, System, Wake};
    use std::time::Duration;

    /// Readers of what a lock directory holds (status reading owner.json) do not wake its
    /// waiters; its own rename does.
    #[test]
    fn only_the_lock_directory_itself_wakes_a_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let sys = Real;
        let parent = sys.open_dir_path(tmp.path()).unwrap();
        sys.mkdir_at(&parent, "l").unwrap();
        let lock = sys.open_dir_at(&parent, "l").unwrap();
        sys.create_file_at(&lock, "owner.json", b"{}", false, None)
            .unwrap();
        let watch = sys.watch(&lock, None, true).unwrap().expect("inotify");
        for _ in 0..5 {
            sys.read_file_at(&lock, "owner.json", 100).unwrap();
        }
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_millis(50)), None)
            .unwrap();
        assert_eq!(wake, Wake::TimedOut, "reading owner.json woke the waiter");
        let _ = sys.rename_noreplace(&parent, "l", "m").unwrap();
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_secs(5)), None)
            .unwrap();
        assert_eq!(wake, Wake::Changed, "the rename did not wake the waiter");
    }

    /// When the process's inotify queue overflows before anyone reads it, the events lost
    /// (a release among them) are replaced by one that says so: every waiter is woken to look
    /// again. (The overflow was once ignored: a waiter slept on a free lock.)
    #[test]
    fn an_overflowed_queue_wakes_every_waiter() {
        let tmp = tempfile::tempdir().unwrap();
        let sys = Real;
        let parent = sys.open_dir_path(tmp.path()).unwrap();
        sys.mkdir_at(&parent, "l").unwrap();
        let lock = sys.open_dir_at(&parent, "l").unwrap();
        for f in ["a", "b"] {
            sys.create_file_at(&lock, f, b"", false, None).unwrap();
        }
        let watch = sys.watch(&lock, None, true).unwrap().expect("inotify");
        // More events than the queue holds (16384 by default; alternate names: identical
        // events in a row are merged), while no one reads them: entries inside the lock
        // closed after reading, as `dirlock status` does to its record.
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|m| m.trim().parse().ok())
            .unwrap_or(16384);
        for i in 0..max + 10 {
            sys.read_file_at(&lock, ["a", "b"][i % 2], 10).unwrap();
        }
        // The release: its event is lost in the overflow.
        let _ = sys.rename_noreplace(&parent, "l", "m").unwrap();
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_secs(5)), None)
            .unwrap();
        assert_eq!(wake, Wake::Changed, "the overflow did not wake the waiter");
    }

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let line = "4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(super::parse_start_time(line), Some(987654));
        assert_eq!(super::parse_start_time("garbage"), None);
    }
}

#[cfg(test)]
mod filesystem_tests {
    use super::*;

    #[test]
    fn the_mount_of_a_device_is_found_by_its_number() {
        let table = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
            60 27 0:52 / /mnt/x rw,nosuid - fuse.bindfs /src rw,user_id=0\n\
            61 27 0:53 / /mnt/n rw - nfs4 srv:/e rw,vers=4.2,local_lock=flock\n\
            62 27 0:52 / /mnt/y rw - fuse.bindfs /src2 rw,user_id=1\n";
        assert_eq!(
            mount_of(table, "254:0"),
            Some(("ext4".into(), "rw,discard".into()))
        );
        assert_eq!(
            mount_of(table, "0:52"),
            Some(("fuse.bindfs".into(), "rw,user_id=1".into()))
        );
        assert_eq!(
            mount_of(table, "0:53").unwrap().1,
            "rw,vers=4.2,local_lock=flock"
        );
        assert_eq!(mount_of(table, "9:9"), None);
        let dir = std::fs::File::open("/proc").unwrap();
        let fd: OwnedFd = dir.into();
        assert_eq!(filesystem(&fd).map(|f| f.0).as_deref(), Some("proc"));
    }
}

#[cfg(test)]
mod list_tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// Every name `read_dir` sees, over many `getdents64` calls (names long enough that a few
    /// dozen fill the buffer), with `.` and `..` passed too, each exactly once.
    #[test]
    fn a_listing_sees_every_name_once_across_many_reads() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..700 {
            let name = format!("{i:04}.{}", "x".repeat(i % 200));
            std::fs::create_dir(tmp.path().join(name)).unwrap();
        }
        std::fs::write(
            tmp.path()
                .join(std::ffi::OsStr::from_bytes(b"\xffnot-utf8")),
            b"",
        )
        .unwrap();
        let fd: OwnedFd = std::fs::File::open(tmp.path()).unwrap().into();
        let mut seen = Vec::new();
        list(fd, &mut |b| seen.push(b.to_vec())).unwrap();
        let mut expected: Vec<Vec<u8>> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .chain([b".".to_vec(), b"..".to_vec()])
            .collect();
        expected.sort();
        seen.sort();
        assert_eq!(seen.len(), 703);
        assert_eq!(seen, expected);
    }
}
