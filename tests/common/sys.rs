//! The test helpers' system calls: signals and the death signal of the children tests own.
//! All `unsafe` of the shared test code lives here, each block with its reason.
#![allow(unsafe_code)]

use std::process::Command;

/// Sends signal `sig` to process `pid`; whether it was delivered. With kill(2) itself, not
/// the `kill` command (a minimal image may not have procps).
pub fn signal(pid: u32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) takes no pointers; a pid that is gone is an error, not undefined behaviour.
    i32::try_from(pid).is_ok_and(|pid| unsafe { libc::kill(pid, sig) } == 0)
}

/// SIGKILLs process group `pgid` (what a child started lives on in it).
pub fn kill_group(pgid: u32) {
    if let Ok(pgid) = i32::try_from(pgid) {
        // SAFETY: as in `signal`; a negative pid names the process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// Makes the process `cmd` starts begin with an alarm `secs` seconds ahead, as when its
/// caller set one (alarm(2)) and then exec'd it: `exec` keeps the timer.
pub fn with_alarm(cmd: &mut Command, secs: u32) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only alarm(2), which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::alarm(secs);
            Ok(())
        })
    }
}

/// Makes the process `cmd` starts begin with signal `sig` blocked and pending, sent by itself,
/// as when a wrapper sent itself a signal it had blocked and then exec'd it (a pending signal
/// survives `exec`).
pub fn with_pending(cmd: &mut Command, sig: libc::c_int) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only sigemptyset, sigaddset,
    // sigprocmask, getpid and kill, all async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            Ok(())
        })
    }
}

/// Makes `cmd` a child the test owns: in a process group of its own (so that what it starts
/// is killed with it), and SIGKILLed by the kernel when the thread that spawned it ends, so
/// that a test binary interrupted by Ctrl-C or a CI timeout (which runs no destructor) leaves
/// nothing running either.
pub fn owned(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    cmd.process_group(0);
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (prctl or procctl, getppid, signal, _exit) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // (macOS has no death signal: there a child outlives an interrupted test binary.)
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            #[cfg(target_os = "freebsd")]
            {
                let mut sig = libc::SIGKILL;
                let data = (&mut sig as *mut libc::c_int).cast();
                if libc::procctl(libc::P_PID, 0, libc::PROC_PDEATHSIG_CTL, data) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The parent died before the prctl: no one would kill us.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            // A test started as a background job of a script inherits SIGINT and SIGQUIT
            // ignored, and a shell that starts with a signal ignored cannot trap it: the
            // tests of signal forwarding need the defaults, however cargo test was started.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// Whether process `pid` is stopped: state `T` (or `t`, stopped under a tracer) in
/// `/proc/PID/stat` on Linux, which an unprivileged user without procps reads too; `ps`
/// elsewhere.
pub fn stopped(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        // The state follows the command name, in parentheses that it may itself contain.
        let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat
            .iter()
            .rposition(|&b| b == b')')
            .map_or(&[][..], |i| &stat[i + 1..]);
        return matches!(after.trim_ascii_start().first(), Some(b'T' | b't'));
    }
    let ps = std::process::Command::new("ps")
        .args(["-o", "stat=", "-p", &pid.to_string()])
        .output();
    ps.is_ok_and(|o| o.stdout.trim_ascii_start().starts_with(b"T"))
}

/// Whether the filesystem of directory `dir` exchanges two names in one step
/// (`renameat2(RENAME_EXCHANGE)` on Linux, `renamex_np(RENAME_SWAP)` on macOS), tried on two
/// directories made in it and removed again. Not where the kernel or the filesystem (NFS, most
/// FUSE) cannot.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn exchanges_names(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let probe = tempfile::tempdir_in(dir).unwrap();
    let [a, b] = ["a", "b"].map(|n| probe.path().join(n));
    for d in [&a, &b] {
        std::fs::create_dir(d).unwrap();
    }
    let [a, b] = [a, b].map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap());
    #[cfg(target_os = "linux")]
    // SAFETY: both names are NUL-terminated strings that outlive the call; renameat2 reads them
    // and keeps no pointer.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    } == 0;
    #[cfg(target_os = "macos")]
    // SAFETY: as above, for renamex_np.
    let done = unsafe { libc::renamex_np(a.as_ptr(), b.as_ptr(), libc::RENAME_SWAP) } == 0;
    done
}

