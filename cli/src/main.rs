//! `dirlock`: run commands under a directory lock, and inspect, clear and sweep locks.

mod sys;

use clap::{Args, CommandFactory, Parser, Subcommand};
use dirlock::text::{escape, path as shown};
use dirlock::{
    Cancel, Error, GuardState, Liveness, LockRequest, Locks, State, Status, Unlocked, Wait,
};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const EX_USAGE: u8 = 64;
const EX_TEMPFAIL: u8 = 75;

const EXIT_STATUS: &str = "\
Exit status:
  0    success (for `run`: the command's own status is passed through; for `status`: the
       lock is free, or its owner is dead and the next acquisition takes it)
  1    an error (unsafe lock directory, I/O failure, malformed lock, lost lock, ...)
  64   usage error
  75   the lock is held by another process (EX_TEMPFAIL; `run -E N` chooses another status);
       for `status`: held, or not free to take (dead within its grace period, unknown,
       malformed)
  126  the command could not be run; 127 the command was not found
  128+N  the command was killed by signal N, or signal N ended `run`'s wait
  141  the output pipe was closed (as for a tool killed by SIGPIPE)";

/// Cross-process directory locks that survive crashes without ever letting two processes in.
#[derive(Parser, Debug)]
#[command(name = "dirlock", version, after_help = EXIT_STATUS, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Take the lock, run a command, release the lock; exit with the command's status.
    ///
    /// While it waits, SIGINT, SIGTERM and SIGHUP (Ctrl-C included) abandon the wait and exit 128+N
    /// without running the command. Once it runs, those signals sent to `dirlock run` are
    /// forwarded to it. The command never outlives `dirlock run`: if `dirlock run` is killed
    /// (even by SIGKILL), the kernel kills the command too. The command inherits the lock's
    /// beacon (unless -o), so what it leaves running in the background keeps the lock held.
    /// It finds the lock named in DIRLOCK_HELD, so that a nested `dirlock run` (or library
    /// call) for the same lock is refused instead of waiting for its own parent.
    #[command(
        after_help = "Examples:\n  dirlock run --repository . -- git gc\n  dirlock run --global-setup ~ -w 300 -- ./install.sh\n  dirlock run --lock /srv/locks/deploy.lock --wait -c 'make deploy'\n  dirlock run -q -n -E 0 --lock cron.lock -- ./nightly.sh   # skip quietly if still running"
    )]
    Run {
        #[command(flatten)]
        sel: Selector,
        #[command(flatten)]
        acq: Acquire,
        /// Say nothing while waiting, nor when the lock is held (the exit status says it).
        #[arg(short, long)]
        quiet: bool,
        /// Exit with status N when the lock is held by another process.
        #[arg(short = 'E', long, value_name = "N", default_value_t = EX_TEMPFAIL)]
        conflict_exit_code: u8,
        /// Run STRING through `sh -c` instead of CMD.
        #[arg(
            short = 'c',
            long = "command",
            value_name = "STRING",
            conflicts_with = "cmd"
        )]
        shell: Option<String>,
        /// The command does not inherit the beacon. Were `dirlock run` killed, the command dies
        /// with it, but what it left running in the background would keep the lock held
        /// (never reclaimed) until it ends; with -o the lock is reclaimable at once.
        #[arg(short = 'o', long)]
        no_inherit: bool,
        /// The command and its arguments.
        #[arg(last = true, value_name = "CMD", required_unless_present = "shell")]
        cmd: Vec<OsString>,
    },
    /// Show a lock's state, owner, reclaim guard and leftovers.
    #[command(
        after_help = "Examples:\n  dirlock status --repository .\n  dirlock status --app apnea --all --json"
    )]
    Status {
        #[command(flatten)]
        sel: Selector,
        /// Every lock in the lock directory.
        #[arg(long, conflicts_with_all = ["repository", "global_setup", "lock"])]
        all: bool,
        /// Print nothing: the exit status says it (0 free, 75 held or not free to take).
        #[arg(short, long, conflicts_with = "json")]
        quiet: bool,
        /// Machine-readable output (schema in the README).
        #[arg(long)]
        json: bool,
        /// The grace period used to judge dead-by-evidence owners, in seconds.
        #[arg(long, value_name = "SECS", value_parser = secs)]
        grace: Option<Duration>,
    },
    /// Remove a lock whose owner is dead (by kernel proof, or by evidence at any age).
    ///
    /// Live and unknown owners are refused. `--force` also removes a malformed lock, but only
    /// while no process holds a lock on it. Removal goes through the same reclaim guard as an
    /// acquisition.
    #[command(
        after_help = "Examples:\n  dirlock unlock --repository .\n  dirlock unlock --lock /srv/locks/deploy.lock --force"
    )]
    Unlock {
        #[command(flatten)]
        sel: Selector,
        /// Also remove a malformed lock (never one whose beacon is held).
        #[arg(long)]
        force: bool,
    },
    /// Remove tombstones, and candidates whose creators are dead.
    #[command(
        after_help = "Examples:\n  dirlock sweep --app myapp\n  dirlock sweep --dir /srv/locks --grace 0"
    )]
    Sweep {
        #[command(flatten)]
        place: Place,
        /// Leave candidates younger than this, in seconds (default 60).
        #[arg(long, value_name = "SECS", value_parser = secs)]
        grace: Option<Duration>,
    },
    /// Print the lock's path.
    #[command(
        after_help = "Examples:\n  dirlock path --repository .\n  dirlock path --app apnea --global-setup ~"
    )]
    Path {
        #[command(flatten)]
        sel: Selector,
    },
    /// Take the lock and hold it until killed or until a file appears (a test helper).
    ///
    /// Prints `held PATH` once the lock is published, and `reclaimed-from PID TOKEN` when it
    /// took over a dead owner's lock.
    #[command(
        hide = true,
        after_help = "Examples:\n  dirlock hold --repository . --until /tmp/done"
    )]
    Hold {
        #[command(flatten)]
        sel: Selector,
        #[command(flatten)]
        acq: Acquire,
        /// Release and exit once this file exists.
        #[arg(long, value_name = "FILE")]
        until: Option<PathBuf>,
    },
    /// Print shell completions for SHELL (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  dirlock completions bash > ~/.local/share/bash-completion/completions/dirlock"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff), generated from the same definitions as this help: the
    /// command's, or one subcommand's (`dirlock-run.1`).
    #[command(
        after_help = "Examples:\n  dirlock man > dirlock.1 && man ./dirlock.1\n  dirlock man run > dirlock-run.1"
    )]
    Man {
        /// The subcommand whose page to print.
        #[arg(value_name = "SUBCOMMAND")]
        of: Option<String>,
    },
}

