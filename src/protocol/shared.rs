//! Shared (read) locks. A shared lock is a lock directory like any other, published the same
//! way by its first reader, whose record says `"shared": true` and names one live reader
//! (at first the first reader: the record is its own). Every reader holds a shared `flock` on
//! the lock directory while it reads; each reader that joins it also has an entry of its own,
//! `reader.<token>` (a directory holding its record, on which it holds an exclusive `flock`).
//! A writer waiting for the readers puts in an entry `writer.<token>` and holds a shared
//! `flock` on the directory `writers`; while one does, no new reader comes in.
//!
//! - **Join** ([`join`]): take the lock directory's shared `flock`, check that `NAME` is still
//!   that directory, check that no writer waits (or, a queued reader, that each one waiting
//!   is queued after us), put in our entry.
//! - **Leave** ([`leave`]): let go of the shared `flock`; if the exclusive one is then granted
//!   (no reader is left, and none can come in while we hold it), retire the lock as an
//!   exclusive holder does; else take our entry out, and hand the record to another reader if
//!   it names us.
//! - **Judge**: the readers are gone, by proof, when an exclusive `flock` on the lock
//!   directory is granted. A reclaimer holds that `flock` from its check to the retiring
//!   rename, so no reader comes in meanwhile.
//! - **The record** names a live reader, for programs that know only exclusive locks and
//!   judge by pid (the reference implementation, dirlock before shared locks): a leaving
//!   reader that is named hands it to another, and each reading process keeps it ([`keep`],
//!   every second): written anew naming itself when the reader named is gone, and rewritten
//!   before it is [`KEEP_FRESH`] old, so that it never looks older than their grace period
//!   while a reader lives.

use super::beside::{hold_beside, Beside};
use super::queue::Ticket;
use super::stage::{new_record, shared_record, write_record, Held, Request};
use super::{check_held, retire_checked_own};
use crate::error::Error;
use crate::options::Bound;
use crate::owner::Owner;
use crate::paths::{
    classify, classify_inside, record_draft, writers_name, Entry as Name, Inside, OWNER_FILE,
    READER, WRITER,
};
use crate::space::{
    beacon_free, lock_past_peekers, make_candidate, not_found, remove_entry_dir, remove_tree, Space,
};
use crate::sys::{FileId, Identity, System};
use std::io;
use std::time::Duration;

/// How old (by its mtime) a shared lock's record may get before a reader rewrites it: well
/// within the 60 s grace period after which a program judging by pid would take over a lock
/// whose named reader died.
pub(crate) const KEEP_FRESH: Duration = Duration::from_secs(15);

/// An entry of our own inside a shared lock: a reader's, or a waiting writer's. Dropping it
/// lets its `flock` go; [`remove_entry`] also takes it out.
pub(crate) struct Entry<S: System> {
    pub(crate) name: String,
    pub(crate) dir: S::Dir,
}

/// Makes entry `entry` inside the lock (or candidate) directory `lock`, at `name`, holding
/// `record`: made private, locked exclusively, the record written (not synced: an entry
/// means something only while its maker lives, and no maker outlives a crash of the system).
fn make_entry<S: System>(
    sp: &Space<S>,
    lock: &S::Dir,
    name: &str,
    entry: String,
    record: &Owner,
) -> Result<Entry<S>, Error> {
    let path = sp.entry(name);
    let sub = sp.within(lock, &path);
    let fresh = make_candidate(&sub, &entry, true)?;
    if let Err(e) = write_record(
        &sub,
        &fresh.dir,
        &entry,
        record,
        false,
        fresh.umask_stripped,
    ) {
        drop(fresh.dir);
        remove_tree(sp.sys, lock, &entry);
        return Err(e);
    }
    Ok(Entry {
        name: entry,
        dir: fresh.dir,
    })
}

/// Takes entry `e` out of the lock directory `lock` (best effort: what remains is removed with
/// the lock).
pub(crate) fn remove_entry<S: System>(sys: &S, lock: &S::Dir, e: Entry<S>) {
    remove_entry_dir(sys, lock, &e.name, e.dir);
}

/// What a reader found when it tried to join a shared lock.
pub(crate) enum Join<S: System> {
    /// It is in: the lock is held, shared.
    Joined(Box<Held<S>>),
    /// A live writer waits in it (its entry): the reader waits for that writer.
    Behind(S::Dir),
    /// The lock's shared `flock` was not granted (it is being retired or reclaimed), or `NAME`
    /// is another directory by now: look again.
    Changed,
}

