//! The protocol: **stage** a candidate, **publish** it, **retire** a lock to a tombstone,
//! **reap** tombstones. The only module (with [`crate::reclaim`]) that changes lock state, and
//! it does so only through the [`System`] seam, relative to the lock directory's handle.

use crate::error::Error;
use crate::liveness::{judge, Judgement, Liveness, Probe};
use crate::options::{Ages, Backoff, Options, Wait};
use crate::owner::Owner;
use crate::paths::{
    candidate_name, classify, guard_name, tombstone_for, Entry, OWNER_FILE, OWNER_LIMIT,
};
use crate::reclaim::{reclaim, Expect, Reclaim};
use crate::sys::{is, Errno, FileId, Identity, Kind, Meta, Renamed, System, Wake};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a fail-fast acquisition republishes after the holder vanished under it before it
/// reports the lock as held (each round means some other process took and released it).
const MAX_FAIL_FAST_ROUNDS: u32 = 64;

/// How many times in a row an acquisition stages again after its candidate vanished (a sweep
/// or a temp cleaner removed it) before it gives up.
const MAX_RESTAGES: u32 = 32;

/// Rounds in a row without a wait (the holder vanished, a reclaim found the lock changed)
/// after which a contender pauses (bounded backoff) before it looks again.
const SPIN_ROUNDS: u32 = 8;

/// How many times a `flock` that an observer holds for an instant (status and sweep peek with
/// a shared one) is retried, with backoff, before it counts as held by someone.
pub(crate) const PEEK_RETRIES: u32 = 20;

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
}

/// A staged candidate: our own, unpublished.
struct Staged<S: System> {
    name: String,
    dir: S::Dir,
    id: FileId,
    owner: Owner,
    staged_at: Duration,
    last_seen: Option<S::Dir>,
    /// The watch of the last wait, dropped once the publish is done (removing it costs time
    /// that a handoff should not pay).
    last_watch: Option<S::Watch>,
}

/// What is at `NAME` right now (short-lived: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Seen<S: System> {
    /// Nothing (or it vanished while we looked).
    Gone,
    /// Something that is not a well-formed lock of ours.
    Malformed(String),
    /// A lock directory whose record cannot be trusted (missing, malformed) but whose beacon a
    /// process holds: in use, though damaged (a temp cleaner caught halfway, a record written
    /// over). Never reclaimed; a waiting acquisition waits for it to change.
    InUse {
        dir: S::Dir,
        meta: Meta,
        problem: String,
    },
    /// A lock with a readable record.
    Owned {
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
    },
}

/// Why an owner record could not be used.
pub(crate) enum Unreadable {
    /// It was read (or looked at) and is not a valid, private record: never trusted, never
    /// removed automatically.
    Malformed(String),
    /// It could not be read (out of descriptors, EIO...): an I/O error, never a judgement.
    Io(io::Error),
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

    /// Whether the lock directory itself was removed (a temp cleaner, `rm -rf`): nothing can
    /// be staged in it any more, and the caller opens (re-creates) it again.
    pub fn removed(&self) -> bool {
        self.sys.unlinked(self.dir)
    }

