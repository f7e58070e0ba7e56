//! Processes: this one's identity (pid, host name), and another's creation time, which sees
//! through a reused pid.

use super::super::Identity;
use std::io;
use windows_sys::Win32::Foundation::FILETIME;
use windows_sys::Win32::System::SystemInformation::{
    ComputerNamePhysicalDnsHostname, GetComputerNameExW,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcessId, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
};

use super::handles::{last, ticks, Handle};

/// Opens process `pid` for `access`.
pub(super) fn open_process(access: u32, pid: u32) -> io::Result<Handle> {
    // SAFETY: OpenProcess takes plain values and returns a handle or null.
    let h = unsafe { OpenProcess(access, 0, pid) };
    if h.is_null() {
        return Err(last());
    }
    Ok(Handle(h))
}

/// When process `pid` was created, in 100-nanosecond intervals since 1601.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let h = open_process(PROCESS_QUERY_LIMITED_INFORMATION, pid).ok()?;
    let [mut created, mut exited, mut kernel, mut user] = [FILETIME::default(); 4];
    // SAFETY: `h` is open with query access; the four out-pointers are locals.
    if unsafe { GetProcessTimes(h.0, &mut created, &mut exited, &mut kernel, &mut user) } == 0 {
        return None;
    }
    Some(ticks(created))
}

fn hostname() -> Option<String> {
    let mut buf = vec![0u16; 256];
    let mut len = buf.len() as u32;
    let (kind, out) = (ComputerNamePhysicalDnsHostname, buf.as_mut_ptr());
    // SAFETY: `buf` is writable for `len` units; `len` receives the length written.
    super::handles::done(unsafe { GetComputerNameExW(kind, out, &mut len) }).ok()?;
    String::from_utf16(&buf[..len as usize])
        .ok()
        .filter(|h| !h.is_empty())
}

pub(super) fn pid() -> u32 {
    // SAFETY: no preconditions; cannot fail.
    unsafe { GetCurrentProcessId() }
}

/// This process: its pid (Windows does not fork).
pub(crate) fn process_key() -> (u32, u64) {
    (pid(), 0)
}

/// This process's identity, read once per process.
pub(super) fn identity() -> Identity {
    super::super::per_process::identity(|| {
        let pid = pid();
        Identity {
            pid,
            start_time: start_time(pid),
            boot_id: None,
            host: hostname(),
            pid_namespace: None,
            uid: 0,
            os: Some(std::env::consts::OS.to_owned()),
            booted: None,
        }
    })
}
