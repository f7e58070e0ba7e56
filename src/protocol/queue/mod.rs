//! The queue of a lock's waiters, first come, first served. `NAME.queue` beside the lock holds
//! one entry per waiting acquisition, `<number>.<w|r|t>.<token>` ([`Queued`]): made whole under a
//! name of its own, then renamed to one above every number then in the queue, with no lock
//! taken, so that numbers follow the order in which waiters came (see [`join`]). Its waiter
//! holds the entry's exclusive `flock` while it waits: a shared one granted proves it waits no
//! longer (it is gone, or holds the lock: see [`Ticket::taken`]), and the writer queued behind
//! it sleeps on it ([`Ticket::thread_ahead`]), in a shared `flock` too.
//!
//! - **Join** ([`join`]): an acquisition that finds the lock held, or a queue already there,
//!   takes a number; it leaves ([`Ticket::leave`]) when it wins or gives up.
//! - **Hand over** ([`hand_over`]): a holder that releases, when the first live waiter takes the
//!   lock exclusively, exchanges `NAME` with that waiter's staged candidate in one atomic step
//!   where the filesystem can; the waiter wakes holding the lock.
//! - **Defer** ([`Ticket::ahead`]): a waiter that finds the lock free publishes only when no
//!   live waiter is ahead of it (for a bounded time: see `contend`).
//! - **Give a turn** ([`turn`]): waiters that hand the lock on without end would leave it free
//!   never, and a process that does not queue (the reference implementation, a dirlock from
//!   before the queue, a try that fails fast) would never find it free. The queue's `turn` file
//!   says when the lock was last left free. The first waiter to take a number makes it, saying
//!   that the clock has not started ([`TURN_UNSTARTED`]; made while the waiter waits, it costs
//!   the handoff nothing). The first release by a holder that queued starts the clock (the file
//!   made anew, empty: it gives no turn), as does a release that finds no file. A release that
//!   finds a started file [`TURN_EVERY`](turn::TURN_EVERY) old makes it anew, saying so, and
//!   releases as if no one waited, and the waiters that find the lock free then let it be for
//!   [`TURN_FOR`] ([`Ticket::turn_given`]). The last release out of the queue removes the file
//!   (the next waiter to queue makes it again).

use super::beside::{open_beside, still_beside};
use super::stage::write_record;
use crate::error::Error;
use crate::owner::Owner;
use crate::paths::{candidate_name, queue_name, Queued, Waiter, TURN_FILE};
use crate::space::{is_not_dir, make_candidate, not_found, remove_entry_dir, remove_tree, Space};
use crate::sys::{is, Errno, System};
use std::io;
use std::time::Duration;

mod turn;
pub(crate) use turn::turn_every;
use turn::{age_of, turn_due, TURN_FOR, TURN_GIVEN, TURN_UNSTARTED};

/// How many times an acquisition makes `NAME.queue` anew (the last waiter out removed it under
/// it) before it waits unqueued.
const TRIES: u32 = 8;

/// How many waiters a release tries to hand the lock to (each found gone at its exchange)
/// before it releases the lock as if no one waited.
const HANDOVER_TRIES: usize = 4;

/// A waiter's place in the queue: its entry (whose exclusive `flock` it holds while it waits)
/// and the queue.
pub(crate) struct Ticket<S: System> {
    me: Queued,
    /// The entries in the queue when it took its number (all ahead of it): those it may wait
    /// on (see [`Ticket::thread_ahead`]).
    seen: Vec<Queued>,
    /// The entry, open (its `flock` held) while its waiter waits; closed once it holds the
    /// lock ([`Ticket::taken`]).
    dir: Option<S::Dir>,
    queue: S::Dir,
}

/// What is queued ahead of a reader ([`Ticket::writer_ahead`]).
pub(crate) enum Ahead<D, W = String> {
    /// No live writer.
    Nobody,
    /// A live writer: its entry, open, and its token (or its place).
    Writer(D, W),
    /// It cannot be told (the queue or an entry cannot be read).
    Unknown,
}

