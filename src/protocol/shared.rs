//! Shared (read) locks. A shared lock is a lock directory like any other, published the same
//! way, whose record says `"shared": true`. Inside it, each reader has an entry of its own,
//! `reader.<token>` (a directory holding the reader's record, on which the reader holds an
//! exclusive `flock`), and each reader holds a shared `flock` on the lock directory itself. A
//! writer waiting for the readers puts in an entry `writer.<token>`, made the same way; while a
//! live one is there, no new reader comes in.
//!
//! - **Join** ([`join`]): take the lock directory's shared `flock`, check that `NAME` is still
//!   that directory, check that no live writer waits, put in our entry.
//! - **Leave** ([`leave`]): take our entry out, hand the record to another reader if it names
//!   us, let go of the shared `flock`; then, if an exclusive `flock` is granted (no reader is
//!   left, and none can come in while we hold it), retire the lock as an exclusive holder does.
//! - **Judge**: the readers are gone, by proof, when an exclusive `flock` on the lock
//!   directory is granted. A reclaimer holds that `flock` from its check to the retiring
//!   rename, so no reader comes in meanwhile.
//! - **The record** names one live reader (its pid, its token), for programs that know only
//!   exclusive locks and judge by pid (the reference implementation, dirlock before 0.2):
//!   a joining reader names itself when the reader named is gone, a leaving one hands it to
//!   another, and each reading process refreshes it ([`keep`]) so that it is never older than
//!   their grace period while a reader lives.

use super::stage::{new_record, shared_record, write_record, Held, Request};
use super::{check_held, retire_checked_own};
use crate::error::Error;
use crate::owner::Owner;
use crate::paths::{classify_inside, record_draft, Inside, OWNER_FILE, READER, WRITER};
use crate::space::{beacon_free, lock_past_peekers, make_candidate, remove_tree, Space};
use crate::sys::{FileId, Identity, System};
use std::io;
use std::path::PathBuf;
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
    pub(crate) id: FileId,
}

/// The lock directory `lock` (at `name` in `sp`) as a space of its own, for its entries.
fn inside<'a, S: System>(sp: &Space<'a, S>, lock: &'a S::Dir, path: &'a PathBuf) -> Space<'a, S> {
    Space {
        sys: sp.sys,
        dir: lock,
        path,
        uid: sp.uid,
        shared: sp.shared,
    }
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
    let sub = inside(sp, lock, &path);
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
        id: fresh.meta.id,
    })
}

/// Takes entry `e` out of the lock directory `lock` (best effort: what remains is removed with
/// the lock).
pub(crate) fn remove_entry<S: System>(sys: &S, lock: &S::Dir, e: Entry<S>) {
    let _ = sys.remove_file_at(&e.dir, OWNER_FILE);
    drop(e.dir);
    remove_tree(sys, lock, &e.name);
}

/// The first reader's entry, made inside its candidate `cand` (named `name`) before it is
/// published, for the reader whose record is `reader`.
pub(super) fn first_reader<S: System>(
    sp: &Space<S>,
    cand: &S::Dir,
    name: &str,
    reader: &Owner,
) -> Result<Entry<S>, Error> {
    make_entry(sp, cand, name, format!("{READER}{}", reader.token), reader)
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

/// Joins the shared lock at `NAME` (`lock`, observed as directory `id`).
pub(crate) fn join<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    lock: S::Dir,
    id: FileId,
) -> Result<Join<S>, Error> {
    let name = req.name;
    match lock_past_peekers(sp, &lock, name, false, "lock the shared lock")? {
        Some(true) => {}
        _ => return Ok(Join::Changed),
    }
    // Holding the shared `flock`, the lock cannot be retired; but it may have been before.
    if !sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == id) {
        return Ok(Join::Changed);
    }
    if let Some(writer) = waiting_writer(sp, &lock)? {
        return Ok(Join::Behind(writer));
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
    // The reader the record names may have left while we came in: then it names us.
    let _ = keep(sp, name, &lock, &record, false);
    Ok(Join::Joined(Box::new(Held {
        name: name.to_owned(),
        owner: record,
        beacon: lock,
        id,
        reclaimed_from: None,
        last_seen: None,
        entry: Some(entry),
    })))
}

/// A writer's entry in the shared lock `lock` (at `NAME`), which keeps new readers out while
/// it waits for those inside.
///
/// # Errors
///
/// An I/O error making it.
pub(crate) fn wait_as_writer<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    lock: &S::Dir,
) -> Result<Entry<S>, Error> {
    let token = sp.sys.token();
    let record = new_record(sp.sys, me, token.clone(), true, req.options);
    make_entry(sp, lock, req.name, format!("{WRITER}{token}"), &record)
}

