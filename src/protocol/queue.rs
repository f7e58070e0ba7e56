//! The queue of a lock's waiters, first come, first served. `NAME.queue` beside the lock holds
//! one entry per waiting acquisition, `<number>.<w|r|t>.<token>` ([`Queued`]): made whole under a
//! name of its own, then renamed to its number under the queue's exclusive `flock`, one above
//! every entry then in it, so that numbers follow the order in which waiters came. Its waiter
//! holds the entry's exclusive `flock` while it waits: a free one proves it waits no longer
//! (it is gone, or holds the lock: see [`Ticket::taken`]).
//!
//! - **Join** ([`join`]): an acquisition that finds the lock held, or a queue already there,
//!   takes a number; it leaves ([`Ticket::leave`]) when it wins or gives up.
//! - **Hand over** ([`hand_over`]): a holder that releases, when the first live waiter takes the
//!   lock exclusively, exchanges `NAME` with that waiter's staged candidate in one atomic step
//!   where the filesystem can; the waiter wakes holding the lock.
//! - **Defer** ([`Ticket::ahead`]): a waiter that finds the lock free publishes only when no
//!   live waiter is ahead of it (for a bounded time: see `contend`).
//! - **Give a turn** ([`TURN_EVERY`]): waiters that hand the lock on without end would leave
//!   it free never, and a process that does not queue (the reference implementation, a dirlock
//!   from before the queue, a try that fails fast) would never find it free. The queue's `turn`
//!   file, made (empty: it gives no turn) by the first release that finds a live waiter, says
//!   when the lock was last left free: a release that finds it [`TURN_EVERY`] old makes it
//!   anew, saying so, and releases as if no one waited, and the waiters that find the lock
//!   free then let it be for [`TURN_FOR`] ([`Ticket::turn_given`]). The last release out of
//!   the queue removes the file (the next waiter to queue starts the clock again).

use super::stage::write_record;
use crate::error::Error;
use crate::options::{Bound, Persist};
use crate::owner::Owner;
use crate::paths::{candidate_name, queue_name, Queued, Waiter, TURN_FILE};
use crate::space::{
    is_not_dir, lock_persisting, make_candidate, not_found, remove_entry_dir, remove_tree, Space,
};
use crate::sys::{gone, is, Errno, System};
use std::cell::Cell;
use std::io;
use std::time::Duration;

/// How long waiters may keep the lock among themselves, handing it on, before a release leaves
/// it free for those that do not queue.
pub(crate) const TURN_EVERY: Duration = Duration::from_secs(2);

/// How long the lock is then left free: two polls of the reference implementation (25 ms).
pub(crate) const TURN_FOR: Duration = Duration::from_millis(50);

/// What the turn file holds when a release left the lock free (the first file, which only
/// starts the clock, is empty: the waiters it finds do not pause for it).
const TURN_GIVEN: &[u8] = b"given\n";

/// How many times an acquisition makes `NAME.queue` anew (the last waiter out removed it under
/// it) before it waits unqueued.
const TRIES: u32 = 8;

/// How many waiters a release tries to hand the lock to (each found gone at its exchange)
/// before it releases the lock as if no one waited.
const HANDOVER_TRIES: usize = 4;

/// What [`hold_beside`] found.
pub(crate) enum Beside<D> {
    /// The directory, held, and still at its name.
    Held(D),
    /// Another process keeps a conflicting `flock` on it past the waiter's patience (one
    /// stopped while it peeked, or that numbers its own entry: see [`AMONG_WAITERS`]), or the
    /// waiter was cancelled meanwhile.
    Busy,
    /// The filesystem has no `flock`.
    NoFlock,
}

