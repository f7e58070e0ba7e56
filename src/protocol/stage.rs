//! Stage and publish: a candidate `NAME.candidate.<token>` made private, beaconed and recorded
//! ([`stage`]), refreshed after a long wait ([`refresh`]), and renamed into place without
//! replacing anything ([`publish`]).

use super::queue::Ticket;
use super::shared::Entry;
use crate::error::Error;
use crate::options::{Options, MAX_RESTAGES};
use crate::owner::Owner;
use crate::paths::{candidate_name, record_draft, OWNER_FILE};
use crate::space::{make_candidate, not_found, remove_entry_dir, remove_tree, Space};
use crate::sys::{is, Errno, FileId, Identity, Renamed, System};
use std::io;
use std::time::Duration;

/// One acquisition's fixed inputs.
pub(crate) struct Request<'a> {
    pub name: &'a str,
    pub resource: &'a str,
    pub options: &'a Options,
    /// When the acquisition started, on the monotonic clock (its deadline counts from here,
    /// also across a re-opened lock directory).
    pub started: Duration,
}

/// A lock this process holds.
pub(crate) struct Held<S: System> {
    pub name: String,
    pub owner: Owner,
    /// The lock directory, open for its whole life: the beacon (when `owner.beacon`), and the
    /// identity that release checks `NAME` against.
    pub beacon: S::Dir,
    pub id: FileId,
    /// The previous owner's record, when this acquisition reclaimed a dead owner's lock.
    pub reclaimed_from: Option<Owner>,
    /// The previous holder's lock directory, when we waited for it: closing it can be the
    /// final reference to a directory its holder just removed, which costs an inode eviction,
    /// so it is closed at our release instead of between a waiter's wake-up and its publish.
    pub last_seen: Option<S::Dir>,
    /// A shared lock's reader (`beacon` then holds the lock directory's shared `flock`).
    pub shared: bool,
    /// A shared lock's reader that joined it: its own entry inside the lock, holding `owner`
    /// (the first reader's record is the lock's).
    pub entry: Option<Entry<S>>,
    /// Our place in the lock's queue, when we waited there: left at release (past the
    /// handoff to the next waiter), so that a waiter handed the lock returns at once.
    pub ticket: Option<Ticket<S>>,
}

/// A staged candidate: our own, unpublished.
pub(super) struct Staged<S: System> {
    pub(super) name: String,
    pub(super) dir: S::Dir,
    pub(super) id: FileId,
    pub(super) owner: Owner,
    pub(super) staged_at: Duration,
    pub(super) last_seen: Option<S::Dir>,
    /// The watch of the last wait, dropped once the publish is done (removing it costs time
    /// that a handoff should not pay).
    pub(super) last_watch: Option<S::Watch>,
    /// A shared lock's first reader's (its record is the lock's).
    pub(super) shared: bool,
}

/// The record we write for a new acquisition (an exclusive lock's, a reader's or a waiting
/// writer's; [`shared_record`] makes a shared lock's of its reader's).
pub(super) fn new_record<S: System>(
    sys: &S,
    me: &Identity,
    token: String,
    beacon: bool,
    options: &Options,
) -> Owner {
    let mut owner = Owner::new(sys.pid(), token);
    owner.start_time = me.start_time;
    owner.boot_id = me.boot_id.clone();
    owner.host = me.host.clone();
    owner.pid_namespace = me.pid_namespace.clone();
    owner.acquired_unix_ms = sys
        .now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64);
    owner.beacon = Some(beacon);
    owner.purpose = options.purpose.clone();
    owner.writer = Some(concat!("dirlock ", env!("CARGO_PKG_VERSION")).to_owned());
    owner.os = me.os.clone();
    owner
}

/// A shared lock's record, naming its reader `reader` (whose record it is).
pub(super) fn shared_record(reader: &Owner) -> Owner {
    let mut owner = reader.clone();
    owner.beacon = None;
    owner.shared = Some(true);
    owner
}

/// Stage: make `NAME.candidate.<token>` (mode exactly 0700), take its beacon, write and sync
/// its record. On failure nothing is left behind. A candidate that vanishes while it is made
/// (a sweep or a temp cleaner removed it) is staged again under a fresh token: no observer
/// makes an acquisition fail.
pub(super) fn stage<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
) -> Result<Staged<S>, Error> {
    let mut vanished = 0;
    loop {
        let token = sp.sys.token();
        sp.sys.own_token(&token, true);
        match stage_once(sp, req, me, token.clone()) {
            Ok(c) => return Ok(c),
            Err(e) => {
                sp.sys.own_token(&token, false);
                if !(not_found(&e) && !sp.removed() && vanished < MAX_RESTAGES) {
                    return Err(e);
                }
                vanished += 1;
            }
        }
    }
}

