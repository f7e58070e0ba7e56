//! The directories beside a lock that its waiters share (`NAME.queue`, `NAME.writers`): made
//! if need be, private or refused, and (`NAME.writers`) held with a `flock`.

use crate::error::Error;
use crate::options::{Bound, Persist};
use crate::space::{is_not_dir, lock_persisting, not_found, Space};
use crate::sys::{gone, System};
use std::io;
use std::time::Duration;

/// How many times a directory beside the lock is made anew (the last one out removed it
/// under us) before the waiter gives up on it.
const TRIES: u32 = 8;

/// What [`hold_beside`] found.
pub(crate) enum Beside<D> {
    /// The directory, held, and still at its name.
    Held(D),
    /// Another process keeps a conflicting `flock` on it past the waiter's patience (one
    /// stopped while it peeked, or a last writer out removing it), or the waiter was cancelled
    /// meanwhile.
    Busy,
    /// The filesystem has no `flock`.
    NoFlock,
}

/// A directory beside the lock (`NAME.writers`), made if need be (see [`open_beside`]), held
/// with a `flock` (exclusive or shared) and checked to be still at its name. `what` names it in
/// an error.
pub(crate) fn hold_beside<S: System>(
    sp: &Space<S>,
    name: &str,
    exclusive: bool,
    what: &'static str,
    bound: Bound<'_>,
) -> Result<Beside<S::Dir>, Error> {
    let how = Persist {
        patience: AMONG_WAITERS.patience.map(|p| bound.cap(p)),
        ..AMONG_WAITERS
    };
    for _ in 0..TRIES {
        let Some(dir) = open_beside(sp, name, what)? else {
            continue;
        };
        let op = "lock the directory beside the lock";
        match lock_persisting(sp, &dir, name, exclusive, op, &how, bound.cancel) {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return Ok(Beside::Busy),
            Ok(None) => return Ok(Beside::NoFlock),
            Err(e) if !not_found(&e) => return Err(e),
            Err(_) => continue,
        }
        // (Removed by the last one out, under its `flock`: see `sys::gone`.)
        if still_beside(sp, name, &dir)? {
            return Ok(Beside::Held(dir));
        }
    }
    Err(sp.io(
        "make the directory beside the lock",
        name,
        io::Error::other("it was removed again and again"),
    ))
}

/// A directory beside the lock (`NAME.queue`, `NAME.writers`), made if need be (private, or
/// the group's in a group's lock directory) and opened; `None` when it was removed meanwhile
/// (by the last one out: try again). `what` names it in an error.
pub(crate) fn open_beside<S: System>(
    sp: &Space<S>,
    name: &str,
    what: &'static str,
) -> Result<Option<S::Dir>, Error> {
    let failed = |e| sp.io("make the directory beside the lock", name, e);
    let made = match sp.sys.mkdir_at(sp.dir, name) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(failed(e)),
        made => made.is_ok(),
    };
    let dir = match sp.sys.open_made_dir_at(sp.dir, name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if is_not_dir(&e) => return Err(not_a_dir(sp, name, what)),
        Err(e) => return Err(failed(e)),
    };
    if made && sp.shared.is_some() {
        // In a group's lock directory, the group's processes use it too.
        let _ = sp.sys.set_mode(&dir, sp.dir_mode());
    }
    Ok(Some(dir))
}

/// Whether `dir`, opened at `name` beside the lock, is still at its name (`false`: it was
/// removed meanwhile), once found private: what others may write or own is never trusted (it
/// could hold waiters off for good).
///
/// # Errors
///
/// It is not private, or cannot be inspected.
pub(crate) fn still_beside<S: System>(
    sp: &Space<S>,
    name: &str,
    dir: &S::Dir,
) -> Result<bool, Error> {
    let here = match sp.sys.meta(dir) {
        Err(e) if gone(&e) => return Ok(false),
        here => here.map_err(|e| sp.io("make the directory beside the lock", name, e))?,
    };
    if let Some(problem) = sp.private_problem(&here, "the directory") {
        return Err(Error::Unsafe {
            path: sp.entry(name),
            problem,
            fix: "remove it (no process needs it)".into(),
        });
    }
    Ok(sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == here.id))
}

/// How a `flock` that waiters take for an instant, one after another, is retried
/// (`NAME.writers`', shared): pauses of 1 ms at most (not a peek's 10), lest one that has
/// waited lose it to each newcomer, for 150 ms and 1,000 tries at most, and never past the
/// caller's bound (a writer's is `MARK_PATIENCE`, 10 ms).
const AMONG_WAITERS: Persist = Persist {
    first: Duration::from_micros(50),
    most: Duration::from_millis(1),
    tries: 1_000,
    patience: Some(Duration::from_millis(150)),
};

/// The error of a file or symbolic link at `name`, where a directory for `what` belongs.
fn not_a_dir<S: System>(sp: &Space<S>, name: &str, what: &str) -> Error {
    Error::Unsafe {
        path: sp.entry(name),
        problem: format!(
            "it is a file or a symbolic link, where dirlock keeps a directory for {what}"
        ),
        fix: "remove it (no process needs it; `dirlock sweep` does)".into(),
    }
}
