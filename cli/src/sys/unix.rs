//! Unix: signal plumbing for `dirlock run` (receiving the signals that would end it, ending a
//! wait or forwarding them, dying of them) and tying the command's life to ours.
//!
//! | | receiving signals | who sent one | the command dies with us |
//! | --- | --- | --- | --- |
//! | Linux | blocked, read from a signalfd | `si_code <= 0`: a process | `PR_SET_PDEATHSIG` |
//! | FreeBSD | blocked, `sigwaitinfo` in a thread | `SI_USER`, `SI_QUEUE`, `SI_LWP` | `PROC_PDEATHSIG_CTL` |
//! | macOS | an `SA_SIGINFO` handler writes to a pipe that a thread reads | `si_pid != 0` or `SI_USER` | no such facility |
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Turns a `-1` return into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The signals `dirlock run` acts on: those that end a process by default and that another
/// process (or a terminal) sends, as they end flock(1). While it waits, one abandons the wait,
/// and `run` dies of it once nothing is left behind; while the command runs, it is forwarded.
const FORWARDED: [libc::c_int; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Which of [`FORWARDED`] this process acts on (a bit per signal number): all but those its
/// caller made ignored (`nohup`, `trap ''`, a script's background job), which stay ignored, as
/// they do for flock(1), and reach the command ignored. Set once, before any thread starts.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Whether the caller made `sig` ignored. SIGPIPE cannot be told: Rust's runtime ignores it
/// itself before `main`, whatever the caller did, so it counts as not ignored.
fn ignored_by_the_caller(sig: libc::c_int) -> bool {
    if sig == libc::SIGPIPE {
        return false;
    }
    // SAFETY: sigaction is plain data; all-zero is valid, and sigaction overwrites it.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into a valid out-pointer.
    let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0;
    ok && old.sa_sigaction == libc::SIG_IGN
}

/// The signals this process acts on (see [`HANDLED`]).
fn handled() -> impl Iterator<Item = libc::c_int> {
    let bits = HANDLED.load(Ordering::Relaxed);
    FORWARDED.into_iter().filter(move |s| bits & (1 << s) != 0)
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in handled() {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// Makes the signals of [`FORWARDED`] that the caller did not make ignored reach
/// [`on_signals`] rather than their default actions. Call it first thing in `main`, before any
/// thread exists. Spawn children with [`unblock_forwarded_in_child`].
///
/// Where `sigwaitinfo` exists (Linux, FreeBSD) the signals are blocked in the calling thread
/// (and every thread it starts later) and a thread of [`on_signals`] takes them. On macOS a
/// handler records each one (signal and sender) in a pipe that the thread reads.
///
/// # Errors
///
/// When `pthread_sigmask` fails (or, on macOS, the pipe or `sigaction`).
pub fn block_forwarded_signals() -> io::Result<()> {
    let bits = FORWARDED
        .into_iter()
        .filter(|s| !ignored_by_the_caller(*s))
        .fold(0u64, |b, s| b | 1 << s);
    HANDLED.store(bits, Ordering::Relaxed);
    #[cfg(not(target_os = "macos"))]
    {
        let set = forwarded_set();
        // SAFETY: `set` is initialized; the old mask is not wanted (null).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    came::install()
}

/// Makes the child that `cmd` spawns start with the forwarded signals unblocked again (a
/// spawned child inherits the signal mask, and [`block_forwarded_signals`] changed ours; a
/// handler is reset by `exec` on its own).
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

/// Starts a thread that calls `wake` whenever a signal [`block_forwarded_signals`] took over
/// may have come; `wake` takes them with [`take_signals`], under the lock that orders them with
/// the rest of `run`. On Linux and macOS the thread waits without taking one, so that a signal
/// that came is always either taken under that lock or still there for the next to take it.
pub fn on_signals(mut wake: impl FnMut() + Send + 'static) {
    std::thread::spawn(move || {
        while came::wait() {
            wake();
        }
    });
}

/// Passes each signal that came and is not taken yet to `f`, with whether it reached this
/// process alone ([`alone`]), not also the command beside it in the foreground process group.
/// Never blocks.
pub fn take_signals(mut f: impl FnMut(i32, bool)) {
    while let Some((sig, sent_by_process)) = came::take() {
        f(sig, alone(sig, sent_by_process));
    }
}

/// Whether signal `sig` reached this process alone: another process sent it (`kill`), or it
/// is our own timer's (an `alarm` the caller set before it ran us, which `exec` keeps and a
/// child does not inherit). The kernel's other signals here are a terminal's (Ctrl-C, the quit key,
/// a hangup), which reach the whole foreground process group, the command included.
fn alone(sig: libc::c_int, sent_by_process: bool) -> bool {
    sent_by_process || sig == libc::SIGALRM
}

/// Whether a signal was sent by a process (`kill`, `sigqueue`, `tkill`) rather than by the
/// kernel: on Linux (and NetBSD, OpenBSD) those are the codes `<= 0` (Linux: `SI_USER` 0,
/// `SI_QUEUE` -1, `SI_TKILL` -6).
#[cfg(not(any(target_os = "linux", target_os = "freebsd", target_os = "macos")))]
fn sent_by_process(info: &libc::siginfo_t) -> bool {
    info.si_code <= 0
}

/// Whether a signal was sent by a process: FreeBSD's `SI_USER` (`kill`), `SI_QUEUE`
/// (`sigqueue`) and `SI_LWP` (`thr_kill`); a terminal's signals come as `SI_KERNEL`.
#[cfg(target_os = "freebsd")]
fn sent_by_process(info: &libc::siginfo_t) -> bool {
    const SI_USER: libc::c_int = 0x10001;
    const SI_QUEUE: libc::c_int = 0x10002;
    const SI_LWP: libc::c_int = 0x10007;
    matches!(info.si_code, SI_USER | SI_QUEUE | SI_LWP)
}

/// macOS has no `sigwaitinfo`: a handler writes each forwarded signal and whether a process
/// sent it (two bytes, atomically) to a pipe, from which they are taken in order.
#[cfg(target_os = "macos")]
mod came {
    use super::{check, handled, wait_readable};
    use std::io;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The pipe's write end, for the handler (-1 until installed).
    static WRITE: AtomicI32 = AtomicI32::new(-1);
    /// The pipe's read end, for the signal thread.
    static READ: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn record(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // A process that sends with `kill` is named in si_pid (and macOS marks it SI_USER); the
        // kernel's signals (a terminal's) name none.
        const SI_USER: libc::c_int = 0x10001;
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
        let from_process = unsafe { (*info).si_pid != 0 || (*info).si_code == SI_USER };
        let record = [sig as u8, u8::from(from_process)];
        // The interrupted code may be about to read errno: a failed write must not change it.
        // SAFETY: __error returns this thread's errno location, valid for the thread's life.
        let saved = unsafe { *libc::__error() };
        // SAFETY: write is async-signal-safe; two bytes from a live array to our pipe (a full
        // pipe, thousands of pending signals, drops this one).
        unsafe { libc::write(WRITE.load(Ordering::Relaxed), record.as_ptr().cast(), 2) };
        // SAFETY: as above.
        unsafe { *libc::__error() = saved };
    }

    pub(super) fn install() -> io::Result<()> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two descriptors for pipe to fill.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
        for fd in fds {
            // SAFETY: both descriptors are open and ours.
            check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) })?;
        }
        for fd in fds {
            // SAFETY: both descriptors are open and ours: a handler must never block, nor a
            // take.
            check(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) })?;
        }
        READ.store(fds[0], Ordering::Relaxed);
        WRITE.store(fds[1], Ordering::Relaxed);
        for sig in handled() {
            // SAFETY: sigaction is plain data; all-zero (an empty mask) is valid.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = record as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            // SAFETY: `action` is initialized and the handler only calls write.
            check(unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) })?;
        }
        Ok(())
    }

    /// Waits until a signal was recorded (`false`: the pipe failed).
    pub(super) fn wait() -> bool {
        wait_readable(READ.load(Ordering::Relaxed))
    }

    /// The first signal recorded and not taken yet (and whether a process sent it).
    pub(super) fn take() -> Option<(i32, bool)> {
        let mut record = [0u8; 2];
        loop {
            // SAFETY: reads two bytes into a live array from the pipe's read end.
            let n =
                unsafe { libc::read(READ.load(Ordering::Relaxed), record.as_mut_ptr().cast(), 2) };
            match n {
                2 => return Some((i32::from(record[0]), record[1] != 0)),
                -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return None,
            }
        }
    }
}