    /// Reads and checks `NAME` through one directory handle, so that the record, the mtime and
    /// the beacon all belong to the same directory. A lock that vanishes while it is looked at
    /// is `Gone` (ordinary contention), on every path.
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
        let meta = match self.sys.meta(&dir) {
            Ok(m) => m,
            // Some FUSE filesystems answer fstat of a moved directory with ENOENT.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Seen::Gone),
            Err(e) => return Err(self.io("inspect the lock", name, e)),
        };
        let problem = match self.private_problem(&meta, "the lock directory") {
            Some(p) => Unreadable::Malformed(p),
            None => match self.read_owner(&dir) {
                Ok(owner) => return Ok(Seen::Owned { dir, meta, owner }),
                Err(u) => u,
            },
        };
        // A record we cannot read counts against the lock only if NAME still names the
        // directory we looked into; otherwise the holder released (or someone reclaimed)
        // meanwhile.
        match self.sys.meta_at(self.dir, name) {
            Ok(now) if now.id == meta.id => match problem {
                Unreadable::Malformed(problem)
                    if self.sys.try_lock(&dir, false).ok() == Some(false) =>
                {
                    Ok(Seen::InUse { dir, meta, problem })
                }
                Unreadable::Malformed(p) => Ok(Seen::Malformed(p)),
                Unreadable::Io(e) => Err(self.io("read the owner record of", name, e)),
            },
            Ok(_) => Ok(Seen::Gone),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Seen::Gone),
            Err(e) => Err(self.io("inspect the lock", name, e)),
        }
    }

    /// Reads `owner.json` in an open lock (or candidate) directory.
    pub fn read_owner(&self, dir: &S::Dir) -> Result<Owner, Unreadable> {
        let malformed = |p: String| Err(Unreadable::Malformed(p));
        let (meta, bytes) = match self.sys.read_file_at(dir, OWNER_FILE, OWNER_LIMIT) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return malformed(format!("it has no {OWNER_FILE}"))
            }
            Err(e) if is(&e, Errno::Loop) => {
                return malformed(format!("its {OWNER_FILE} is a symbolic link"))
            }
            Err(e) => {
                // Say what it is when that explains the failure (a socket cannot be opened);
                // a private regular file that cannot be read is an I/O error (EMFILE, EIO).
                return match self.sys.meta_at(dir, OWNER_FILE) {
                    Ok(m) if m.kind != Kind::File => {
                        malformed(format!("its {OWNER_FILE} is a {}", kind_name(m.kind)))
                    }
                    Ok(m) => match self.private_problem(&m, OWNER_FILE) {
                        Some(p) => malformed(p),
                        None => Err(Unreadable::Io(e)),
                    },
                    Err(_) => Err(Unreadable::Io(e)),
                };
            }
        };
        if meta.kind != Kind::File {
            return malformed(format!("its {OWNER_FILE} is a {}", kind_name(meta.kind)));
        }
        if let Some(p) = self.private_problem(&meta, OWNER_FILE) {
            return malformed(p);
        }
        if bytes.len() > OWNER_LIMIT {
            return malformed(format!(
                "its {OWNER_FILE} is larger than {OWNER_LIMIT} bytes"
            ));
        }
        Owner::parse(&bytes).map_err(Unreadable::Malformed)
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
    fn wrote(&mut self, token: &str) -> bool {
        self.sys.wrote(token)
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

/// Whether `e` is a "no such file" from an operation on a lock directory entry.
fn not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
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
/// its record. On failure nothing is left behind. A candidate that vanishes while it is made
/// (a sweep or a temp cleaner removed it) is staged again under a fresh token: no observer
/// makes an acquisition fail.
fn stage<S: System>(sp: &Space<S>, req: &Request, me: &Identity) -> Result<Staged<S>, Error> {
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

fn stage_once<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    token: String,
) -> Result<Staged<S>, Error> {
    // Size the record before touching the disk (the purpose may be too long).
    let mut owner = new_record(sp.sys, me, token, true, req.options);
    owner.to_bytes().map_err(|problem| Error::InvalidInput {
        what: "purpose".into(),
        problem,
    })?;
    let name = candidate_name(req.name, &owner.token);
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
        last_watch: None,
    })
}

/// Drops a candidate we staged: removes it and forgets its token.
fn unstage<S: System>(sp: &Space<S>, c: Staged<S>) {
    drop(c.dir);
    remove_tree(sp.sys, sp.dir, &c.name);
    sp.sys.own_token(&c.owner.token, false);
}

/// Stages again after our candidate vanished, keeping what the old one knew of the holder.
fn restage<S: System>(
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
            .open_made_dir_at(sp.dir, name)
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
        let flocked = lock_fresh(sp, &dir, name)?;
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

/// Takes the exclusive `flock` of a directory we just made. Nobody contends for it, but an
/// observer (status, sweep) may be peeking at it with a shared one for an instant: retried.
/// `Ok(false)` where the filesystem has no `flock` (the lock then works, judged by pid).
pub(crate) fn lock_fresh<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
) -> Result<bool, Error> {
    let mut pause = Backoff::new(Duration::from_micros(100), Duration::from_millis(10));
    for _ in 0..PEEK_RETRIES {
        match sp.sys.try_lock(dir, true) {
            Ok(true) => return Ok(true),
            Ok(false) => {
                let _ = sp.sys.sleep(None, Some(pause.next_pause()), None);
            }
            Err(e) if is(&e, Errno::LockUnsupported) => return Ok(false),
            Err(e) => return Err(sp.io("lock the candidate directory", name, e)),
        }
    }
    Err(sp.io(
        "lock the fresh candidate directory",
        name,
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "another process keeps a lock on it",
        ),
    ))
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
    /// Our candidate is gone (a sweep or a cleaner removed it): stage again.
    Vanished,
}