/// Which lock.
#[derive(Args, Debug)]
struct Selector {
    /// The lock of the repository (or any directory tree) at ROOT.
    #[arg(long, value_name = "ROOT", group = "target")]
    repository: Option<PathBuf>,
    /// The per-account setup lock of the account whose home is HOME.
    #[arg(long, value_name = "HOME", group = "target")]
    global_setup: Option<PathBuf>,
    /// A named lock: NAME (ending in .lock) in the lock directory, or DIR/NAME.
    #[arg(long, value_name = "[DIR/]NAME", group = "target")]
    lock: Option<String>,
    #[command(flatten)]
    place: Place,
}

/// Which lock directory.
#[derive(Args, Debug)]
struct Place {
    /// Lock namespace <temp dir>/<NAME>-<uid>/operation-locks (temp dir from TMPDIR). `--app
    /// apnea` addresses the reference implementation's locks. Default: dirlock.
    #[arg(long, value_name = "NAME", conflicts_with = "dir")]
    app: Option<String>,
    /// A lock directory of your own.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// How to acquire.
#[derive(Args, Debug)]
struct Acquire {
    /// Wait for the lock however long it takes (default for --global-setup).
    #[arg(long, conflicts_with_all = ["timeout", "nonblock"])]
    wait: bool,
    /// Wait at most SECS seconds (fractions allowed).
    #[arg(short = 'w', long, value_name = "SECS", value_parser = secs, conflicts_with = "nonblock")]
    timeout: Option<Duration>,
    /// Fail at once if the lock is held (default for --repository and --lock).
    #[arg(short = 'n', long)]
    nonblock: bool,
    /// Reclaim owners dead by evidence (not kernel proof) after SECS seconds (default 60).
    #[arg(long, value_name = "SECS", value_parser = secs)]
    grace: Option<Duration>,
    /// What this holder is doing, shown to contenders.
    #[arg(long, value_name = "TEXT")]
    purpose: Option<String>,
}

fn secs(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e12)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{v:?} is not a number of seconds from 0 to 999999999999"))
}

