//! Windows: console control events for `dirlock run`, and a job object that ties the command
//! (and everything it starts) to our life.
//!
//! - Ctrl-C, Ctrl-Break and the console's close, logoff and shutdown events reach every
//!   process attached to the console, the command included, so they are never passed on
//!   ("from a process" is always false); Windows has no way to send one process a signal.
//!   They are numbered as the signals they stand for: Ctrl-C 2 (SIGINT), Ctrl-Break 21
//!   (SIGBREAK), the others 15 (SIGTERM).
//! - The first spawn puts this process in a job object with `KILL_ON_JOB_CLOSE`; the command
//!   and whatever it starts inherit the job. If `dirlock run` dies while the command runs
//!   (even by `taskkill /F`), the last handle to the job closes and the kernel kills them all,
//!   so no contender of either implementation gets the lock while the command runs. Once the
//!   command has exited, the limit is taken off: what it left running outlives us, as on Unix.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::sync::{Condvar, Mutex, OnceLock};
use windows_sys::core::BOOL;
use windows_sys::Win32::Foundation::{HANDLE, TRUE};
use windows_sys::Win32::System::Console::{SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_C_EVENT};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectExtendedLimitInformation,
    SetInformationJobObject, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

/// Where the console handler keeps the events until [`take_signals`] takes them, and how it
/// wakes the thread of [`on_signals`].
static CAME: Mutex<VecDeque<i32>> = Mutex::new(VecDeque::new());
static WAKE: Condvar = Condvar::new();

/// The console control handler: runs on a thread the system makes for it, so it may lock and
/// send. Returning TRUE keeps the default action (ending this process) from running for
/// Ctrl-C and Ctrl-Break; for close, logoff and shutdown Windows ends the process anyway once
/// the handler returns, and the job takes the command with it.
unsafe extern "system" fn on_event(kind: u32) -> BOOL {
    let sig = match kind {
        CTRL_C_EVENT => 2,
        CTRL_BREAK_EVENT => 21,
        _ => 15,
    };
    CAME.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(sig);
    WAKE.notify_all();
    TRUE
}

