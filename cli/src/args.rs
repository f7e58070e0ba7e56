//! The command line: subcommands, options and their help.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const EX_USAGE: u8 = 64;
pub(crate) const EX_TEMPFAIL: u8 = 75;

const STATUS_USAGE: &str = "\
dirlock status [OPTIONS] --lock [DIR/]NAME|--repository ROOT|--global-setup HOME
       dirlock status [OPTIONS] --all";
const UNLOCK_USAGE: &str =
    "dirlock unlock [OPTIONS] --lock [DIR/]NAME|--repository ROOT|--global-setup HOME";
const PATH_USAGE: &str =
    "dirlock path [OPTIONS] --lock [DIR/]NAME|--repository ROOT|--global-setup HOME";

const RUN_USAGE: &str = "\
dirlock run [OPTIONS] --lock [DIR/]NAME|--repository ROOT|--global-setup HOME CMD [ARG]...
       dirlock run [OPTIONS] --lock [DIR/]NAME|--repository ROOT|--global-setup HOME -c STRING
       dirlock run [OPTIONS] LOCKPATH CMD [ARG]...      (as flock FILE CMD)
       dirlock run [OPTIONS] LOCKPATH -c STRING";

/// Cross-process directory locks that survive crashes without ever letting two processes in.
#[derive(Parser, Debug)]
#[command(name = "dirlock", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Take the lock, run a command, release the lock; exit with the command's status.
    #[cfg_attr(
        any(target_os = "linux", target_os = "freebsd"),
        doc = "\n\nWhile it waits, a signal that would end it (SIGINT, Ctrl-C included, \
        SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2) abandons the wait, leaves \
        nothing behind, and ends `dirlock run` as it would have (the shell sees 128+N), \
        without running the command, as with flock(1); one that comes before the command's \
        exec begins keeps it from starting. Signals its caller made ignored (nohup, trap '', a \
        script's background job) stay ignored, and reach the command ignored. Once the \
        command runs, those signals sent to `dirlock run`, and an alarm its caller set, are \
        forwarded to it. The command \
        never outlives `dirlock run`: if `dirlock run` is killed (even by SIGKILL), the kernel \
        kills the command too, unless the command changes its user or group (sudo, su, \
        setpriv, a daemon dropping privileges) or runs a program that gains privileges \
        (set-user-ID or set-group-ID, or with file capabilities), which takes that \
        away: such a command runs on, holding the lock only through what it inherited (not \
        at all with -o). The command inherits the lock (unless -o), so that, were \
        `dirlock run` killed, what it left running in the background keeps the lock held until \
        it ends; when the command exits, `dirlock run` releases the lock, whatever it left \
        running (unlike flock(1)). It finds the lock named in \
        DIRLOCK_HELD, so that a nested `dirlock run` (or library call) for the same lock is \
        refused instead of waiting for its own parent."
    )]
    #[cfg_attr(
        all(unix, not(any(target_os = "linux", target_os = "freebsd"))),
        doc = "\n\nWhile it waits, a signal that would end it (SIGINT, Ctrl-C included, \
        SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2) abandons the wait, leaves \
        nothing behind, and ends `dirlock run` as it would have (the shell sees 128+N), \
        without running the command, as with flock(1); one that comes before the command's \
        exec begins keeps it from starting. Signals its caller made ignored (nohup, trap '', a \
        script's background job) stay ignored, and reach the command ignored. Once the \
        command runs, those signals sent to `dirlock run`, and an alarm its caller set, are \
        forwarded to it. The command \
        inherits the lock (unless -o), so the lock stays held while it, or anything \
        it left running in the background, is alive, also if `dirlock run` is killed: this \
        kernel (unlike Linux's and FreeBSD's) cannot kill the command with it. It finds the \
        lock named in DIRLOCK_HELD, so that a nested `dirlock run` (or library call) for the \
        same lock is refused instead of waiting for its own parent."
    )]
    #[cfg_attr(
        windows,
        doc = "\n\nWhile it waits, Ctrl-C and Ctrl-Break abandon the wait and exit 130 or 149 \
        without running the command. Once it runs, they reach the command from the console \
        itself. The command never outlives `dirlock run`: if `dirlock run` is killed (even by \
        `taskkill /F`), a job object ends the command and everything it started. A child \
        cannot inherit the lock on Windows: `dirlock run` holds the lock while the \
        command runs, and what the command leaves running once it exits does not keep it held. The \
        command finds the lock named in DIRLOCK_HELD, so that a nested `dirlock run` (or \
        library call) for the same lock is refused instead of waiting for its own parent."
    )]
    #[command(override_usage = RUN_USAGE)]
    Run {
        #[command(flatten)]
        sel: Selector,
        #[command(flatten)]
        acq: Acquire,
        /// The lock excludes every other holder, readers (-s) included: the default (flock's
        /// -x and -e, accepted so that scripts written for it work).
        #[arg(
            short = 'x',
            long,
            short_alias = 'e',
            conflicts_with = "shared",
            help_heading = "Lock"
        )]
        exclusive: bool,
        /// Say nothing while waiting, nor when the lock is held (the exit status says it).
        #[arg(short, long, conflicts_with = "verbose", help_heading = "Output")]
        quiet: bool,
        /// Say how long it waited, and when the command starts and ends.
        #[arg(short, long, help_heading = "Output")]
        verbose: bool,
        /// Exit with status N when the lock is held by another process.
        #[arg(
            short = 'E',
            long,
            value_name = "N",
            default_value_t = EX_TEMPFAIL,
            help_heading = "Output"
        )]
        conflict_exit_code: u8,
        /// Run STRING through `sh -c` (on Windows `cmd /C`) instead of CMD.
        #[arg(
            short = 'c',
            long = "command",
            value_name = "STRING",
            help_heading = "Command"
        )]
        shell: Option<String>,
        #[cfg_attr(
            any(target_os = "linux", target_os = "freebsd"),
            doc = "The command does not inherit the lock: were `dirlock run` killed, what \
            the command left running in the background would not keep the lock held (without -o \
            it does, until it ends). Were `dirlock run` killed, the command dies with it, unless it changed its \
            user or group (sudo, su, setpriv, a daemon) or ran a program that gains privileges \
            (set-user-ID or set-group-ID, or with file capabilities): such a \
            command runs on, and with -o nothing holds the lock while it does (the next \
            contender takes it). Do not use -o for such a command."
        )]
        #[cfg_attr(
            all(unix, not(any(target_os = "linux", target_os = "freebsd"))),
            doc = "The command does not inherit the lock. Here a command outlives a killed \
            `dirlock run` (this kernel has no parent-death signal), and with -o it then runs \
            without the lock: use -o only for commands that cannot outlive their caller."
        )]
        #[cfg_attr(
            windows,
            doc = "No effect on Windows, where a command cannot inherit the lock (accepted so \
            that scripts work on every platform)."
        )]
        #[arg(
            short = 'o',
            long = "close",
            visible_alias = "no-inherit",
            help_heading = "Command"
        )]
        no_inherit: bool,
        /// The command and its arguments (everything after the options; `--` before it works
        /// too). Without --lock, --repository or --global-setup, the first word is the lock's
        /// path, as flock(1) takes it: `dirlock run build.lock make` locks ./build.lock.
        #[arg(value_name = "CMD", trailing_var_arg = true, help_heading = "Command")]
        cmd: Vec<OsString>,
    },
    /// Say whether a lock is free, and who holds it since when (for a shared lock, each
    /// process that reads it, and any that waits to write it).
    #[command(override_usage = STATUS_USAGE)]
    Status {
        #[command(flatten)]
        sel: Selector,
        /// Every lock in the lock directory.
        #[arg(long, conflicts_with_all = ["repository", "global_setup", "lock"])]
        all: bool,
        /// Print nothing: the exit status says it (0 free, 75 held, by readers too, or not free
        /// to take).
        #[arg(short, long, conflicts_with = "json")]
        quiet: bool,
        /// Machine-readable output (schema: docs/command.md in the repository).
        #[arg(long)]
        json: bool,
        /// Also the details: why its holder counts as running or ended, its record, and what
        /// acquisitions and releases left beside the lock.
        #[arg(short, long, conflicts_with_all = ["json", "quiet"])]
        verbose: bool,
        /// How old a lock whose holder seems dead must be before it is taken over (default
        /// 60s).
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        grace: Option<Duration>,
    },
    /// Remove a lock whose holder has ended without releasing it.
    ///
    /// A lock whose holder runs, or cannot be checked from here, is never removed. `--force`
    /// also removes a damaged lock, but only while no process holds it. A lock is removed the
    /// way `run` takes over a dead holder's lock, so the two never race.
    #[command(override_usage = UNLOCK_USAGE)]
    Unlock {
        #[command(flatten)]
        sel: Selector,
        /// Also remove a damaged lock (never one a process still holds).
        #[arg(long)]
        force: bool,
    },
    /// Remove what released locks and ended runs left beside the locks (never a lock).
    Sweep {
        #[command(flatten)]
        place: Place,
        /// Leave what is younger than this (default 60s).
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        grace: Option<Duration>,
        /// Name each leftover removed or kept.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Tell whether a directory can host locks, and which guarantees it keeps.
    ///
    /// What locks rely on is tried, not looked up: in a private directory made for the
    /// purpose (and removed after), a rename onto another that must not replace it, and an
    /// flock taken through two opens. Nothing else in the directory is touched.
    Doctor {
        /// The directory (default: your lock directory, where `--lock NAME` puts locks).
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print the lock's path.
    #[command(override_usage = PATH_USAGE)]
    Path {
        #[command(flatten)]
        sel: Selector,
    },
    /// Take the lock and hold it until killed or until a file appears (a test helper).
    ///
    /// Prints `held PATH` once the lock is published, and `reclaimed-from PID TOKEN` when it
    /// took over a dead owner's lock.
    #[command(hide = true)]
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
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff), generated from the same definitions as this help: the
    /// command's, or one subcommand's (`dirlock-run.1`).
    Man {
        /// The subcommand whose page to print.
        #[arg(value_name = "SUBCOMMAND")]
        of: Option<String>,
    },
}

