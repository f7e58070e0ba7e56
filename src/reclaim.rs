//! Reclaim: retire a dead owner's lock, under the `NAME.reclaim` guard.
//!
//! The guard is a directory made with `mkdir` and held with an exclusive `flock`. Only the
//! process working under it ever removes it; a guard left behind by a crash is *reused*, never
//! removed or renamed by another process. A guard carrying this crate's marker was made under a
//! `flock`, so getting the `flock` proves its maker gone: it is reused at once. A guard without
//! the marker (the reference implementation makes bare `mkdir` guards and holds no `flock`) is
//! respected until it is older than the grace period.

use crate::error::Error;
use crate::paths::{guard_name, tombstone_name, GUARD_MARKER};
use crate::protocol::{remove_tree, Seen, Space};
use crate::sys::{is, Errno, System};
use std::io;
use std::time::Duration;

/// How a reclaim attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// The dead owner's lock was retired and reaped.
    Done,
    /// `NAME` no longer carries the dead owner's token (released, reclaimed, or the guard
    /// moved): look again.
    Changed,
    /// Another process works under the guard (`remaining: None`), or an unmarked guard is
    /// younger than the grace period (`Some(time until it may be reused)`).
    Busy { remaining: Option<Duration> },
}

/// How many times the maker of a fresh guard retries its `flock` while another process peeks
/// at the guard (a peeker finds it unmarked and fresh, and lets go at once).
const PEEK_RETRIES: u32 = 50;

/// What must still be at `NAME`, under the guard, for it to be retired.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expect<'a> {
    /// A lock carrying this (dead) owner's token.
    Token(&'a str),
    /// This very directory, whatever its record (an operator's forced removal of a malformed
    /// lock on which no beacon is held).
    Dir(crate::sys::FileId),
}

/// Retires the lock `name` if, under the guard, it is still what `expect` says. `grace` is how
/// long an unmarked guard left by another implementation is respected.
pub(crate) fn reclaim<S: System>(
    sp: &Space<S>,
    name: &str,
    expect: Expect,
    grace: Duration,
) -> Result<Reclaim, Error> {
    let gname = guard_name(name);
    #[cfg(any(test, feature = "sim"))]
    if sp.sys.mutant() == crate::sys::Mutant::SkipGuard {
        return retire_checked(sp, name, expect);
    }
    let created = match sp.sys.mkdir_at(sp.dir, &gname) {
        Ok(()) => true,
        Err(e) if is(&e, Errno::Exists) => false,
        Err(e) => return Err(Error::io("create the reclaim guard", sp.entry(&gname), e)),
    };
    let guard = match sp.sys.open_dir_at(sp.dir, &gname) {
        Ok(g) => g,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Reclaim::Changed),
        Err(e) if is(&e, Errno::Loop) || is(&e, Errno::NotDir) => {
            return Err(Error::Unsafe {
                path: sp.entry(&gname),
                problem: "the reclaim guard is a symbolic link or not a directory".into(),
                fix: "remove it by hand once no process uses this lock".into(),
            })
        }
        Err(e) => return Err(Error::io("open the reclaim guard", sp.entry(&gname), e)),
    };
    let meta = sp
        .sys
        .meta(&guard)
        .map_err(|e| Error::io("inspect the reclaim guard", sp.entry(&gname), e))?;
    if created {
        sp.sys
            .set_mode(&guard, 0o700)
            .map_err(|e| Error::io("set the mode of the reclaim guard", sp.entry(&gname), e))?;
    } else if meta.uid != sp.uid || meta.mode & 0o077 != 0 {
        return Err(Error::Unsafe {
            path: sp.entry(&gname),
            problem: format!(
                "the reclaim guard is owned by uid {} with mode {:o}",
                meta.uid,
                meta.mode & 0o777
            ),
            fix:
                "it must be private to this user: remove it by hand once no process uses this lock"
                    .into(),
        });
    }
    let mut tries = 0;
    let flocked = loop {
        match sp.sys.try_lock(&guard, true) {
            Ok(true) => break true,
            Ok(false) if created && tries < PEEK_RETRIES => {
                tries += 1;
                let _ = sp.sys.sleep(None, Some(Duration::from_millis(1)), None);
            }
            Ok(false) => return Ok(Reclaim::Busy { remaining: None }),
            Err(e) if is(&e, Errno::LockUnsupported) => break false,
            Err(e) => return Err(Error::io("lock the reclaim guard", sp.entry(&gname), e)),
        }
    };
    // The path must still name the directory we locked (its maker may have removed it).
    match sp.sys.meta_at(sp.dir, &gname) {
        Ok(now) if now.id == meta.id => {}
        _ => return Ok(Reclaim::Changed),
    }
    if !created {
        // Left by a crash. Our marker under a granted flock proves its maker gone; an unmarked
        // guard (or any guard where flock does not work) is waited out for the grace period.
        let marked = flocked && sp.sys.meta_at(&guard, GUARD_MARKER).is_ok();
        if !marked {
            let age = sp
                .sys
                .now()
                .duration_since(meta.mtime)
                .unwrap_or(Duration::ZERO);
            if age < grace {
                return Ok(Reclaim::Busy {
                    remaining: Some(grace - age),
                });
            }
        }
    }
    let result = under_guard(sp, &guard, &gname, name, expect);
    // Always clean up: marker, directory, then the flock (when `guard` drops).
    let _ = sp.sys.remove_file_at(&guard, GUARD_MARKER);
    let _ = sp.sys.remove_dir_at(sp.dir, &gname);
    drop(guard);
    result
}