/// Takes a number in `NAME`'s queue for the candidate of `record` (its token), a waiter of
/// kind `kind`: its entry, made whole under a name of its own and locked, is renamed to one
/// above every number then in the queue. No lock is taken for it, and nothing waits: waiters
/// that number at the same moment may take the same number, and then go by their tokens (see
/// [`Queued::place`]). `Ok(None)` where there can be no queue (no `flock`): the acquisition
/// then waits unqueued.
///
/// # Errors
///
/// An I/O error making the queue or the entry, or a queue that is not private.
pub(crate) fn join<S: System>(
    sp: &Space<S>,
    lock: &str,
    record: &Owner,
    kind: Waiter,
) -> Result<Option<Ticket<S>>, Error> {
    let qname = queue_name(lock);
    for _ in 0..TRIES {
        let Some(queue) = open_beside(sp, &qname, "the lock's waiters")? else {
            continue;
        };
        // Once our entry is in it, the last one out cannot remove it (it is not empty); in a
        // queue removed before, our entry cannot be made (we try again).
        if !still_beside(sp, &qname, &queue)? {
            continue;
        }
        match number(sp, &qname, queue, record, kind) {
            Err(e) if not_found(&e) && !sp.removed() => continue,
            other => return other,
        }
    }
    Ok(None)
}

/// The entry, made whole and renamed to the next number (`None`: the filesystem has no
/// `flock`, which the entry needs).
fn number<S: System>(
    sp: &Space<S>,
    qname: &str,
    queue: S::Dir,
    record: &Owner,
    kind: Waiter,
) -> Result<Option<Ticket<S>>, Error> {
    let path = sp.entry(qname);
    let inq = sp.within(&queue, &path);
    let draft = format!("new.{}", record.token);
    let fresh = make_candidate(&inq, &draft, true)?;
    if !fresh.flocked {
        drop(fresh.dir); // first: an open directory cannot be removed on Windows
        remove_tree(sp.sys, &queue, &draft);
        return Ok(None);
    }
    let made = write_record(
        &inq,
        &fresh.dir,
        &draft,
        record,
        false,
        fresh.umask_stripped,
    );
    let numbered = made.and_then(|()| {
        let names = sp.sys.list(&queue).map_err(|e| sp.io("list", qname, e))?;
        let seen: Vec<Queued> = names.iter().filter_map(|n| Queued::parse(n)).collect();
        let last = seen.iter().map(|q| q.number);
        let me = Queued {
            number: last
                .max()
                .map_or(1, |n| n.saturating_add(1).min(Queued::TOP)),
            kind,
            token: record.token.clone(),
        };
        let me = rename_to_number(sp, qname, &queue, &draft, me)?;
        if !names.iter().any(|n| n == TURN_FILE) {
            let _ = sp
                .sys
                .create_file_at(&queue, TURN_FILE, TURN_UNSTARTED, false, None);
        }
        Ok((me, seen))
    });
    match numbered {
        Ok((me, seen)) => Ok(Some(Ticket {
            me,
            seen,
            dir: Some(fresh.dir),
            queue,
        })),
        Err(e) => {
            drop(fresh.dir);
            remove_tree(sp.sys, &queue, &draft);
            Err(e)
        }
    }
}

/// Renames `draft` in `queue` to the entry `me`, or to the next number free (what another
/// program put there is passed, never replaced: an entry is never empty).
fn rename_to_number<S: System>(
    sp: &Space<S>,
    qname: &str,
    queue: &S::Dir,
    draft: &str,
    mut me: Queued,
) -> Result<Queued, Error> {
    for _ in 0..TRIES {
        match sp.sys.rename_noreplace(queue, draft, &me.name()) {
            Ok(_) => return Ok(me),
            Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => {
                me.number = me.number.saturating_add(1).min(Queued::TOP);
            }
            Err(e) => return Err(sp.io("number the waiter", qname, e)),
        }
    }
    let e = io::Error::other("no free number");
    Err(sp.io("number the waiter", qname, e))
}

impl<S: System> Ticket<S> {
    /// Its number.
    pub(crate) fn number(&self) -> u64 {
        self.me.number
    }

    /// Lets go of the entry once its waiter holds the lock: its `flock` (for every copy a fork
    /// made of it), then the entry itself, closed, which wakes the waiter queued behind it (see
    /// [`Ticket::thread_ahead`]). The entry reads as a departed waiter's from then on, so that
    /// no release hands the lock to it again (its candidate's name may hold the lock's
    /// previous directory, on its way to a tombstone) and no waiter lets it go first. (The
    /// entry itself goes at the release, or with whoever finds it so first.)
    pub(crate) fn taken(&mut self, sp: &Space<S>) {
        if let Some(dir) = self.dir.take() {
            let _ = sp.sys.unlock(&dir);
        }
    }

