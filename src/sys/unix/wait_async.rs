//! The asynchronous sleep (feature `tokio`): the descriptors of [`super::wait`]'s sleep, each
//! registered with the runtime's reactor through `AsyncFd`, so that a waiting task holds no
//! thread. Linux: the inotify instance, this waiter's eventfd and the holder's pidfd; macOS
//! and FreeBSD: the waiter's kqueue (itself pollable).

use super::platform::Watch;
use super::wait::CancelHandle;
use super::{check, owned};
use crate::sys::Wake;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A duplicate of `fd` for the reactor: a descriptor is registered once per reactor, and some
/// of ours are shared (Linux's process-wide inotify instance, a cancel handle several waits
/// use), so each registration gets a descriptor of its own for the same open file.
fn registered(fd: RawFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `fd` is open for the caller's borrow; F_DUPFD_CLOEXEC returns a new descriptor
    // or -1.
    let dup = owned(check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?);
    // SAFETY: an `OwnedFd` is open for as long as it lives and always returns the same
    // descriptor, which is what the reactor's registration needs.
    unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }.map_err(io::Error::from)
}

/// Registers a descriptor with the current runtime's reactor and lets it go: tokio's panic,
/// now rather than at the first wait, when the runtime has no I/O enabled.
pub(crate) fn check_reactor() {
    if let Ok((a, _b)) = std::os::unix::net::UnixStream::pair() {
        drop(registered(a.as_raw_fd()));
    }
}

/// What woke a sleeper.
enum Ready {
    Cancelled,
    /// Which of [`Watch::fds`] are readable.
    Watch([bool; 3]),
    /// Time to look again: [`Watch::recheck`]'s, or a registration's that failed.
    Recheck,
}

/// How often a sleeper looks again when a descriptor of its watch could not be registered
/// with the reactor (out of descriptors: each registration needs a duplicate).
const UNREGISTERED: Duration = Duration::from_millis(100);

/// Sleeps until `watch` fires or `cancel` is fired (with neither, forever: the caller bounds
/// it), in the reactor of the runtime it is polled on (a tokio runtime with I/O enabled must
/// be current). A watch that cannot see what it waits for asks to be looked at again
/// ([`Watch::recheck`]): the sleep then ends as `Changed` after that long. So does a sleep
/// whose descriptors could not all be registered (out of descriptors), every
/// [`UNREGISTERED`]: it degrades to looking again, as a blocking sleep without a watch does,
/// rather than failing. The cancel is heard through its `Notify`, with no descriptor.
/// Dropping the future leaves nothing registered.
///
/// # Errors
///
/// When the reactor reports an error on a registered descriptor.
pub(crate) async fn sleep_async(
    watch: Option<&Watch>,
    cancel: Option<&CancelHandle>,
) -> io::Result<Wake> {
    // Made before the check, so that a fire after it is heard.
    let notified = cancel.map(|c| c.notify().notified());
    tokio::pin!(notified);
    if cancel.is_some_and(|c| c.is_fired()) {
        return Ok(Wake::Cancelled);
    }
    let (fds, unregistered) = registrations(watch);
    let recheck = watch
        .and_then(Watch::recheck)
        .into_iter()
        .chain(unregistered.then_some(UNREGISTERED))
        .min()
        .map(tokio::time::sleep);
    tokio::pin!(recheck);
    loop {
        let ready = poll_fn(|cx| {
            if let Some(n) = notified.as_mut().as_pin_mut() {
                if n.poll(cx).is_ready() {
                    return Poll::Ready(Ok(Ready::Cancelled));
                }
            }
            match readable(&fds, cx) {
                Ok(ready) if ready.contains(&true) => return Poll::Ready(Ok(Ready::Watch(ready))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Some(r) = recheck.as_mut().as_pin_mut() {
                if r.poll(cx).is_ready() {
                    return Poll::Ready(Ok(Ready::Recheck));
                }
            }
            Poll::Pending
        })
        .await?;
        match ready {
            Ready::Cancelled => return Ok(Wake::Cancelled),
            // Not the caller's deadline: time to look again.
            Ready::Recheck => return Ok(Wake::Changed),
            Ready::Watch(ready) => {
                if watch.is_none_or(|w| w.woken(ready)) {
                    return Ok(Wake::Changed);
                }
                // Another waiter's events: sleep on.
            }
        }
    }
}

/// The watch's descriptors registered with the reactor, by their place in [`Watch::fds`], and
/// whether any could not be.
fn registrations(watch: Option<&Watch>) -> (Vec<(usize, AsyncFd<OwnedFd>)>, bool) {
    let mut fds = Vec::new();
    let mut unregistered = false;
    for (slot, fd) in watch.map_or([-1; 3], Watch::fds).into_iter().enumerate() {
        if fd >= 0 {
            match registered(fd) {
                Ok(r) => fds.push((slot, r)),
                Err(_) => unregistered = true,
            }
        }
    }
    (fds, unregistered)
}

/// Which of the registered descriptors `fds` are readable now (registering `cx` with the
/// others).
fn readable(fds: &[(usize, AsyncFd<OwnedFd>)], cx: &mut Context<'_>) -> io::Result<[bool; 3]> {
    let mut ready = [false; 3];
    for (slot, fd) in fds {
        match fd.poll_read_ready(cx) {
            // Edge-triggered: what made it readable is consumed by `woken` (or does not
            // matter: a pidfd stays readable once its process is gone).
            Poll::Ready(Ok(mut guard)) => {
                guard.clear_ready();
                ready[*slot] = true;
            }
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => {}
        }
    }
    Ok(ready)
}