/// Whether the token-check mutant is active (always false outside tests).
fn skip_token<S: System>(_sp: &Space<S>) -> bool {
    #[cfg(any(test, feature = "sim"))]
    return _sp.sys.mutant() == crate::sys::Mutant::SkipTokenCheck;
    #[cfg(not(any(test, feature = "sim")))]
    false
}

fn under_guard<S: System>(
    sp: &Space<S>,
    guard: &S::Dir,
    gname: &str,
    name: &str,
    expect: Expect,
) -> Result<Reclaim, Error> {
    let marker = format!("{{\"pid\":{}}}", sp.sys.pid());
    match sp
        .sys
        .create_file_at(guard, GUARD_MARKER, marker.as_bytes(), false, false)
    {
        Ok(()) => {}
        Err(e) if is(&e, Errno::Exists) => {}
        Err(e) => {
            return Err(Error::io(
                "mark the reclaim guard",
                sp.entry(gname).join(GUARD_MARKER),
                e,
            ))
        }
    }
    retire_checked(sp, name, expect)
}

/// Under the guard: check that `NAME` is still what `expect` says, retire it, check the
/// tombstone, reap.
fn retire_checked<S: System>(sp: &Space<S>, name: &str, expect: Expect) -> Result<Reclaim, Error> {
    // What we retire, checked under the guard: `held` keeps the directory open (and, for a
    // forced removal, its exclusive flock) until it is a tombstone.
    let (held, id) = match expect {
        Expect::Token(token) => match sp.observe(name)? {
            Seen::Owned { dir, meta, owner } if owner.token == token || skip_token(sp) => {
                (Some(dir), meta.id)
            }
            _ => return Ok(Reclaim::Changed),
        },
        Expect::Dir(id) => {
            let meta = match sp.sys.meta_at(sp.dir, name) {
                Ok(m) if m.id == id => m,
                _ => return Ok(Reclaim::Changed),
            };
            if meta.kind == crate::sys::Kind::Dir {
                // Still nobody's beacon: hold it exclusively until it is retired.
                match sp.sys.open_dir_at(sp.dir, name) {
                    Ok(dir) if sp.sys.try_lock(&dir, true).unwrap_or(false) => (Some(dir), id),
                    _ => return Ok(Reclaim::Changed),
                }
            } else {
                (None, id) // a file or symlink where the lock should be
            }
        }
    };
    // A dead owner's lock is named by its token (unique); a forced removal by a fresh one.
    let tomb = match expect {
        Expect::Token(token) => tombstone_name(name, token),
        Expect::Dir(_) => tombstone_name(name, &sp.sys.token()),
    };
    match sp.sys.rename_noreplace(sp.dir, name, &tomb) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Reclaim::Changed),
        Err(e) => return Err(Error::io("retire the dead owner's lock", sp.entry(name), e)),
    }
    match sp.sys.meta_at(sp.dir, &tomb) {
        Ok(m) if m.id == id => {}
        _ => {
            // Not the directory we checked: put it back, never over anything.
            let _ = sp.sys.rename_noreplace(sp.dir, &tomb, name);
            return Ok(Reclaim::Changed);
        }
    }
    drop(held);
    remove_tree(sp.sys, sp.dir, &tomb);
    Ok(Reclaim::Done)
}
