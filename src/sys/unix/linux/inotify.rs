//! One inotify instance for the whole process (closing an instance waits for an SRCU grace
//! period in the kernel, up to tens of milliseconds, and each user may have only 128 of them,
//! so instances are neither made per wait nor kept per thread). Waiters add a watch on the lock
//! directory they wait for (shared, counted, when several wait for the same one), each with an
//! eventfd of its own; whichever waiter finds the instance readable reads every queued event
//! and wakes the waiters of the watches they name. A forked child makes its own instance (see
//! [`PerProcess`]).

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
    /// Its directory was renamed or removed: a lock released or handed on, whose directory
    /// is a tombstone on its way out (with it, the kernel drops the watch).
    moved: bool,
}

struct Instance {
    fd: OwnedFd,
    watches: HashMap<libc::c_int, Watched>,
    generations: u64,
    /// Watches of moved directories that no waiter shares any more, still in the kernel: the
    /// next registration removes them, before it adds its own. The waiter that drops one has
    /// typically just been handed the lock, and `inotify_rm_watch` cost it about 20 µs, an
    /// eighth of a handoff. A tombstone's few events meanwhile name no watch here, and are
    /// passed over. The watch of a directory that did not move (a wait that timed out or
    /// was cancelled: the lock is still held) is removed at once: its events could go on
    /// waking the process's other waiters for as long as it stayed.
    retired: Vec<libc::c_int>,
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
            retired: Vec::new(),
        });
    }
    let inst = slot.as_mut().expect("just made");
    // First: a watch of the same directory added before its removal would be that very
    // watch (the kernel gives one inode one watch), removed with it.
    for wd in inst.retired.drain(..) {
        // SAFETY: removes a watch of our open instance; one the kernel already dropped
        // (its directory gone) just fails. No watch was added since it was retired, so its
        // number names no other.
        unsafe { libc::inotify_rm_watch(inst.fd.as_raw_fd(), wd) };
    }
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
        moved: false,
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
                w.moved |= ev.mask & (libc::IN_MOVE_SELF | libc::IN_DELETE_SELF) != 0;
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
            unsafe { libc::read(self.waker.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) } == 8;
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
                w.wakers.is_empty().then_some(w.moved)
            }
            _ => None,
        };
        let Some(moved) = last else {
            return;
        };
        inst.watches.remove(&self.wd);
        if moved {
            inst.retired.push(self.wd);
        } else {
            // SAFETY: removes a watch of our open instance; one the kernel already dropped
            // just fails.
            unsafe { libc::inotify_rm_watch(inst.fd.as_raw_fd(), self.wd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::sys::{Real, System, Wake};
    use std::time::Duration;

    /// A temporary directory holding a lock directory `l`: it, and both open.
    fn lock_dir() -> (
        tempfile::TempDir,
        std::os::fd::OwnedFd,
        std::os::fd::OwnedFd,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let parent = Real.open_dir_path(tmp.path()).unwrap();
        Real.mkdir_at(&parent, "l").unwrap();
        let lock = Real.open_dir_at(&parent, "l").unwrap();
        (tmp, parent, lock)
    }

    /// Readers of what a lock directory holds (status reading owner.json) do not wake its
    /// waiters; its own rename does.
    #[test]
    fn only_the_lock_directory_itself_wakes_a_watch() {
        let (_tmp, parent, lock) = lock_dir();
        let sys = Real;
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

    /// The inodes this process's inotify instance watches (`/proc/self/fdinfo`).
    fn watched_inodes(instance: std::os::fd::RawFd) -> Vec<u64> {
        std::fs::read_to_string(format!("/proc/self/fdinfo/{instance}"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ino:")))
            .map(|ino| u64::from_str_radix(ino, 16).unwrap())
            .collect()
    }

    /// Waits for a change of the directory `watch` watches (its rename), as a waiter does.
    fn woken_by_its_move(watch: &super::super::Watch) {
        let wake = Real
            .sleep(Some(watch), Some(Duration::from_secs(5)), None)
            .unwrap();
        assert_eq!(wake, Wake::Changed, "the rename did not wake the waiter");
    }

    /// The watch of a moved directory (a tombstone on its way out), which no waiter shares any
    /// more, leaves the kernel by the next registration at the latest: many of them retired
    /// before one registration, as by waits that ended at once, do not pile up.
    #[test]
    fn retired_watches_are_removed_by_the_next_registration() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let sys = Real;
        let parent = sys.open_dir_path(tmp.path()).unwrap();
        let (mut ours, mut watches) = (Vec::new(), Vec::new());
        for i in 0..20 {
            let name = format!("l{i}");
            sys.mkdir_at(&parent, &name).unwrap();
            let lock = sys.open_dir_at(&parent, &name).unwrap();
            watches.push(sys.watch(&lock, None, true).unwrap().expect("inotify"));
            ours.push(std::fs::metadata(tmp.path().join(&name)).unwrap().ino());
        }
        for (i, watch) in watches.iter().enumerate() {
            let _ = sys
                .rename_noreplace(&parent, &format!("l{i}"), &format!("m{i}"))
                .unwrap();
            woken_by_its_move(watch);
        }
        drop(watches);
        sys.mkdir_at(&parent, "last").unwrap();
        let lock = sys.open_dir_at(&parent, "last").unwrap();
        let watch = sys.watch(&lock, None, true).unwrap().expect("inotify");
        let instance = watch.inotify.as_ref().unwrap().instance;
        let left: Vec<u64> = watched_inodes(instance)
            .into_iter()
            .filter(|i| ours.contains(i))
            .collect();
        assert!(
            left.is_empty(),
            "{} retired watches are still in the kernel",
            left.len()
        );
    }

    /// The watch of a directory that did not move (a wait that timed out or was cancelled,
    /// the lock still held) leaves the kernel when its last waiter drops it: kept, its
    /// events would wake the process's other waiters for nothing.
    #[test]
    fn the_watch_of_a_directory_still_in_place_is_removed_at_once() {
        use std::os::unix::fs::MetadataExt;
        let (tmp, _parent, lock) = lock_dir();
        let sys = Real;
        let ino = std::fs::metadata(tmp.path().join("l")).unwrap().ino();
        let watch = sys.watch(&lock, None, true).unwrap().expect("inotify");
        let instance = watch.inotify.as_ref().unwrap().instance;
        assert!(watched_inodes(instance).contains(&ino), "not watched");
        drop(watch);
        assert!(
            !watched_inodes(instance).contains(&ino),
            "the watch stayed in the kernel"
        );
    }

    /// A directory watched again after its watch retired is watched anew: its next rename
    /// wakes the new waiter, and nothing did before it.
    #[test]
    fn a_directory_watched_again_after_its_watch_retired_wakes_its_waiter() {
        let (_tmp, parent, lock) = lock_dir();
        let sys = Real;
        let first = sys.watch(&lock, None, true).unwrap().expect("inotify");
        let _ = sys.rename_noreplace(&parent, "l", "m").unwrap();
        woken_by_its_move(&first);
        drop(first);
        let watch = sys.watch(&lock, None, true).unwrap().expect("inotify");
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_millis(50)), None)
            .unwrap();
        assert_eq!(
            wake,
            Wake::TimedOut,
            "the waiter was woken with nothing changed"
        );
        let _ = sys.rename_noreplace(&parent, "m", "n").unwrap();
        woken_by_its_move(&watch);
    }

    /// When the process's inotify queue overflows before anyone reads it, the events lost
    /// (a release among them) are replaced by one that says so: every waiter is woken to look
    /// again. (The overflow was once ignored: a waiter slept on a free lock.)
    #[test]
    fn an_overflowed_queue_wakes_every_waiter() {
        let (_tmp, parent, lock) = lock_dir();
        let sys = Real;
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
}
