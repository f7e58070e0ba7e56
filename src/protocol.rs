//! The protocol: **stage** a candidate, **publish** it, **retire** a lock to a tombstone,
//! **reap** tombstones. The only module (with [`crate::reclaim`]) that changes lock state, and
//! it does so only through the [`System`] seam, relative to the lock directory's handle.

use crate::error::Error;
use crate::liveness::{judge, Judgement, Liveness, Probe};
use crate::options::{Backoff, Options, Wait};
use crate::owner::Owner;
use crate::paths::{
    candidate_name, classify, guard_name, tombstone_name, Entry, OWNER_FILE, OWNER_LIMIT,
};
use crate::reclaim::{reclaim, Expect, Reclaim};
use crate::sys::{is, Errno, FileId, Identity, Kind, Meta, System, Wake};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a fail-fast acquisition republishes after the holder vanished under it before it
/// reports the lock as held (each round means some other process took and released it).
const MAX_FAIL_FAST_ROUNDS: u32 = 64;

/// A lock directory `D`: its handle, its path (for messages) and the user it belongs to.
pub(crate) struct Space<'a, S: System> {
    pub sys: &'a S,
    pub dir: &'a S::Dir,
    pub path: &'a Path,
    pub uid: u32,
}

/// One acquisition's fixed inputs.
pub(crate) struct Request<'a> {
    pub name: &'a str,
    pub resource: &'a str,
    pub options: &'a Options,
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
}

/// A staged candidate: our own, unpublished.
struct Staged<S: System> {
    name: String,
    dir: S::Dir,
    id: FileId,
    owner: Owner,
    staged_at: Duration,
    last_seen: Option<S::Dir>,
}

/// What is at `NAME` right now (short-lived: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Seen<S: System> {
    /// Nothing (or it vanished while we looked).
    Gone,
    /// Something that is not a well-formed lock of ours.
    Malformed(String),
    /// A lock with a readable record.
    Owned {
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
    },
}