fn publish<S: System>(sp: &Space<S>, c: &Staged<S>, name: &str) -> Result<Publish, Error> {
    match sp.sys.rename_noreplace(sp.dir, &c.name, name) {
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

/// Acquire: stage, then publish until we win, judging (and waiting for or reclaiming from)
/// whoever holds `NAME`. Every way out but success removes our candidate.
pub(crate) fn acquire<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
) -> Result<Held<S>, Error> {
    let mut c = stage(sp, req, me)?;
    match contend(sp, req, me, &mut c) {
        Ok(reclaimed_from) => {
            drop(c.last_watch);
            Ok(Held {
                name: req.name.to_owned(),
                owner: c.owner,
                beacon: c.dir,
                id: c.id,
                reclaimed_from,
                last_seen: c.last_seen,
            })
        }
        Err(e) => {
            unstage(sp, c);
            Err(e)
        }
    }
}

/// Runs `attempt` in the lock directory `open` gives (`dir` finds the handle in it), and once
/// more in a fresh one each time the directory was removed under it (a temp cleaner, `rm -rf`):
/// a lock in a removed directory would exclude no one, and a waiter should go on in the new
/// one, not fail.
pub(crate) fn in_current_dir<S: System, D, T>(
    sys: &S,
    mut open: impl FnMut() -> Result<D, Error>,
    dir: impl Fn(&D) -> &S::Dir,
    mut attempt: impl FnMut(&D) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut left = MAX_RESTAGES;
    loop {
        let d = open()?;
        match attempt(&d) {
            Err(e) if left > 0 && not_found(&e) && sys.unlinked(dir(&d)) => {
                left -= 1;
            }
            other => return other,
        }
    }
}

/// The evidence a wait for a live holder watches, besides the lock directory itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evidence {
    /// The holder's beacon `flock`.
    Beacon,
    /// The holder's pid (a pid-judged holder: no beacon).
    Pid(u32),
    /// Nothing but the directory (an owner that cannot be judged from here, or a dead one
    /// waited out for the grace period).
    Nothing,
}

/// One acquisition's contest for `NAME`: its deadline, what it has seen, and how it gives up.
struct Contest<'r, 'a, S: System> {
    sp: &'r Space<'a, S>,
    req: &'r Request<'r>,
    deadline: Option<Duration>,
    fail_fast: bool,
    /// Publishes lost so far.
    rounds: u32,
    /// Rounds in a row that did not wait.
    idle: u32,
    last_owner: Option<Owner>,
    told: bool,
    backoff: Backoff,
    ages: Ages,
}

