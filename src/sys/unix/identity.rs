//! Who this process is: pid (cached across forks), process start time, boot id, host name,
//! pid namespace and uid, read from the kernel.

use super::{read_to_limit, Identity};
use std::sync::atomic::Ordering;

/// A small text file of the kernel's (`/proc`), or `None`.
fn read_small(path: &str) -> Option<String> {
    let bytes = read_to_limit(std::fs::File::open(path).ok()?, 4096).ok()?;
    String::from_utf8(bytes).ok()
}

/// The target of a symbolic link of the kernel's (`/proc/self/ns/pid`), or `None`.
fn read_link(path: &str) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .into_os_string()
        .into_string()
        .ok()
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`.
pub(super) fn proc_start_time(pid: u32) -> Option<u64> {
    parse_start_time(&read_small(&format!("/proc/{pid}/stat"))?)
}

/// Parses field 22 out of a `/proc/<pid>/stat` line; the command name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|h| !h.is_empty())
}

/// This process's pid, cached (glibc no longer caches it, and the protocol asks often); a
/// `pthread_atfork` child handler clears the cache in every forked child.
static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn forget_pid_in_child() {
    // Async-signal-safe: a relaxed atomic store.
    PID.store(0, Ordering::Relaxed);
}

pub(super) fn getpid() -> u32 {
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only performs an atomic store; no prepare or parent
        // handler.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
    });
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() as u32 };
    PID.store(pid, Ordering::Relaxed);
    pid
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn read_identity() -> Identity {
    let pid = getpid();
    Identity {
        pid,
        start_time: proc_start_time(pid),
        boot_id: read_small("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()),
        host: hostname(),
        pid_namespace: read_link("/proc/self/ns/pid"),
        uid: geteuid(),
    }
}