impl<S: System> Space<'_, S> {
    pub fn entry(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn io(&self, op: &'static str, name: &str, e: io::Error) -> Error {
        Error::io(op, self.entry(name), e)
    }

    /// Checks that an entry is ours and private; `what` names it in the problem.
    fn private_problem(&self, meta: &Meta, what: &str) -> Option<String> {
        if meta.uid != self.uid {
            return Some(format!(
                "{what} is owned by uid {}, not {}",
                meta.uid, self.uid
            ));
        }
        if meta.mode & 0o077 != 0 {
            return Some(format!(
                "{what} has mode {:o}, open to group or others",
                meta.mode & 0o777
            ));
        }
        None
    }

    /// Reads and checks `NAME` through one directory handle, so that the record, the mtime and
    /// the beacon all belong to the same directory.
    pub fn observe(&self, name: &str) -> Result<Seen<S>, Error> {
        let dir = match self.sys.open_dir_at(self.dir, name) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Seen::Gone),
            Err(e) if is_not_dir(&e) => {
                return match self.sys.meta_at(self.dir, name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Seen::Gone),
                    Ok(m) if m.kind == Kind::Dir => Ok(Seen::Gone), // replaced meanwhile
                    Ok(m) => Ok(Seen::Malformed(format!(
                        "the lock path is a {}, not a directory",
                        kind_name(m.kind)
                    ))),
                    Err(e) => Err(self.io("inspect the lock", name, e)),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                // Not ours to open: someone else's lock (or a hostile one) in our directory.
                return match self.sys.meta_at(self.dir, name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Seen::Gone),
                    Ok(m) => Ok(Seen::Malformed(
                        self.private_problem(&m, "the lock directory")
                            .unwrap_or_else(|| "the lock directory cannot be opened".into()),
                    )),
                    Err(_) => Err(self.io("open the lock", name, e)),
                };
            }
            Err(e) => return Err(self.io("open the lock", name, e)),
        };
        let meta = self
            .sys
            .meta(&dir)
            .map_err(|e| self.io("inspect the lock", name, e))?;
        let problem = match self.private_problem(&meta, "the lock directory") {
            Some(p) => Some(p),
            None => match self.read_owner(&dir) {
                Ok(owner) => return Ok(Seen::Owned { dir, meta, owner }),
                Err(p) => Some(p),
            },
        };
        // A record we cannot read counts as malformed only if NAME still names the directory
        // we looked into; otherwise the holder released (or someone reclaimed) meanwhile.
        match self.sys.meta_at(self.dir, name) {
            Ok(now) if now.id == meta.id => Ok(Seen::Malformed(problem.unwrap_or_default())),
            Ok(_) => Ok(Seen::Gone),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Seen::Gone),
            Err(e) => Err(self.io("inspect the lock", name, e)),
        }
    }

    /// Reads `owner.json` in an open lock (or candidate) directory; `Err` says what is wrong.
    pub fn read_owner(&self, dir: &S::Dir) -> Result<Owner, String> {
        let (meta, bytes) = match self.sys.read_file_at(dir, OWNER_FILE, OWNER_LIMIT) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(format!("it has no {OWNER_FILE}"))
            }
            Err(e) if is(&e, Errno::Loop) => {
                return Err(format!("its {OWNER_FILE} is a symbolic link"))
            }
            Err(e) => {
                // Say what it is when that explains the failure (a socket cannot be opened).
                return Err(match self.sys.meta_at(dir, OWNER_FILE) {
                    Ok(m) if m.kind != Kind::File => {
                        format!("its {OWNER_FILE} is a {}", kind_name(m.kind))
                    }
                    _ => format!("its {OWNER_FILE} cannot be read: {e}"),
                });
            }
        };
        if meta.kind != Kind::File {
            return Err(format!("its {OWNER_FILE} is a {}", kind_name(meta.kind)));
        }
        if let Some(p) = self.private_problem(&meta, OWNER_FILE) {
            return Err(p);
        }
        if bytes.len() > OWNER_LIMIT {
            return Err(format!(
                "its {OWNER_FILE} is larger than {OWNER_LIMIT} bytes"
            ));
        }
        Owner::parse(&bytes)
    }

    /// Judges the owner of an observed lock.
    pub fn judge(&self, dir: &S::Dir, owner: &Owner, me: &Identity) -> Judgement {
        let mut probe = LiveProbe { sys: self.sys, dir };
        judge(owner, me, &mut probe)
    }
}

/// The real facts behind a judgement.
struct LiveProbe<'a, S: System> {
    sys: &'a S,
    dir: &'a S::Dir,
}

impl<S: System> Probe for LiveProbe<'_, S> {
    fn beacon_free(&mut self) -> Option<bool> {
        self.sys.try_lock(self.dir, false).ok()
    }
    fn process_alive(&mut self, pid: u32) -> Option<bool> {
        self.sys.process_alive(pid)
    }
    fn start_time(&mut self, pid: u32) -> Option<u64> {
        self.sys.start_time(pid)
    }
}

fn is_not_dir(e: &io::Error) -> bool {
    // A file at the path, or a symlink refused by O_NOFOLLOW.
    is(e, Errno::NotDir) || is(e, Errno::Loop)
}

pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Dir => "directory",
        Kind::File => "regular file",
        Kind::Symlink => "symbolic link",
        Kind::Other => "FIFO, socket or device",
    }
}

/// The record we write for a new acquisition.
fn new_record<S: System>(
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
    owner
}

/// Stage: make `NAME.candidate.<token>` (mode exactly 0700), take its beacon, write and sync
/// its record. On failure nothing is left behind.
fn stage<S: System>(sp: &Space<S>, req: &Request, me: &Identity) -> Result<Staged<S>, Error> {
    let token = sp.sys.token();
    // Size the record before touching the disk (the purpose may be too long).
    let mut owner = new_record(sp.sys, me, token.clone(), true, req.options);
    owner.to_bytes().map_err(|problem| Error::InvalidInput {
        what: "purpose".into(),
        problem,
    })?;
    let name = candidate_name(req.name, &token);
    let fresh = make_candidate(sp, &name)?;
    owner.beacon = Some(fresh.flocked);
    let written = write_record(
        sp,
        &fresh.dir,
        &name,
        &owner,
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
    })
}

