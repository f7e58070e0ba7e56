//! Other Unixes (NetBSD, OpenBSD, illumos…): what POSIX alone offers. Renames are plain (the
//! caller checks what it renamed, and the reclaim guard is made in place), no start time or
//! boot identity is recorded (pid evidence alone; a reused pid judges a dead owner live, which
//! fails closed), and waiters back off instead of being woken by the kernel.

// The thread's `errno`, by each C library's name for it (std's own list): a directory listing
// clears it to tell its end from an error.
#[cfg(target_os = "aix")]
pub(super) use libc::_Errno as errno;
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
pub(super) use libc::___errno as errno;
#[cfg(any(
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "android",
    target_os = "cygwin",
    target_os = "nuttx",
    target_env = "newlib"
))]
pub(super) use libc::__errno as errno;
#[cfg(any(
    target_os = "dragonfly",
    target_os = "emscripten",
    target_os = "hurd",
    target_os = "l4re",
    target_os = "redox"
))]
pub(super) use libc::__errno_location as errno;
#[cfg(any(
    target_os = "ios",
    target_os = "tvos",
    target_os = "watchos",
    target_os = "visionos"
))]
pub(super) use libc::__error as errno;
#[cfg(target_os = "haiku")]
pub(super) use libc::_errnop as errno;

use super::no_exclusive_rename;
use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// No exchange of two names here: always [`io::ErrorKind::Unsupported`].
pub(super) fn exchange(_at: &OwnedFd, _a: &str, _b: &str) -> io::Result<()> {
    Err(super::no_exchange())
}

/// No no-replace rename here: always [`io::ErrorKind::Unsupported`].
pub(super) fn rename_exclusive(_at: &OwnedFd, _from: &str, _to: &str) -> io::Result<()> {
    Err(no_exclusive_rename())
}

/// Not read here.
pub(super) fn start_time(_pid: u32) -> Option<u64> {
    None
}

/// Not read here.
pub(super) fn boot_id() -> Option<String> {
    None
}

/// Not read here (no boot identity either).
pub(super) fn booted() -> Option<std::time::SystemTime> {
    None
}

/// No pid namespaces here.
pub(super) fn pid_namespace() -> Option<String> {
    None
}

/// No kernel wake-ups here: a watch is never made.
#[derive(Debug)]
pub enum Watch {}

/// Always `Ok(None)`: the waiter backs off.
pub(super) fn watch(
    _lock: &OwnedFd,
    _pid: Option<u32>,
    _beacon: bool,
) -> io::Result<Option<Watch>> {
    Ok(None)
}

impl Watch {
    pub(super) fn recheck(&self) -> Option<std::time::Duration> {
        match *self {}
    }

    pub(super) fn fds(&self) -> [RawFd; 3] {
        match *self {}
    }

    pub(super) fn woken(&self, _ready: [bool; 3]) -> bool {
        match *self {}
    }
}

/// Not told on this platform.
pub(super) fn filesystem(_dir: &OwnedFd) -> Option<(String, String)> {
    None
}

pub(super) use super::readdir::list;
