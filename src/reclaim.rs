//! Reclaim: retire a dead owner's lock, under the `NAME.reclaim` guard.
//!
//! The guard is a directory held with an exclusive `flock` and marked with this crate's
//! `dirlock.guard` file. It is made whole before it appears: staged under a candidate name,
//! locked, marked, then renamed into place without replacing anything; and it is retired the
//! same way, renamed to a tombstone while still locked. A crash therefore never leaves a guard
//! of ours unmarked: one that is there was made under a `flock`, so getting the `flock` proves
//! its maker gone and it is reused at once. Only the process working under a guard retires it;
//! a guard left behind by a crash is *reused*, never removed or renamed by another process. A
//! guard without the marker (the reference implementation makes bare `mkdir` guards and holds
//! no `flock`) is respected until it is older than the grace period.
//!
//! Where the filesystem has no no-replace rename (FUSE, NFS), a directory cannot be put in
//! place whole without the risk of replacing another implementation's empty guard: the guard
//! is then a *file*, made in place with `O_CREAT | O_EXCL` (atomic there too) and then
//! locked. Only this crate makes file guards, so one is never another implementation's: its
//! `flock` alone says who owns it. A maker killed before it locked its guard leaves one whose
//! `flock` the next reclaimer gets at once; and a maker that comes second to its own guard's
//! `flock` finds it taken and lets go. (The reference implementation's `mkdir` of the guard
//! fails on the file as on a directory: it stays out.)

mod force;

pub(crate) use force::stranger;
use force::{forced, forced_still, remove_forced};

use crate::error::Error;
use crate::options::{Ages, MAX_RESTAGES};
use crate::owner::Owner;
use crate::paths::{candidate_name, guard_name, tombstone_for, tombstone_name, GUARD_MARKER};
use crate::space::{lock_past_peekers, make_candidate, not_found, remove_tree, Seen, Space};
use crate::sys::{gone, is, Errno, FileId, Identity, Kind, System};
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
/// long an unmarked guard left by another implementation is respected (as `ages` observes it).
pub(crate) fn reclaim<S: System>(
    sp: &Space<S>,
    name: &str,
    expect: Expect,
    grace: Duration,
    ages: &mut Ages,
) -> Result<Reclaim, Error> {
    let gname = guard_name(name);
    let guard = match stage_guard(sp, name, &gname)? {
        Some(guard) => guard,
        None => match take_left_guard(sp, &gname, grace, ages)? {
            Ok(guard) => guard,
            Err(busy) => return Ok(busy),
        },
    };
    let result = retire_checked(sp, name, expect);
    // Always clean up, in one step: the guard (marker inside) is retired to a tombstone while
    // its flock is held, so a crash leaves it either whole (marked: reused at once) or gone.
    let tomb = tombstone_name(name, &sp.sys.token());
    match sp.sys.rename_noreplace(sp.dir, &gname, &tomb) {
        Ok(_) => {
            drop(guard);
            remove_tree(sp.sys, sp.dir, &tomb);
        }
        Err(_) => {
            let _ = sp.sys.remove_file_at(&guard, GUARD_MARKER);
            let _ = sp.sys.remove_dir_at(sp.dir, &gname);
        }
    }
    result
}

/// Where a fresh guard ended up.
enum Staged<D> {
    /// In place at `NAME.reclaim`, held (and marked).
    Placed(D),
    /// Another guard was there first.
    Exists,
    /// This filesystem has no no-replace rename.
    Unsupported,
}

/// Makes a fresh guard whole before it appears: a private directory under a candidate name,
/// locked and marked, then renamed to `NAME.reclaim` without replacing anything. A guard of
/// this crate therefore never exists unmarked or unlocked, and a crash at any point leaves
/// either a candidate (swept like any other) or a marked guard whose free flock proves its
/// maker gone. `Ok(None)`: a guard is there already. Where the filesystem has no no-replace
/// rename, the guard is a file made in place (see [`make_guard_in_place`]). A staging directory
/// that vanishes (a sweep or a temp cleaner removed it) is made again under a fresh token: no
/// observer makes a reclaim fail.
fn stage_guard<S: System>(sp: &Space<S>, name: &str, gname: &str) -> Result<Option<S::Dir>, Error> {
    let mut vanished = 0;
    loop {
        match stage_guard_once(sp, name, gname) {
            Err(e) if not_found(&e) && !sp.removed() && vanished < MAX_RESTAGES => vanished += 1,
            other => return other,
        }
    }
}