/// A directory beside the lock (`NAME.queue`, `NAME.writers`), made if need be (private, or
/// the group's in a group's lock directory), held with a `flock` (exclusive or shared) and
/// checked to be still at its name. `what` names it in an error.
pub(crate) fn hold_beside<S: System>(
    sp: &Space<S>,
    name: &str,
    exclusive: bool,
    what: &'static str,
    bound: Bound<'_>,
) -> Result<Beside<S::Dir>, Error> {
    let failed = |e| sp.io("make the directory beside the lock", name, e);
    let how = Persist {
        patience: AMONG_WAITERS.patience.map(|p| bound.cap(p)),
        ..AMONG_WAITERS
    };
    for _ in 0..TRIES {
        let made = match sp.sys.mkdir_at(sp.dir, name) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(failed(e)),
            made => made.is_ok(),
        };
        let dir = match sp.sys.open_made_dir_at(sp.dir, name) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if is_not_dir(&e) => return Err(not_a_dir(sp, name, what)),
            Err(e) => return Err(failed(e)),
        };
        let op = "lock the directory beside the lock";
        let taken = match at_once(sp, &dir, exclusive, bound.kept) {
            true => Ok(Some(true)),
            false => lock_persisting(sp, &dir, name, exclusive, op, &how, bound.cancel),
        };
        match taken {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return Ok(Beside::Busy),
            Ok(None) => return Ok(Beside::NoFlock),
            Err(e) if !not_found(&e) => return Err(e),
            Err(_) => continue,
        }
        if made && sp.shared.is_some() {
            // In a group's lock directory, the group's processes use it too.
            let _ = sp.sys.set_mode(&dir, sp.dir_mode());
        }
        // (Removed by the last one out: see `sys::gone`.)
        let here = match sp.sys.meta(&dir) {
            Err(e) if gone(&e) => continue,
            here => here.map_err(failed)?,
        };
        // What others may write or own is never trusted: it could hold waiters off for good.
        if let Some(problem) = sp.private_problem(&here, "the directory") {
            return Err(Error::Unsafe {
                path: sp.entry(name),
                problem,
                fix: "remove it (no process needs it)".into(),
            });
        }
        if sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == here.id) {
            return Ok(Beside::Held(dir));
        }
    }
    Err(failed(io::Error::other("it was removed again and again")))
}

/// Whether the `flock` of `dir` (exclusive or shared) is ours at a first try, made only if
/// the waiter notes whether another kept it (`kept`).
fn at_once<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    exclusive: bool,
    kept: Option<&Cell<bool>>,
) -> bool {
    let Some(kept) = kept else {
        return false;
    };
    let first = sp.sys.try_lock(dir, exclusive);
    kept.set(matches!(first, Ok(false)));
    first.is_ok_and(|t| t)
}

/// How a `flock` that waiters take for an instant, one after another, is retried (the queue's,
/// to number an entry; `NAME.writers`' too, shared): pauses of 1 ms at most (not a peek's 10),
/// lest one that has waited lose it to each newcomer, for about as long in all as a peek is
/// waited for (150 ms, and 1,000 tries at most). See docs/performance.md.
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

/// A waiter's place in the queue: its entry (whose exclusive `flock` it holds while it waits)
/// and the queue.
pub(crate) struct Ticket<S: System> {
    pub(crate) number: u64,
    entry: String,
    dir: S::Dir,
    queue: S::Dir,
}

/// What is queued ahead of a reader ([`Ticket::writer_ahead`]).
pub(crate) enum Ahead<D> {
    /// No live writer.
    Nobody,
    /// A live writer: its entry, open, and its token.
    Writer(D, String),
    /// It cannot be told (the queue or an entry cannot be read).
    Unknown,
}