/// Makes the console's control events reach [`on_signals`] rather than end this process.
/// Call it first thing in `main`.
///
/// # Errors
///
/// When `SetConsoleCtrlHandler` fails.
pub fn block_forwarded_signals() -> io::Result<()> {
    // SAFETY: `on_event` has the handler's signature and lives for the whole program.
    if unsafe { SetConsoleCtrlHandler(Some(on_event), TRUE) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Nothing to undo in the child: a handler function is not inherited.
pub fn unblock_forwarded_in_child(_cmd: &mut std::process::Command) {}

/// Starts a thread that calls `wake` whenever a console control event came; `wake` takes them
/// with [`take_signals`] (the thread waits without taking one).
pub fn on_signals(mut wake: impl FnMut() + Send + 'static) {
    std::thread::spawn(move || loop {
        let came = CAME.lock().unwrap_or_else(|e| e.into_inner());
        drop(WAKE.wait_while(came, |c| c.is_empty()));
        wake();
    });
}

/// Passes each console control event that came and is not taken yet to `f` (see the module's
/// docs for the numbers), with `false`: it reached the command too. Never blocks.
pub fn take_signals(mut f: impl FnMut(i32, bool)) {
    loop {
        let next = CAME.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some(sig) = next else { return };
        f(sig, false);
    }
}

/// Ends this process with 128+`sig` (Windows has no death by signal).
pub fn die_by(sig: i32) -> ! {
    std::process::exit(128 + sig)
}

/// No gate on Windows: a command is created whole, and a Ctrl-C that comes while it is being
/// started reaches it from the console once it is attached.
pub struct StartGate;

impl StartGate {
    /// The gate that stops nothing.
    ///
    /// # Errors
    ///
    /// Never.
    pub fn new() -> io::Result<StartGate> {
        Ok(StartGate)
    }

    /// Nothing to shut.
    pub fn shut(&self) {}

    /// Nothing to pass.
    pub fn guard(&self, _cmd: &mut std::process::Command) {}

    /// Never: nothing stops a spawn here.
    pub fn stopped(_e: &io::Error) -> bool {
        false
    }
}

/// Windows cannot send one process a signal: nothing is done. (A Ctrl-C that comes while the
/// command is being started reaches the command itself once it is attached to the console.)
pub fn send_signal(_pid: u32, _sig: i32) {}

/// The job this process joined, kept open for our whole life (its last handle closing is what
/// kills the command).
struct Job {
    handle: HANDLE,
}

// SAFETY: a job handle may be used from any thread; it is never closed.
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

/// The job, once the first spawn made it (or why it could not).
static JOB: OnceLock<Result<Job, String>> = OnceLock::new();

fn join_a_job() -> io::Result<Job> {
    // SAFETY: no security attributes, unnamed.
    let job = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
    if job.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the structure is plain data; all-zero is valid.
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: `job` is open; `limits` is valid for its size.
    if unsafe {
        SetInformationJobObject(
            job,
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `job` is open; the pseudo-handle of this process is always valid.
    if unsafe { AssignProcessToJobObject(job, GetCurrentProcess()) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Job { handle: job })
}

/// Makes the command that `cmd` spawns (and what it starts) die when this process does: this
/// process joins a kill-on-close job once, and children inherit it. Returns why not, where the
/// job cannot be made or joined (the command then outlives a killed `dirlock run`).
pub fn die_with_parent(_cmd: &mut std::process::Command) -> Option<String> {
    JOB.get_or_init(|| join_a_job().map_err(|e| e.to_string()))
        .as_ref()
        .err()
        .cloned()
}

/// The exit status `dirlock run` passes on: the command's exit code.
pub fn exit_code(status: &std::process::ExitStatus) -> i32 {
    status.code().unwrap_or(1)
}

/// The exit status for the command's `code`. Windows exit codes are 32 bits (a crash is
/// `0xC0000005`, a Ctrl-C'd program `0xC000013A`): one outside 0 to 255 cannot be an
/// `ExitCode`, so this process exits with it at once (the lock is released by then).
pub fn exit_status(code: i32) -> std::process::ExitCode {
    match u8::try_from(code) {
        Ok(c) => std::process::ExitCode::from(c),
        Err(_) => std::process::exit(code),
    }
}

/// The command exited: what it left running may outlive us, as on Unix (without the lock,
/// which is released next). Takes `KILL_ON_JOB_CLOSE` off the job, which then ends with us
/// without killing anyone.
pub fn command_exited() {
    if let Some(Ok(job)) = JOB.get() {
        // SAFETY: the structure is plain data; all-zero is "no limits".
        let limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: the job is open; `limits` is valid for its size. A failure leaves the
        // command's leftovers to be killed with us, as before.
        unsafe {
            SetInformationJobObject(
                job.handle,
                JobObjectExtendedLimitInformation,
                (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
    }
}

/// Whether a spawn failed because the command line and environment are too large: Windows
/// says `ERROR_FILENAME_EXCED_RANGE` (206) for a command line over 32767 characters.
pub fn too_large(e: &io::Error) -> bool {
    e.raw_os_error() == Some(206)
}

/// The command that runs `script` through the command interpreter: `%ComSpec%` (else
/// `cmd.exe`) `/S /C "SCRIPT"`, the script passed as it is. (As an ordinary argument, its
/// quotes would be escaped as `\"`, which `cmd` does not read; with `/S` it strips exactly
/// the outer pair of quotes added here.)
pub fn shell(script: &str) -> std::process::Command {
    use std::os::windows::process::CommandExt;
    let interpreter = std::env::var_os("ComSpec")
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cmd.exe".into());
    let mut cmd = std::process::Command::new(interpreter);
    cmd.raw_arg(format!("/S /C \"{script}\""));
    cmd
}

/// The time of `secs` since the epoch, in UTC (said so by [`ZONE`]): (year, month, day, hour,
/// minute, second).
pub fn local_time(secs: i64) -> Option<(i64, u32, u32, u32, u32, u32)> {
    Some(dirlock::text::civil_utc(secs))
}

/// [`local_time`] gives UTC here.
pub const ZONE: &str = " UTC";