fn stage_guard_once<S: System>(
    sp: &Space<S>,
    name: &str,
    gname: &str,
) -> Result<Option<S::Dir>, Error> {
    let staging = candidate_name(name, &sp.sys.token());
    let guard = make_candidate(sp, &staging, true)?.dir;
    let result = mark(sp, &guard, &staging).and_then(|()| {
        match sp.sys.rename_exclusive(sp.dir, &staging, gname) {
            Ok(()) => Ok(Staged::Placed(guard)),
            Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Staged::Exists),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(Staged::Unsupported),
            Err(e) => Err(sp.io("put the takeover marker in place", gname, e)),
        }
    });
    match result {
        Ok(Staged::Placed(guard)) => Ok(Some(guard)),
        other => {
            remove_tree(sp.sys, sp.dir, &staging);
            match other? {
                Staged::Unsupported => make_guard_in_place(sp, gname),
                _ => Ok(None),
            }
        }
    }
}

/// The guard made where it stands (filesystems without no-replace renames): a file created
/// exclusively, then locked. Whoever gets its `flock` owns it: should another reclaimer have
/// taken it over between our creating and our locking it (it found it unlocked: a maker
/// killed there would leave it so), we let go (`Ok(None)`, as when a guard is there already),
/// also when that reclaimer has finished and retired it meanwhile (our flock then holds a
/// file that is no longer the guard). Where there is no `flock`, creating it makes it ours.
fn make_guard_in_place<S: System>(sp: &Space<S>, gname: &str) -> Result<Option<S::Dir>, Error> {
    let guard = match sp.sys.open_file_at(sp.dir, gname, true) {
        Ok(g) => g,
        Err(e) if is(&e, Errno::Exists) => return Ok(None),
        Err(e) => return Err(sp.io("create the takeover marker", gname, e)),
    };
    if sp.shared.is_some() {
        // The group's members must be able to open it (to lock it, and to see it busy).
        let _ = sp.sys.set_mode(&guard, 0o640);
    }
    if lock_past_peekers(sp, &guard, gname, true, "lock the takeover marker")? == Some(false) {
        return Ok(None);
    }
    let mine = match sp.sys.meta(&guard) {
        Ok(m) => m,
        // Retired meanwhile (see `sys::gone`).
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(sp.io("inspect the takeover marker", gname, e)),
    };
    match sp.sys.meta_at(sp.dir, gname) {
        Ok(now) if now.id == mine.id => Ok(Some(guard)),
        _ => Ok(None),
    }
}

/// Writes this crate's marker into a guard held (or, reusing one left by a crash, finds it
/// there already).
fn mark<S: System>(sp: &Space<S>, guard: &S::Dir, at: &str) -> Result<(), Error> {
    let marker = format!("{{\"pid\":{}}}", sp.sys.pid());
    match sp.sys.create_file_at(
        guard,
        GUARD_MARKER,
        marker.as_bytes(),
        false,
        sp.file_mode(false),
    ) {
        Ok(()) => Ok(()),
        Err(e) if is(&e, Errno::Exists) => Ok(()),
        Err(e) => Err(Error::io(
            "finish the takeover marker",
            sp.entry(at).join(GUARD_MARKER),
            e,
        )),
    }
}

