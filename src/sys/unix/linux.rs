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
/// a pidfd. Dropping it removes the watch once no other waiter of the process shares it: at
/// once, or, where its directory moved (a tombstone on its way out), at the process's next
/// registration.
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

mod inotify;

#[cfg(test)]
mod tests {
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