/// Whether test `test` skips (see [`super::lacks`]) because the filesystem of directory `dir`
/// does not exchange names ([`exchanges_names`]).
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn lacks_exchange(test: &str, dir: &std::path::Path) -> bool {
    let need = "a temporary directory on a filesystem that exchanges names (tmpfs, ext4, APFS)";
    super::lacks(test, need, exchanges_names(dir))
}

/// The write end of a pipe whose read end is closed: what a process writes there raises
/// SIGPIPE in it (or fails with `EPIPE`).
pub fn broken_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two descriptors for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors were just made and are owned by nothing else; the read end is
    // closed at once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

/// Runs the calling thread before every ordinary one (`SCHED_FIFO`), where it may (root on
/// Linux), so that a thread that must act every few milliseconds does on a loaded machine;
/// whether it does.
pub fn run_first() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_param is a plain C struct of integers (more of them on musl), for which
        // all zeros is a valid value.
        let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
        param.sched_priority = 1;
        // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the calling
        // thread.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Stops processes `pids` (`SIGSTOP`) and returns once each is stopped (kill(2) returns
/// before the stop takes effect); panics if a signal cannot be sent, or a process is not
/// stopped within 10 s. A guard's `SIGKILL` still ends them if the test fails.
pub fn stop(pids: &[u32]) {
    for &pid in pids {
        assert!(signal(pid, libc::SIGSTOP), "SIGSTOP to {pid} failed");
    }
    let all = || pids.iter().all(|&pid| stopped(pid));
    assert!(
        super::eventually(std::time::Duration::from_secs(10), all),
        "{pids:?} never stopped"
    );
}

/// Returns once a child of process `pid` is held by its tracer (strace) at the entry of the
/// system call numbered `nr` on x86-64 (`/proc/CHILD/syscall`), as a delay injected there
/// holds it; panics if none is within 20 s. Elsewhere it waits 300 ms.
pub fn child_held_in(pid: u32, nr: u32) {
    if !cfg!(target_arch = "x86_64") {
        std::thread::sleep(std::time::Duration::from_millis(300));
        return;
    }
    let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let held = || {
        let children = read(format!("/proc/{pid}/task/{pid}/children"));
        children.split_whitespace().any(|c| {
            let call = read(format!("/proc/{c}/syscall"));
            call.split(' ').next() == Some(&nr.to_string()) && c.parse().is_ok_and(stopped)
        })
    };
    assert!(
        super::eventually(std::time::Duration::from_secs(20), held),
        "no child of {pid} was held in system call {nr}"
    );
}

/// Lets processes `pids`, stopped by [`stop`], go on (`SIGCONT`).
pub fn resume(pids: &[u32]) {
    for &pid in pids {
        assert!(signal(pid, libc::SIGCONT), "SIGCONT to {pid} failed");
    }
}

/// Opens `path` (a directory) and takes its exclusive `flock`, held until the file is closed
/// (`File::lock` is newer than the crate's minimum Rust).
pub fn flocked(path: &std::path::Path) -> std::fs::File {
    flocked_as(path, libc::LOCK_EX)
}

/// [`flocked`], the `flock` shared.
pub fn flocked_shared(path: &std::path::Path) -> std::fs::File {
    flocked_as(path, libc::LOCK_SH)
}

fn flocked_as(path: &std::path::Path, how: libc::c_int) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: `f` is open; flock takes no pointers.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), how) }, 0);
    f
}