/// Takes a number in `NAME`'s queue for the candidate of `record` (its token), a waiter of
/// kind `kind`, trying for the queue's `flock` within `bound`. `Ok(None)` where there can be
/// no queue (no `flock`), or its `flock` stays held: the acquisition then waits unqueued.
///
/// # Errors
///
/// An I/O error making the queue or the entry, or a queue that is not private.
pub(crate) fn join<S: System>(
    sp: &Space<S>,
    lock: &str,
    record: &Owner,
    kind: Waiter,
    bound: Bound<'_>,
) -> Result<Option<Ticket<S>>, Error> {
    let qname = queue_name(lock);
    for _ in 0..TRIES {
        let Beside::Held(queue) = hold_beside(sp, &qname, true, "the lock's waiters", bound)?
        else {
            return Ok(None);
        };
        let ticket = number(sp, &qname, queue, record, kind);
        match ticket {
            Err(e) if not_found(&e) && !sp.removed() => continue,
            other => return other.map(Some),
        }
    }
    Ok(None)
}

/// Under the queue's exclusive `flock` (let go on the way out): the entry, made whole and
/// renamed to the next number.
fn number<S: System>(
    sp: &Space<S>,
    qname: &str,
    queue: S::Dir,
    record: &Owner,
    kind: Waiter,
) -> Result<Ticket<S>, Error> {
    let path = sp.entry(qname);
    let inq = sp.within(&queue, &path);
    let draft = format!("new.{}", record.token);
    let made = make_candidate(&inq, &draft, true).and_then(|fresh| {
        write_record(
            &inq,
            &fresh.dir,
            &draft,
            record,
            false,
            fresh.umask_stripped,
        )?;
        Ok(fresh.dir)
    });
    let numbered = made.and_then(|dir| {
        let names = sp.sys.list(&queue).map_err(|e| sp.io("list", qname, e))?;
        let last = names
            .iter()
            .filter_map(|n| Queued::parse(n))
            .map(|q| q.number);
        let mut me = Queued {
            number: last.max().unwrap_or(0) + 1,
            kind,
            token: record.token.clone(),
        };
        // The queue's `flock` is ours: no one else numbers an entry now. (What another program
        // put there is passed, never replaced: an entry is never empty.)
        for _ in 0..TRIES {
            match sp.sys.rename_noreplace(&queue, &draft, &me.name()) {
                Ok(_) => return Ok((me, dir)),
                Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => me.number += 1,
                Err(e) => return Err(sp.io("number the waiter", qname, e)),
            }
        }
        Err(sp.io(
            "number the waiter",
            qname,
            io::Error::other("no free number"),
        ))
    });
    if numbered.is_err() {
        remove_tree(sp.sys, &queue, &draft);
    }
    let _ = sp.sys.unlock(&queue);
    let (me, dir) = numbered?;
    Ok(Ticket {
        number: me.number,
        entry: me.name(),
        dir,
        queue,
    })
}

impl<S: System> Ticket<S> {
    /// Lets go of the entry's `flock` once its waiter holds the lock: the entry reads as a
    /// departed waiter's from then on, so that no release hands the lock to it again (its
    /// candidate's name may hold the lock's previous directory, on its way to a tombstone) and
    /// no waiter lets it go first. One `flock` call on the way to holding the lock (the entry
    /// itself goes at the release, or with whoever finds it so first).
    pub(crate) fn taken(&self, sp: &Space<S>) {
        let _ = sp.sys.unlock(&self.dir);
    }

    /// Leaves the queue (won, or given up): the entry is removed, and the queue with it when
    /// it is empty (a waiter that comes meanwhile makes it anew; one that keeps its turn file
    /// goes at the next release that finds no one else in it, or see [`remove_if_spent`]).
    /// Best effort: what remains, its `flock` let go, is passed over as a dead waiter's and
    /// removed by the next release or sweep.
    pub(crate) fn leave(self, sp: &Space<S>, lock: &str) {
        remove_entry_dir(sp.sys, &self.queue, &self.entry, self.dir);
        let qname = queue_name(lock);
        let here = sp.sys.meta(&self.queue).ok();
        let same = here.is_some_and(|h| sp.sys.meta_at(sp.dir, &qname).is_ok_and(|m| m.id == h.id));
        if same {
            remove_if_empty(sp, lock);
        }
    }