/// Takes over a guard that another process made: `Err(Busy)` while its maker works under it,
/// or (unmarked) until it is older than the grace period.
fn take_left_guard<S: System>(
    sp: &Space<S>,
    gname: &str,
    grace: Duration,
    ages: &mut Ages,
) -> Result<Result<S::Dir, Reclaim>, Error> {
    let (guard, file) = match open_guard(sp, gname)? {
        Guard::Gone => return Ok(Err(Reclaim::Changed)),
        Guard::Dir(g) => (g, false),
        Guard::File(g) => (g, true),
        Guard::Foreign => return Ok(Err(Reclaim::Busy { remaining: None })),
    };
    let meta = match sp.sys.meta(&guard) {
        Ok(m) => m,
        // Gone meanwhile (see `sys::gone`).
        Err(e) if gone(&e) => return Ok(Err(Reclaim::Changed)),
        Err(e) => return Err(sp.io("inspect the takeover marker", gname, e)),
    };
    if let Some(problem) = sp.private_problem(&meta, "the takeover marker") {
        return Err(Error::Unsafe {
            path: sp.entry(gname),
            problem,
            fix: "it must be this user's and written by no one else: remove it by hand once no process uses this lock"
                .into(),
        });
    }
    let flocked = match lock_past_peekers(sp, &guard, gname, true, "lock the takeover marker") {
        Ok(Some(true)) => true,
        Ok(Some(false)) => return Ok(Err(Reclaim::Busy { remaining: None })),
        Ok(None) => false,
        // Gone from its name, where a lock is taken by the name (Windows): its maker is done.
        Err(e) if not_found(&e) => return Ok(Err(Reclaim::Changed)),
        Err(e) => return Err(e),
    };
    // The path must still name the directory we locked (its maker may have retired it).
    match sp.sys.meta_at(sp.dir, gname) {
        Ok(now) if now.id == meta.id => {}
        _ => return Ok(Err(Reclaim::Changed)),
    }
    // Left by a crash. Our marker (or a file guard, which only this crate makes) under a
    // granted flock proves its maker gone; an unmarked guard (or any guard where flock does
    // not work) is waited out for the grace period.
    let marked = flocked && (file || sp.sys.meta_at(&guard, GUARD_MARKER).is_ok());
    if !marked {
        let (age, _) = ages.age(sp.sys, meta.id, meta.mtime);
        if age < grace {
            return Ok(Err(Reclaim::Busy {
                remaining: Some(grace - age),
            }));
        }
    }
    if !file {
        mark(sp, &guard, gname)?;
    }
    Ok(Ok(guard))
}

/// Under the guard: check that `NAME` is still what `expect` says, retire it, check the
/// tombstone, reap.
fn retire_checked<S: System>(sp: &Space<S>, name: &str, expect: Expect) -> Result<Reclaim, Error> {
    // What we retire, checked under the guard: `held` keeps the directory open (and, for a
    // forced removal, its exclusive flock) until it is a tombstone.
    let (held, id) = match expect {
        Expect::Token(token) => match sp.observe(name)? {
            Seen::Owned { dir, meta, owner }
                if owner.token == token
                    && (!owner.is_shared() || held_alone(sp, &dir, name, meta.id)) =>
            {
                (Some(dir), meta.id)
            }
            _ => return Ok(Reclaim::Changed),
        },
        Expect::Dir(id) => match forced_still(sp, name, id) {
            Some(held) => (held, id),
            None => return Ok(Reclaim::Changed),
        },
    };
    // A dead owner's lock is named by its token when that is a safe name (unique); anything
    // else read from the record, and a forced removal, get a fresh one.
    let tomb = match expect {
        Expect::Token(token) => tombstone_for(name, token, || sp.sys.token()),
        Expect::Dir(_) => tombstone_name(name, &sp.sys.token()),
    };
    match sp.sys.rename_noreplace(sp.dir, name, &tomb) {
        Ok(_) => {}
        // Gone meanwhile: someone else moved it. Still there, the rename cannot work: an
        // error, not a change to look at again (that would spin).
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                && !sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == id) =>
        {
            return Ok(Reclaim::Changed)
        }
        Err(e) => return Err(sp.io("retire the dead owner's lock", name, e)),
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
    if let Expect::Dir(_) = expect {
        return remove_forced(sp, name, &tomb);
    }
    remove_tree(sp.sys, sp.dir, &tomb);
    Ok(Reclaim::Done)
}

/// Whether we hold the shared lock `dir` (at `NAME`, observed as `id`) alone: its readers stay
/// out while we hold its exclusive `flock`, from the check under the guard to the tombstone
/// (not granted, a reader came in: it lives again), and `NAME` is still that directory once
/// we do (its last reader, who needs no guard, may have retired it since we looked, and
/// another lock may be in its place).
fn held_alone<S: System>(sp: &Space<S>, dir: &S::Dir, name: &str, id: FileId) -> bool {
    sp.sys.try_lock(dir, true).unwrap_or(false)
        && sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == id)
}

/// How often an unlock looks again after the lock changed under it (each time, some other
/// process took or released it) before it reports a timeout.
const MAX_UNLOCK_ROUNDS: u32 = 64;