    /// Leaves the queue (won, or given up): the entry is removed, and the queue with it when
    /// it is empty (a waiter that comes meanwhile makes it anew; one that keeps its turn file
    /// goes at the next release that finds no one else in it, or see [`remove_if_spent`]).
    /// Best effort: what remains, its `flock` let go, is passed over as a dead waiter's and
    /// removed by the next release or sweep.
    pub(crate) fn leave(self, sp: &Space<S>, lock: &str) {
        match self.dir {
            Some(dir) => remove_entry_dir(sp.sys, &self.queue, &self.me.name(), dir),
            None => {
                remove_tree(sp.sys, &self.queue, &self.me.name());
            }
        }
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
        for q in names.iter().take_while(|q| q.place() < self.me.place()) {
            if waits(sp.sys, &self.queue, &q.name()) != Some(false) {
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
        match self.nearest_ahead(sp, |q| q.kind != Waiter::Reader) {
            Ahead::Writer(entry, q) => Ahead::Writer(entry, q.token),
            Ahead::Nobody => Ahead::Nobody,
            Ahead::Unknown => Ahead::Unknown,
        }
    }

    /// The entry, open, of the nearest live waiter queued ahead of this one when that waiter
    /// is a thread that writes: a release hands the lock to it before us, and it lets go of
    /// its entry once it holds it ([`Ticket::taken`]), or gives up or dies, so a writer waits
    /// on that entry rather than on the holder, and only one waiter wakes at each handoff.
    /// `None` when it is a reader or a task (which a release does not hand the lock to: we
    /// then watch the holder, as they do), when no one is ahead, or when it cannot be told.
    ///
    /// Only a waiter that had its number when we took ours: one that drew a lower number
    /// before but renamed its entry to it only later may be missed by a release that listed
    /// the queue between, which hands the lock past it to us, and we would sleep on (found
    /// by the simulation). A release that lists us lists the waiters we saw too, and tries
    /// them first.
    pub(crate) fn thread_ahead(&self, sp: &Space<S>) -> Option<S::Dir> {
        match self.nearest_ahead(sp, |q| self.seen.contains(q)) {
            Ahead::Writer(entry, q) if q.kind == Waiter::Writer => Some(entry),
            _ => None,
        }
    }

    /// The nearest live waiter queued ahead of this one among those `among` lets count, its
    /// entry opened (see [`Ticket::writer_ahead`]). Entries of dead waiters found on the way
    /// are removed.
    fn nearest_ahead(
        &self,
        sp: &Space<S>,
        among: impl Fn(&Queued) -> bool,
    ) -> Ahead<S::Dir, Queued> {
        let Ok(names) = in_order(sp.sys, &self.queue) else {
            return Ahead::Unknown;
        };
        let ahead = names
            .into_iter()
            .rev()
            .filter(|q| q.place() < self.me.place());
        for q in ahead.filter(|q| among(q)) {
            let mut keep = Vec::new();
            match waits_keeping(sp.sys, &self.queue, &q.name(), &mut keep) {
                Some(false) => {}
                Some(true) => return keep.pop().map_or(Ahead::Unknown, |e| Ahead::Writer(e, q)),
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
                .any(|q| q.token == *t && q.kind != Waiter::Reader && q.place() > self.me.place())
        })
    }

    /// How much longer the lock is left free for those that do not queue, when a release has
    /// just left it so (the queue's turn file says so, and is under [`TURN_FOR`] old). A file
    /// dated later than that ahead of our clock is no turn: the clock was set back since it
    /// was made.
    pub(crate) fn turn_given(&self, sp: &Space<S>) -> Option<Duration> {
        let turn = sp.sys.meta_at(&self.queue, TURN_FILE).ok()?;
        // A file that only starts the clock (or says it has not started): no turn was given.
        if turn.size != TURN_GIVEN.len() as u64 {
            return None;
        }
        let age = age_of(sp.sys, turn.mtime)?;
        TURN_FOR.checked_sub(age).filter(|left| !left.is_zero())
    }
}

/// The waiters' entries in `queue`, first come first (what is not an entry left out).
pub(crate) fn in_order<S: System>(sys: &S, queue: &S::Dir) -> io::Result<Vec<Queued>> {
    sys.list(queue).map(ordered)
}

/// The entries among `names`, first come first.
fn ordered(names: Vec<String>) -> Vec<Queued> {
    let mut entries: Vec<Queued> = names.iter().filter_map(|n| Queued::parse(n)).collect();
    entries.sort_by(|a, b| a.place().cmp(&b.place()));
    entries
}

/// Whether the lock directory holds no directory but the one a caller knows of (our lock, or
/// our candidate), so no queue: its link count is 3. It costs no lookup of a missing name
/// (tmpfs makes and frees an entry for each). Where link counts do not count directories
/// (btrfs and Windows say 1, some network filesystems 2), the queue is looked for by name. A
/// count of 3 said wrongly would cost the queue's order only, never exclusion.
pub(crate) fn no_queue<S: System>(sp: &Space<S>) -> bool {
    sp.sys.meta(sp.dir).is_ok_and(|m| m.nlink == 3)
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
        .any(|q| waits(sp.sys, &queue, &q.name()) != Some(false))
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

/// Whether the waiter of entry `name` of `queue` (or of a draft, `new.<token>`, which its
/// maker locks as it makes it) still waits: `Some(false)` when it waits no longer, or its entry
/// is barred to us (see [`Entry`]), `None` when it cannot be told.
fn waits<S: System>(sys: &S, queue: &S::Dir, name: &str) -> Option<bool> {
    waits_keeping(sys, queue, name, &mut Vec::new())
}

/// [`waits`], keeping the entry it opened, when it waits, in `keep` (closed later: off the way
/// to the handoff).
fn waits_keeping<S: System>(
    sys: &S,
    queue: &S::Dir,
    name: &str,
    keep: &mut Vec<S::Dir>,
) -> Option<bool> {
    match look(sys, queue, name) {
        Entry::Waits(dir) => {
            keep.push(dir);
            Some(true)
        }
        Entry::Left | Entry::Barred => Some(false),
        Entry::Untold => None,
    }
}

/// What a queue entry says of its waiter ([`look`]).
enum Entry<D> {
    /// Its waiter holds its `flock`: the entry, open.
    Waits(D),
    /// Gone, or its `flock` was free (its waiter is gone, or holds the lock): removed.
    Left,
    /// We may not open it. No dirlock made it so (every entry is opened to all who share the
    /// lock directory before it is numbered): a `chmod` did, of a dead waiter's entry or of a
    /// live one's. Deferring to it would cost every acquisition its wait for as long as it
    /// stays, so it is passed over (its waiter, if one lives, loses its place only) and kept:
    /// `status` and `sweep` name it.
    Barred,
    /// It cannot be told (an I/O error).
    Untold,
}

/// Entry `name` of `queue`, looked at ([`Entry`]); a file or a link there (no waiter makes
/// one) is removed.
fn look<S: System>(sys: &S, queue: &S::Dir, name: &str) -> Entry<S::Dir> {
    let dir = match sys.open_dir_at(queue, name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Entry::Left,
        Err(e) if is_not_dir(&e) => {
            let _ = sys.remove_file_at(queue, name);
            return Entry::Left;
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Entry::Barred,
        Err(_) => return Entry::Untold,
    };
    // Shared: the writer queued behind sleeps on the entry in a shared `flock`, granted when
    // its waiter lets go and kept until that writer publishes. An exclusive probe took it for
    // the waiter's, and handed the lock to a waiter that held it already: to the name where
    // the lock's previous directory is until the release that handed it on retires it.
    match sys.try_lock(&dir, false) {
        Ok(true) => {
            remove_entry_dir(sys, queue, name, dir);
            Entry::Left
        }
        Ok(false) => Entry::Waits(dir),
        Err(_) => Entry::Untold,
    }
}

/// Hands the lock `lock` (ours, token `token`) to the first live waiter, when that waiter is a
/// thread that takes it exclusively (what it opened is left in `keep`, for the caller to close
/// once it woke the waiter): `NAME` and its staged candidate are exchanged in one step.
/// Returns the name our lock now has (the waiter's candidate's), or `None` when no waiter took
/// it (none waits, the first reads, the filesystem cannot exchange): the caller releases as
/// usual.
/// `holder_queued`: our holder took a number in the queue (see [`TURN_UNSTARTED`]).
pub(crate) fn hand_over<S: System>(
    sp: &Space<S>,
    lock: &str,
    token: &str,
    holder_queued: bool,
    keep: &mut Vec<S::Dir>,
) -> Option<String> {
    if !holder_queued && no_queue(sp) {
        return None;
    }
    let queue = sp.sys.open_dir_at(sp.dir, &queue_name(lock)).ok()?;
    let names = ordered(sp.sys.list_opened(&queue).ok()?);
    let mut tries = 0;
    let mut handed = None;
    let (mut alone, mut turned) = (true, None);
    for q in names.iter().filter(|q| q.token != token) {
        let waits = waits_keeping(sp.sys, &queue, &q.name(), keep);
        alone &= waits == Some(false);
        match waits {
            Some(false) => continue,
            None => break,
            Some(true)
                if *turned.get_or_insert_with(|| turn_due(sp.sys, &queue, holder_queued)) =>
            {
                break
            }
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

/// Why a sweep kept a queue ([`sweep`]).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// How many waiters wait in it.
    pub(crate) waiters: usize,
    /// Its entries (and drafts) barred to us (see [`Entry::Barred`]), by name.
    pub(crate) barred: Vec<String>,
    /// Its entries (and drafts) whose waiter cannot be told (an I/O error), by name.
    pub(crate) untold: Vec<String>,
    /// Where none of the above keeps it: why it could not be removed, and what it holds.
    pub(crate) stuck: Option<(io::Error, Vec<String>)>,
}

/// A sweep of queue `qname`: the entries of waiters that died (and drafts their makers left)
/// are removed, then, when no waiter is left, its turn file and the queue itself. `None`:
/// removed.
pub(crate) fn sweep<S: System>(sp: &Space<S>, qname: &str) -> io::Result<Option<Kept>> {
    let queue = match sp.sys.open_dir_at(sp.dir, qname) {
        // A file or a link where the queue belongs: it turns the queue off.
        Err(e) if is_not_dir(&e) => return sp.sys.remove_file_at(sp.dir, qname).map(|()| None),
        other => other?,
    };
    let mut kept = Kept::default();
    for name in sp.sys.list(&queue)? {
        // A draft is locked by its maker from just after it made it: free, its maker is gone
        // (or has yet to lock it, and makes it anew when it finds it removed).
        if Queued::parse(&name).is_some() || name.starts_with("new.") {
            match look(sp.sys, &queue, &name) {
                Entry::Left => {}
                Entry::Waits(_) => kept.waiters += 1,
                Entry::Barred => kept.barred.push(name),
                Entry::Untold => kept.untold.push(name),
            }
        }
    }
    kept.barred.sort();
    kept.untold.sort();
    if kept.waiters == 0 && kept.untold.is_empty() {
        remove_tree(sp.sys, &queue, TURN_FILE);
    }
    drop(queue); // first: an open directory cannot be removed on Windows
    let Err(e) = sp.sys.remove_dir_at(sp.dir, qname) else {
        return Ok(None);
    };
    if kept.waiters == 0 && kept.barred.is_empty() && kept.untold.is_empty() {
        let queue = sp.sys.open_dir_at(sp.dir, qname)?;
        let mut held = sp.sys.list(&queue)?;
        held.sort();
        kept.stuck = Some((e, held));
    }
    Ok(Some(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiters that took one number at the same moment go by their tokens, in whatever order
    /// a listing gives them: a release and the waiters behind them see one order.
    #[test]
    fn waiters_with_one_number_go_by_their_tokens() {
        let name = |number: u64, token: &str| {
            let kind = Waiter::Writer;
            let token = token.to_owned();
            Queued {
                number,
                kind,
                token,
            }
            .name()
        };
        let listed = vec![
            name(5, "tokb"),
            name(5, "toka"),
            TURN_FILE.into(),
            name(4, "tokc"),
        ];
        let order: Vec<String> = ordered(listed).into_iter().map(|q| q.token).collect();
        assert_eq!(order, ["tokc", "toka", "tokb"]);
    }
}