    /// The number of the first live waiter ahead of this one (an entry with a lower number
    /// whose `flock` is held, or cannot be judged), if any. Entries of dead waiters found on
    /// the way are removed.
    pub(crate) fn ahead(&self, sp: &Space<S>) -> Option<u64> {
        let names = in_order(sp.sys, &self.queue).ok()?;
        let mut first = None;
        for q in names.iter().take_while(|q| q.number < self.number) {
            if waits(sp.sys, &self.queue, q) != Some(false) {
                first = first.or(Some(q.number));
            }
        }
        first
    }

    /// The nearest live writer (a thread's or a task's entry) queued ahead of this one, which
    /// a reader lets go first: its entry, opened, to wait on (its waiter holds its `flock`
    /// while it waits, and lets go once it holds the lock, or is gone). Entries of dead
    /// waiters found on the way are removed.
    pub(crate) fn writer_ahead(&self, sp: &Space<S>) -> Ahead<S::Dir> {
        let Ok(names) = in_order(sp.sys, &self.queue) else {
            return Ahead::Unknown;
        };
        let ahead = names.iter().rev().filter(|q| q.number < self.number);
        for q in ahead.filter(|q| q.kind != Waiter::Reader) {
            let mut keep = Vec::new();
            match waits_keeping(sp.sys, &self.queue, q, &mut keep) {
                Some(false) => {}
                Some(true) => {
                    let writer = |entry| Ahead::Writer(entry, q.token.clone());
                    return keep.pop().map_or(Ahead::Unknown, writer);
                }
                None => return Ahead::Unknown,
            }
        }
        Ahead::Nobody
    }

    /// Whether a reader holding this ticket comes into a shared lock before the writers
    /// waiting there (their entries' tokens, `writers`): each of them is queued after us (a
    /// writer not in the queue is not).
    pub(crate) fn before_writers(&self, sp: &Space<S>, writers: &[String]) -> bool {
        let Ok(names) = in_order(sp.sys, &self.queue) else {
            return false;
        };
        writers.iter().all(|t| {
            names
                .iter()
                .any(|q| q.token == *t && q.kind != Waiter::Reader && q.number > self.number)
        })
    }

    /// How much longer the lock is left free for those that do not queue, when a release has
    /// just left it so (the queue's turn file says so, and is under [`TURN_FOR`] old). A file
    /// dated later than that ahead of our clock is no turn: the clock was set back since it
    /// was made.
    pub(crate) fn turn_given(&self, sp: &Space<S>) -> Option<Duration> {
        let turn = sp.sys.meta_at(&self.queue, TURN_FILE).ok()?;
        // The first file, empty, only starts the clock: no turn was given then.
        if turn.size == 0 {
            return None;
        }
        let age = age_of(sp.sys, turn.mtime)?;
        TURN_FOR.checked_sub(age).filter(|left| !left.is_zero())
    }
}

/// How long waiters may keep the lock among themselves on `sys` ([`TURN_EVERY`], unless the
/// system says otherwise: see `System::turn_every`).
pub(crate) fn turn_every<S: System>(sys: &S) -> Duration {
    sys.turn_every().unwrap_or(TURN_EVERY)
}

/// The age of the turn file in `queue` by our clock; `None` when it is dated [`TURN_FOR`] or
/// more ahead of our clock (the clock was set back since it was made): it gives no turn, and
/// is made anew.
fn turn_age<S: System>(sys: &S, queue: &S::Dir) -> io::Result<Option<Duration>> {
    Ok(age_of(sys, sys.meta_at(queue, TURN_FILE)?.mtime))
}

/// The age of a turn file dated `made` (see [`turn_age`]).
fn age_of<S: System>(sys: &S, made: std::time::SystemTime) -> Option<Duration> {
    match sys.now().duration_since(made) {
        Ok(age) => Some(age),
        Err(e) if e.duration() < TURN_FOR => Some(Duration::ZERO),
        Err(_) => None,
    }
}

