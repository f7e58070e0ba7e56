//! Waiting without polling: the process's one inotify instance (Linux), the holder's pidfd,
//! cancellation handles, and the sleep that waits on all of them at once.

use super::{check, owned, Wake};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A waiter's registrations: a watch in the process's inotify instance (with an eventfd that
/// whoever reads the instance's events uses to wake this waiter) and, for a pid-judged holder,
/// a pidfd. Dropping it removes the watch once no other waiter of the process shares it.
#[derive(Debug)]
pub struct Watch {
    #[cfg(target_os = "linux")]
    inotify: Option<inotify::Registration>,
    pidfd: Option<OwnedFd>,
}

/// One inotify instance for the whole process (closing an instance waits for an SRCU grace
/// period in the kernel, up to tens of milliseconds, and each user may have only 128 of them,
/// so instances are neither made per wait nor kept per thread). Waiters add a watch on the lock
/// directory they wait for (shared, counted, when several wait for the same one), each with an
/// eventfd of its own; whichever waiter finds the instance readable reads every queued event
/// and wakes the waiters of the watches they name. A forked child makes its own instance.
#[cfg(target_os = "linux")]
mod inotify {
    use super::super::{check, getpid, owned};
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::sync::Mutex;

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
        pid: u32,
        fd: OwnedFd,
        watches: HashMap<libc::c_int, Watched>,
        generations: u64,
    }

    static INSTANCE: Mutex<Option<Instance>> = Mutex::new(None);

    /// One waiter's share of a watch.
    #[derive(Debug)]
    pub(super) struct Registration {
        pub(super) instance: RawFd,
        wd: libc::c_int,
        generation: u64,
        seen: std::cell::Cell<u64>,
        pub(super) waker: OwnedFd,
    }

    fn lock() -> std::sync::MutexGuard<'static, Option<Instance>> {
        INSTANCE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches the directory open as `dir` (through `/proc/self/fd/N`, so the very inode that
    /// was judged, whatever its name is now). `None` when inotify is not available.
    pub(super) fn register(dir: RawFd) -> Option<Registration> {
        // SAFETY: eventfd with valid flags returns a new descriptor or -1.
        let waker =
            owned(check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).ok()?);
        let path = CString::new(format!("/proc/self/fd/{dir}")).ok()?;
        let mut slot = lock();
        let pid = getpid();
        if slot.as_ref().is_none_or(|i| i.pid != pid) {
            // SAFETY: inotify_init1 with valid flags returns a new descriptor or -1.
            let fd =
                check(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) }).ok()?;
            // A forked parent's instance is dropped here: only this process's copy closes.
            *slot = Some(Instance {
                pid,
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
            seen: std::cell::Cell::new(watched.epoch),
            waker,
        })
    }

    /// Reads every queued event, bumps the watches they name and wakes their waiters.
    pub(super) fn dispatch() {
        let mut slot = lock();
        let Some(inst) = slot.as_mut().filter(|i| i.pid == getpid()) else {
            return;
        };
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into a local buffer of the given length from the non-blocking
            // instance.
            let n = unsafe { libc::read(inst.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return; // EAGAIN: drained (or an error that the next poll reports again)
            }
            let mut at = 0;
            while at + std::mem::size_of::<libc::inotify_event>() <= n as usize {
                // SAFETY: the kernel wrote whole events; the header is read unaligned from the
                // byte buffer.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                at += std::mem::size_of::<libc::inotify_event>() + ev.len as usize;
                if ev.len > 0 {
                    // About an entry inside (a reader of owner.json closing it), not the
                    // lock directory itself: nothing a waiter waits for.
                    continue;
                }
                let gone = ev.mask & libc::IN_IGNORED != 0;
                if let Some(w) = inst.watches.get_mut(&ev.wd) {
                    w.epoch += 1;
                    for &waker in &w.wakers {
                        let one: u64 = 1;
                        // SAFETY: writes 8 bytes to a waiter's eventfd; the waiter removes it
                        // from this list (under this lock) before closing it.
                        unsafe { libc::write(waker, (&one as *const u64).cast(), 8) };
                    }
                }
                if gone {
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
            let slot = lock();
            let epoch = slot
                .as_ref()
                .and_then(|i| i.watches.get(&self.wd))
                .filter(|w| w.generation == self.generation)
                .map(|w| w.epoch);
            let changed = woken || epoch != Some(self.seen.get());
            if let Some(e) = epoch {
                self.seen.set(e);
            }
            changed
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let mut slot = lock();
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

/// A cancellation signal shared between a waiter and whoever may cancel it (an `eventfd` on
/// Linux, a pipe elsewhere): once fired, it stays fired.
#[derive(Debug)]
pub struct CancelHandle {
    read: OwnedFd,
    #[cfg(not(target_os = "linux"))]
    write: OwnedFd,
    fired: AtomicBool,
}

impl CancelHandle {
    /// Makes a new, unfired handle.
    pub fn new() -> io::Result<Arc<CancelHandle>> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: eventfd with valid flags returns a new descriptor or -1.
            let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
            Ok(Arc::new(CancelHandle {
                read: owned(fd),
                fired: AtomicBool::new(false),
            }))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut fds = [0; 2];
            // SAFETY: `fds` is a valid array of two descriptors for pipe to fill.
            check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
            let (read, write) = (owned(fds[0]), owned(fds[1]));
            for fd in [&read, &write] {
                // SAFETY: both descriptors are open and owned here.
                check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
            }
            Ok(Arc::new(CancelHandle {
                read,
                write,
                fired: AtomicBool::new(false),
            }))
        }
    }

    /// Fires the handle, waking every sleeper polling it.
    pub fn fire(&self) {
        if self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        let one: u64 = 1;
        #[cfg(target_os = "linux")]
        let fd = self.read.as_raw_fd();
        #[cfg(not(target_os = "linux"))]
        let fd = self.write.as_raw_fd();
        // SAFETY: writes 8 bytes from a live u64 to an open descriptor we own. A failure (the
        // counter cannot overflow from 0) would only lose a wake-up that `fired` still records.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }

    /// Whether the handle has fired.
    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

fn ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        // Round up so that a sleep never returns before its deadline.
        Some(d) => d.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    }
}

#[cfg(target_os = "linux")]
pub(super) fn watch(lock: &OwnedFd, pid: Option<u32>) -> io::Result<Option<Watch>> {
    let inotify = inotify::register(lock.as_raw_fd());
    let pidfd = pid.and_then(|pid| {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        (fd >= 0).then(|| owned(fd as libc::c_int))
    });
    if inotify.is_none() && pidfd.is_none() {
        return Ok(None);
    }
    Ok(Some(Watch { inotify, pidfd }))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn watch(_lock: &OwnedFd, _pid: Option<u32>) -> io::Result<Option<Watch>> {
    Ok(None)
}

/// Sleeps until `watch` fires, `timeout` passes or `cancel` is fired.
pub(super) fn sleep(
    watch: Option<&Watch>,
    timeout: Option<Duration>,
    cancel: Option<&CancelHandle>,
) -> io::Result<Wake> {
    if cancel.is_some_and(|c| c.is_fired()) {
        return Ok(Wake::Cancelled);
    }
    // Slots: the cancel's fd, the shared inotify instance, this waiter's eventfd, the
    // holder's pidfd (each only when there is one; -1 is ignored by poll).
    let cancel_fd = cancel.map_or(-1, |c| c.read.as_raw_fd());
    #[cfg(target_os = "linux")]
    let reg = watch.and_then(|w| w.inotify.as_ref());
    #[cfg(target_os = "linux")]
    let (instance, waker) = reg.map_or((-1, -1), |r| (r.instance, r.waker.as_raw_fd()));
    #[cfg(not(target_os = "linux"))]
    let (instance, waker) = (-1, -1);
    let pidfd = watch
        .and_then(|w| w.pidfd.as_ref())
        .map_or(-1, |f| f.as_raw_fd());
    let mut fds: Vec<libc::pollfd> = [cancel_fd, instance, waker, pidfd]
        .into_iter()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms(left)) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(Wake::TimedOut);
        }
        if fds[0].revents != 0 {
            return Ok(Wake::Cancelled);
        }
        if fds[3].revents != 0 {
            return Ok(Wake::Changed); // the holder exited (or its pidfd says something)
        }
        #[cfg(target_os = "linux")]
        if let Some(reg) = reg {
            if fds[1].revents != 0 {
                inotify::dispatch();
            }
            if reg.changed() {
                return Ok(Wake::Changed);
            }
            // Another waiter's event: sleep on.
            for f in &mut fds {
                f.revents = 0;
            }
            continue;
        }
        return Ok(Wake::Changed);
    }
}