/// A failure: what to print (nothing for a closed output pipe) and the exit status.
struct Failure(String, u8);

/// The status of a command whose output pipe was closed: what a tool killed by `SIGPIPE`
/// reports (128 + 13), without a word.
const EX_PIPE: u8 = 141;

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match &e {
            e if e.is_contended() => EX_TEMPFAIL,
            // A name or an argument that cannot be used: a usage error.
            Error::InvalidInput { .. } => EX_USAGE,
            _ => 1,
        };
        Failure(explain(&e), code)
    }
}

/// The error in one paragraph, with its causes, and the advice in this command's terms (its
/// flags and subcommands, where the library's own message names its API).
fn explain(e: &Error) -> String {
    let head = match e {
        Error::Locked { judgement, lock, .. } if judgement.liveness == Liveness::Unknown => format!(
            "{}; it is never reclaimed automatically: check the holder where it ran, and once it is gone remove {} by hand",
            e.facts(),
            shown(lock)
        ),
        Error::Locked { .. } => format!("{}; retry when it finishes", e.facts()),
        Error::Malformed { lock, .. } => format!(
            "{}; check that no process uses it, then remove it with `dirlock unlock --force` for the same lock (it refuses while a process holds a lock on it), or remove {} by hand",
            e.facts(),
            shown(lock)
        ),
        _ => e.to_string(),
    };
    let mut msg = head;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// Writes the command's output. A reader that went away (`| head`) ends the command quietly,
/// as it ends other Unix tools; any other write error is reported.
fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(Failure(String::new(), EX_PIPE))
        }
        Err(e) => Err(Failure(format!("cannot write the output: {e}"), 1)),
    }
}

/// A line on stderr; a stderr that cannot be written to is not worth failing over.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "dirlock: {line}");
}

fn open(place: &Place) -> Result<Locks, Failure> {
    match (&place.app, &place.dir) {
        (_, Some(dir)) => own_dir(dir),
        (app, None) => Ok(Locks::new(app.as_deref().unwrap_or("dirlock"))?),
    }
}

/// A lock directory the user named (`--dir`, `--lock DIR/NAME`). When it cannot be used as
/// one (it is not private), say what to use instead, in this command's terms.
fn own_dir(dir: &Path) -> Result<Locks, Failure> {
    Locks::in_dir(dir).map_err(|e| match e {
        // The library's advice names its API: say it in this command's options instead.
        Error::Unsafe { path, problem, .. } => Failure(
            format!(
                "refusing {}: {}; lock directories must be private to you: use `--lock NAME` alone (your own namespace under the temporary directory), or `--dir DIR` with a new directory made only for your locks (dirlock creates it with mode 700)",
                shown(&path),
                escape(&problem)
            ),
            1,
        ),
        e => e.into(),
    })
}

