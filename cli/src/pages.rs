//! What `--help` and the manual pages say beyond the options, written once: each subcommand's
//! examples, the exit statuses and the environment. `--help` shows them as text after the
//! options; `dirlock man` renders them as the manual's EXIT STATUS, ENVIRONMENT, EXAMPLES and
//! SEE ALSO sections.

use clap::CommandFactory;
use clap_mangen::roff::{bold, roman, Roff};

/// An example: the command line, and what it does.
type Example = (&'static str, &'static str);

#[cfg(not(windows))]
const RUN: &[Example] = &[
    (
        "dirlock run ./build.lock make",
        "as flock ./build.lock make: waits for the lock",
    ),
    (
        "dirlock run --repository . git gc",
        "this repository's lock; fails at once if held",
    ),
    (
        "dirlock run --global-setup ~ -w 5m ./install.sh",
        "waits at most 5 minutes",
    ),
    (
        "dirlock run --lock deploy -c 'make deploy'",
        "your lock named deploy, a shell command",
    ),
    (
        "dirlock run -q -n -E 0 --lock nightly ./nightly.sh",
        "skips quietly if still running",
    ),
    (
        "dirlock run -s --lock index ./search.sh",
        "a shared lock: many such runs at once; a run without -s waits for them",
    ),
];
#[cfg(windows)]
const RUN: &[Example] = &[
    (
        "dirlock run --repository . git gc",
        "this repository's lock; fails at once if held",
    ),
    (
        "dirlock run --global-setup %USERPROFILE% -w 5m install.cmd",
        "waits at most 5 minutes",
    ),
    (
        "dirlock run --lock deploy -c \"make deploy\"",
        "your lock named deploy, a shell command",
    ),
    (
        "dirlock run -q -n -E 0 --lock nightly nightly.cmd",
        "skips quietly if still running",
    ),
    (
        "dirlock run -s --lock index search.cmd",
        "a shared lock: many such runs at once; a run without -s waits for them",
    ),
];

const STATUS: &[Example] = &[
    (
        "dirlock status --lock deploy",
        "who holds it since when; for a shared lock, each reader and who waits to write",
    ),
    (
        "dirlock status -q --repository . || echo busy",
        "in a script",
    ),
    ("dirlock status --all --json", "every lock, for a program"),
];
const UNLOCK: &[Example] = &[
    (
        "dirlock unlock --repository .",
        "remove a lock whose holder has ended",
    ),
    (
        "dirlock unlock --force --lock /srv/locks/deploy",
        "also a damaged one no process holds",
    ),
];
const SWEEP: &[Example] = &[
    ("dirlock sweep", "in your lock directory"),
    (
        "dirlock sweep --dir /srv/locks --grace 0",
        "also what is fresh",
    ),
];
const PATH: &[Example] = &[
    ("dirlock path --repository .", ""),
    ("dirlock path --lock deploy", ""),
];
const DOCTOR: &[Example] = &[
    ("dirlock doctor", "your lock directory"),
    ("dirlock doctor /srv/locks", "before sharing locks there"),
    ("dirlock doctor --json .", ""),
];
const COMPLETIONS: &[Example] = &[(
    "dirlock completions bash > ~/.local/share/bash-completion/completions/dirlock",
    "",
)];
const HOLD: &[Example] = &[
    (
        "dirlock hold --repository . --until /tmp/done",
        "holds the lock until the file appears",
    ),
    (
        "dirlock hold -s --lock index --until /tmp/done",
        "reads it (a shared lock) until then",
    ),
];
const MAN: &[Example] = &[
    ("dirlock man > dirlock.1 && man ./dirlock.1", ""),
    ("dirlock man run > dirlock-run.1", ""),
];

const TOP: &[Example] = &[
    (
        "dirlock run ./build.lock make",
        "as flock ./build.lock make: waits for the lock",
    ),
    (
        "dirlock run -n --lock nightly ./nightly.sh",
        "fails at once (75) if still running",
    ),
    ("dirlock status --lock nightly", "who holds it, since when"),
    ("dirlock doctor /srv/locks", "can locks live there?"),
];

/// The examples of subcommand `name` (`""`: the command's).
fn examples(name: &str) -> &'static [Example] {
    match name {
        "" => TOP,
        "run" => RUN,
        "status" => STATUS,
        "unlock" => UNLOCK,
        "sweep" => SWEEP,
        "path" => PATH,
        "doctor" => DOCTOR,
        "completions" => COMPLETIONS,
        "man" => MAN,
        "hold" => HOLD,
        _ => &[],
    }
}