/// Linux: a signalfd for the blocked signals, which a `poll` waits on without taking any.
#[cfg(target_os = "linux")]
mod came {
    use super::{check, forwarded_set, wait_readable};
    use std::io;
    use std::sync::atomic::{AtomicI32, Ordering};

    static FD: AtomicI32 = AtomicI32::new(-1);

    pub(super) fn install() -> io::Result<()> {
        let set = forwarded_set();
        let flags = libc::SFD_NONBLOCK | libc::SFD_CLOEXEC;
        // SAFETY: `set` is initialized; -1 asks for a new descriptor.
        FD.store(
            check(unsafe { libc::signalfd(-1, &set, flags) })?,
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// Waits until a signal is pending (`false`: the descriptor failed).
    pub(super) fn wait() -> bool {
        wait_readable(FD.load(Ordering::Relaxed))
    }

    /// A pending signal, taken (and whether a process sent it: `si_code <= 0`). A SIGPIPE that
    /// names this process as its sender is passed over: a write of the thread taking it caused
    /// it (the kernel names the writer), never a reason to stop.
    pub(super) fn take() -> Option<(i32, bool)> {
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        loop {
            // SAFETY: signalfd_siginfo is plain data.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            // SAFETY: reads at most `size` bytes into `info`, a live signalfd_siginfo.
            let n = unsafe { libc::read(FD.load(Ordering::Relaxed), (&raw mut info).cast(), size) };
            if usize::try_from(n) != Ok(size) {
                return None;
            }
            let sig = i32::try_from(info.ssi_signo).ok()?;
            if sig != libc::SIGPIPE || info.ssi_pid != std::process::id() {
                return Some((sig, info.ssi_code <= 0));
            }
        }
    }
}

/// Elsewhere (FreeBSD): a thread takes each signal with `sigwaitinfo` and keeps it here until
/// it is taken again. (A signal the thread took and has not kept yet cannot be seen.)
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod came {
    use super::{forwarded_set, sent_by_process};
    use std::collections::VecDeque;
    use std::io;
    use std::sync::Mutex;

    static KEPT: Mutex<VecDeque<(i32, bool)>> = Mutex::new(VecDeque::new());

    pub(super) fn install() -> io::Result<()> {
        Ok(())
    }

    /// Takes the next signal that comes, and keeps it.
    pub(super) fn wait() -> bool {
        let set = forwarded_set();
        loop {
            // SAFETY: siginfo_t is plain data, filled in by sigwaitinfo.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is initialized and `info` is a valid out-pointer.
            let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
            if sig > 0 {
                let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
                kept.push_back((sig, sent_by_process(&info)));
                return true;
            }
        }
    }

    pub(super) fn take() -> Option<(i32, bool)> {
        KEPT.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }
}

/// Waits until `fd` is readable (`false`: it failed, or is not open).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn wait_readable(fd: libc::c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one live pollfd.
        match unsafe { libc::poll(&mut p, 1, -1) } {
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            1 => return p.revents & libc::POLLIN != 0,
            _ => return false,
        }
    }
}