/// A candidate directory just made by [`make_candidate`].
pub(crate) struct Fresh<D> {
    pub(crate) dir: D,
    pub(crate) meta: Meta,
    /// The umask stripped owner bits (so files made inside need their mode fixed too).
    pub(crate) umask_stripped: bool,
    /// Its exclusive `flock` is held (false where the filesystem has no `flock`).
    pub(crate) flocked: bool,
}

/// Makes candidate directory `name` (a lock's, or a reclaim guard's being staged), opens it,
/// gives it mode exactly 0700 and takes its exclusive `flock`. On failure it is removed.
pub(crate) fn make_candidate<S: System>(sp: &Space<S>, name: &str) -> Result<Fresh<S::Dir>, Error> {
    sp.sys
        .mkdir_at(sp.dir, name)
        .map_err(|e| sp.io("create the candidate directory", name, e))?;
    let result = (|| {
        let dir = sp
            .sys
            .open_dir_at(sp.dir, name)
            .map_err(|e| sp.io("open the candidate directory", name, e))?;
        let meta = sp
            .sys
            .meta(&dir)
            .map_err(|e| sp.io("inspect the candidate directory", name, e))?;
        // mkdir gave 0700 & ~umask. Only a umask that strips owner bits needs fixing, and then
        // the record's 0600 does too (0700 & ~u == 0700 implies 0600 & ~u == 0600).
        let umask_stripped = meta.mode & 0o777 != 0o700;
        if umask_stripped {
            sp.sys
                .set_mode(&dir, 0o700)
                .map_err(|e| sp.io("set the mode of the candidate directory", name, e))?;
        }
        // A fresh candidate's lock is free: nobody looks at one this young.
        let flocked = match sp.sys.try_lock(&dir, true) {
            Ok(true) => true,
            Ok(false) => {
                return Err(sp.io(
                    "lock the fresh candidate directory",
                    name,
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        "another process holds a lock on it",
                    ),
                ))
            }
            // Some NFS and FUSE mounts have no flock: the lock works, judged by pid evidence.
            Err(e) if is(&e, Errno::LockUnsupported) => false,
            Err(e) => return Err(sp.io("lock the candidate directory", name, e)),
        };
        Ok(Fresh {
            dir,
            meta,
            umask_stripped,
            flocked,
        })
    })();
    if result.is_err() {
        remove_tree(sp.sys, sp.dir, name);
    }
    result
}

fn write_record<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    owner: &Owner,
    durable: bool,
    fix_mode: bool,
) -> Result<(), Error> {
    let bytes = owner.to_bytes().map_err(|problem| Error::InvalidInput {
        what: "purpose".into(),
        problem,
    })?;
    let file = format!("{name}/{OWNER_FILE}");
    sp.sys
        .create_file_at(dir, OWNER_FILE, &bytes, durable, fix_mode)
        .map_err(|e| sp.io("write the owner record", &file, e))?;
    if durable {
        sp.sys
            .sync_dir(dir)
            .map_err(|e| sp.io("sync the candidate directory", name, e))?;
    }
    Ok(())
}

/// A candidate that waited a while is refreshed before it is published, so that its record's
/// acquisition time and its directory's mtime (where the grace period starts) are the publish
/// time, not the time the wait began.
const REFRESH_AFTER: Duration = Duration::from_secs(1);

fn refresh<S: System>(
    sp: &Space<S>,
    c: &mut Staged<S>,
    me: &Identity,
    options: &Options,
) -> Result<(), Error> {
    let beacon = c.owner.has_beacon();
    let mut owner = new_record(sp.sys, me, c.owner.token.clone(), beacon, options);
    owner.beacon = Some(beacon);
    sp.sys
        .remove_file_at(&c.dir, OWNER_FILE)
        .map_err(|e| sp.io("refresh the owner record", &c.name, e))?;
    write_record(sp, &c.dir, &c.name, &owner, options.durable, true)?;
    c.owner = owner;
    c.staged_at = sp.sys.monotonic();
    Ok(())
}

