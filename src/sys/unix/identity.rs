//! Who this process is: pid (cached across forks), host name and uid here, and the process
//! start time, boot id and pid namespace from the platform's module.

use super::{platform, Identity};
use std::sync::atomic::Ordering;

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

/// Whether that handler is registered: 0 not yet, 1 being registered, 2 registered. (An atomic
/// rather than a `Once`: a child forked while another thread runs a `Once` would wait for it
/// forever.)
static ATFORK: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// How many forks made this process, counted from the first use of the pid (by the same
/// handler): with the pid, it tells this process from an ancestor whose pid it got back.
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn forget_pid_in_child() {
    // Async-signal-safe: relaxed atomic operations.
    PID.store(0, Ordering::Relaxed);
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// This process, told apart from every other one in its line of forks: its pid, and how many
/// forks made it (a grandchild may get its grandparent's pid back).
pub(crate) fn process_key() -> (u32, u64) {
    let pid = getpid();
    (pid, FORKS.load(Ordering::Relaxed))
}

pub(super) fn getpid() -> u32 {
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    if ATFORK
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: registers a handler that only performs an atomic store; no prepare or parent
        // handler.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
        ATFORK.store(2, Ordering::Release);
    }
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() as u32 };
    // Cached only once a forked child is sure to forget it (until then, asked each time).
    if ATFORK.load(Ordering::Acquire) == 2 {
        PID.store(pid, Ordering::Relaxed);
    }
    pid
}

pub(super) fn read_identity() -> Identity {
    let pid = getpid();
    Identity {
        pid,
        start_time: platform::start_time(pid),
        boot_id: platform::boot_id(),
        host: hostname(),
        pid_namespace: platform::pid_namespace(),
        // SAFETY: geteuid has no preconditions and cannot fail.
        uid: unsafe { libc::geteuid() },
        os: Some(std::env::consts::OS.to_owned()),
        booted: platform::booted(),
    }
}
