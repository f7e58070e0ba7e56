//! `dirlock run`: take the lock, run the command with the lock's beacon, release; signals
//! abandon the wait or reach the command.

use crate::args::{Acquire, Selector};
use crate::say::{explain, say, Failure};
use crate::select::{configure, select};
use crate::sys;
use dirlock::text::{escape, path as shown};
use dirlock::{Cancel, Error, Liveness, LockGuard, LockRequest};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, ExitCode};
use std::sync::{Arc, Mutex, MutexGuard};

/// The variable that gives the command the record of the holder whose lock `run` took over.
pub(crate) const RECLAIMED_FROM: &str = "DIRLOCK_RECLAIMED_FROM";

/// Where `dirlock run` is, for its signal thread.
pub(crate) enum Phase {
    /// Finding the lock directory, or past an acquisition that failed: nothing is held, a
    /// signal ends `run` at once.
    Setup,
    /// Taking the lock: a signal abandons the wait (the first one is kept), and `run` dies of
    /// it once nothing is left behind.
    Waiting(Option<i32>),
    /// The lock is held and the command being started: a signal (a terminal's included: the
    /// command may not exist yet to receive it) shuts the gate, so that the command never
    /// starts, and is kept (each kind once, in the order they came): `run` releases and dies
    /// of the first, or, the command past the gate already, passes them on.
    Starting(Vec<i32>),
    /// The command runs: signals other processes send are forwarded to it.
    Running(u32),
    /// The command has exited (its pid may be another process's by now): nothing is forwarded.
    Done,
}

/// What `run` runs.
pub(crate) enum Program {
    /// A program and its arguments.
    Argv(Vec<OsString>),
    /// A script for the shell (`-c`): `sh -c`, or on Windows `cmd /S /C`.
    Shell(String),
}

/// How `run` treats its command.
pub(crate) struct RunOptions {
    /// Say nothing while waiting, nor when the lock is held.
    pub(crate) quiet: bool,
    /// Say how long it waited, and when the command starts and ends.
    pub(crate) verbose: bool,
    /// The exit status when the lock is held by another process.
    pub(crate) conflict: u8,
    /// Whether the command inherits the beacon (keeps the lock held while it, or what it
    /// leaves running, lives).
    pub(crate) inherit: bool,
    /// A shared (read) lock (`-s`).
    pub(crate) shared: bool,
}

pub(crate) fn run(
    sel: &Selector,
    acq: &Acquire,
    opts: &RunOptions,
    command: &Program,
) -> Result<ExitCode, Failure> {
    let signals = catch_signals()?;
    let req = select(sel)?;
    let what = req.resource()?;
    *signals.settled() = Phase::Waiting(None);
    let started = std::time::Instant::now();
    let acquired = acquire(configure(req, acq).cancel(&signals.cancel), opts);
    // Decide under the phase lock, so that a signal is either seen here or kept for later.
    {
        let mut phase = signals.settled();
        if let Phase::Waiting(Some(sig)) = *phase {
            drop(acquired); // got it just as the signal came: released, nothing runs
            sys::die_by(sig);
        }
        // (A signal that comes while a failure is said ends `run` at once, as a wait's does.)
        *phase = match acquired {
            Ok(_) => Phase::Starting(Vec::new()),
            Err(_) => Phase::Setup,
        };
    }
    let guard = acquired?;
    announce(&guard, &what, started, opts);
    let (guard, child) = start(guard, opts, command, &signals)?;
    finish(child, guard, &what, opts, &signals)
}

/// Where `run` is, how to abandon its wait, and the gate that keeps the command from starting:
/// what the signals that come act on.
struct Signals {
    phase: Mutex<Phase>,
    cancel: Cancel,
    gate: sys::StartGate,
}

impl Signals {
    /// The phase, locked, once the signals that came meanwhile have acted on it: whoever
    /// locks it (the signal thread, or `run` as it moves on) takes them first, so that none
    /// is taken in one phase and acted on in another.
    fn settled(&self) -> MutexGuard<'_, Phase> {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        sys::take_signals(|sig, alone| self.act(&mut phase, sig, alone));
        phase
    }

    /// What signal `sig` (`alone`: it reached us alone, not the command beside us too) does in
    /// `phase`.
    fn act(&self, phase: &mut Phase, sig: i32, alone: bool) {
        match phase {
            Phase::Setup => sys::die_by(sig),
            Phase::Waiting(first) => {
                first.get_or_insert(sig);
                self.cancel.cancel();
            }
            Phase::Starting(pending) => {
                if !pending.contains(&sig) {
                    pending.push(sig);
                }
                self.gate.shut();
            }
            // A terminal's Ctrl-C or hangup reached the command already (same process
            // group): only what reached us alone is passed on.
            Phase::Running(child) if alone => sys::send_signal(*child, sig),
            Phase::Running(_) | Phase::Done => {}
        }
    }
}