/// What a publish attempt found.
enum Publish {
    Won,
    Contended,
}

fn publish<S: System>(sp: &Space<S>, c: &Staged<S>, name: &str) -> Result<Publish, Error> {
    match sp.sys.rename_noreplace(sp.dir, &c.name, name) {
        // RENAME_NOREPLACE succeeding is the proof. The plain-rename fallback (filesystems
        // that refuse the flag) is verified: NAME must now be our very directory.
        Ok(()) if !sp.sys.rename_is_plain() => Ok(Publish::Won),
        Ok(()) => match sp.sys.meta_at(sp.dir, name) {
            Ok(m) if m.id == c.id => Ok(Publish::Won),
            Ok(_) => Ok(Publish::Contended),
            Err(e) => Err(sp.io("check the published lock", name, e)),
        },
        Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Contended),
        Err(e) => {
            // A network filesystem may report an error for a rename that happened.
            match sp.sys.meta_at(sp.dir, name) {
                Ok(m) if m.id == c.id => Ok(Publish::Won),
                _ => Err(sp.io("publish the lock", name, e)),
            }
        }
    }
}

/// The deadline of a wait, on the monotonic clock (`None`: forever; `Some(now)`: fail fast).
fn deadline<S: System>(sys: &S, wait: Wait) -> Option<Duration> {
    match wait {
        Wait::Immediately => Some(sys.monotonic()),
        Wait::Forever => None,
        Wait::Timeout(d) => Some(sys.monotonic().saturating_add(d)),
    }
}

/// Acquire: stage, then publish until we win, judging (and waiting for or reclaiming from)
/// whoever holds `NAME`. Every way out but success removes our candidate.
pub(crate) fn acquire<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
) -> Result<Held<S>, Error> {
    let mut c = stage(sp, req, me)?;
    let result = contend(sp, req, me, &mut c);
    match result {
        Ok(reclaimed_from) => Ok(Held {
            name: req.name.to_owned(),
            owner: c.owner,
            beacon: c.dir,
            id: c.id,
            reclaimed_from,
            last_seen: c.last_seen,
        }),
        Err(e) => {
            drop(c.dir);
            remove_tree(sp.sys, sp.dir, &c.name);
            Err(e)
        }
    }
}

