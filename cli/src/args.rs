//! The command line: subcommands, options and their help.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const EX_USAGE: u8 = 64;
pub(crate) const EX_TEMPFAIL: u8 = 75;

#[cfg(not(windows))]
pub(crate) const EXIT_STATUS: &str = "\
Exit status:
  0    success (for `run`: the command's own status is passed through; for `status`: the
       lock is free, or its owner is dead and the next acquisition takes it)
  1    an error (unsafe lock directory, I/O failure, malformed lock, lost lock, ...)
  64   usage error
  75   the lock is held by another process (EX_TEMPFAIL; `run -E N` chooses another status);
       for `status`: held, or not free to take (dead within its grace period, unknown,
       malformed)
  126  the command could not be run; 127 the command was not found
  128+N  the command was killed by signal N, or `run` was ended by signal N before the
       command ran (while it waited, or as it started the command), as flock(1) is
  141  the output pipe was closed (as for a tool killed by SIGPIPE)";
#[cfg(windows)]
pub(crate) const EXIT_STATUS: &str = "\
Exit status:
  0    success (for `run`: the command's own exit code is passed through, whole, also one
       above 255 such as a crash's 0xC0000005; for `status`: the lock is free, or its owner is
       dead and the next acquisition takes it)
  1    an error (unsafe lock directory, I/O failure, malformed lock, lost lock, ...)
  64   usage error
  75   the lock is held by another process (`run -E N` chooses another status); for
       `status`: held, or not free to take (dead within its grace period, unknown, malformed)
  126  the command could not be run; 127 the command was not found
  130  Ctrl-C ended `run`'s wait (149: Ctrl-Break; 143: the console closing)
  141  the output pipe was closed";

/// Cross-process directory locks that survive crashes without ever letting two processes in.
#[derive(Parser, Debug)]
#[command(name = "dirlock", version, after_help = EXIT_STATUS, disable_help_subcommand = true)]
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
        command runs, those signals sent to `dirlock run` are forwarded to it. The command \
        never outlives `dirlock run`: if `dirlock run` is killed (even by SIGKILL), the kernel \
        kills the command too, unless the command changes its user or group (sudo, su, \
        setpriv, a daemon dropping privileges) or runs a program that gains privileges \
        (set-user-ID or set-group-ID, or with file capabilities), which takes that \
        away: such a command runs on, holding the lock only through the beacon it inherited \
        (not at all with -o). The command inherits the lock's beacon (unless -o), so what it \
        leaves running in the background keeps the lock held. It finds the lock named in \
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
        command runs, those signals sent to `dirlock run` are forwarded to it. The command \
        inherits the lock's beacon (unless -o), so the lock stays held while it, or anything \
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
        cannot inherit the lock's beacon on Windows: `dirlock run` holds the lock while the \
        command runs, and what the command leaves running once it exits does not hold it. The \
        command finds the lock named in DIRLOCK_HELD, so that a nested `dirlock run` (or \
        library call) for the same lock is refused instead of waiting for its own parent."
    )]
    #[cfg_attr(
        not(windows),
        command(
            after_help = "Examples:\n  dirlock run --repository . -- git gc\n  dirlock run --global-setup ~ -w 300 -- ./install.sh\n  dirlock run --lock /srv/locks/deploy.lock --wait -c 'make deploy'\n  dirlock run -q -n -E 0 --lock cron.lock -- ./nightly.sh   # skip quietly if still running"
        )
    )]
    #[cfg_attr(
        windows,
        command(
            after_help = "Examples:\n  dirlock run --repository . -- git gc\n  dirlock run --global-setup %USERPROFILE% -w 300 -- install.cmd\n  dirlock run --lock C:\\locks\\deploy.lock --wait -c \"make deploy\"\n  dirlock run -q -n -E 0 --lock nightly.lock -- nightly.cmd   # skip quietly if still running"
        )
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
        /// Run STRING through `sh -c` (on Windows `cmd /C`) instead of CMD.
        #[arg(
            short = 'c',
            long = "command",
            value_name = "STRING",
            conflicts_with = "cmd"
        )]
        shell: Option<String>,
        #[cfg_attr(
            any(target_os = "linux", target_os = "freebsd"),
            doc = "The command does not inherit the beacon: what it leaves running in the \
            background does not keep the lock held (without -o it would, never reclaimed, until \
            it ends). Were `dirlock run` killed, the command dies with it, unless it changed its \
            user or group (sudo, su, setpriv, a daemon) or ran a program that gains privileges \
            (set-user-ID or set-group-ID, or with file capabilities): such a \
            command runs on, and with -o nothing holds the lock while it does (the next \
            contender takes it). Do not use -o for such a command."
        )]
        #[cfg_attr(
            all(unix, not(any(target_os = "linux", target_os = "freebsd"))),
            doc = "The command does not inherit the beacon. Here a command outlives a killed \
            `dirlock run` (this kernel has no parent-death signal), and with -o it then runs \
            without the lock: use -o only for commands that cannot outlive their caller."
        )]
        #[cfg_attr(
            windows,
            doc = "No effect on Windows, where a command cannot inherit the beacon (accepted so \
            that scripts work on every platform)."
        )]
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
pub(crate) struct Selector {
    /// The lock of the repository (or any directory tree) at ROOT.
    #[arg(long, value_name = "ROOT", group = "target")]
    pub(crate) repository: Option<PathBuf>,
    /// The per-account setup lock of the account whose home is HOME.
    #[arg(long, value_name = "HOME", group = "target")]
    pub(crate) global_setup: Option<PathBuf>,
    /// A named lock: NAME (ending in .lock) in the lock directory, or DIR/NAME.
    #[arg(long, value_name = "[DIR/]NAME", group = "target")]
    pub(crate) lock: Option<String>,
    #[command(flatten)]
    pub(crate) place: Place,
}

/// Which lock directory.
#[derive(Args, Debug)]
pub(crate) struct Place {
    #[cfg_attr(
        not(windows),
        doc = "Lock namespace `<temp dir>/<NAME>-<uid>/operation-locks` (temp dir from TMPDIR). \
        `--app apnea` addresses the reference implementation's locks. Default: dirlock."
    )]
    #[cfg_attr(
        windows,
        doc = "Lock namespace `%TEMP%\\<NAME>-user\\operation-locks`. `--app apnea` addresses \
        the reference implementation's locks. Default: dirlock."
    )]
    #[arg(long, value_name = "NAME", conflicts_with = "dir")]
    pub(crate) app: Option<String>,
    /// A lock directory of your own.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// How to acquire.
#[derive(Args, Debug)]
pub(crate) struct Acquire {
    /// Wait for the lock however long it takes (default for --global-setup).
    #[arg(long, conflicts_with_all = ["timeout", "nonblock"])]
    pub(crate) wait: bool,
    /// Wait at most SECS seconds (fractions allowed).
    #[arg(short = 'w', long, value_name = "SECS", value_parser = secs, conflicts_with = "nonblock")]
    pub(crate) timeout: Option<Duration>,
    /// Fail at once if the lock is held (default for --repository and --lock).
    #[arg(short = 'n', long)]
    pub(crate) nonblock: bool,
    /// Reclaim owners dead by evidence (not kernel proof) after SECS seconds (default 60).
    #[arg(long, value_name = "SECS", value_parser = secs)]
    pub(crate) grace: Option<Duration>,
    /// What this holder is doing, shown to contenders.
    #[arg(long, value_name = "TEXT")]
    pub(crate) purpose: Option<String>,
}

pub(crate) fn secs(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e12)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{v:?} is not a number of seconds from 0 to 999999999999"))
}