/// A live writer's entry in the shared lock `lock`, if one waits there.
fn waiting_writer<S: System>(sp: &Space<S>, lock: &S::Dir) -> Result<Option<S::Dir>, Error> {
    let names = sp
        .sys
        .list(lock)
        .map_err(|e| sp.io("list the readers of", "", e))?;
    for n in names {
        if !matches!(classify_inside(&n), Inside::Writer(_)) {
            continue;
        }
        if let Ok(w) = sp.sys.open_dir_at(lock, &n) {
            if beacon_free(sp.sys, &w, false).ok() == Some(false) {
                return Ok(Some(w));
            }
        }
    }
    Ok(None)
}

/// A live reader's record in the shared lock `lock`, other than the one whose token is `not`.
fn live_reader<S: System>(sp: &Space<S>, name: &str, lock: &S::Dir, not: &str) -> Option<Owner> {
    let path = sp.entry(name);
    let sub = inside(sp, lock, &path);
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

/// Whether the reader whose token is `token` still reads the shared lock `lock`: its entry is
/// there, and its `flock` held.
fn reads<S: System>(sys: &S, lock: &S::Dir, token: &str) -> bool {
    crate::paths::safe_token(token)
        && sys
            .open_dir_at(lock, &format!("{READER}{token}"))
            .is_ok_and(|d| beacon_free(sys, &d, false).ok() == Some(false))
}

/// Keeps the record of the shared lock `lock` we read (our own reader record is `mine`)
/// naming a live reader: when the one it names has left or died, or when `refresh`, it is
/// written anew naming us.
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
    let named = match inside(sp, lock, &path).read_owner(lock) {
        Ok(o) if o.is_shared() => o.token,
        Ok(_) => return Ok(()),  // not a shared lock: not ours to write
        Err(_) => String::new(), // unreadable (never so for long): written anew
    };
    if !refresh && (named == mine.token || reads(sp.sys, lock, &named)) {
        return Ok(());
    }
    rewrite(sp, name, lock, mine)
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

/// How many readers a leaving reader names in turn, each found gone once named.
const HAND_OVER_TRIES: u32 = 8;

/// Hands the record of the shared lock `lock` (at `name`), which names the leaving reader
/// whose token is `from`, over to another live reader; and again if the one named has left by
/// the time it is written: it may have been leaving too, and have read the record (not naming
/// it yet) before we wrote it, and so not have handed it over in turn.
fn hand_over<S: System>(sp: &Space<S>, name: &str, lock: &S::Dir, from: &str) {
    for _ in 0..HAND_OVER_TRIES {
        let Some(other) = live_reader(sp, name, lock, from) else {
            return;
        };
        if rewrite(sp, name, lock, &other).is_err() || reads(sp.sys, lock, &other.token) {
            return;
        }
    }
}

/// Release of a shared lock: take our entry out, hand the record to another reader if it
/// names us, let go of the shared `flock`, and retire the lock if no reader is left.
pub(crate) fn leave<S: System>(
    sp: &Space<S>,
    mut held: Held<S>,
    resource: &str,
) -> Result<(), Error> {
    let entry = held.entry.take().expect("a reader's lock has its entry");
    check_held(sp, &held, resource)?;
    if !sp
        .sys
        .meta_at(&held.beacon, &entry.name)
        .is_ok_and(|m| m.id == entry.id)
    {
        return Err(Error::Lost {
            lock: sp.entry(&held.name),
            resource: resource.to_owned(),
            problem: "our reader's entry in it is gone (someone removed it)".into(),
        });
    }
    remove_entry(sp.sys, &held.beacon, entry);
    let path = sp.entry(&held.name);
    let names_us = inside(sp, &held.beacon, &path)
        .read_owner(&held.beacon)
        .is_ok_and(|o| o.token == held.owner.token);
    if names_us {
        hand_over(sp, &held.name, &held.beacon, &held.owner.token);
    }
    let _ = sp.sys.unlock(&held.beacon);
    // Granted, the exclusive `flock` proves no reader is left, and keeps new ones out until
    // the lock is retired. Not granted: others read on (or look at it for an instant; then
    // the next contender finds no reader and reclaims it).
    if !sp.sys.try_lock(&held.beacon, true).unwrap_or(false) {
        return Ok(());
    }
    if !sp
        .sys
        .meta_at(sp.dir, &held.name)
        .is_ok_and(|m| m.id == held.id)
    {
        return Ok(()); // retired already, by a contender that found us gone
    }
    // Our read was whole whatever happens now: a lock another took meanwhile stays theirs.
    let _ = retire_checked_own(sp, held, resource);
    Ok(())
}