fn contend<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    c: &mut Staged<S>,
) -> Result<Option<Owner>, Error> {
    let options = req.options;
    let start = sp.sys.monotonic();
    let deadline = deadline(sp.sys, options.wait);
    let fail_fast = options.wait == Wait::Immediately;
    let mut reclaimed_from = None;
    let mut rounds = 0u32;
    let mut last_owner: Option<Owner> = None;
    let mut guard_backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
    let mut told = false;
    let mut tell = |owner: &Owner, judgement: &Judgement, since| {
        if let (false, Some(f)) = (told, &options.on_wait) {
            told = true;
            f(&crate::options::Waiting {
                lock: sp.entry(req.name),
                owner: owner.clone(),
                judgement: judgement.clone(),
                since,
            });
        }
    };
    let cancel = options.cancel.as_ref().map(|c| &*c.0);
    let lock_path = || sp.entry(req.name);
    let timeout = |owner: Option<Owner>| Error::Timeout {
        lock: lock_path(),
        resource: req.resource.to_owned(),
        waited: sp.sys.monotonic().saturating_sub(start),
        owner: owner.map(Box::new),
    };
    loop {
        if cancel.is_some_and(|c| c.is_fired()) {
            return Err(Error::Cancelled {
                lock: lock_path(),
                resource: req.resource.to_owned(),
            });
        }
        if sp.sys.monotonic().saturating_sub(c.staged_at) > REFRESH_AFTER {
            refresh(sp, c, me, options)?;
        }
        if let Publish::Won = publish(sp, c, req.name)? {
            return Ok(reclaimed_from);
        }
        rounds += 1;
        let left = |now: Duration| deadline.map(|d| d.saturating_sub(now));
        let (dir, meta, owner) = match sp.observe(req.name)? {
            Seen::Gone => {
                if fail_fast && rounds > MAX_FAIL_FAST_ROUNDS {
                    return Err(timeout(last_owner));
                }
                continue;
            }
            Seen::Malformed(problem) => {
                return Err(Error::Malformed {
                    lock: lock_path(),
                    resource: req.resource.to_owned(),
                    problem,
                })
            }
            Seen::Owned { dir, meta, owner } => (dir, meta, owner),
        };
        let judgement = sp.judge(&dir, &owner, me);
        last_owner = Some(owner.clone());
        let now = sp.sys.monotonic();
        let expired = deadline.is_some_and(|d| now >= d);
        match judgement.liveness {
            Liveness::Live | Liveness::Unknown => {
                if expired {
                    if fail_fast {
                        return Err(Error::Locked {
                            lock: lock_path(),
                            resource: req.resource.to_owned(),
                            owner: Box::new(owner),
                            judgement,
                            since: meta.mtime,
                        });
                    }
                    return Err(timeout(last_owner));
                }
                // Re-check between wake-ups only the fact the judgement rests on: the beacon
                // of a live beacon holder, the pid (with a pidfd) of a live pid-judged one. An
                // unknown owner (another host or namespace) is waited for by inotify alone:
                // its beacon and pid mean nothing here, and re-probing them would spin.
                tell(&owner, &judgement, meta.mtime);
                let live = judgement.liveness == Liveness::Live;
                let by_beacon = live && owner.has_beacon();
                let pid = (live && !owner.has_beacon()).then_some(owner.pid);
                wait_for_change(sp, req, &dir, meta.id, by_beacon, pid, None, left(now))?;
                c.last_seen = Some(dir);
            }
            Liveness::DeadByProof | Liveness::DeadByEvidence => {
                let age = sp
                    .sys
                    .now()
                    .duration_since(meta.mtime)
                    .unwrap_or(Duration::ZERO);
                let proven = judgement.liveness == Liveness::DeadByProof;
                if !proven && age < options.grace {
                    let remaining = options.grace - age;
                    if expired {
                        if fail_fast {
                            return Err(Error::Stale {
                                lock: lock_path(),
                                resource: req.resource.to_owned(),
                                owner: Box::new(owner),
                                judgement,
                                remaining,
                            });
                        }
                        return Err(timeout(last_owner));
                    }
                    tell(&owner, &judgement, meta.mtime);
                    wait_for_change(
                        sp,
                        req,
                        &dir,
                        meta.id,
                        false,
                        None,
                        Some(remaining),
                        left(now),
                    )?;
                    continue;
                }
                drop(dir);
                match reclaim(sp, req.name, Expect::Token(&owner.token), options.grace)? {
                    Reclaim::Done => reclaimed_from = Some(owner),
                    Reclaim::Changed => {}
                    Reclaim::Busy { remaining } => {
                        let now = sp.sys.monotonic();
                        if deadline.is_some_and(|d| now >= d) {
                            if fail_fast {
                                return Err(Error::Guarded {
                                    guard: sp.entry(&guard_name(req.name)),
                                    lock: lock_path(),
                                    resource: req.resource.to_owned(),
                                    remaining,
                                });
                            }
                            return Err(timeout(last_owner));
                        }
                        let pause = guard_backoff.next_pause();
                        let pause = left(now).map_or(pause, |l| l.min(pause));
                        if sp
                            .sys
                            .sleep(None, Some(pause), cancel)
                            .map_err(|e| sp.io("wait for the reclaim guard", req.name, e))?
                            == Wake::Cancelled
                        {
                            return Err(Error::Cancelled {
                                lock: lock_path(),
                                resource: req.resource.to_owned(),
                            });
                        }
                    }
                }
            }
        }
    }
}

