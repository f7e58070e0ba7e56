//! FreeBSD: plain renames (checked by the caller; `renameat2` came only in FreeBSD 15, and a
//! binary that linked it would not start on older releases), the process start time from
//! `sysctl(KERN_PROC_PID)`, no boot identity, and waiting with [`super::kqueue`].

use super::no_exclusive_rename;
pub(super) use libc::__error as errno;
use std::io;
use std::os::fd::OwnedFd;

pub(super) use super::kqueue::watch;
pub use super::kqueue::Watch;

/// No exchange of two names here: always [`io::ErrorKind::Unsupported`].
pub(super) fn exchange(_at: &OwnedFd, _a: &str, _b: &str) -> io::Result<()> {
    Err(super::no_exchange())
}

/// No no-replace rename on the releases this build supports: [`io::ErrorKind::Unsupported`].
pub(super) fn rename_exclusive(_at: &OwnedFd, _from: &str, _to: &str) -> io::Result<()> {
    Err(no_exclusive_rename())
}

/// A `struct timeval` from `sysctl` `name`, in microseconds.
fn micros_of(tv: &libc::timeval) -> Option<u64> {
    let sec = u64::try_from(tv.tv_sec).ok()?;
    let usec = u64::try_from(tv.tv_usec).ok()?;
    Some(sec.saturating_mul(1_000_000).saturating_add(usec))
}

/// `kern.boottime` in microseconds since the epoch. FreeBSD moves it when the clock is set.
fn boot_time() -> Option<u64> {
    // SAFETY: timeval is plain data.
    micros_of(&unsafe { sysctl::<libc::timeval>(&[libc::CTL_KERN, libc::KERN_BOOTTIME]) }?)
}

/// The value of sysctl `mib`, when it is exactly a `T` (a process that is gone answers with no
/// data).
///
/// # Safety
///
/// `T` must be plain data (a C structure), for which all-zero bytes are valid.
unsafe fn sysctl<T>(mib: &[libc::c_int]) -> Option<T> {
    // SAFETY: the caller promises all-zero is a valid `T`; sysctl overwrites it.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>();
    let (name, names) = (mib.as_ptr(), mib.len() as libc::c_uint);
    let out = (&mut value as *mut T).cast();
    // SAFETY: `mib` holds `mib.len()` names; `value` is writable for `len` bytes; nothing is
    // set.
    let rc = unsafe { libc::sysctl(name, names, out, &mut len, std::ptr::null(), 0) };
    (rc == 0 && len == std::mem::size_of::<T>()).then_some(value)
}

/// `ki_start` of process `pid`, in microseconds since the epoch as the kernel reports it now.
fn reported_start(pid: libc::pid_t) -> Option<u64> {
    let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PID, pid];
    // SAFETY: kinfo_proc is plain data.
    micros_of(&unsafe { sysctl::<libc::kinfo_proc>(&mib) }?.ki_start)
}

/// The start of process `pid`, in microseconds since boot. FreeBSD reports `ki_start` as the
/// boot time plus the uptime at the start, and moves the boot time whenever the clock is set:
/// recorded as it is, a live owner's start time would stop matching after a clock step, and
/// the owner would be judged dead. The difference from `kern.boottime` read around it does not
/// move; if the boot time changed meanwhile, it is read again (three tries, then `None`).
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
    for _ in 0..3 {
        let before = boot_time()?;
        let start = reported_start(pid)?;
        if boot_time()? == before {
            return start.checked_sub(before);
        }
    }
    None
}

/// Not asked: with no boot identity recorded, no record is told to be another boot's.
pub(super) fn booted() -> Option<std::time::SystemTime> {
    None
}

/// Not recorded: `kern.boottime` moves when the clock is set, so it cannot tell boots apart
/// without judging a live owner's record to be from a previous boot.
pub(super) fn boot_id() -> Option<String> {
    None
}

/// None recorded. A jail does not renumber processes, but it hides the host's and other jails'
/// from `kill(pid, 0)`: a pid-judged record written outside the jail that reads it would look
/// dead there. Our own records carry a beacon, which is judged first and sees across jails.
pub(super) fn pid_namespace() -> Option<String> {
    None
}

pub(super) use super::readdir::list;
