//! Waiting without polling: cancellation handles, and the sleep that waits at once for a
//! cancel and for the platform's watch (Linux: inotify and a pidfd; macOS and FreeBSD: a
//! kqueue).

use super::platform::Watch;
use super::{check, owned, Wake};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cancellation signal shared between a waiter and whoever may cancel it (an `eventfd` on
/// Linux, a pipe elsewhere): once fired, it stays fired.
#[derive(Debug)]
pub struct CancelHandle {
    pub(super) read: OwnedFd,
    #[cfg(not(target_os = "linux"))]
    write: OwnedFd,
    fired: AtomicBool,
    /// Wakes asynchronous waiters that wait for the cancel alone (a task queued behind
    /// another), without a descriptor each.
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

impl CancelHandle {
    /// Makes a new, unfired handle.
    pub fn new() -> io::Result<Arc<CancelHandle>> {
        #[cfg(target_os = "linux")]
        // SAFETY: eventfd with valid flags returns a new descriptor or -1.
        let read = owned(check(unsafe {
            libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
        })?);
        #[cfg(not(target_os = "linux"))]
        let (read, write) = pipe()?;
        Ok(Arc::new(CancelHandle {
            read,
            #[cfg(not(target_os = "linux"))]
            write,
            fired: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }))
    }

    /// Fires the handle, waking every sleeper polling it.
    pub fn fire(&self) {
        if self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        #[cfg(feature = "tokio")]
        self.notify.notify_waiters();
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

    /// Notified when the handle fires (a `Notified` made before [`CancelHandle::is_fired`]
    /// is checked sees a fire after it).
    #[cfg(feature = "tokio")]
    pub fn notify(&self) -> &tokio::sync::Notify {
        &self.notify
    }
}

/// A pipe, both of its ends closed on exec.
#[cfg(not(target_os = "linux"))]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two descriptors for pipe to fill.
    check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
    let (read, write) = (owned(fds[0]), owned(fds[1]));
    for fd in [&read, &write] {
        // SAFETY: both descriptors are open and owned here.
        check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    }
    Ok((read, write))
}

fn ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        // Round up so that a sleep never returns before its deadline.
        Some(d) => d.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    }
}

/// What [`sleep`] polls: the cancel's fd, then the watch's (each -1 where there is none; poll
/// skips it).
fn slots(watch: Option<&Watch>, cancel: Option<&CancelHandle>) -> Vec<libc::pollfd> {
    let cancel_fd = cancel.map_or(-1, |c| c.read.as_raw_fd());
    let watched = watch.map_or([-1; 3], Watch::fds);
    std::iter::once(cancel_fd)
        .chain(watched)
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect()
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
    let mut fds = slots(watch, cancel);
    // A deadline beyond what the clock can count (`Duration::MAX`) is no deadline.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // A watch that cannot see what it waits for (a pid-judged holder's exit without a pidfd or
    // a process filter; on macOS, a beacon's release by death when the holder's process cannot
    // be watched) asks to be looked at again now and then.
    let recheck = watch.and_then(Watch::recheck);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let capped = recheck.filter(|r| left.is_none_or(|l| l > *r));
        let wait = capped.or(left);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms(wait)) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            // Capped: not the caller's deadline, but time to look again.
            return Ok(if capped.is_some() {
                Wake::Changed
            } else {
                Wake::TimedOut
            });
        }
        if fds[0].revents != 0 {
            return Ok(Wake::Cancelled);
        }
        let ready = [1, 2, 3].map(|i| fds[i].revents != 0);
        if watch.is_none_or(|w| w.woken(ready)) {
            return Ok(Wake::Changed);
        }
        // Another waiter's event: sleep on.
        fds.iter_mut().for_each(|f| f.revents = 0);
    }
}