/// Joins the shared lock at `NAME` (`lock`, observed as directory `id`): behind the writers
/// waiting there, unless `ticket` (the reader's place in the queue) comes before them all.
pub(crate) fn join<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    lock: S::Dir,
    id: FileId,
    ticket: Option<&Ticket<S>>,
) -> Result<Join<S>, Error> {
    let name = req.name;
    match lock_past_peekers(sp, &lock, name, false, "lock the shared lock") {
        Ok(Some(true)) => {}
        // (Not found: gone from its name, where a lock is taken by it, as on Windows.)
        Err(e) if !not_found(&e) => return Err(e),
        _ => return Ok(Join::Changed),
    }
    // Holding the shared `flock`, the lock cannot be retired; but it may have been before.
    if !sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == id) {
        return Ok(Join::Changed);
    }
    if let Some(writers) = waiting_writers(sp, name) {
        let first = ticket
            .is_some_and(|t| writers_in(sp.sys, &lock).is_ok_and(|w| t.before_writers(sp, &w)));
        if !first {
            return Ok(Join::Behind(writers));
        }
    }
    let token = sp.sys.token();
    sp.sys.own_token(&token, true);
    let record = new_record(sp.sys, me, token.clone(), true, req.options);
    let entry = match make_entry(sp, &lock, name, format!("{READER}{token}"), &record) {
        Ok(e) => e,
        Err(e) => {
            sp.sys.own_token(&token, false);
            return Err(e);
        }
    };
    // (Should the reader the record names have left meanwhile, the readers' keepers name
    // another within a second.)
    Ok(Join::Joined(Box::new(Held {
        name: name.to_owned(),
        owner: record,
        beacon: lock,
        id,
        reclaimed_from: None,
        last_seen: None,
        shared: true,
        entry: Some(entry),
        ticket: None,
    })))
}

/// Whether the writer of token `token` has its entry in the lock at `NAME` (it waits for that
/// lock's readers).
pub(crate) fn waits_in<S: System>(sp: &Space<S>, name: &str, token: &str) -> bool {
    let Ok(lock) = sp.sys.open_dir_at(sp.dir, name) else {
        return false;
    };
    sp.sys.meta_at(&lock, &format!("{WRITER}{token}")).is_ok()
}

/// The tokens of the writers waiting in the shared lock `lock`: their entries, whose `flock`
/// is held (or cannot be judged).
fn writers_in<S: System>(sys: &S, lock: &S::Dir) -> io::Result<Vec<String>> {
    let mut writers = Vec::new();
    for name in sys.list(lock)? {
        let Inside::Writer(token) = classify_inside(&name) else {
            continue;
        };
        let waits = match sys.open_dir_at(lock, &name) {
            Ok(entry) => !beacon_free(sys, &entry, true).unwrap_or(false),
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        };
        if waits {
            writers.push(token);
        }
    }
    Ok(writers)
}

/// A writer's place while it waits for the readers of a shared lock: a shared `flock` on
/// `NAME.writers` beside the lock, which keeps new readers out (those that would join it, and
/// those that would take the lock anew once its last reader retired it), and its entry in the
/// lock it waits for (its record, for people; moved to the next lock it waits for). Dropped,
/// it lets go of both `flock`s; it is taken out with [`Intent::withdraw`].
pub(crate) struct Intent<S: System> {
    writers: S::Dir,
    /// The lock waited for (its handle and identity), and our entry in it.
    entry: Option<(S::Dir, FileId, Entry<S>)>,
}

impl<S: System> Intent<S> {
    /// Puts a waiting writer in for the shared lock `NAME`: `NAME.writers`, made if need be,
    /// held with a shared `flock`, tried for within `bound`. `None` while another process
    /// keeps it locked (one stopped while it peeked): the writer waits without it for now.
    ///
    /// # Errors
    ///
    /// An I/O error making it.
    pub(crate) fn new(
        sp: &Space<S>,
        name: &str,
        bound: Bound<'_>,
    ) -> Result<Option<Intent<S>>, Error> {
        let writers = hold_writers(sp, name, bound)?;
        Ok(writers.map(|writers| Intent {
            writers,
            entry: None,
        }))
    }

    /// Whether its entry is in the lock `id`.
    pub(crate) fn entered(&self, id: FileId) -> bool {
        self.entry.as_ref().is_some_and(|(_, i, _)| *i == id)
    }

