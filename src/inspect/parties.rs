//! The parties of a lock beside its owner: a shared lock's readers and writers, and the
//! waiters in its queue, each judged by its entry.

use super::{Party, Role, Status};
use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::owner::Owner;
use crate::paths::{classify_inside, queue_name, Inside, OWNER_FILE, READER};
use crate::protocol::shared;
use crate::space::{beacon_free, is_not_dir, Seen, Space};
use crate::sys::{Identity, System};
use std::io;

/// The waiters in lock `name`'s queue, into `st`, in their order: each entry observed and
/// judged as a shared lock's reader is (see [`parties`]).
pub(super) fn queued<S: System>(sp: &Space<S>, name: &str, me: &Identity, st: &mut Status) {
    let qname = queue_name(name);
    let path = sp.entry(&qname);
    // What cannot be read is listed, named, and fails no look at the lock (nor at the others
    // `status --all` looks at).
    let unread = |entry: &str, at: &std::path::Path, why: String| Party {
        role: Role::Queued,
        since: None,
        entry: entry.to_owned(),
        owner: None,
        liveness: Liveness::Unknown,
        reason: format!("{} cannot be read{why}", at.display()),
    };
    let listed = sp.sys.open_dir_at(sp.dir, &qname).and_then(|queue| {
        let entries = crate::protocol::queue::in_order(sp.sys, &queue)?;
        Ok((queue, entries))
    });
    let (queue, entries) = match listed {
        Ok(listed) => listed,
        // None, or removed meanwhile (a file or a link there turns the queue off).
        Err(e) if e.kind() == io::ErrorKind::NotFound || is_not_dir(&e) => return,
        Err(e) => {
            st.queue.push(unread(&qname, &path, format!(" ({e})")));
            return;
        }
    };
    let sub = sp.within(&queue, &path);
    // The holder's own entry stays until it releases (it got the lock from the queue).
    let holder = st.owner.as_ref().map(|o| o.token.clone());
    for q in entries
        .into_iter()
        .filter(|q| Some(&q.token) != holder.as_ref())
    {
        let entry = q.name();
        match party(&sub, entry.clone(), Role::Queued, me) {
            // One that cannot be told (waiters pass over one they may not open: see
            // `protocol::queue`).
            Err(_)
            | Ok(Some(Party {
                owner: None,
                liveness: Liveness::Unknown,
                ..
            })) => st
                .queue
                .push(unread(&entry, &sub.entry(&entry), String::new())),
            // Without its record: taken out (or made) at this instant.
            Ok(Some(p)) if p.owner.is_none() => {}
            Ok(Some(p)) if p.liveness.is_dead() => st.departed.push(p),
            Ok(Some(p)) => st.queue.push(p),
            Ok(None) => {} // it left meanwhile
        }
    }
}

/// The readers and waiting writers of the shared lock `name` (open as `lock`, its record
/// `record`), into `st`: each entry observed and judged in a space rooted at the lock, as a
/// lock's owner is in the lock directory. Its `flock` is peeked at with a shared one for an
/// instant, which a reader or writer making its entry retries past. Entries gone meanwhile
/// are left out, and so are those that cannot be read. See [`first_reader`].
pub(super) fn parties<S: System>(
    sp: &Space<S>,
    name: &str,
    lock: &S::Dir,
    record: &Owner,
    me: &Identity,
    st: &mut Status,
) -> Result<(), Error> {
    let path = sp.entry(name);
    let sub = sp.within(lock, &path);
    let entries = match sp.sys.list(lock) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()), // retired meanwhile
        Err(e) => return Err(sp.io("list the readers of", name, e)),
    };
    for entry in entries {
        let role = match classify_inside(&entry) {
            Inside::Reader(_) => Role::Reader,
            Inside::Writer(_) => Role::Writer,
            Inside::Record | Inside::Other => continue,
        };
        let Some(party) = party(&sub, entry, role, me)? else {
            continue; // it left meanwhile
        };
        match (party.liveness.is_dead(), role) {
            // One that cannot be opened or probed counts for nothing: readers are told by
            // the lock's own `flock`, and a waiting writer by `NAME.writers`'s.
            _ if party.owner.is_none() && party.liveness == Liveness::Unknown => {}
            (true, _) => st.departed.push(party),
            (false, Role::Reader) => st.readers.push(party),
            (false, _) => st.writers.push(party),
        }
    }
    first_reader(sp, lock, record, st);
    for list in [&mut st.readers, &mut st.writers, &mut st.departed] {
        list.sort_by(|a, b| (a.since, &a.entry).cmp(&(b.since, &b.entry)));
    }
    Ok(())
}

/// The reader the record of shared lock `lock` names, into `st`, judged by its pid when it
/// has no entry (the first reader: the record is its own).
fn first_reader<S: System>(sp: &Space<S>, lock: &S::Dir, record: &Owner, st: &mut Status) {
    let first = format!("{READER}{}", record.token);
    if !st
        .readers
        .iter()
        .chain(&st.departed)
        .any(|p| p.entry == first)
    {
        let lives = shared::lives(sp.sys, lock, record);
        let (liveness, reason) = match lives {
            true => (Liveness::Live, "its process runs"),
            false => (Liveness::DeadByEvidence, "its process is gone"),
        };
        let party = Party {
            role: Role::Reader,
            since: record.acquired_at(),
            entry: OWNER_FILE.to_owned(),
            owner: Some(record.clone()),
            liveness,
            reason: format!("the first reader, named by the record: {reason}"),
        };
        match lives {
            true => st.readers.push(party),
            false => st.departed.push(party),
        }
    }
}

/// One entry `entry` of a shared lock (`sub` is the space rooted at the lock), judged:
/// `None` when it is gone.
fn party<S: System>(
    sub: &Space<S>,
    entry: String,
    role: Role,
    me: &Identity,
) -> Result<Option<Party>, Error> {
    let (owner, mtime, judgement) = match sub.observe(&entry)? {
        Seen::Gone => return Ok(None),
        Seen::Owned { dir, meta, owner } => {
            let judgement = sub.judge(&dir, &owner, me);
            (Some(owner), Some(meta.mtime), judgement)
        }
        // A reader coming in, its record not written yet.
        Seen::InUse { meta, problem, .. } => (
            None,
            Some(meta.mtime),
            Judgement::new(Liveness::Live, format!("{problem}, but it holds its entry")),
        ),
        // Not a record to trust: it counts, as it does for readers and writers, only while
        // its `flock` is held (nothing holds what is gone or no directory; what cannot be
        // opened or probed cannot be told).
        Seen::Malformed(problem) => {
            let liveness = match sub.sys.open_dir_at(sub.dir, &entry) {
                Ok(d) => match beacon_free(sub.sys, &d, false) {
                    Ok(false) => Liveness::Live,
                    Ok(true) => Liveness::DeadByProof,
                    Err(_) => Liveness::Unknown,
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound || is_not_dir(&e) => {
                    Liveness::DeadByProof
                }
                Err(_) => Liveness::Unknown,
            };
            (None, None, Judgement::new(liveness, problem))
        }
    };
    Ok(Some(Party {
        role,
        since: owner.as_ref().and_then(Owner::acquired_at).or(mtime),
        entry,
        owner,
        liveness: judgement.liveness,
        reason: judgement.reason,
    }))
}