/// The request for the lock the selector names, in the lock directory it names.
fn select(sel: &Selector) -> Result<LockRequest, Failure> {
    let usage = |m: &str| Failure(m.to_owned(), EX_USAGE);
    match (&sel.repository, &sel.global_setup, &sel.lock) {
        (Some(r), None, None) => Ok(open(&sel.place)?.repository_lock(r)),
        (None, Some(h), None) => Ok(open(&sel.place)?.global_setup_lock(h)),
        (None, None, Some(l)) => match l.rsplit_once('/') {
            Some((dir, name)) => {
                if sel.place.app.is_some() || sel.place.dir.is_some() {
                    return Err(usage(
                        "--lock DIR/NAME names its own directory: drop --app/--dir",
                    ));
                }
                let dir = if dir.is_empty() { "/" } else { dir };
                Ok(own_dir(Path::new(dir))?.named_lock(name))
            }
            None => Ok(open(&sel.place)?.named_lock(l)),
        },
        _ => Err(usage(
            "give one of --repository ROOT, --global-setup HOME, --lock [DIR/]NAME",
        )),
    }
}

fn configure(mut req: LockRequest, acq: &Acquire) -> LockRequest {
    if acq.wait {
        req = req.wait(Wait::Forever);
    }
    if acq.nonblock {
        req = req.wait(Wait::Immediately);
    }
    if let Some(t) = acq.timeout {
        req = req.wait(Wait::Timeout(t));
    }
    if let Some(g) = acq.grace {
        req = req.grace(g);
    }
    if let Some(p) = &acq.purpose {
        req = req.purpose(p.clone());
    }
    req
}

fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(d) => format!("{} s ago", d.as_secs()),
        Err(e) => format!("{} s in the future", e.duration().as_secs()),
    }
}