/// The exit statuses of subcommand `name` (`""`: the command's).
fn exit_statuses(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "doctor" => &[
            ("0", "locks can live there, and every guarantee holds"),
            ("2", "locks can live there, with a guarantee lost (it says which)"),
            ("1", "locks cannot live there (others can write it), or it cannot be examined"),
        ],
        "status" => &[
            ("0", "the next acquisition would get the lock (free, or its holder ended); with --all, always"),
            ("75", "it would not (held, by readers too: another run -s would join them; within the grace period, a holder that cannot be checked, damaged)"),
            ("1", "an error"),
            ("64", "usage error"),
        ],
        #[cfg(not(windows))]
        "" | "run" => &[
            ("0", "success; for run, the command's own status"),
            ("1", "an error (a lock directory others can write, an I/O failure, a damaged or lost lock)"),
            ("64", "usage error"),
            ("75", "the lock is held by another process (run -E N chooses another status)"),
            ("126", "the command could not be run; 127: it was not found"),
            ("128+N", "the command was killed by signal N, or run was ended by signal N before the command ran, as with flock(1)"),
            ("141", "the output pipe was closed (as for a tool killed by SIGPIPE)"),
        ],
        #[cfg(windows)]
        "" | "run" => &[
            ("0", "success; for run, the command's own exit code, whole"),
            ("1", "an error (a lock directory others can write, an I/O failure, a damaged or lost lock)"),
            ("64", "usage error"),
            ("75", "the lock is held by another process (run -E N chooses another status)"),
            ("126", "the command could not be run; 127: it was not found"),
            ("130", "Ctrl-C ended run's wait (149: Ctrl-Break; 143: the console closing)"),
            ("141", "the output pipe was closed"),
        ],
        _ => &[
            ("0", "success"),
            ("1", "an error"),
            ("64", "usage error"),
        ],
    }
}

/// The variables the command reads or sets.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("DIRLOCK_DIR", "your lock directory, where neither --dir nor --app is given (default /tmp/dirlock-<uid>/operation-locks; on Windows under %TEMP%)"),
    ("TMPDIR", "only for --app NAME, as that application finds its locks (on Windows TEMP)"),
    ("DIRLOCK_HELD", "set for run's command: the locks its parents hold, so that a nested run of one is refused instead of waiting for its parent"),
    ("DIRLOCK_RECLAIMED_FROM", "set for run's command when run took over the lock of a holder that ended: that holder's record (JSON)"),
];

/// The whole command, with each subcommand's examples and exit statuses after its options.
pub(crate) fn command() -> clap::Command {
    let mut cmd = crate::args::Cli::command().after_help(help_text(""));
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in names {
        let text = help_text(&name);
        cmd = cmd.mut_subcommand(&name, |c| c.after_help(text));
    }
    cmd
}

/// The text after the options in `--help`.
fn help_text(name: &str) -> String {
    let mut out = String::new();
    let ex = examples(name);
    if !ex.is_empty() {
        out.push_str("Examples:\n");
        for (line, what) in ex {
            if what.is_empty() {
                out.push_str(&format!("  {line}\n"));
            } else {
                out.push_str(&format!("  {line}\n      {what}\n"));
            }
        }
    }
    if name.is_empty() || name == "doctor" || name == "status" {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("Exit status:\n");
        for (code, what) in exit_statuses(name) {
            out.push_str(&format!("  {code:5} {what}\n"));
        }
    }
    if name.is_empty() {
        out.push_str(
            "\nSee `dirlock help SUBCOMMAND` for each one's options; the manual: `dirlock man`.\n",
        );
    }
    out.trim_end().to_owned()
}

/// The manual sections after the options: EXIT STATUS, ENVIRONMENT, EXAMPLES, SEE ALSO.
pub(crate) fn man_sections(name: &str) -> Roff {
    let mut roff = Roff::new();
    let list = |roff: &mut Roff, title: &str, items: &[(&str, &str)]| {
        roff.control("SH", [title]);
        for (term, what) in items {
            roff.control("TP", []);
            roff.text([bold(*term)]);
            roff.text([roman(*what)]);
        }
    };
    list(&mut roff, "EXIT STATUS", exit_statuses(name));
    list(&mut roff, "ENVIRONMENT", ENVIRONMENT);
    let ex = examples(name);
    if !ex.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for (line, what) in ex {
            if !what.is_empty() {
                roff.text([roman(format!("{what}:"))]);
            }
            roff.control("RS", []);
            roff.control("nf", []);
            roff.text([bold(*line)]);
            roff.control("fi", []);
            roff.control("RE", []);
        }
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut also = vec![bold("flock"), roman("(1)")];
    if !name.is_empty() {
        also.push(roman(", "));
        also.push(bold("dirlock"));
        also.push(roman("(1)"));
    }
    also.push(roman(
        "; the library and the protocol: https://docs.rs/dirlock",
    ));
    roff.text(also);
    roff
}

/// The SYNOPSIS section: each usage line as `--help` gives it.
pub(crate) fn synopsis(usage: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    roff.control("nf", []);
    for line in usage.lines().map(str::trim).filter(|l| !l.is_empty()) {
        roff.text([bold(line)]);
    }
    roff.control("fi", []);
    roff
}