/// What an [unlock](crate::LockRequest::unlock) did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unlocked {
    /// The lock was not held.
    NotLocked,
    /// The lock was removed; `owner` is its dead owner's record (`None` for a malformed one).
    Removed {
        /// The removed lock's owner record, if it had a readable one.
        owner: Option<Box<Owner>>,
    },
}

/// Unlock (an operator's request): retire the lock if its owner is dead, by proof or by
/// evidence at any age; with `force`, also a malformed lock on which no beacon is held. Live
/// and unknown owners are refused. Always through the reclaim guard.
pub(crate) fn unlock<S: System>(
    sp: &Space<S>,
    name: &str,
    resource: &str,
    me: &Identity,
    grace: Duration,
    force: bool,
) -> Result<Unlocked, Error> {
    let guarded = |remaining| Error::Guarded {
        guard: sp.entry(&guard_name(name)),
        lock: sp.entry(name),
        resource: resource.to_owned(),
        remaining,
    };
    for _ in 0..MAX_UNLOCK_ROUNDS {
        let (expect_owner, id) = match sp.observe(name)? {
            Seen::Gone => return Ok(Unlocked::NotLocked),
            Seen::Owned { dir, meta, owner } => {
                let judgement = sp.judge(&dir, &owner, me);
                if !judgement.liveness.is_dead() {
                    return Err(Error::Locked {
                        lock: sp.entry(name),
                        resource: resource.to_owned(),
                        owner: Box::new(owner),
                        judgement,
                        since: meta.mtime,
                    });
                }
                (Some(owner), meta.id)
            }
            Seen::InUse { problem, .. } | Seen::Malformed(problem) => {
                match forced(sp, name, resource, problem, force)? {
                    Some(id) => (None, id),
                    None => continue, // it vanished meanwhile: look again
                }
            }
        };
        let expect = match &expect_owner {
            Some(owner) => Expect::Token(&owner.token),
            None => Expect::Dir(id),
        };
        match reclaim(sp, name, expect, grace, &mut Ages::default())? {
            Reclaim::Done => {
                return Ok(Unlocked::Removed {
                    owner: expect_owner.map(Box::new),
                })
            }
            Reclaim::Changed => continue,
            Reclaim::Busy { remaining } => return Err(guarded(remaining)),
        }
    }
    Err(Error::Timeout {
        lock: sp.entry(name),
        resource: resource.to_owned(),
        waited: Duration::ZERO,
        owner: None,
        blocked: None,
    })
}

/// What is at `NAME.reclaim`.
pub(crate) enum Guard<D> {
    /// Nothing (any more).
    Gone,
    /// A directory: this crate's (marked, made whole) or another implementation's (bare).
    Dir(D),
    /// A file: this crate's, made in place on a filesystem without no-replace renames.
    File(D),
    /// A file this platform cannot lock (Windows meeting a Unix program's): never reused.
    Foreign,
}

/// Opens `NAME.reclaim`, whichever kind of guard it is.
pub(crate) fn open_guard<S: System>(sp: &Space<S>, gname: &str) -> Result<Guard<S::Dir>, Error> {
    let unsafe_guard = || Error::Unsafe {
        path: sp.entry(gname),
        problem: "the takeover marker is a symbolic link, or neither a directory nor a file".into(),
        fix: "remove it by hand once no process uses this lock".into(),
    };
    match sp.sys.open_dir_at(sp.dir, gname) {
        Ok(g) => Ok(Guard::Dir(g)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Guard::Gone),
        Err(e) if is(&e, Errno::NotDir) => match sp.sys.open_file_at(sp.dir, gname, false) {
            Ok(g) => Ok(Guard::File(g)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Guard::Gone),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(Guard::Foreign),
            Err(e) if is(&e, Errno::Loop) || e.kind() == io::ErrorKind::InvalidInput => {
                Err(unsafe_guard())
            }
            // A socket (ENXIO), a device: neither a directory nor a file.
            Err(_)
                if sp
                    .sys
                    .meta_at(sp.dir, gname)
                    .is_ok_and(|m| m.kind == Kind::Other) =>
            {
                Err(unsafe_guard())
            }
            Err(e) => Err(sp.io("open the takeover marker", gname, e)),
        },
        Err(e) if is(&e, Errno::Loop) => Err(unsafe_guard()),
        Err(e) => Err(sp.io("open the takeover marker", gname, e)),
    }
}