impl<'r, 'a, S: System> Contest<'r, 'a, S> {
    fn new(sp: &'r Space<'a, S>, req: &'r Request<'r>) -> Self {
        let wait = req.options.wait;
        Contest {
            sp,
            req,
            deadline: match wait {
                Wait::Immediately => Some(req.started),
                Wait::Forever => None,
                Wait::Timeout(d) => Some(req.started.saturating_add(d)),
            },
            fail_fast: wait == Wait::Immediately,
            rounds: 0,
            idle: 0,
            last_owner: None,
            told: false,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(100)),
            ages: Ages::default(),
        }
    }

    fn cancel(&self) -> Option<&'r crate::sys::CancelHandle> {
        self.req.options.cancel.as_ref().map(|c| &*c.0)
    }

    fn cancelled(&self) -> Error {
        Error::Cancelled {
            lock: self.sp.entry(self.req.name),
            resource: self.req.resource.to_owned(),
        }
    }

    fn left(&self) -> Option<Duration> {
        let now = self.sp.sys.monotonic();
        self.deadline.map(|d| d.saturating_sub(now))
    }

    fn expired(&self) -> bool {
        self.left() == Some(Duration::ZERO)
    }

    fn timeout(&self) -> Error {
        Error::Timeout {
            lock: self.sp.entry(self.req.name),
            resource: self.req.resource.to_owned(),
            waited: self.sp.sys.monotonic().saturating_sub(self.req.started),
            owner: self.last_owner.clone().map(Box::new),
        }
    }

    /// The error for a deadline that has passed: `contended` when failing fast, else a
    /// timeout.
    fn give_up(&self, contended: impl FnOnce() -> Error) -> Error {
        if self.fail_fast {
            contended()
        } else {
            self.timeout()
        }
    }

    /// Tells the caller's `on_wait` (once) who it waits for.
    fn tell(&mut self, owner: &Owner, judgement: &Judgement, since: std::time::SystemTime) {
        if let (false, Some(f)) = (self.told, &self.req.options.on_wait) {
            self.told = true;
            f(&crate::options::Waiting {
                lock: self.sp.entry(self.req.name),
                owner: owner.clone(),
                judgement: judgement.clone(),
                since,
            });
        }
    }

    /// A round that did not wait (the holder vanished, a reclaim found the lock changed): a
    /// fail-fast acquisition gives up after a bound, and a run of them pauses with backoff.
    fn idle_round(&mut self) -> Result<(), Error> {
        self.idle += 1;
        if self.fail_fast && self.rounds > MAX_FAIL_FAST_ROUNDS {
            return Err(self.timeout());
        }
        if self.idle >= SPIN_ROUNDS {
            self.pause()?;
        }
        Ok(())
    }

    /// Sleeps one backoff pause (never past the deadline), unless cancelled.
    fn pause(&mut self) -> Result<(), Error> {
        let pause = self.backoff.next_pause();
        let pause = match self.left() {
            Some(l) if !self.fail_fast => l.min(pause),
            _ => pause,
        };
        let wake = self
            .sp
            .sys
            .sleep(None, Some(pause), self.cancel())
            .map_err(|e| self.sp.io("wait for the lock", self.req.name, e))?;
        if wake == Wake::Cancelled {
            return Err(self.cancelled());
        }
        Ok(())
    }

    /// Waits until the lock may have changed (see [`wait_for_change`]), at most `also`.
    fn wait(
        &mut self,
        dir: &S::Dir,
        id: FileId,
        evidence: Evidence,
        also: Option<Duration>,
    ) -> Result<Option<S::Watch>, Error> {
        self.idle = 0;
        let until = match (also, self.left()) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        wait_for_change(self.sp, self.req, dir, id, evidence, until)
    }

    /// A live (or unknown) holder: give up at the deadline, else wait for it to change.
    fn wait_for_holder(
        &mut self,
        c: &mut Staged<S>,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<(), Error> {
        if self.expired() {
            return Err(self.give_up(|| Error::Locked {
                lock: self.sp.entry(self.req.name),
                resource: self.req.resource.to_owned(),
                owner: Box::new(owner.clone()),
                judgement: judgement.clone(),
                since: meta.mtime,
            }));
        }
        self.tell(&owner, &judgement, meta.mtime);
        // Re-check between wake-ups only the fact the judgement rests on: the beacon of a live
        // beacon holder, the pid (with a pidfd) of a live pid-judged one. An unknown owner
        // (another host or namespace) is waited for by its directory alone: its beacon and pid
        // mean nothing here, and re-probing them would spin.
        let evidence = match judgement.liveness {
            Liveness::Live if owner.has_beacon() => Evidence::Beacon,
            Liveness::Live => Evidence::Pid(owner.pid),
            _ => Evidence::Nothing,
        };
        c.last_watch = self.wait(&dir, meta.id, evidence, None)?;
        c.last_seen = Some(dir);
        Ok(())
    }

    /// A damaged lock that a process holds ([`Seen::InUse`]): fail fast with what is wrong,
    /// or wait for its beacon to be let go, as for a live holder.
    fn wait_while_in_use(
        &mut self,
        c: &mut Staged<S>,
        dir: S::Dir,
        meta: Meta,
        problem: String,
    ) -> Result<(), Error> {
        if self.expired() {
            return Err(self.give_up(|| Error::Malformed {
                lock: self.sp.entry(self.req.name),
                resource: self.req.resource.to_owned(),
                problem: format!("{problem}, and a process holds a lock on it"),
            }));
        }
        c.last_watch = self.wait(&dir, meta.id, Evidence::Beacon, None)?;
        c.last_seen = Some(dir);
        Ok(())
    }

    /// A dead holder: wait out the grace period (evidence only), then reclaim under the guard.
    /// `Some(owner)` when this contender reclaimed it.
    fn reclaim_dead(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<Option<Owner>, Error> {
        let grace = self.req.options.grace;
        let (age, clock_ahead) = self.ages.age(self.sp.sys, meta.id, meta.mtime);
        if judgement.liveness != Liveness::DeadByProof && age < grace {
            let remaining = grace - age;
            if self.expired() {
                return Err(self.give_up(|| Error::Stale {
                    lock: self.sp.entry(self.req.name),
                    resource: self.req.resource.to_owned(),
                    owner: Box::new(owner.clone()),
                    judgement: judgement.clone(),
                    remaining,
                    clock_ahead,
                }));
            }
            self.tell(&owner, &judgement, meta.mtime);
            self.wait(&dir, meta.id, Evidence::Nothing, Some(remaining))?;
            return Ok(None);
        }
        drop(dir);
        let name = self.req.name;
        match reclaim(
            self.sp,
            name,
            Expect::Token(&owner.token),
            grace,
            &mut self.ages,
        )? {
            Reclaim::Done => Ok(Some(owner)),
            Reclaim::Changed => self.idle_round().map(|()| None),
            Reclaim::Busy { remaining } => {
                if self.expired() {
                    return Err(self.give_up(|| Error::Guarded {
                        guard: self.sp.entry(&guard_name(name)),
                        lock: self.sp.entry(name),
                        resource: self.req.resource.to_owned(),
                        remaining,
                    }));
                }
                self.pause().map(|()| None)
            }
        }
    }
}

/// The contest proper: publish, and on losing, judge the holder and wait for it, reclaim from
/// it, or give up. `Ok(Some(owner))` when the lock was reclaimed from a dead owner.
fn contend<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    c: &mut Staged<S>,
) -> Result<Option<Owner>, Error> {
    let mut k = Contest::new(sp, req);
    let mut reclaimed_from = None;
    loop {
        if k.cancel().is_some_and(|c| c.is_fired()) {
            return Err(k.cancelled());
        }
        if sp.sys.monotonic().saturating_sub(c.staged_at) > REFRESH_AFTER {
            match refresh(sp, c, me, req.options) {
                Ok(()) => {}
                Err(e) if not_found(&e) && !sp.removed() => restage(sp, req, me, c)?,
                Err(e) => return Err(e),
            }
        }
        match publish(sp, c, req.name)? {
            Publish::Won => return Ok(reclaimed_from),
            Publish::Vanished => {
                restage(sp, req, me, c)?;
                continue;
            }
            Publish::Contended => k.rounds += 1,
        }
        let (dir, meta, owner) = match sp.observe(req.name)? {
            Seen::Gone => {
                k.idle_round()?;
                continue;
            }
            Seen::Malformed(problem) => {
                return Err(Error::Malformed {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                    problem,
                })
            }
            Seen::InUse { dir, meta, problem } => {
                k.wait_while_in_use(c, dir, meta, problem)?;
                continue;
            }
            Seen::Owned { dir, meta, owner } => (dir, meta, owner),
        };
        let judgement = sp.judge(&dir, &owner, me);
        k.last_owner = Some(owner.clone());
        if judgement.liveness.is_dead() {
            if let Some(dead) = k.reclaim_dead(dir, meta, owner, judgement)? {
                reclaimed_from = Some(dead);
            }
        } else {
            k.wait_for_holder(c, dir, meta, owner, judgement)?;
        }
    }
}

