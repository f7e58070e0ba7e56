//! macOS: the no-replace rename (`renameatx_np(RENAME_EXCL)`), the process start time from
//! `proc_pidinfo`, the boot session UUID from `sysctl`, and waiting with [`super::kqueue`].

use super::{at_names, no_exchange, no_exclusive_rename};
pub(super) use libc::__error as errno;
use std::ffi::CStr;
use std::io;
use std::os::fd::OwnedFd;

pub(super) use super::kqueue::watch;
pub use super::kqueue::Watch;

/// `renameatx_np(RENAME_EXCL)`: fails with `EEXIST` when `to` exists;
/// [`io::ErrorKind::Unsupported`] where the filesystem does not offer it (`ENOTSUP`; some
/// network and FUSE filesystems), asked again each time.
pub(super) fn rename_exclusive(at: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
    at_names(at, from, to, |at, f, t| unsafe {
        libc::renameatx_np(at, f, at, t, libc::RENAME_EXCL)
    })
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTSUP) | Some(libc::EINVAL) => no_exclusive_rename(),
        _ => e,
    })
}

/// `renameatx_np(RENAME_SWAP)`; [`io::ErrorKind::Unsupported`] where the filesystem does not
/// offer it.
pub(super) fn exchange(at: &OwnedFd, a: &str, b: &str) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
    at_names(at, a, b, |at, f, t| unsafe {
        libc::renameatx_np(at, f, at, t, libc::RENAME_SWAP)
    })
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTSUP) | Some(libc::EINVAL) => no_exchange(),
        _ => e,
    })
}

/// The start of process `pid` in microseconds since the epoch (`pbi_start_tvsec` and
/// `pbi_start_tvusec` of `PROC_PIDTBSDINFO`: stored when the process was made, so a clock
/// step does not change it). `None` for a process that is gone or not ours to inspect.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let pid = libc::c_int::try_from(pid).ok().filter(|&p| p > 0)?;
    // SAFETY: proc_bsdinfo is plain data; all-zero is valid and proc_pidinfo overwrites it.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    let out = (&mut info as *mut libc::proc_bsdinfo).cast();
    // SAFETY: `info` is writable for `size` bytes.
    let n = unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, out, size) };
    (n == size).then(|| {
        info.pbi_start_tvsec
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec)
    })
}

/// The value of `sysctl` `name`, and how many of its bytes were written.
///
/// # Safety
///
/// `T` must be plain data, for which all-zero bytes are a valid value.
unsafe fn sysctl_named<T>(name: &CStr) -> Option<(T, usize)> {
    // SAFETY: the caller promises `T` is plain data; all-zero is valid, and sysctl overwrites it.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>();
    let out = (&mut value as *mut T).cast();
    // SAFETY: the name is NUL-terminated; `value` is writable for `len` bytes, which sysctl
    // updates to the length it wrote; nothing is set (null, 0).
    let rc = unsafe { libc::sysctlbyname(name.as_ptr(), out, &mut len, std::ptr::null_mut(), 0) };
    (rc == 0).then_some((value, len))
}

/// When this kernel booted: `kern.boottime`.
pub(super) fn booted() -> Option<std::time::SystemTime> {
    // SAFETY: timeval is plain data.
    let (tv, _) = unsafe { sysctl_named::<libc::timeval>(c"kern.boottime") }?;
    let since = std::time::Duration::new(
        u64::try_from(tv.tv_sec).ok()?,
        u32::try_from(tv.tv_usec).ok()?.saturating_mul(1000),
    );
    std::time::UNIX_EPOCH.checked_add(since)
}

/// `kern.bootsessionuuid`: a UUID drawn at each boot.
pub(super) fn boot_id() -> Option<String> {
    // SAFETY: a byte array is plain data.
    let (buf, len) = unsafe { sysctl_named::<[u8; 64]>(c"kern.bootsessionuuid") }?;
    let text = CStr::from_bytes_until_nul(&buf[..len.min(buf.len())]).ok()?;
    text.to_str()
        .ok()
        .map(str::to_owned)
        .filter(|s| !s.is_empty())
}

/// macOS has no pid namespaces.
pub(super) fn pid_namespace() -> Option<String> {
    None
}

pub(super) use super::readdir::list;