/// Before any thread starts: the signals that would end us (SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT, SIGUSR1, ...; those the caller made ignored stay ignored) are received by a
/// thread of ours, not by their default actions. While the lock is awaited they abandon the
/// wait, and once nothing is left behind we die of them (nothing runs, as with flock(1));
/// one that comes before the command has started keeps it from starting; once it runs they
/// are forwarded to it (and `dirlock run` itself waits for it and releases).
fn catch_signals() -> Result<Arc<Signals>, Failure> {
    sys::block_forwarded_signals().map_err(|e| Failure(format!("cannot block signals: {e}"), 1))?;
    let cancel =
        Cancel::new().map_err(|e| Failure(format!("cannot make a cancel handle: {e}"), 1))?;
    let gate = sys::StartGate::new().map_err(|e| Failure(format!("cannot make a pipe: {e}"), 1))?;
    let signals = Arc::new(Signals {
        phase: Mutex::new(Phase::Setup),
        cancel,
        gate,
    });
    let theirs = signals.clone();
    sys::on_signals(move || drop(theirs.settled()));
    Ok(signals)
}

/// Says how long it took (-v), and, unless -q, whose lock it took over.
fn announce(guard: &LockGuard, what: &str, started: std::time::Instant, opts: &RunOptions) {
    if opts.verbose {
        say(&format!(
            "took {what} ({}) after {}",
            shown(guard.path()),
            crate::when::span(started.elapsed())
        ));
    }
    if let (Some(dead), false) = (guard.reclaimed_from(), opts.quiet) {
        let taken = dead
            .acquired_at()
            .map(|t| format!(" (it took the lock at {})", crate::when::when(t)))
            .unwrap_or_default();
        say(&format!(
            "took over {what} from {dead}{taken}, which ended without releasing it: its work may be half done; the command finds its record in {RECLAIMED_FROM}"
        ));
    }
}

/// Starts the command under `guard`; one that cannot start releases it (and a signal that
/// stopped it at the gate ends us).
fn start(
    guard: LockGuard,
    opts: &RunOptions,
    command: &Program,
    signals: &Signals,
) -> Result<(LockGuard, Child), Failure> {
    let spawned = spawn(&guard, opts, command, &signals.gate);
    // A signal that came while the command was being started: it stopped the command at the
    // gate (or, the gate passed already, the command gets it below).
    let stopped = match (&spawned, &*signals.settled()) {
        (Err(_), Phase::Starting(pending)) => pending.first().copied(),
        _ => None,
    };
    let child = match spawned {
        Ok(c) => c,
        Err(failure) => {
            let _ = guard.release();
            if let Some(sig) = stopped {
                sys::die_by(sig);
            }
            return Err(failure);
        }
    };
    let pending = std::mem::replace(&mut *signals.settled(), Phase::Running(child.id()));
    if let Phase::Starting(pending) = pending {
        // They came after the command passed the gate: it may have missed them.
        for sig in pending {
            sys::send_signal(child.id(), sig);
        }
    }
    Ok((guard, child))
}

/// Waits for the command and releases after it exits, whatever happened to it: `run` exits
/// with its status (1 for a success whose lock was lost meanwhile).
fn finish(
    mut child: Child,
    guard: LockGuard,
    what: &str,
    opts: &RunOptions,
    signals: &Signals,
) -> Result<ExitCode, Failure> {
    let status = child.wait();
    // (Not settled first: the command's pid, reaped, may be another process's by now.)
    *signals.phase.lock().unwrap_or_else(|e| e.into_inner()) = Phase::Done;
    // What the command left running may outlive us now, as on Unix (without the lock).
    sys::command_exited();
    let released = guard.release();
    let status = status.map_err(|e| Failure(format!("cannot wait for the command: {e}"), 1))?;
    let code = sys::exit_code(&status);
    if opts.verbose && released.is_ok() {
        say(&format!(
            "the command exited with status {code}; released {what}"
        ));
    }
    if let Err(e) = released {
        say(&explain(&e));
        return Ok(sys::exit_status(if code == 0 { 1 } else { code }));
    }
    Ok(sys::exit_status(code))
}