pub(super) fn stage_once<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    token: String,
) -> Result<Staged<S>, Error> {
    // Size the record before touching the disk (the purpose may be too long).
    let mut owner = new_record(sp.sys, me, token, true, req.options);
    owner.to_bytes().map_err(|e| Error::InvalidInput {
        what: "purpose".into(),
        problem: format!("{e} (shorten the purpose)"),
    })?;
    let name = candidate_name(req.name, &owner.token);
    let shared = req.options.shared;
    let fresh = make_candidate(sp, &name, !shared)?;
    owner.beacon = Some(fresh.flocked);
    // A shared lock needs `flock`s (its readers' own and the lock's): where the filesystem has
    // none, a reader takes the lock exclusively.
    let shared = shared && fresh.flocked;
    let record = match shared {
        true => shared_record(&owner),
        false => owner.clone(),
    };
    let written = write_record(
        sp,
        &fresh.dir,
        &name,
        &record,
        req.options.durable,
        fresh.umask_stripped,
    );
    if let Err(e) = written {
        remove_tree(sp.sys, sp.dir, &name);
        return Err(e);
    }
    Ok(Staged {
        name,
        dir: fresh.dir,
        id: fresh.meta.id,
        owner,
        staged_at: sp.sys.monotonic(),
        last_seen: None,
        last_watch: None,
        shared,
    })
}

/// Drops a candidate we staged: removes it (its record first, while its beacon is held: a
/// sweep never takes a candidate of ours for a dead creator's) and forgets its token.
pub(super) fn unstage<S: System>(sp: &Space<S>, c: Staged<S>) {
    remove_entry_dir(sp.sys, sp.dir, &c.name, c.dir);
    sp.sys.own_token(&c.owner.token, false);
}

/// Stages again after our candidate vanished, keeping what the old one knew of the holder.
pub(super) fn restage<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    c: &mut Staged<S>,
) -> Result<(), Error> {
    let mut fresh = stage(sp, req, me)?;
    fresh.last_seen = c.last_seen.take();
    let old = std::mem::replace(c, fresh);
    unstage(sp, old);
    Ok(())
}

pub(super) fn write_record<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    owner: &Owner,
    durable: bool,
    fix_mode: bool,
) -> Result<(), Error> {
    write_record_as(sp, dir, name, OWNER_FILE, owner, durable, fix_mode)
}

/// [`write_record`] to file `file` of candidate `name`.
fn write_record_as<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    file: &str,
    owner: &Owner,
    durable: bool,
    fix_mode: bool,
) -> Result<(), Error> {
    let bytes = owner.to_bytes().map_err(|e| Error::InvalidInput {
        what: "purpose".into(),
        problem: format!("{e} (shorten the purpose)"),
    })?;
    let path = format!("{name}/{file}");
    sp.sys
        .create_file_at(dir, file, &bytes, durable, sp.file_mode(fix_mode))
        .map_err(|e| sp.io("write the owner record", &path, e))?;
    if durable {
        sp.sys
            .sync_dir(dir)
            .map_err(|e| sp.io("sync the candidate directory", name, e))?;
    }
    Ok(())
}

/// A candidate that waited a while is refreshed before it is published (or once it was handed
/// the lock), so that its record's acquisition time and its directory's mtime (where the grace
/// period starts) are the publish time, not the time the wait began. The new record is renamed
/// over the old in one step: a waiter may be handed the lock at any moment, and `NAME` never
/// lacks a complete record.
pub(super) const REFRESH_AFTER: Duration = Duration::from_secs(1);

pub(super) fn refresh<S: System>(
    sp: &Space<S>,
    c: &mut Staged<S>,
    me: &Identity,
    options: &Options,
) -> Result<(), Error> {
    let beacon = c.owner.has_beacon();
    let owner = new_record(sp.sys, me, c.owner.token.clone(), beacon, options);
    let record = match c.shared {
        true => shared_record(&owner),
        false => owner.clone(),
    };
    let draft = record_draft(&owner.token);
    write_record_as(sp, &c.dir, &c.name, &draft, &record, options.durable, true)?;
    if let Err(e) = sp.sys.replace_file_at(&c.dir, &draft, OWNER_FILE) {
        let _ = sp.sys.remove_file_at(&c.dir, &draft);
        return Err(sp.io("refresh the owner record", &c.name, e));
    }
    if options.durable {
        let _ = sp.sys.sync_dir(&c.dir);
    }
    c.owner = owner;
    c.staged_at = sp.sys.monotonic();
    Ok(())
}

/// What a publish attempt found.
pub(super) enum Publish {
    Won,
    Contended,
    /// Our candidate is gone (a sweep or a cleaner removed it): stage again.
    Vanished,
}

pub(super) fn publish<S: System>(
    sp: &Space<S>,
    c: &Staged<S>,
    name: &str,
) -> Result<Publish, Error> {
    match sp.sys.rename_dir_noreplace(sp.dir, &c.dir, &c.name, name) {
        // RENAME_NOREPLACE succeeding is the proof. The plain-rename fallback (filesystems
        // that refuse the flag) is verified: NAME must now be our very directory.
        Ok(Renamed::Exclusive) => Ok(Publish::Won),
        Ok(Renamed::Plain) => match sp.sys.meta_at(sp.dir, name) {
            Ok(m) if m.id == c.id => Ok(Publish::Won),
            Ok(_) => Ok(Publish::Contended),
            // Moved on already: judged again from the top like any vanished lock.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Publish::Contended),
            Err(e) => Err(sp.io("check the published lock", name, e)),
        },
        Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Contended),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !sp.removed() => Ok(Publish::Vanished),
        Err(e) => {
            // A network filesystem may report an error for a rename that happened.
            match sp.sys.meta_at(sp.dir, name) {
                Ok(m) if m.id == c.id => Ok(Publish::Won),
                _ => Err(sp.io("publish the lock", name, e)),
            }
        }
    }
}