    /// Puts its entry in the shared lock `lock` (directory `id`), out of the one before, named
    /// by `token`, the writer's candidate's (and its queue entry's: a reader queued before the
    /// writer tells it by that).
    ///
    /// # Errors
    ///
    /// An I/O error making it (not found: the lock was retired meanwhile).
    pub(crate) fn enter(
        &mut self,
        sp: &Space<S>,
        req: &Request,
        me: &Identity,
        (lock, id): (S::Dir, FileId),
        token: String,
    ) -> Result<(), Error> {
        if let Some((old, old_id, e)) = self.entry.take() {
            leave_lock(sp, req.name, old, old_id, e);
        }
        let record = new_record(sp.sys, me, token.clone(), true, req.options);
        let entry = make_entry(sp, &lock, req.name, format!("{WRITER}{token}"), &record)?;
        self.entry = Some((lock, id, entry));
        Ok(())
    }

    /// Takes the writer out (best effort: what remains is removed with the lock, or by the
    /// next writer or sweep): its entry first, then its hold on `NAME.writers`, and readers
    /// come in again (never past the entry of a writer that is leaving, as if it waited). The
    /// last waiting writer out removes `NAME.writers`.
    pub(crate) fn withdraw(self, sp: &Space<S>, name: &str) {
        let Intent { writers, entry } = self;
        if let Some((lock, id, e)) = entry {
            leave_lock(sp, name, lock, id, e);
        }
        let _ = sp.sys.unlock(&writers);
        remove_writers_if_free(sp, name, &writers);
    }
}

/// Takes a waiting writer's entry `e` out of the lock `lock` (directory `id`) it waited in.
/// Should that lock have been retired meanwhile, removes its tombstone too: where a directory
/// that is open cannot be removed at once (Windows), our entry kept its retirer from removing
/// it.
fn leave_lock<S: System>(sp: &Space<S>, name: &str, lock: S::Dir, id: FileId, e: Entry<S>) {
    remove_entry(sp.sys, &lock, e);
    let in_place = sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == id);
    if in_place || sp.sys.unlinked(&lock) {
        return;
    }
    drop(lock);
    for n in sp.sys.list(sp.dir).unwrap_or_default() {
        let ours = matches!(classify(&n), Name::Tombstone { lock } if lock == name)
            && sp.sys.meta_at(sp.dir, &n).is_ok_and(|m| m.id == id);
        if ours {
            remove_tree(sp.sys, sp.dir, &n);
            return;
        }
    }
}

/// Removes `NAME.writers` (open as `writers`) if no writer holds it, holding its exclusive
/// `flock` (a writer that opened it meanwhile finds, once it holds its shared one, that the
/// name is gone, and makes it anew).
pub(crate) fn remove_writers_if_free<S: System>(
    sp: &Space<S>,
    name: &str,
    writers: &S::Dir,
) -> bool {
    let wname = writers_name(name);
    let removed = sp.sys.try_lock(writers, true).unwrap_or(false)
        && sp
            .sys
            .meta(writers)
            .is_ok_and(|m| sp.sys.meta_at(sp.dir, &wname).is_ok_and(|n| n.id == m.id))
        && sp.sys.remove_dir_at(sp.dir, &wname).is_ok();
    let _ = sp.sys.unlock(writers);
    removed
}

/// How long a writer tries for the shared `flock` of `NAME.writers` in one round (those that
/// keep it from a writer, a status or a last writer out, do so for an instant), and how long it
/// pauses before the next when another process keeps it (one stopped while it peeked): short
/// both, lest a writer that waits as a task keep its runtime's thread.
pub(crate) const MARK_PATIENCE: Duration = Duration::from_millis(10);

/// `NAME.writers`, made if need be, held with a shared `flock` (and still at its name), tried
/// for within `bound` and [`MARK_PATIENCE`]: `None` while another process keeps it locked.
fn hold_writers<S: System>(
    sp: &Space<S>,
    name: &str,
    bound: Bound<'_>,
) -> Result<Option<S::Dir>, Error> {
    let wname = writers_name(name);
    let what = "the writers that wait for the lock's readers";
    match hold_beside(sp, &wname, false, what, bound.within(MARK_PATIENCE))? {
        Beside::Held(writers) => Ok(Some(writers)),
        Beside::Busy => Ok(None),
        Beside::NoFlock => {
            let e = io::Error::other("the filesystem has no flock here");
            Err(sp.io("put a waiting writer in", &wname, e))
        }
    }
}