fn unix_ms(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EX_USAGE } else { 0 });
        }
    };
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(Failure(msg, code)) => {
            if !msg.is_empty() {
                say(&msg);
            }
            ExitCode::from(code)
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<ExitCode, Failure> {
    match cmd {
        Cmd::Run {
            sel,
            acq,
            quiet,
            conflict_exit_code,
            shell,
            no_inherit,
            cmd,
        } => {
            let command = match shell {
                Some(script) => vec!["sh".into(), "-c".into(), script.into()],
                None => cmd,
            };
            let opts = RunOptions {
                quiet,
                conflict: conflict_exit_code,
                inherit: !no_inherit,
            };
            run(&sel, &acq, &opts, &command)
        }
        Cmd::Status {
            sel,
            all,
            quiet,
            json,
            grace,
        } => status(&sel, all, quiet, json, grace),
        Cmd::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "dirlock", &mut out);
            emit(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { of } => {
            let cli = Cli::command();
            let page = match &of {
                None => cli,
                Some(name) => {
                    let sub = cli
                        .get_subcommands()
                        .find(|c| c.get_name() == name && !c.is_hide_set())
                        .ok_or_else(|| {
                            Failure(
                                format!("cannot find a subcommand {name:?}: see `dirlock --help`"),
                                64,
                            )
                        })?;
                    sub.clone()
                        .name(format!("dirlock-{name}"))
                        .version(env!("CARGO_PKG_VERSION"))
                }
            };
            let mut out = Vec::new();
            clap_mangen::Man::new(page)
                .render(&mut out)
                .map_err(|e| Failure(format!("cannot render the manual page: {e}"), 1))?;
            emit(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Unlock { sel, force } => {
            let req = select(&sel)?;
            let path = req.path()?;
            let path = shown(&path);
            let unlocked = req.unlock(force).map_err(|e| match &e {
                Error::Locked { .. } => Failure(
                    format!(
                        "{}; `dirlock unlock` removes only a lock whose owner is dead",
                        explain(&e)
                    ),
                    EX_TEMPFAIL,
                ),
                _ => e.into(),
            })?;
            emit(&match unlocked {
                Unlocked::NotLocked => format!("nothing to remove: {path} is not locked\n"),
                Unlocked::Removed { owner: Some(o) } => {
                    format!("removed {path} (its owner, pid {}, is dead)\n", o.pid)
                }
                Unlocked::Removed { owner: None } => {
                    format!("removed {path} (malformed, no process held it)\n")
                }
                _ => format!("removed {path}\n"),
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Sweep { place, grace } => {
            let locks = open(&place)?;
            let report = locks.sweep(grace.unwrap_or(dirlock::DEFAULT_GRACE))?;
            let mut text = String::new();
            for name in &report.removed {
                let _ = writeln!(text, "removed {}", escape(name));
            }
            for (name, why) in &report.kept {
                let _ = writeln!(text, "kept {}: {}", escape(name), escape(why));
            }
            emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Path { sel } => {
            let path = select(&sel)?.path()?;
            emit(&format!("{}\n", path.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Hold { sel, acq, until } => {
            let guard = configure(select(&sel)?, &acq).acquire()?;
            let mut text = format!("held {}\n", guard.path().display());
            if let Some(prev) = guard.reclaimed_from() {
                let _ = writeln!(text, "reclaimed-from {} {}", prev.pid, escape(&prev.token));
            }
            emit(&text)?;
            loop {
                if until.as_ref().is_some_and(|f| f.exists()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            guard.release()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Where `dirlock run` is, for its signal thread.
enum Phase {
    /// Finding the lock directory: nothing is held yet, a signal ends `run` at once.
    Setup,
    /// Taking the lock: a signal abandons the wait (the first one is kept).
    Waiting(Option<i32>),
    /// The lock is held and the command being started: a signal (a terminal's included: the
    /// command may not exist yet to receive it) is kept, and passed on once it does.
    Starting(Option<i32>),
    /// The command runs: signals other processes send are forwarded to it.
    Running(u32),
    /// The command has exited (its pid may be another process's by now): nothing is forwarded.
    Done,
}

/// How `run` treats its command.
struct RunOptions {
    /// Say nothing while waiting, nor when the lock is held.
    quiet: bool,
    /// The exit status when the lock is held by another process.
    conflict: u8,
    /// Whether the command inherits the beacon (keeps the lock held while it, or what it
    /// leaves running, lives).
    inherit: bool,
}

fn run(
    sel: &Selector,
    acq: &Acquire,
    opts: &RunOptions,
    command: &[OsString],
) -> Result<ExitCode, Failure> {
    // Before any thread starts: SIGINT, SIGTERM and SIGHUP are received by a thread of ours,
    // not by their default handlers. While the lock is awaited they abandon the wait (nothing
    // is left behind and nothing runs: exit 128+N, as flock(1) does); once the command runs
    // they are forwarded to it (and `dirlock run` itself waits for it and releases).
    sys::block_forwarded_signals().map_err(|e| Failure(format!("cannot block signals: {e}"), 1))?;
    let cancel =
        Cancel::new().map_err(|e| Failure(format!("cannot make a cancel handle: {e}"), 1))?;
    let phase = Arc::new(Mutex::new(Phase::Setup));
    sys::on_signals({
        let (phase, cancel) = (phase.clone(), cancel.clone());
        move |sig, from_process| match &mut *phase.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Setup => std::process::exit(128 + sig),
            Phase::Waiting(first) => {
                first.get_or_insert(sig);
                cancel.cancel();
            }
            Phase::Starting(pending) => {
                pending.get_or_insert(sig);
            }
            // A terminal's Ctrl-C or hangup reached the command already (same process
            // group): only what another process sent us is passed on.
            Phase::Running(child) if from_process => sys::send_signal(*child, sig),
            Phase::Running(_) | Phase::Done => {}
        }
    });
    let lock_phase = || phase.lock().unwrap_or_else(|e| e.into_inner());
    let req = select(sel)?;
    *lock_phase() = Phase::Waiting(None);
    let mut req = configure(req, acq).cancel(&cancel);
    if !opts.quiet {
        req = req.on_wait(|w| {
            say(&format!(
                "waiting for {}: held by {} since {}, judged {}",
                shown(&w.lock),
                w.owner,
                ago(w.since),
                escape(&w.judgement.to_string())
            ));
        });
    }
    let acquired = req.acquire();
    // Decide under the phase lock, so that a signal is either seen here or kept for later.
    {
        let mut phase = lock_phase();
        if let Phase::Waiting(Some(sig)) = *phase {
            drop(acquired); // got it just as the signal came: released, nothing runs
            return Ok(ExitCode::from(128 + sig.clamp(0, 127) as u8));
        }
        *phase = Phase::Starting(None);
    }
    let guard = match acquired {
        Ok(g) => g,
        // Busy: under -q the exit status alone says it (`-q -n -E 0`: skip without a word).
        Err(e) if e.is_contended() => {
            let msg = match &e {
                _ if opts.quiet => String::new(),
                Error::Locked { judgement, .. } if judgement.liveness != Liveness::Unknown => {
                    format!("{}, or wait for it (--wait, or -w SECS)", explain(&e))
                }
                _ => explain(&e),
            };
            return Err(Failure(msg, opts.conflict));
        }
        Err(e) => return Err(e.into()),
    };
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    if opts.inherit {
        guard.keep_alive_in(&mut cmd);
    } else {
        guard.name_in(&mut cmd);
    }
    sys::unblock_forwarded_in_child(&mut cmd);
    // The command never outlives this process: were `dirlock run` killed (even by SIGKILL),
    // the kernel kills the command too, so no contender, whether it judges by the beacon or
    // (like the reference implementation) by our pid, ever gets the lock while it runs.
    sys::die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let _ = guard.release();
            return Err(Failure(
                format!("cannot run {}: {e}", shown(Path::new(&command[0]))),
                code,
            ));
        }
    };
    let pending = std::mem::replace(&mut *lock_phase(), Phase::Running(child.id()));
    if let Phase::Starting(Some(sig)) = pending {
        // It came while the command was being started: the command may have missed it.
        sys::send_signal(child.id(), sig);
    }
    let status = child.wait();
    *lock_phase() = Phase::Done;
    // Released after the command exits, whatever happened to it.
    let released = guard.release();
    let status = status.map_err(|e| Failure(format!("cannot wait for the command: {e}"), 1))?;
    let code = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    if let Err(e) = released {
        say(&explain(&e));
        return Ok(ExitCode::from(if code == 0 { 1 } else { code as u8 }));
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

fn status(
    sel: &Selector,
    all: bool,
    quiet: bool,
    json: bool,
    grace: Option<Duration>,
) -> Result<ExitCode, Failure> {
    let statuses = if all {
        open(&sel.place)?.statuses()?
    } else {
        let mut req = select(sel)?;
        if let Some(g) = grace {
            req = req.grace(g);
        }
        vec![req.status()?]
    };
    let text = if json {
        let value = if all {
            json!({ "schema": 1, "locks": statuses.iter().map(to_json).collect::<Vec<_>>() })
        } else {
            to_json(&statuses[0])
        };
        format!("{value}\n")
    } else if statuses.is_empty() {
        "no locks are held or left over\n".to_owned()
    } else {
        statuses.iter().map(describe).collect::<Vec<_>>().join("\n")
    };
    if !quiet {
        emit(&text)?;
    }
    // One lock: whether the next acquisition would get it.
    let takeable = |st: &Status| match &st.state {
        State::Free | State::DeadByProof => true,
        State::DeadByEvidence { remaining } => remaining.is_zero(),
        _ => false,
    };
    if !all && !statuses.iter().all(takeable) {
        return Ok(ExitCode::from(EX_TEMPFAIL));
    }
    Ok(ExitCode::SUCCESS)
}

/// A path in JSON: `path` is always a string (lossy where the path is not UTF-8); a path that
/// is not UTF-8 also gets its exact bytes in `path_bytes`.
fn json_path(value: &mut Value, path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    value["path"] = json!(path.to_string_lossy());
    if path.to_str().is_none() {
        value["path_bytes"] = json!(path.as_os_str().as_bytes());
    }
}

fn to_json(st: &Status) -> Value {
    let remaining = match &st.state {
        State::DeadByEvidence { remaining } => Some(remaining.as_millis() as u64),
        _ => None,
    };
    let guard = match &st.guard {
        GuardState::Leftover { marked, age } => {
            json!({ "state": st.guard.name(), "marked": marked, "age_ms": age.as_millis() as u64 })
        }
        g => json!({ "state": g.name(), "marked": null, "age_ms": null }),
    };
    let mut value = json!({
        "schema": 1,
        "path": null,
        "name": st.name,
        "state": st.state.name(),
        "reason": st.reason,
        "since_unix_ms": st.since.and_then(unix_ms),
        "grace_remaining_ms": remaining,
        "owner": st.owner,
        "guard": guard,
        "candidates": st.candidates.iter().map(|c| json!({
            "name": c.name, "age_ms": c.age.as_millis() as u64, "creator_alive": c.creator_alive,
        })).collect::<Vec<_>>(),
        "tombstones": st.tombstones.iter().map(|t| json!({
            "name": t.name, "age_ms": t.age.as_millis() as u64,
        })).collect::<Vec<_>>(),
    });
    json_path(&mut value, &st.path);
    value
}

/// A lock's status for people: one field per line, everything read from disk escaped.
fn describe(st: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "lock:       {}", shown(&st.path));
    let state = match &st.state {
        State::DeadByEvidence { remaining } if remaining.is_zero() => {
            "dead by evidence (past the grace period: the next acquisition reclaims it)".to_owned()
        }
        State::DeadByEvidence { remaining } => format!(
            "dead by evidence ({} s left in the grace period)",
            remaining.as_secs_f64().ceil()
        ),
        State::DeadByProof => "dead by proof (the next acquisition reclaims it at once)".to_owned(),
        State::Malformed { .. } => "malformed (never removed automatically)".to_owned(),
        s => s.name().to_owned(),
    };
    let _ = writeln!(out, "state:      {state}");
    if let Some(r) = &st.reason {
        let _ = writeln!(out, "why:        {}", escape(r));
    }
    if let Some(o) = &st.owner {
        let mut line = o.to_string();
        if let Some(t) = st.since {
            let _ = write!(line, ", since {}", ago(t));
        }
        line.push_str(match o.beacon {
            Some(true) => ", holds a beacon",
            Some(false) => ", no beacon (judged by pid)",
            None => ", reference-format record (judged by pid)",
        });
        if let Some(w) = &o.writer {
            let _ = write!(line, ", written by {}", escape(w));
        }
        let _ = writeln!(out, "owner:      {line}");
    }
    let guard = match &st.guard {
        GuardState::Leftover { marked: true, age } => format!(
            "left by a crashed reclaimer {} s ago (reused at once by the next one)",
            age.as_secs()
        ),
        GuardState::Leftover { marked: false, age } => format!(
            "left by another implementation {} s ago (respected for the grace period)",
            age.as_secs()
        ),
        GuardState::Busy => "busy: a process is reclaiming the lock".to_owned(),
        g => g.name().to_owned(),
    };
    let _ = writeln!(out, "guard:      {guard}");
    let list = |v: &[dirlock::Leftover]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter()
                .map(|l| {
                    let who = match l.creator_alive {
                        Some(true) => ", creator alive",
                        Some(false) => ", creator gone",
                        None => "",
                    };
                    format!("{} ({} s old{who})", escape(&l.name), l.age.as_secs())
                })
                .collect::<Vec<_>>()
                .join("\n            ")
        }
    };
    let _ = writeln!(out, "candidates: {}", list(&st.candidates));
    let _ = writeln!(out, "tombstones: {}", list(&st.tombstones));
    out
}