/// Sleeps until the lock at `NAME` may have changed: released (moved away), its beacon dropped,
/// its (beacon-less) holder exited, `until` passed, or the wait cancelled. Wake-ups that
/// changed nothing are filtered here, with no new opens of the lock directory (an open and
/// close by us would wake every other waiter). Returns the watch it used, for the caller to
/// drop once its publish is done.
fn wait_for_change<S: System>(
    sp: &Space<S>,
    req: &Request,
    dir: &S::Dir,
    id: FileId,
    evidence: Evidence,
    until: Option<Duration>,
) -> Result<Option<S::Watch>, Error> {
    let cancel = req.options.cancel.as_ref().map(|c| &*c.0);
    if evidence == Evidence::Beacon && cancel.is_none() && until.is_none() {
        // An unbounded wait on a beacon holder: sleep in the kernel's own lock handoff. The
        // holder's release unlocks the beacon explicitly (for every copy a fork made of it),
        // and its death closes it, so either wakes us.
        match sp.sys.wait_shared(dir) {
            Ok(()) => return Ok(None),
            Err(e) if is(&e, Errno::LockUnsupported) => {}
            Err(e) => return Err(sp.io("wait for the lock", req.name, e)),
        }
    }
    let pid = match evidence {
        Evidence::Pid(p) => Some(p),
        _ => None,
    };
    let watch = sp.sys.watch(dir, pid).unwrap_or(None);
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(250));
    let start = sp.sys.monotonic();
    let mut spurious = 0u32;
    loop {
        // Look once more now that the watch is armed: a change before it would be missed.
        let changed = match sp.sys.meta_at(sp.dir, req.name) {
            Ok(m) => m.id != id,
            Err(_) => true,
        } || (evidence == Evidence::Beacon
            && sp.sys.try_lock(dir, false).unwrap_or(false))
            || pid.is_some_and(|p| sp.sys.process_alive(p) == Some(false));
        if changed {
            return Ok(watch);
        }
        let elapsed = sp.sys.monotonic().saturating_sub(start);
        let mut timeout = until.map(|t| t.saturating_sub(elapsed));
        if timeout == Some(Duration::ZERO) {
            return Ok(watch); // the caller re-judges and reports the deadline
        }
        // Without a watch, back off. After wake-ups that changed nothing (a reader opening
        // the lock directory, a pidfd of a zombie that stays readable), pause a little before
        // watching again, so that a storm of them cannot make a waiter spin; what happens
        // meanwhile is queued and wakes the next sleep at once.
        if watch.is_none() {
            let pause = backoff.next_pause();
            timeout = Some(timeout.map_or(pause, |t| t.min(pause)));
        } else if spurious >= 3 {
            let pause = backoff.next_pause();
            let pause = timeout.map_or(pause, |t| t.min(pause));
            if sp
                .sys
                .sleep(None, Some(pause), cancel)
                .map_err(|e| sp.io("wait for the lock", req.name, e))?
                == Wake::Cancelled
            {
                return Err(Error::Cancelled {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                });
            }
            spurious = 0;
            continue;
        }
        let wake = sp
            .sys
            .sleep(watch.as_ref(), timeout, cancel)
            .map_err(|e| sp.io("wait for the lock", req.name, e))?;
        match wake {
            Wake::Cancelled => {
                return Err(Error::Cancelled {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                })
            }
            Wake::TimedOut if watch.is_some() => return Ok(watch),
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
    let token = held.owner.token.clone();
    let result = retire_held(sp, held, resource);
    // Whatever happened, the token is no longer ours to hold: a record still carrying it (a
    // retire that failed) names a dead owner from now on.
    sp.sys.own_token(&token, false);
    result
}

/// Release proper: check, retire, check the tombstone, wake waiters, reap.
fn retire_held<S: System>(sp: &Space<S>, held: Held<S>, resource: &str) -> Result<(), Error> {
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
    let tomb = tombstone_for(name, &held.owner.token, || sp.sys.token());
    match sp.sys.rename_noreplace(sp.dir, name, &tomb) {
        Ok(_) => {}
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
        Err(e) if e.kind() == io::ErrorKind::NotFound && sp.sys.unlinked(&held.beacon) => {}
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

/// A candidate without a record may be one being made right now (between its `mkdir` and its
/// beacon `flock`, microseconds): a sweep leaves it alone for at least this long, whatever its
/// grace period, so that even `sweep --grace 0` never removes a candidate under its creator.
pub(crate) const STAGING_FLOOR: Duration = Duration::from_secs(10);

/// Sweep: reap every tombstone, and retire-then-reap every candidate whose creator is dead.
/// Locks and guards are never touched.
pub(crate) fn sweep<S: System>(sp: &Space<S>, grace: Duration) -> Result<Sweep, Error> {
    let me = &sp.sys.identity();
    let entries = sp
        .sys
        .list(sp.dir)
        .map_err(|e| Error::io("list the lock directory", sp.path, e))?;
    let mut report = Sweep::default();
    for entry in entries {
        let outcome = match classify(&entry) {
            Entry::Tombstone { .. } => {
                if remove_tree(sp.sys, sp.dir, &entry) {
                    Swept::Removed
                } else {
                    Swept::Kept("it could not be removed".into())
                }
            }
            Entry::Candidate { lock, token } => {
                sweep_candidate(sp, &entry, &lock, &token, grace, me)
            }
            _ => Swept::Untouched,
        };
        match outcome {
            Swept::Removed => report.removed.push(entry),
            Swept::Kept(why) => report.kept.push((entry, why)),
            Swept::Untouched => {}
        }
    }
    Ok(report)
}

/// What a sweep did with one entry.
enum Swept {
    Removed,
    Kept(String),
    Untouched,
}

/// A candidate is removed only when its creator is dead: its beacon is free and it holds a
/// complete record (written only under the beacon) and is older than `grace`; or, without a
/// record, it is older than both `grace` and [`STAGING_FLOOR`]. Where there is no `flock`, its
/// record judges its creator like any owner. It is retired to a tombstone first, so that its
/// creator's publish and the sweep cannot both win.
fn sweep_candidate<S: System>(
    sp: &Space<S>,
    entry: &str,
    lock: &str,
    token: &str,
    grace: Duration,
    me: &Identity,
) -> Swept {
    let Ok(meta) = sp.sys.meta_at(sp.dir, entry) else {
        return Swept::Untouched; // published or removed meanwhile
    };
    let age = sp
        .sys
        .now()
        .duration_since(meta.mtime)
        .unwrap_or(Duration::ZERO);
    if age < grace {
        return Swept::Kept("it is younger than the grace period (it may be being staged)".into());
    }
    let Ok(dir) = sp.sys.open_dir_at(sp.dir, entry) else {
        return Swept::Kept("it cannot be opened".into());
    };
    let record = sp.read_owner(&dir).ok();
    match creator(sp, &dir, record.as_ref(), me) {
        Creator::Gone => {}
        Creator::Alive(why) | Creator::Untold(why) => return Swept::Kept(why),
    }
    if record.is_none() && age < STAGING_FLOOR {
        return Swept::Kept("it has no record yet (it may be being staged)".into());
    }
    let tomb = tombstone_for(lock, token, || sp.sys.token());
    match sp.sys.rename_noreplace(sp.dir, entry, &tomb) {
        Ok(_) => {
            drop(dir);
            if remove_tree(sp.sys, sp.dir, &tomb) {
                Swept::Removed
            } else {
                Swept::Kept(format!("it was retired to {tomb} but could not be removed"))
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Swept::Untouched,
        Err(e) => Swept::Kept(format!("it could not be retired: {e}")),
    }
}

/// What became of a candidate's creator.
pub(crate) enum Creator {
    /// It still works on it (the reason says how we know).
    Alive(String),
    /// It is gone.
    Gone,
    /// It cannot be told (why).
    Untold(String),
}

/// Judges the creator of the open candidate `dir` whose record (if it has one yet) is
/// `record`. A record that does not claim a beacon (the reference implementation's, which
/// never takes one, or ours on a filesystem without `flock`) is judged by its pid like any
/// owner; otherwise the candidate's beacon decides: held, its creator is alive; free, gone
/// (a candidate is briefly beacon-less while it is made: the caller minds its age).
pub(crate) fn creator<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    record: Option<&Owner>,
    me: &Identity,
) -> Creator {
    let by_record = |owner: &Owner| {
        let judgement = sp.judge(dir, owner, me);
        if judgement.liveness.is_dead() {
            Creator::Gone
        } else {
            Creator::Alive(format!("its creator is {judgement}"))
        }
    };
    match record {
        Some(owner) if !owner.has_beacon() => return by_record(owner),
        _ => {}
    }
    match sp.sys.try_lock(dir, false) {
        Ok(true) => Creator::Gone,
        Ok(false) => {
            Creator::Alive("its creator is alive (it holds the candidate's beacon)".into())
        }
        // No flock here after all: judge by the record, if there is one yet.
        Err(e) if is(&e, Errno::LockUnsupported) => record.map_or(Creator::Gone, by_record),
        Err(_) => Creator::Untold("its creator cannot be probed".into()),
    }
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
            Seen::InUse { problem, .. } | Seen::Malformed(problem) => {
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
                            "{problem}; a process holds a lock on it, so it is in use and a forced unlock refuses it"
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
        match reclaim(sp, name, expect, grace, &mut Ages::default())? {
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
