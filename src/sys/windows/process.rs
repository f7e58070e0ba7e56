//! Processes: this one's identity (pid, host name), and another's creation time, which sees
//! through a reused pid.

use super::super::Identity;
use windows_sys::Win32::Foundation::FILETIME;
use windows_sys::Win32::Storage::FileSystem::SYNCHRONIZE;
use windows_sys::Win32::System::SystemInformation::{
    ComputerNamePhysicalDnsHostname, GetComputerNameExW,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcessId, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
};

use super::handles::{owned, Handle};

pub(super) fn process_times(pid: u32) -> Option<(Handle, u64)> {
    // SAFETY: OpenProcess takes plain values and returns a handle or null.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, 0, pid) };
    if h.is_null() {
        return None;
    }
    let h = owned(h);
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: `h` is open with query access; the four out-pointers are locals.
    if unsafe { GetProcessTimes(h.0, &mut created, &mut exited, &mut kernel, &mut user) } == 0 {
        return None;
    }
    Some((
        h,
        (u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime),
    ))
}

fn hostname() -> Option<String> {
    let mut buf = vec![0u16; 256];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units; `len` receives the length written.
    if unsafe { GetComputerNameExW(ComputerNamePhysicalDnsHostname, buf.as_mut_ptr(), &mut len) }
        == 0
    {
        return None;
    }
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
            start_time: process_times(pid).map(|(_, t)| t),
            boot_id: None,
            host: hostname(),
            pid_namespace: None,
            uid: 0,
            os: Some(std::env::consts::OS.to_owned()),
            booted: None,
        }
    })
}