/// Sleeps until the lock at `NAME` may have changed: released (moved away), its beacon dropped,
/// its (beacon-less) holder exited, `also` passed, the deadline passed, or the wait cancelled.
/// Wake-ups that changed nothing are filtered here, with no new opens of the lock directory (an
/// open and close by us would wake every other waiter).
#[allow(clippy::too_many_arguments)]
fn wait_for_change<S: System>(
    sp: &Space<S>,
    req: &Request,
    dir: &S::Dir,
    id: FileId,
    beacon: bool,
    pid: Option<u32>,
    also: Option<Duration>,
    left: Option<Duration>,
) -> Result<(), Error> {
    let cancel = req.options.cancel.as_ref().map(|c| &*c.0);
    if beacon && cancel.is_none() && also.is_none() && left.is_none() {
        // An unbounded wait on a beacon holder: sleep in the kernel's own lock handoff. The
        // holder's release unlocks the beacon explicitly (for every copy a fork made of it),
        // and its death closes it, so either wakes us.
        match sp.sys.wait_shared(dir) {
            Ok(()) => return Ok(()),
            Err(e) if is(&e, Errno::LockUnsupported) => {}
            Err(e) => return Err(sp.io("wait for the lock", req.name, e)),
        }
    }
    let watch = sp.sys.watch(dir, pid).unwrap_or(None);
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(250));
    let start = sp.sys.monotonic();
    let mut spurious = 0u32;
    loop {
        // Look once more now that the watch is armed: a change before it would be missed.
        let changed = match sp.sys.meta_at(sp.dir, req.name) {
            Ok(m) => m.id != id,
            Err(_) => true,
        } || (beacon && sp.sys.try_lock(dir, false).unwrap_or(false))
            || pid.is_some_and(|p| sp.sys.process_alive(p) == Some(false));
        if changed {
            return Ok(());
        }
        let elapsed = sp.sys.monotonic().saturating_sub(start);
        let mut timeout = [also, left]
            .into_iter()
            .flatten()
            .map(|t| t.saturating_sub(elapsed))
            .min();
        if timeout == Some(Duration::ZERO) {
            return Ok(()); // the caller re-judges and reports the deadline
        }
        // Without a watch, or after wake-ups that changed nothing (a pidfd of a zombie stays
        // readable), back off instead of spinning.
        let use_watch = watch.is_some() && spurious < 3;
        if !use_watch {
            let pause = backoff.next_pause();
            timeout = Some(timeout.map_or(pause, |t| t.min(pause)));
        }
        let wake = sp
            .sys
            .sleep(watch.as_ref().filter(|_| use_watch), timeout, cancel)
            .map_err(|e| sp.io("wait for the lock", req.name, e))?;
        match wake {
            Wake::Cancelled => {
                return Err(Error::Cancelled {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                })
            }
            Wake::TimedOut if use_watch => return Ok(()),
            Wake::TimedOut => {}
            Wake::Changed => spurious += 1,
        }
    }
}

