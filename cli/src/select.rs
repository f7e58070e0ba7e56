//! From options to the library: the lock directory and the request they name.

use crate::args::{Acquire, Place, Selector, EX_USAGE};
use crate::run::Program;
use crate::say::{explain, Failure};
use dirlock::text::{escape, path as shown};
use dirlock::{Error, LockRequest, Locks, Wait};
use std::ffi::OsString;
use std::path::Path;

/// The variable that pins the lock directory where neither `--dir` nor `--app` is given.
pub(crate) const DIRLOCK_DIR: &str = "DIRLOCK_DIR";

pub(crate) fn open(place: &Place) -> Result<Locks, Failure> {
    match (&place.app, &place.dir) {
        (_, Some(dir)) => own_dir(dir),
        (Some(app), None) => Ok(Locks::new(app)?),
        (None, None) => match std::env::var_os(DIRLOCK_DIR).filter(|d| !d.is_empty()) {
            // Relative, it would name another directory in each working directory: a cron
            // job and a shell would each take "the same" lock, and run at once.
            Some(dir) if !Path::new(&dir).is_absolute() => Err(Failure(
                format!(
                    "{DIRLOCK_DIR} is a relative path ({}): it would name another lock directory in each working directory; set it to an absolute path",
                    shown(Path::new(&dir))
                ),
                1,
            )),
            Some(dir) => own_dir(Path::new(&dir)),
            None => default_dir().map_err(|e| {
                // Made by someone else (anyone may write /tmp): say how to go elsewhere.
                let taken = match &e {
                    Error::Unsafe { .. } => true,
                    Error::Io { source, .. } => {
                        source.kind() == std::io::ErrorKind::PermissionDenied
                    }
                    _ => false,
                };
                if !taken {
                    return e.into();
                }
                Failure(
                    format!(
                        "{}; it is where your locks go by default, and someone else made it: set {DIRLOCK_DIR} to a directory only you can write (and have an administrator remove it)",
                        match &e {
                            Error::Unsafe { path, problem, .. } =>
                                format!("refusing {}: {}", shown(path), escape(problem)),
                            e => explain(e),
                        }
                    ),
                    1,
                )
            }),
        },
    }
}

/// The command's own lock directory: one per user that does not move with `TMPDIR`, so that
/// a cron job, a login shell and a service of one user (each with its own environment) name
/// the same locks. On Windows `%TEMP%`, which is the user's own and the same for all of them.
fn default_dir() -> Result<Locks, dirlock::Error> {
    if cfg!(windows) {
        Locks::new("dirlock")
    } else {
        Locks::in_temp("dirlock", "/tmp")
    }
}

/// A lock directory the user named (`--dir`, `--lock DIR/NAME`). When it cannot be used as
/// one (it is not private), say what to use instead, in this command's terms.
pub(crate) fn own_dir(dir: &Path) -> Result<Locks, Failure> {
    Locks::in_dir(dir).map_err(|e| match e {
        // The library's advice names its API: say it in this command's options instead.
        Error::Unsafe { path, problem, .. } => Failure(
            format!(
                "refusing {}: {}; a lock directory must be one that only you can write (others may read it): use `--lock NAME` alone (your own lock directory), or `--dir DIR` with a directory only you can write (dirlock creates a missing one with mode 700)",
                shown(&path),
                escape(&problem)
            ),
            1,
        ),
        e => e.into(),
    })
}

/// A lock's path (`--lock`, or the first word), which must be UTF-8: a lock's name is written
/// in its record.
fn utf8_path(p: &OsString) -> Result<&str, Failure> {
    p.to_str().ok_or_else(|| {
        Failure(
            format!(
                "the lock's path {} is not UTF-8: give a UTF-8 path",
                shown(Path::new(p))
            ),
            EX_USAGE,
        )
    })
}

