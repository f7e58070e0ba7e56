//! `dirlock`: run commands under a directory lock, and inspect, clear and sweep locks.

mod args;
mod doctor;
mod pages;
mod run;
mod say;
mod select;
mod status;
mod sys;
mod when;

use args::{Acquire, Cli, Cmd, Place, Selector, EX_TEMPFAIL, EX_USAGE};
use clap::FromArgMatches;
use dirlock::text::{escape, path as shown};
use dirlock::{Error, Unlocked};
use run::{run, RunOptions};
use say::{emit, say, Failure};
use select::{configure, open, run_target, select};
use status::status;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let parsed = pages::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // Usage errors carry the prefix of every other error.
            let text = e.render().to_string();
            say(text.strip_prefix("error: ").unwrap_or(&text).trim_end());
            return ExitCode::from(EX_USAGE);
        }
        Err(e) => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
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
            exclusive: _,
            quiet,
            verbose,
            conflict_exit_code,
            shell,
            no_inherit,
            cmd,
        } => {
            let (sel, command) = run_target(sel, shell, cmd)?;
            let opts = RunOptions {
                quiet,
                verbose,
                conflict: conflict_exit_code,
                inherit: !no_inherit,
                shared: acq.shared,
            };
            run(&sel, &acq, &opts, &command)
        }
        Cmd::Status {
            sel,
            all,
            quiet,
            json,
            verbose,
            grace,
        } => status(
            &sel,
            all,
            &status::Speech {
                quiet,
                json,
                verbose,
            },
            grace,
        ),
        Cmd::Completions { shell } => completions(shell),
        Cmd::Man { of } => man(of),
        Cmd::Unlock { sel, force } => unlock(&sel, force),
        Cmd::Sweep {
            place,
            grace,
            verbose,
        } => sweep(&place, grace, verbose),
        Cmd::Path { sel } => {
            let path = select(&sel)?.path()?;
            emit(&format!("{}\n", path.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Hold { sel, acq, until } => hold(&sel, &acq, until),
        Cmd::Doctor { dir, json } => doctor::doctor(dir, json),
    }
}

/// `dirlock completions SHELL`.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode, Failure> {
    // Hidden subcommands (the test helper `hold`) are left out, as they are from `--help`.
    let full = pages::command();
    let mut visible = clap::Command::new("dirlock")
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true)
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut visible, "dirlock", &mut out);
    emit(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// `dirlock man [SUBCOMMAND]`: the options from the same definitions as `--help`, then the
/// exit statuses, the environment, examples and related pages.
fn man(of: Option<String>) -> Result<ExitCode, Failure> {
    let cli = pages::command();
    let (page, name) = match &of {
        None => (cli, String::new()),
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
            (
                sub.clone()
                    .name(format!("dirlock-{name}"))
                    .bin_name(format!("dirlock {name}"))
                    .version(env!("CARGO_PKG_VERSION"))
                    .disable_version_flag(true),
                name.clone(),
            )
        }
    };
    let has_subcommands = page.get_subcommands().any(|c| !c.is_hide_set());
    // The help's text after the options becomes the sections below, not a block of text.
    let mut page = page.after_help("");
    page.build();
    // The usage lines `--help` shows (a lock and a command are required), not one made from
    // the options.
    let usage = page.render_usage().to_string();
    let synopsis = pages::synopsis(usage.strip_prefix("Usage: ").unwrap_or(&usage));
    let man = clap_mangen::Man::new(page);
    let mut out = Vec::new();
    let rendered = (|| {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        synopsis.to_writer(&mut out)?;
        man.render_description_section(&mut out)?;
        man.render_options_section(&mut out)?;
        if has_subcommands {
            man.render_subcommands_section(&mut out)?;
        }
        pages::man_sections(&name).to_writer(&mut out)?;
        man.render_version_section(&mut out)
    })();
    rendered.map_err(|e| Failure(format!("cannot render the manual page: {e}"), 1))?;
    emit(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// `dirlock unlock`: an operator removes a dead owner's lock (a malformed one with --force).
fn unlock(sel: &Selector, force: bool) -> Result<ExitCode, Failure> {
    let req = select(sel)?;
    let path = req.path()?;
    let path = shown(&path);
    let unlocked = req.unlock(force).map_err(|e| match &e {
        Error::Locked { .. } => Failure(
            format!(
                "{}; `dirlock unlock` removes only a lock whose holder has ended",
                say::held_words(&e).unwrap_or_else(|| e.facts())
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

/// `dirlock sweep`: what released locks and ended runs left, removed; counted per lock, or,
/// with `verbose`, named.
fn sweep(place: &Place, grace: Option<Duration>, verbose: bool) -> Result<ExitCode, Failure> {
    let locks = open(place)?;
    let report = locks.sweep(grace.unwrap_or(dirlock::DEFAULT_GRACE))?;
    let mut text = String::new();
    if verbose {
        for name in &report.removed {
            let _ = writeln!(text, "removed {}", escape(name));
        }
        for (name, why) in &report.kept {
            let _ = writeln!(text, "kept {}: {}", escape(name), escape(why));
        }
    } else {
        use dirlock::paths::Entry;
        let lock_of = |name: &str| match dirlock::paths::classify(name) {
            Entry::Candidate { lock, .. }
            | Entry::Tombstone { lock }
            | Entry::Guard { lock }
            | Entry::Writers { lock }
            | Entry::Queue { lock } => status::words_for(&lock),
            _ => escape(name).into_owned(),
        };
        // How many per lock (and, kept, per reason): never a line per leftover.
        let mut removed: std::collections::BTreeMap<String, usize> = Default::default();
        for name in &report.removed {
            *removed.entry(lock_of(name)).or_default() += 1;
        }
        for (what, n) in removed {
            let s = if n == 1 { "" } else { "s" };
            let _ = writeln!(text, "removed {n} leftover{s} of {what}");
        }
        let mut kept: std::collections::BTreeMap<(String, String), usize> = Default::default();
        for (name, why) in &report.kept {
            *kept
                .entry((lock_of(name), escape(why).into_owned()))
                .or_default() += 1;
        }
        for ((what, why), n) in kept {
            let s = if n == 1 { "" } else { "s" };
            let _ = writeln!(text, "kept {n} leftover{s} of {what}: {why}");
        }
        if report.removed.is_empty() && report.kept.is_empty() {
            text.push_str("nothing to remove\n");
        }
    }
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `dirlock hold` (a test helper): holds the lock until the file `until` appears.
fn hold(sel: &Selector, acq: &Acquire, until: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let guard = configure(select(sel)?, acq).acquire()?;
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