/// `NAME.writers`, when a writer waits for the shared lock `NAME` (holds its shared `flock`).
pub(crate) fn waiting_writers<S: System>(sp: &Space<S>, name: &str) -> Option<S::Dir> {
    let writers = sp.sys.open_dir_at(sp.dir, &writers_name(name)).ok()?;
    (beacon_free(sp.sys, &writers, true).ok() == Some(false)).then_some(writers)
}

/// A live reader's record in the shared lock `lock`, other than the one whose token is `not`.
fn live_reader<S: System>(sp: &Space<S>, name: &str, lock: &S::Dir, not: &str) -> Option<Owner> {
    let path = sp.entry(name);
    let sub = sp.within(lock, &path);
    sp.sys
        .list(lock)
        .ok()?
        .into_iter()
        .find_map(|n| match classify_inside(&n) {
            Inside::Reader(t) if t != not => {
                let d = sp.sys.open_dir_at(lock, &n).ok()?;
                let live = beacon_free(sp.sys, &d, false).ok() == Some(false);
                live.then(|| sub.read_owner(&d).ok()).flatten()
            }
            _ => None,
        })
}

/// Writes the shared lock `lock`'s record anew, naming the reader whose record is `reader`:
/// a draft beside it, renamed over it (so that anyone reading it reads a whole record).
fn rewrite<S: System>(
    sp: &Space<S>,
    name: &str,
    lock: &S::Dir,
    reader: &Owner,
) -> Result<(), Error> {
    let bytes = shared_record(reader)
        .to_bytes()
        .map_err(|e| sp.io("write the record of", name, io::Error::other(e)))?;
    let draft = record_draft(&sp.sys.token());
    sp.sys
        .create_file_at(lock, &draft, &bytes, true, sp.file_mode(true))
        .map_err(|e| sp.io("write the record of", name, e))?;
    sp.sys
        .replace_file_at(lock, &draft, OWNER_FILE)
        .map_err(|e| {
            let _ = sp.sys.remove_file_at(lock, &draft);
            sp.io("write the record of", name, e)
        })
}

/// Whether the reader the shared lock `lock`'s record `named` names still reads it: a
/// reader that joined has an entry, whose `flock` it holds while it reads; the first reader
/// has none (its record is the lock's), and is judged by its pid and start time.
pub(crate) fn lives<S: System>(sys: &S, lock: &S::Dir, named: &Owner) -> bool {
    let entry = match crate::paths::safe_token(&named.token) {
        true => sys.open_dir_at(lock, &format!("{READER}{}", named.token)),
        false => Err(io::ErrorKind::NotFound.into()),
    };
    match entry {
        Ok(d) => beacon_free(sys, &d, false).ok() == Some(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            sys.process_alive(named.pid) != Some(false)
                && match (named.start_time, sys.start_time(named.pid)) {
                    (Some(recorded), Some(now)) => recorded == now,
                    _ => true,
                }
        }
        Err(_) => true, // cannot tell: left as it is
    }
}

/// Keeps the record of the shared lock `lock` we read (our own reader record is `mine`)
/// naming a live reader: written anew naming us when the one it names has left or died, and,
/// when `refresh`, written anew anyway (naming the same reader, if it lives), for its mtime.
///
/// # Errors
///
/// An I/O error writing the record.
pub(crate) fn keep<S: System>(
    sp: &Space<S>,
    name: &str,
    lock: &S::Dir,
    mine: &Owner,
    refresh: bool,
) -> Result<(), Error> {
    let path = sp.entry(name);
    let named = match sp.within(lock, &path).read_owner(lock) {
        Ok(o) if o.is_shared() => o,
        Ok(_) => return Ok(()), // not a shared lock: not ours to write
        Err(_) => return rewrite(sp, name, lock, mine), // unreadable (never for long)
    };
    let lives = named.token == mine.token || lives(sp.sys, lock, &named);
    match (lives, refresh) {
        (true, false) => Ok(()),
        (true, true) => rewrite(sp, name, lock, &named),
        (false, _) => rewrite(sp, name, lock, mine),
    }
}

