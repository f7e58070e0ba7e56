//! Waiting on macOS and FreeBSD: a kqueue of the waiter's own (they are cheap to make and to
//! close there, unlike Linux's inotify instances), holding
//!
//! - an `EVFILT_VNODE` filter on the lock directory (its own descriptor, duplicated, so the
//!   registration lives as long as the watch): its rename (a release), removal, revocation and
//!   attribute change, and on FreeBSD its closes (`NOTE_CLOSE`: the last close of the holder's
//!   beacon is its release or its death);
//! - an `EVFILT_PROC`/`NOTE_EXIT` filter on the holder's pid when there is one: a pid-judged
//!   holder's exit, or, for a beacon holder, the exit of the process its record names (macOS
//!   reports no close, so a holder that dies without renaming is seen through its exit).
//!
//! A kqueue's descriptor is readable while it has events, so the sleeper polls it beside the
//! cancel handle; when it is, the events are drained and the waiter looks again. Every event
//! in it is this waiter's own, so there is no dispatch between waiters as on Linux.

use super::{check, owned, retry};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// One waiter's kqueue and the lock directory descriptor its vnode filter is registered on.
#[derive(Debug)]
pub struct Watch {
    kq: OwnedFd,
    /// Kept open for the registration (closing it would drop the filter).
    _dir: OwnedFd,
    /// What decides the holder's fate and nothing here reports (a beacon's release by death on
    /// macOS, which has no `NOTE_CLOSE`, or a pid-judged holder's exit, when its process could
    /// not be watched): looked at again every 100 ms.
    recheck: bool,
}

/// The vnode events that may mean the lock directory changed hands.
fn vnode_events(beacon: bool) -> u32 {
    let moved = libc::NOTE_DELETE | libc::NOTE_RENAME | libc::NOTE_ATTRIB | libc::NOTE_REVOKE;
    #[cfg(target_os = "freebsd")]
    if beacon {
        return moved | libc::NOTE_CLOSE | libc::NOTE_CLOSE_WRITE;
    }
    #[cfg(not(target_os = "freebsd"))]
    let _ = beacon;
    moved
}

/// A change (`EV_ADD`) of one filter.
fn change(ident: usize, filter: i16, flags: u16, fflags: u32) -> libc::kevent {
    // SAFETY: kevent is plain data (integers and a null user pointer); all-zero is valid.
    let mut ev: libc::kevent = unsafe { std::mem::zeroed() };
    ev.ident = ident as _;
    ev.filter = filter as _;
    ev.flags = flags as _;
    ev.fflags = fflags as _;
    ev
}

/// Applies one change to `kq` (no events are collected).
fn register(kq: &OwnedFd, ev: &libc::kevent) -> io::Result<()> {
    let (none, no_timeout) = (std::ptr::null_mut(), std::ptr::null());
    // SAFETY: `kq` is an open kqueue; one change is read from `ev`; no event list (null, 0)
    // and no timeout pointer are given.
    retry(|| unsafe { libc::kevent(kq.as_raw_fd(), ev, 1, none, 0, no_timeout) }).map(drop)
}

/// Registers a waiter: the lock directory's vnode events and, when given, `pid`'s exit.
pub(super) fn watch(lock: &OwnedFd, pid: Option<u32>, beacon: bool) -> io::Result<Option<Watch>> {
    // SAFETY: kqueue takes no arguments and returns a new descriptor or -1.
    let kq = owned(check(unsafe { libc::kqueue() })?);
    // SAFETY: `kq` is open; F_SETFD takes an integer flag.
    check(unsafe { libc::fcntl(kq.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    // SAFETY: `lock` is open; F_DUPFD_CLOEXEC returns a new descriptor or -1.
    let dir = owned(check(unsafe {
        libc::fcntl(lock.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0)
    })?);
    register(
        &kq,
        &change(
            dir.as_raw_fd() as usize,
            libc::EVFILT_VNODE,
            libc::EV_ADD | libc::EV_CLEAR,
            vnode_events(beacon),
        ),
    )?;
    let mut exit_watched = false;
    if let Some(pid) = pid.filter(|&p| p > 0 && p <= i32::MAX as u32) {
        let exit = change(
            pid as usize,
            libc::EVFILT_PROC,
            libc::EV_ADD,
            libc::NOTE_EXIT,
        );
        match register(&kq, &exit) {
            Ok(()) => exit_watched = true,
            // Gone already (the caller's next look sees it), or not ours to watch (another
            // user's process: the directory's events still come).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::EPERM)) => {}
            Err(e) => return Err(e),
        }
    }
    // What nothing here reports is looked at again: a beacon's release by death where there
    // is no `NOTE_CLOSE` (macOS) and its holder's exit is not watched, and the exit of a
    // holder judged by pid that could not be watched.
    let recheck = !exit_watched
        && if beacon {
            cfg!(not(target_os = "freebsd"))
        } else {
            pid.is_some()
        };
    Ok(Some(Watch {
        kq,
        _dir: dir,
        recheck,
    }))
}

impl Watch {
    /// How often to look again at a holder nothing here reports the end of.
    pub(super) fn recheck(&self) -> Option<std::time::Duration> {
        self.recheck
            .then_some(std::time::Duration::from_millis(100))
    }

    /// The descriptor a sleeper polls for this watch: the kqueue (readable while it has
    /// events), then two unused slots.
    pub(super) fn fds(&self) -> [RawFd; 3] {
        [self.kq.as_raw_fd(), -1, -1]
    }

    /// Given which of [`Watch::fds`] poll found ready, whether to look again: when the kqueue
    /// is, its events are drained (every one is ours) and the answer is yes.
    pub(super) fn woken(&self, ready: [bool; 3]) -> bool {
        if !ready[0] {
            return false;
        }
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: kevent is plain data; all-zero is valid, and the kernel overwrites it.
        let mut events: [libc::kevent; 8] = unsafe { std::mem::zeroed() };
        let (kq, out) = (self.kq.as_raw_fd(), events.as_mut_ptr());
        loop {
            // SAFETY: `kq` is open; no changes; up to 8 events are written into `events`; the
            // zero timeout makes it return at once.
            let n = unsafe { libc::kevent(kq, std::ptr::null(), 0, out, events.len() as _, &zero) };
            if n < events.len() as libc::c_int {
                return true; // drained (or an error, which the next poll reports again)
            }
        }
    }
}