/// Which lock.
#[derive(Args, Debug)]
#[command(next_help_heading = "Lock")]
pub(crate) struct Selector {
    /// A lock named NAME in your lock directory, or NAME in directory DIR (which only you may
    /// write). Its directory is NAME.lock (NAME where it ends in .lock). Waits by default.
    #[arg(long, value_name = "[DIR/]NAME", group = "target")]
    pub(crate) lock: Option<OsString>,
    /// The lock of the repository (or any directory tree) at ROOT. Fails at once by default.
    #[arg(long, value_name = "ROOT", group = "target")]
    pub(crate) repository: Option<PathBuf>,
    /// The setup lock of the account whose home is HOME. Waits by default.
    #[arg(long, value_name = "HOME", group = "target")]
    pub(crate) global_setup: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) place: Place,
}

/// Which lock directory.
#[derive(Args, Debug)]
pub(crate) struct Place {
    #[cfg_attr(
        not(windows),
        doc = "The locks of application NAME: `$TMPDIR/NAME-<uid>/operation-locks`, found \
        through TMPDIR as that application finds them. `--app apnea` shares the locks of apnea \
        (the TypeScript tool this protocol comes from)."
    )]
    #[cfg_attr(
        windows,
        doc = "The locks of application NAME: `%TEMP%\\NAME-user\\operation-locks`, as that \
        application finds them. `--app apnea` shares the locks of apnea (the TypeScript tool \
        this protocol comes from)."
    )]
    #[arg(long, value_name = "NAME", conflicts_with = "dir")]
    pub(crate) app: Option<String>,
    #[cfg_attr(
        not(windows),
        doc = "The lock directory (made if missing; only you may write it). Default: \
        $DIRLOCK_DIR, else `/tmp/dirlock-<uid>/operation-locks`, the same whatever TMPDIR says."
    )]
    #[cfg_attr(
        windows,
        doc = "The lock directory (made if missing; only you may write it). Default: \
        %DIRLOCK_DIR%, else %TEMP%\\dirlock-user\\operation-locks."
    )]
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// How to acquire.
#[derive(Args, Debug)]
#[command(next_help_heading = "Waiting")]
pub(crate) struct Acquire {
    /// Wait at most DURATION for the lock, then fail (as flock -w): seconds (2.5) or with
    /// units (500ms, 5m, 1h30m).
    #[arg(
        short = 'w',
        long = "wait",
        visible_alias = "timeout",
        value_name = "DURATION",
        value_parser = duration,
        conflicts_with_all = ["nonblock", "forever"]
    )]
    pub(crate) timeout: Option<Duration>,
    /// Wait for the lock however long it takes (the default for --lock and --global-setup).
    #[arg(long = "wait-forever", conflicts_with = "nonblock")]
    pub(crate) forever: bool,
    /// Fail at once if the lock is held (the default for --repository).
    #[arg(short = 'n', long = "nonblock", visible_aliases = ["nb", "no-wait"])]
    pub(crate) nonblock: bool,
    /// Take over a holder that seems dead, but that the system cannot prove dead, once its
    /// lock is this old (default 60s).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) grace: Option<Duration>,
    /// What this holder is doing, shown to those who wait for it.
    #[arg(long, value_name = "TEXT")]
    pub(crate) purpose: Option<String>,
    /// A shared (read) lock, as flock -s: any number of runs with -s take it together, and a
    /// run without -s waits until they have all finished (or fails at once with -n), then
    /// runs alone; while it waits, new -s runs wait for it. Where the filesystem has no flock
    /// (some network mounts), the lock is taken exclusively.
    #[arg(short = 's', long, help_heading = "Lock")]
    pub(crate) shared: bool,
}

/// A duration as people write it: seconds (`90`, `2.5`), or numbers each with a unit (`ms`,
/// `s`, `m`, `h`, `d`): `500ms`, `5m`, `1h30m`.
pub(crate) fn duration(v: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{v:?} is not a duration: give seconds (90, 2.5) or numbers with units (500ms, 5m, 1h30m)"
        )
    };
    let secs = |n: f64| -> Result<Duration, String> {
        if n.is_finite() && (0.0..1e12).contains(&n) {
            Ok(Duration::from_secs_f64(n))
        } else {
            Err(bad())
        }
    };
    let v = v.trim();
    if let Ok(n) = v.parse::<f64>() {
        return secs(n);
    }
    let mut total = 0.0;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let n: f64 = number.parse().map_err(|_| bad())?;
        total += n * match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(bad()),
        };
        rest = tail;
    }
    if v.is_empty() {
        return Err(bad());
    }
    secs(total)
}