/// Whether a reader other than `held`'s own reads its shared lock, as far as can be seen: one
/// that joined (its entry held), or the one the record names, if not us (by its pid). A
/// reader coming in, between its shared `flock` and its entry, is not seen.
fn others_read<S: System>(sp: &Space<S>, held: &Held<S>) -> bool {
    let path = sp.entry(&held.name);
    let named = sp.within(&held.beacon, &path).read_owner(&held.beacon).ok();
    // The one named first: a look at one entry or pid, where a listing reads them all.
    named.is_some_and(|o| o.token != held.owner.token && lives(sp.sys, &held.beacon, &o))
        || live_reader(sp, &held.name, &held.beacon, &held.owner.token).is_some()
}

/// The keeper's look at the shared lock `name` this process reads (as the reader `mine`), if
/// `NAME` is still the directory `id`: its record must name a live reader, and be no older
/// than [`KEEP_FRESH`] (by the lock directory's mtime, where a pid-judging program's grace
/// period starts).
///
/// # Errors
///
/// An I/O error looking at the lock or writing its record.
pub(crate) fn keep_record<S: System>(
    sp: &Space<S>,
    name: &str,
    id: FileId,
    mine: &Owner,
) -> Result<(), Error> {
    let lock = sp
        .sys
        .open_dir_at(sp.dir, name)
        .map_err(|e| sp.io("open the lock", name, e))?;
    let meta = sp
        .sys
        .meta(&lock)
        .map_err(|e| sp.io("inspect the lock", name, e))?;
    if meta.id != id {
        return Ok(());
    }
    let stale = sp
        .sys
        .now()
        .duration_since(meta.mtime)
        .is_ok_and(|age| age >= KEEP_FRESH);
    keep(sp, name, &lock, mine, stale)
}

/// Release of a shared lock: take our entry out, let go of the shared `flock`; then, if the
/// exclusive one is granted (no reader is left, and none can come in while it is held),
/// retire the lock as an exclusive holder does. Otherwise hand the record to another reader
/// if it names us.
pub(crate) fn leave<S: System>(
    sp: &Space<S>,
    mut held: Held<S>,
    resource: &str,
) -> Result<(), Error> {
    check_held(sp, &held, resource)?;
    // Out before the shared `flock` goes: the last reader, who retires the lock, then finds
    // no entry of a reader still leaving.
    if let Some(entry) = held.entry.take() {
        remove_entry(sp.sys, &held.beacon, entry);
    }
    // Our shared `flock` becomes the exclusive one, in one step where the kernel converts it so
    // (Linux): no waiting writer then sees the lock without a reader, before it is retired, and
    // takes it over as a crashed reader's.
    let mut last = sp.sys.try_lock(&held.beacon, true).unwrap_or(false);
    if !last && !others_read(sp, &held) {
        // No other reader to be seen: an observer peeks (status, a waiting writer's look) for
        // an instant. Past it, or the lock would be left to the next contender, which would
        // take it over as a crashed reader's.
        last = lock_past_peekers(sp, &held.beacon, &held.name, true, "retire the lock")
            .is_ok_and(|got| got == Some(true));
    }
    // (Holding the exclusive flock, nobody else retires it; before, a contender that found no
    // reader may have, once we had let go.)
    if last
        && sp
            .sys
            .meta_at(sp.dir, &held.name)
            .is_ok_and(|m| m.id == held.id)
    {
        // Our read was whole whatever happens now: a lock another took meanwhile stays theirs.
        let _ = retire_checked_own(sp, held, resource, &mut None);
        return Ok(());
    }
    let _ = sp.sys.unlock(&held.beacon);
    let path = sp.entry(&held.name);
    let names_us = sp
        .within(&held.beacon, &path)
        .read_owner(&held.beacon)
        .is_ok_and(|o| o.token == held.owner.token);
    if names_us {
        hand_over(sp, &held.name, &held.beacon, &held.owner.token);
    }
    Ok(())
}

/// How many readers a leaving reader names in turn, each found gone once named.
const HAND_OVER_TRIES: u32 = 8;

/// Hands the record of the shared lock `lock` (at `name`), which names the leaving reader
/// whose token is `from`, over to another live reader; and again if the one named has left by
/// the time it is written: it may have been leaving too, and have read the record (not naming
/// it yet) before we wrote it, and so not have handed it over in turn. (Found by the
/// simulation: three readers, two of them leaving at once.)
fn hand_over<S: System>(sp: &Space<S>, name: &str, lock: &S::Dir, from: &str) {
    for _ in 0..HAND_OVER_TRIES {
        let Some(other) = live_reader(sp, name, lock, from) else {
            return;
        };
        if rewrite(sp, name, lock, &other).is_err() || lives(sp.sys, lock, &other) {
            return;
        }
    }
}