/// Takes the lock, saying whom it waits for (unless -q). A busy lock fails with the conflict
/// status; under -q the exit status alone says it (`-q -n -E 0`: skip without a word).
fn acquire(mut req: LockRequest, opts: &RunOptions) -> Result<LockGuard, Failure> {
    if !opts.quiet {
        let (verbose, shared) = (opts.verbose, opts.shared);
        req = req.on_wait(move |w| {
            let mut line = format!(
                "waiting for {}: {}",
                escape(&w.resource),
                crate::say::waiting_words(w)
            );
            // A reader waits at a lock other readers hold only behind a writer that waits.
            if shared && w.owner.is_shared() {
                line.push_str("; a process waits to write it, and new readers wait for it");
            }
            if verbose {
                line.push_str(&format!(
                    " ({}, judged {})",
                    shown(&w.lock),
                    escape(&w.judgement.to_string())
                ));
            }
            say(&line);
        });
    }
    req.acquire().map_err(|e| {
        if !e.is_contended() {
            return e.into();
        }
        let msg = match &e {
            _ if opts.quiet => String::new(),
            // A reader is refused by readers only when a writer waits among them.
            Error::Locked { owner, .. } if opts.shared && owner.is_shared() => format!(
                "{}; a process waits to write it, and new readers wait for it: retry when it has written, or wait for it (--wait-forever, or -w DURATION)",
                crate::say::held_words(&e).unwrap_or_default()
            ),
            Error::Locked { judgement, .. } if judgement.liveness != Liveness::Unknown => {
                format!(
                    "{}, or wait for it (--wait-forever, or -w DURATION)",
                    explain(&e)
                )
            }
            _ => explain(&e),
        };
        Failure(msg, opts.conflict)
    })
}

/// Starts the command under the lock: with its beacon (unless -o) and its name in
/// `DIRLOCK_HELD`, the forwarded signals unblocked, and tied to our life.
fn spawn(
    guard: &LockGuard,
    opts: &RunOptions,
    command: &Program,
    gate: &sys::StartGate,
) -> Result<Child, Failure> {
    let mut cmd = match command {
        Program::Argv(argv) => {
            let mut cmd = std::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            cmd
        }
        Program::Shell(script) => sys::shell(script),
    };
    let named = if opts.inherit {
        guard.keep_alive_in(&mut cmd)
    } else {
        guard.name_in(&mut cmd)
    };
    named.map_err(|e| Failure(explain(&e), 126))?;
    // The dead holder's record, for a command that repairs what it left half done; never one
    // a parent's run left in our environment.
    match guard.reclaimed_from() {
        Some(dead) => {
            cmd.env(
                RECLAIMED_FROM,
                serde_json::to_string(dead).unwrap_or_default(),
            );
        }
        None => {
            cmd.env_remove(RECLAIMED_FROM);
        }
    }
    sys::unblock_forwarded_in_child(&mut cmd);
    // The command never outlives this process: were `dirlock run` killed (even by SIGKILL),
    // the kernel kills the command too, so no contender, whether it judges by the beacon or
    // (like the reference implementation) by our pid, ever gets the lock while it runs.
    if let Some(why) = sys::die_with_parent(&mut cmd) {
        say(&format!(
            "warning: the command is not tied to this process ({why}): were `dirlock run` killed, the command would run on without the lock"
        ));
    }
    // Last, just before the exec: a stop signal that came meanwhile keeps the command from
    // starting.
    gate.guard(&mut cmd);
    cmd.spawn().map_err(|e| spawn_failure(&e, &cmd))
}

/// Why command `cmd` did not start (`e`), with the conventional status: 127 when it is not
/// found, else 126.
fn spawn_failure(e: &std::io::Error, cmd: &std::process::Command) -> Failure {
    if sys::StartGate::stopped(e) {
        return Failure("stopped before the command started".into(), 1);
    }
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    let program = shown(Path::new(cmd.get_program()));
    let why = if sys::too_large(e) {
        // Not the command's fault: say what is large.
        let env: usize = std::env::vars_os()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum();
        format!(
            "{e}: its arguments and environment (this process's is {env} bytes) are more than the system takes; shorten them, or remove variables it does not need (`env -u NAME`)"
        )
    } else {
        e.to_string()
    };
    Failure(format!("cannot run {program}: {why}"), code)
}