/// The request for the lock the selector names, in the lock directory it names.
pub(crate) fn select(sel: &Selector) -> Result<LockRequest, Failure> {
    let usage = |m: &str| Failure(m.to_owned(), EX_USAGE);
    let lock = sel.lock.as_ref().map(utf8_path).transpose()?;
    match (&sel.repository, &sel.global_setup, lock) {
        (Some(r), None, None) => Ok(open(&sel.place)?.repository_lock(r)),
        (None, Some(h), None) => Ok(open(&sel.place)?.global_setup_lock(h)),
        // DIR/NAME (on Windows DIR\NAME too): a lock name has no separator of either kind.
        (None, None, Some(l)) => match l
            .rfind(|c| c == '/' || (cfg!(windows) && c == '\\'))
            .map(|i| (&l[..i], &l[i + 1..]))
        {
            Some((dir, name)) => {
                if sel.place.app.is_some() || sel.place.dir.is_some() {
                    return Err(usage(
                        "--lock DIR/NAME names its own directory: drop --app/--dir",
                    ));
                }
                if name.is_empty() {
                    return Err(usage(&format!(
                        "--lock {} names a directory: add the lock's name after the last /",
                        escape(l)
                    )));
                }
                let dir = Path::new(if dir.is_empty() { "/" } else { dir });
                // As flock(1) makes no directory for its file: a mistyped DIR is an error,
                // not a new directory.
                match std::fs::metadata(dir) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        return Err(Failure(
                            format!("cannot use {}: it is not a directory", shown(dir)),
                            1,
                        ))
                    }
                    Err(e) => {
                        return Err(Failure(
                            format!(
                                "cannot use {}: {e}; the directory of --lock DIR/NAME must exist (create it, or check the path)",
                                shown(dir)
                            ),
                            1,
                        ))
                    }
                }
                Ok(own_dir(dir)?.named_lock(name).wait(Wait::Forever))
            }
            None => Ok(open(&sel.place)?.named_lock(l).wait(Wait::Forever)),
        },
        _ => Err(usage(
            "give one of --lock [DIR/]NAME, --repository ROOT, --global-setup HOME",
        )),
    }
}

/// The waiting options over the selector's default.
pub(crate) fn configure(mut req: LockRequest, acq: &Acquire) -> LockRequest {
    if acq.forever {
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
    if acq.shared {
        req = req.shared();
    }
    req
}

/// The lock and the command of `dirlock run`, from the selector and the words after the
/// options. Without a selector the first word is the lock's path, as flock(1) takes its file
/// (a bare name is in the working directory), and `-c STRING` may follow it, as in flock.
pub(crate) fn run_target(
    mut sel: Selector,
    shell: Option<String>,
    mut words: Vec<OsString>,
) -> Result<(Selector, Program), Failure> {
    let usage = |m: &str| Failure(m.to_owned(), EX_USAGE);
    let given = sel.repository.is_some() || sel.global_setup.is_some() || sel.lock.is_some();
    let mut shell = shell;
    if !given {
        if words.is_empty() {
            return Err(usage(
                "say which lock and what to run: `dirlock run --lock NAME CMD...` (or --repository ROOT, --global-setup HOME, or the lock's path first, as with flock: `dirlock run ./build.lock make`)",
            ));
        }
        let first = words.remove(0);
        let path = utf8_path(&first)?;
        let has_dir = path.contains('/') || (cfg!(windows) && path.contains('\\'));
        sel.lock = Some(if has_dir {
            path.into()
        } else {
            format!("./{path}").into()
        });
        // `flock FILE -- CMD`: the `--` after the lock's path ends the options as it would
        // before it.
        let dash_c = words.first().is_some_and(|w| w == "-c" || w == "--command");
        if words.first().is_some_and(|w| w == "--") {
            words.remove(0);
        } else if dash_c && (shell.is_some() || words.len() != 2) {
            return Err(usage(
                "-c takes exactly one command string (quote it: -c 'make deploy')",
            ));
        } else if dash_c {
            shell = words.pop().and_then(|w| w.into_string().ok());
            if shell.is_none() {
                return Err(usage("the -c command is not UTF-8"));
            }
            words.clear();
        }
    }
    match (shell, words.is_empty()) {
        (Some(script), true) => Ok((sel, Program::Shell(script))),
        (Some(_), false) => Err(usage(
            "give either -c STRING or a command with its arguments, not both",
        )),
        (None, false) => Ok((sel, Program::Argv(words))),
        (None, true) => Err(usage(
            "say what to run after the options: a command with its arguments, or -c STRING",
        )),
    }
}