/// Ends this process by signal `sig`, as its default action would have (the shell sees
/// 128+`sig`, and a script's loop stops on Ctrl-C as it does for flock(1)): called once
/// nothing is left behind. Should the signal not end it, it exits with 128+`sig`.
pub fn die_by(sig: i32) -> ! {
    // SAFETY: plain signal calls on a valid signal number: its default action, unblocked in
    // this thread, then raised in it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// A gate the command passes between its fork and its exec: once [`StartGate::shut`] (a stop
/// signal came while it was being started), a command not yet past it never starts, and its
/// spawn fails with an error that [`StartGate::stopped`] recognises.
pub struct StartGate {
    read: OwnedFd,
    write: OwnedFd,
}

impl StartGate {
    /// An open gate: a pipe (close-on-exec; its read end non-blocking).
    ///
    /// # Errors
    ///
    /// When the pipe cannot be made (out of descriptors).
    pub fn new() -> io::Result<StartGate> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two descriptors for pipe to fill.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
        // SAFETY: both descriptors were just made and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&read, &write] {
            // SAFETY: the descriptor is open and ours.
            check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
        }
        // SAFETY: the descriptor is open and ours.
        check(unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) })?;
        Ok(StartGate { read, write })
    }

    /// Shuts the gate (from the signal thread).
    pub fn shut(&self) {
        // SAFETY: writes one byte from a live array to our pipe; a full pipe (impossible
        // here: one byte per run) would only lose a byte that is already there.
        unsafe { libc::write(self.write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }

    /// Makes the command `cmd` spawns pass the gate last, just before its exec.
    pub fn guard(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let fd = self.read.as_raw_fd();
        // SAFETY: the closure runs in the child between fork and exec and only reads one byte
        // (read is async-signal-safe) from a descriptor the child inherited.
        unsafe {
            cmd.pre_exec(move || {
                let mut byte = 0u8;
                if libc::read(fd, (&mut byte as *mut u8).cast(), 1) == 1 {
                    return Err(io::Error::from_raw_os_error(libc::ECANCELED));
                }
                Ok(())
            });
        }
    }

    /// Whether a spawn failed at the shut gate (the command never started).
    pub fn stopped(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ECANCELED)
    }
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
/// from the thread that lives as long as the process) or when this process exits (FreeBSD
/// `PROC_PDEATHSIG_CTL`). A parent that died before the setting took effect is caught by
/// checking the parent pid after it. macOS has no such facility: there this does nothing, and
/// the command of a `dirlock run` killed with SIGKILL runs on (holding the beacon, unless `-o`).
/// Never fails here (a failing `prctl` fails the spawn): always `None`.
pub fn die_with_parent(cmd: &mut std::process::Command) -> Option<String> {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid has no preconditions and cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl or
        // procctl, getppid and raise, which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                #[cfg(target_os = "linux")]
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
                #[cfg(target_os = "freebsd")]
                {
                    let mut signal = libc::SIGKILL;
                    check(libc::procctl(
                        libc::P_PID,
                        0,
                        libc::PROC_PDEATHSIG_CTL,
                        (&mut signal as *mut libc::c_int).cast(),
                    ))?;
                }
                if libc::getppid() != parent {
                    libc::raise(libc::SIGKILL);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    let _ = cmd;
    None
}

/// The exit status `dirlock run` passes on: the command's, or 128 + the signal that ended it.
pub fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// The exit status for `code` (0 to 255 here: a code or 128 + a signal).
pub fn exit_status(code: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(code.clamp(0, 255) as u8)
}

/// Nothing to do on Unix: the parent-death signal reaches only the command itself.
pub fn command_exited() {}

/// Whether a spawn failed because the arguments and environment are too large (`E2BIG`).
pub fn too_large(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::E2BIG)
}

/// The command that runs `script` through the shell: `sh -c SCRIPT`.
pub fn shell(script: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(script);
    cmd
}

/// The local time of `secs` since the epoch: (year, month, day, hour, minute, second).
#[allow(
    clippy::useless_conversion,
    reason = "time_t is 64 bits here, 32 on some targets"
)]
#[allow(
    deprecated,
    reason = "the libc crate marks musl's time_t for a change of width; try_into fits either"
)]
pub fn local_time(secs: i64) -> Option<(i64, u32, u32, u32, u32, u32)> {
    let t: libc::time_t = secs.try_into().ok()?;
    // SAFETY: an all-zero `tm` is a valid value (integers, and a null zone name pointer that
    // localtime_r overwrites).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live values of the right types; localtime_r is the
    // reentrant form, writing only to `tm`.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    Some((
        i64::from(tm.tm_year) + 1900,
        u32::try_from(tm.tm_mon + 1).ok()?,
        u32::try_from(tm.tm_mday).ok()?,
        u32::try_from(tm.tm_hour).ok()?,
        u32::try_from(tm.tm_min).ok()?,
        u32::try_from(tm.tm_sec).ok()?,
    ))
}

/// What [`local_time`] gives: local time needs no zone name.
pub const ZONE: &str = "";