/// Release: if this is the acquiring process, check that `NAME` is still our directory, retire
/// it to a tombstone, check the tombstone, drop the beacon (waking waiters), reap.
pub(crate) fn release<S: System>(
    sp: &Space<S>,
    held: Held<S>,
    resource: &str,
    acquirer: u32,
) -> Result<(), Error> {
    if sp.sys.pid() != acquirer {
        return Ok(()); // a forked child: the lock is the parent's
    }
    let name = held.name.as_str();
    let lost = |problem: &str| Error::Lost {
        lock: sp.entry(name),
        resource: resource.to_owned(),
        problem: problem.to_owned(),
    };
    match sp.sys.meta_at(sp.dir, name) {
        Ok(m) if m.id == held.id => {}
        Ok(_) => {
            return Err(lost(
                "another owner's lock is in its place (it was reclaimed and taken)",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(lost("it is gone (someone removed or reclaimed it)"))
        }
        Err(e) => return Err(sp.io("check the lock before release", name, e)),
    }
    // Named by our token: unique (a token is published once), and no random draw needed.
    let tomb = tombstone_name(name, &held.owner.token);
    match sp.sys.rename_noreplace(sp.dir, name, &tomb) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(lost("it vanished while being released"))
        }
        Err(e) => return Err(sp.io("retire the lock", name, e)),
    }
    // `NAME` is free: wake the waiters blocked in the beacon's flock now, before the checks
    // and the reaping. Explicitly, not just by closing: a forked child's copy of the beacon
    // shares its lock, and would otherwise keep them blocked until the child exits.
    let _ = sp.sys.unlock(&held.beacon);
    match sp.sys.meta_at(sp.dir, &tomb) {
        Ok(m) if m.id == held.id => {}
        // Already reaped (tombstones are anyone's to delete, at any time: a sweep got there
        // first): if our own directory is unlinked, what we retired was ours.
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                && sp.sys.meta(&held.beacon).is_ok_and(|m| m.nlink == 0) => {}
        _ => {
            // Not ours after all: put it back where it was, never over anything.
            let _ = sp.sys.rename_noreplace(sp.dir, &tomb, name);
            return Err(lost(
                "another owner's lock was in its place at the moment of release",
            ));
        }
    }
    // Reap: empty the tombstone through our handle, drop the beacon, remove the directory;
    // then close the previous holder's directory we kept (see `Held::last_seen`).
    let _ = sp.sys.remove_file_at(&held.beacon, OWNER_FILE);
    drop(held.beacon);
    remove_tree(sp.sys, sp.dir, &tomb);
    drop(held.last_seen);
    Ok(())
}