/// Whether the release that looks at `queue`, where a live waiter waits, leaves the lock free
/// instead of handing it on (see [`TURN_EVERY`]): the turn file is that old (or dated ahead of
/// our clock: see [`turn_age`]), and is made anew. The first such release makes the file.
/// Best effort: where it cannot be made, the lock is handed on.
fn turn_due<S: System>(sys: &S, queue: &S::Dir) -> bool {
    let due = match turn_age(sys, queue) {
        Ok(Some(age)) => age >= turn_every(sys),
        Ok(None) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = sys.create_file_at(queue, TURN_FILE, b"", false, None);
            return false;
        }
        Err(_) => return false,
    };
    if !due {
        return false;
    }
    remove_tree(sys, queue, TURN_FILE);
    sys.create_file_at(queue, TURN_FILE, TURN_GIVEN, false, None)
        .is_ok()
}

/// The waiters' entries in `queue`, first come first (what is not an entry left out).
pub(crate) fn in_order<S: System>(sys: &S, queue: &S::Dir) -> io::Result<Vec<Queued>> {
    sys.list(queue).map(ordered)
}

/// The entries among `names`, first come first.
fn ordered(names: Vec<String>) -> Vec<Queued> {
    let mut entries: Vec<Queued> = names.iter().filter_map(|n| Queued::parse(n)).collect();
    entries.sort_by_key(|q| q.number);
    entries
}

/// Whether a live writer (a thread's or a task's entry) waits in `NAME`'s queue, or one cannot
/// be judged: a reader that finds a read lock takes a number only then (a queue left to
/// drafts of the dead, or to readers, costs it one listing).
pub(crate) fn writer_queued<S: System>(sp: &Space<S>, lock: &str) -> bool {
    let Ok(queue) = sp.sys.open_dir_at(sp.dir, &queue_name(lock)) else {
        return false;
    };
    let Ok(names) = in_order(sp.sys, &queue) else {
        return true;
    };
    names
        .iter()
        .filter(|q| q.kind != Waiter::Reader)
        .any(|q| waits(sp.sys, &queue, q) != Some(false))
}

/// Removes `NAME.queue` when all it holds is its turn file, for the last waiter out that gave
/// up (the last one out that releases finds itself alone in [`hand_over`]): a queue left to
/// its turn file would be joined by every acquisition to come.
pub(crate) fn remove_if_spent<S: System>(sp: &Space<S>, lock: &str) {
    let Ok(queue) = sp.sys.open_dir_at(sp.dir, &queue_name(lock)) else {
        return;
    };
    if sp
        .sys
        .list_opened(&queue)
        .is_ok_and(|names| names == [TURN_FILE])
    {
        remove_tree(sp.sys, &queue, TURN_FILE);
        drop(queue); // first: an open directory cannot be removed on Windows
        remove_if_empty(sp, lock);
    }
}

/// Removes `NAME.queue` if it is empty (a waiter that comes meanwhile finds it gone, and
/// makes it anew).
pub(crate) fn remove_if_empty<S: System>(sp: &Space<S>, lock: &str) {
    let _ = sp.sys.remove_dir_at(sp.dir, &queue_name(lock));
}

/// Whether the waiter of entry `q` of `queue` still waits: `Some(false)` when its `flock` is
/// free (it is gone, or holds the lock: the entry is removed) or the entry is gone, `None`
/// when it cannot be told.
fn waits<S: System>(sys: &S, queue: &S::Dir, q: &Queued) -> Option<bool> {
    waits_keeping(sys, queue, q, &mut Vec::new())
}

