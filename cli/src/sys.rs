//! The one place where the command meets the operating system beyond the library: signal
//! plumbing for `dirlock run` (blocking, receiving and forwarding SIGINT, SIGTERM and SIGHUP)
//! and tying the command's life to ours. All `unsafe` and `libc` of the command live here.
#![allow(unsafe_code)]

use std::io;

/// Turns a `-1` return into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The signals a wrapper forwards to its child.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and every thread it starts later),
/// so that they can be received with `sigwait` by [`on_signals`]. Call it first thing in
/// `main`, before any thread exists. Children inherit the mask: spawn them with
/// [`unblock_forwarded_in_child`].
///
/// # Errors
///
/// When `pthread_sigmask` fails.
pub fn block_forwarded_signals() -> io::Result<()> {
    let set = forwarded_set();
    // SAFETY: `set` is initialized; the old mask is not wanted (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Makes the child that `cmd` spawns start with the forwarded signals unblocked again (a
/// spawned child inherits the signal mask, and [`block_forwarded_signals`] changed ours).
pub fn unblock_forwarded_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = forwarded_set();
    // SAFETY: the closure runs in the child between fork and exec and only calls sigprocmask,
    // which is async-signal-safe, with a set initialized before the fork.
    unsafe {
        cmd.pre_exec(move || {
            check(libc::sigprocmask(
                libc::SIG_UNBLOCK,
                &set,
                std::ptr::null_mut(),
            ))?;
            Ok(())
        });
    }
}

/// Starts a thread that receives every SIGINT, SIGTERM and SIGHUP (which must be blocked in
/// every thread: see [`block_forwarded_signals`]) and calls `handler(signal, from_process)`,
/// where `from_process` says whether another process sent it with `kill` (rather than the
/// kernel, for a terminal's Ctrl-C or hangup, which reaches the whole foreground process
/// group).
pub fn on_signals(mut handler: impl FnMut(i32, bool) + Send + 'static) {
    std::thread::spawn(move || {
        let set = forwarded_set();
        loop {
            // SAFETY: siginfo_t is plain data, filled in by sigwaitinfo.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is initialized and `info` is a valid out-pointer.
            let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
            if sig < 0 {
                continue; // EINTR
            }
            // si_code <= 0: sent by a process (SI_USER, SI_QUEUE, SI_TKILL); > 0: the kernel.
            handler(sig, info.si_code <= 0);
        }
    });
}

/// Sends `sig` to process `pid` (at worst the pid is gone and nothing happens).
pub fn send_signal(pid: u32, sig: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill takes no pointers; a stale pid fails with ESRCH.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Makes the child that `cmd` spawns die (`SIGKILL`) when this process dies, however it dies:
/// the kernel sends the signal when the spawning thread exits (Linux `PR_SET_PDEATHSIG`; spawn
/// from the thread that lives as long as the process). A parent that died before the setting
/// took effect is caught by checking the parent pid after it. Elsewhere this does nothing.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid has no preconditions and cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // getppid and raise, which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
                if libc::getppid() != parent {
                    libc::raise(libc::SIGKILL);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}