/// Removes `name` in `at` and everything below it, never following a symlink; best effort
/// (what remains is a tombstone or candidate that a sweep removes later).
pub(crate) fn remove_tree<S: System>(sys: &S, at: &S::Dir, name: &str) -> bool {
    fn go<S: System>(sys: &S, at: &S::Dir, name: &str, depth: u32) -> io::Result<()> {
        match sys.remove_dir_at(at, name) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if is(&e, Errno::NotDir) => return sys.remove_file_at(at, name),
            Err(e) if (is(&e, Errno::NotEmpty) || is(&e, Errno::Exists)) && depth < 16 => {}
            Err(e) => return Err(e),
        }
        // Try the common case first: a lock or candidate holds just its record.
        let _ = sys.remove_file_at(&sys.open_dir_at(at, name)?, OWNER_FILE);
        if sys.remove_dir_at(at, name).is_ok() {
            return Ok(());
        }
        let sub = sys.open_dir_at(at, name)?;
        for entry in sys.list(&sub)? {
            let meta = match sys.meta_at(&sub, &entry) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // another reaper
                Err(e) => return Err(e),
            };
            let removed = match meta.kind {
                Kind::Dir => go(sys, &sub, &entry, depth + 1),
                _ => sys.remove_file_at(&sub, &entry),
            };
            match removed {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        drop(sub);
        sys.remove_dir_at(at, name)
    }
    match go(sys, at, name, 0) {
        Ok(()) => true,
        // Someone else reaped it first: tombstones are anyone's to delete.
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// What a [sweep](crate::Locks::sweep) removed and what it left, with why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Names removed from the lock directory.
    pub removed: Vec<String>,
    /// Names left in place, each with the reason.
    pub kept: Vec<(String, String)>,
}

/// Sweep: reap every tombstone, and retire-then-reap every candidate older than `grace` whose
/// creator is dead: its beacon is free (a candidate is briefly beacon-less while it is made,
/// hence the age), or, where there is no flock, its record judges it dead. Locks and guards are
/// never touched.
pub(crate) fn sweep<S: System>(sp: &Space<S>, grace: Duration) -> Result<Sweep, Error> {
    let me = &sp.sys.identity();
    let entries = sp
        .sys
        .list(sp.dir)
        .map_err(|e| Error::io("list the lock directory", sp.path, e))?;
    let mut report = Sweep::default();
    let mut keep = |name: &str, why: &str| report.kept.push((name.to_owned(), why.to_owned()));
    let mut removed = Vec::new();
    for entry in entries {
        match classify(&entry) {
            Entry::Tombstone { .. } => {
                if remove_tree(sp.sys, sp.dir, &entry) {
                    removed.push(entry);
                } else {
                    keep(&entry, "it could not be removed");
                }
            }
            Entry::Candidate { lock, token } => {
                let Ok(meta) = sp.sys.meta_at(sp.dir, &entry) else {
                    continue; // published or removed meanwhile
                };
                if sp
                    .sys
                    .now()
                    .duration_since(meta.mtime)
                    .unwrap_or(Duration::ZERO)
                    < grace
                {
                    keep(
                        &entry,
                        "it is younger than the grace period (it may be being staged)",
                    );
                    continue;
                }
                let Ok(dir) = sp.sys.open_dir_at(sp.dir, &entry) else {
                    keep(&entry, "it cannot be opened");
                    continue;
                };
                match sp.sys.try_lock(&dir, false) {
                    // Its beacon is free: its creator is gone (a fresh candidate, briefly
                    // without one, was ruled out by its age).
                    Ok(true) => {}
                    Ok(false) => {
                        keep(
                            &entry,
                            "its creator is alive (it holds the candidate's beacon)",
                        );
                        continue;
                    }
                    // No flock here: judge the creator by its record, like any owner. A
                    // candidate with no record after the grace period lost its creator before
                    // it could write one.
                    Err(e) if is(&e, Errno::LockUnsupported) => {
                        if let Ok(owner) = sp.read_owner(&dir) {
                            let judgement = sp.judge(&dir, &owner, me);
                            if !judgement.liveness.is_dead() {
                                keep(&entry, &format!("its creator is {judgement}"));
                                continue;
                            }
                        }
                    }
                    Err(_) => {
                        keep(&entry, "its creator cannot be probed");
                        continue;
                    }
                }
                // Retire it first, so that its creator's publish and this sweep cannot both win.
                let tomb = tombstone_name(&lock, &token);
                match sp.sys.rename_noreplace(sp.dir, &entry, &tomb) {
                    Ok(()) => {
                        drop(dir);
                        if remove_tree(sp.sys, sp.dir, &tomb) {
                            removed.push(entry);
                        } else {
                            keep(&tomb, "it was retired but could not be removed");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => keep(&entry, &format!("it could not be retired: {e}")),
                }
            }
            _ => {}
        }
    }
    report.removed = removed;
    Ok(report)
}

/// What an [unlock](crate::LockRequest::unlock) did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unlocked {
    /// The lock was not held.
    NotLocked,
    /// The lock was removed; `owner` is its dead owner's record (`None` for a malformed one).
    Removed {
        /// The removed lock's owner record, if it had a readable one.
        owner: Option<Owner>,
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
    for _ in 0..MAX_FAIL_FAST_ROUNDS {
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
            Seen::Malformed(problem) => {
                let malformed = |problem: String| Error::Malformed {
                    lock: sp.entry(name),
                    resource: resource.to_owned(),
                    problem,
                };
                if !force {
                    return Err(malformed(problem));
                }
                let meta = match sp.sys.meta_at(sp.dir, name) {
                    Ok(m) => m,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(sp.io("inspect the lock", name, e)),
                };
                if meta.kind == Kind::Dir {
                    let dir = match sp.sys.open_dir_at(sp.dir, name) {
                        Ok(d) => d,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(sp.io("open the lock", name, e)),
                    };
                    if !sp.sys.try_lock(&dir, false).unwrap_or(false) {
                        return Err(malformed(format!(
                            "{problem}; a process holds a lock on it, so it is in use and --force refuses it"
                        )));
                    }
                }
                (None, meta.id)
            }
        };
        let expect = match &expect_owner {
            Some(owner) => Expect::Token(&owner.token),
            None => Expect::Dir(id),
        };
        match reclaim(sp, name, expect, grace)? {
            Reclaim::Done => {
                return Ok(Unlocked::Removed {
                    owner: expect_owner,
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
    })
}