/// [`waits`], keeping the entry it opened, when it waits, in `keep` (closed later: off the way
/// to the handoff).
fn waits_keeping<S: System>(
    sys: &S,
    queue: &S::Dir,
    q: &Queued,
    keep: &mut Vec<S::Dir>,
) -> Option<bool> {
    let name = q.name();
    let dir = match sys.open_dir_at(queue, &name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(false),
        // A file or a symbolic link: no waiter's (none makes one), removed.
        Err(e) if is_not_dir(&e) => {
            let _ = sys.remove_file_at(queue, &name);
            return Some(false);
        }
        Err(_) => return None,
    };
    match sys.try_lock(&dir, true) {
        Ok(true) => {
            remove_entry_dir(sys, queue, &name, dir);
            Some(false)
        }
        Ok(false) => {
            keep.push(dir);
            Some(true)
        }
        Err(_) => None,
    }
}

/// Hands the lock `lock` (ours, token `token`) to the first live waiter, when that waiter is a
/// thread that takes it exclusively (what it opened is left in `keep`, for the caller to close
/// once it woke the waiter): `NAME` and its staged candidate are exchanged in one step. Returns the name
/// our lock now has (the waiter's candidate's), or `None` when no waiter took it (none waits,
/// the first reads, the filesystem cannot exchange): the caller releases as usual.
pub(crate) fn hand_over<S: System>(
    sp: &Space<S>,
    lock: &str,
    token: &str,
    keep: &mut Vec<S::Dir>,
) -> Option<String> {
    let queue = sp.sys.open_dir_at(sp.dir, &queue_name(lock)).ok()?;
    let names = ordered(sp.sys.list_opened(&queue).ok()?);
    let mut tries = 0;
    let mut handed = None;
    let (mut alone, mut turned) = (true, None);
    for q in names.iter().filter(|q| q.token != token) {
        let waits = waits_keeping(sp.sys, &queue, q, keep);
        alone &= waits == Some(false);
        match waits {
            Some(false) => continue,
            None => break,
            Some(true) if *turned.get_or_insert_with(|| turn_due(sp.sys, &queue)) => break,
            // A reader, or a task: it takes the free lock itself, and those behind it wait.
            Some(true) if q.kind != Waiter::Writer => break,
            Some(true) => {}
        }
        let to = candidate_name(lock, &q.token);
        match sp.sys.exchange(sp.dir, lock, &to) {
            Ok(()) => {
                handed = Some(to);
                break;
            }
            // It gave up (or is staging anew) at this very moment: the next one.
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < HANDOVER_TRIES => tries += 1,
            Err(_) => break,
        }
    }
    if alone {
        // The last one out: the queue goes (see `remove_if_empty`), and its turn file first
        // (whatever stands at its name).
        remove_tree(sp.sys, &queue, TURN_FILE);
    }
    keep.push(queue);
    handed
}

/// A sweep of queue `qname`: the entries of waiters that died (and drafts their makers left)
/// are removed, then, when no waiter is left, its turn file and the queue itself. `Ok(true)`
/// removed; `Ok(false)` kept: live waiters are in it, or one is taking its number.
pub(crate) fn sweep<S: System>(sp: &Space<S>, qname: &str) -> io::Result<bool> {
    let queue = match sp.sys.open_dir_at(sp.dir, qname) {
        // A file or a link where the queue belongs: it turns the queue off.
        Err(e) if is_not_dir(&e) => return sp.sys.remove_file_at(sp.dir, qname).map(|()| true),
        other => other?,
    };
    if !sp.sys.try_lock(&queue, true)? {
        return Ok(false);
    }
    let mut left = false;
    for name in sp.sys.list(&queue)? {
        match Queued::parse(&name) {
            Some(q) => {
                left |= waits(sp.sys, &queue, &q) != Some(false);
            }
            // A draft, made and locked under the queue's `flock`, which we hold: its maker is
            // gone.
            None if name.starts_with("new.") => {
                remove_tree(sp.sys, &queue, &name);
            }
            None => {}
        }
    }
    if !left {
        remove_tree(sp.sys, &queue, TURN_FILE);
    }
    let removed = sp.sys.remove_dir_at(sp.dir, qname).is_ok();
    let _ = sp.sys.unlock(&queue);
    Ok(removed)
}
