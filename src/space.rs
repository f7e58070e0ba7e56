//! The lock directory's primitives, below every operation: what is at a name ([`Space::observe`]),
//! the owner record ([`Space::read_owner`]) and its judgement ([`Space::judge`]), a private
//! candidate directory made whole ([`make_candidate`]), the judgement of a candidate's creator
//! ([`creator`]) and the removal of a retired tree ([`remove_tree`]). Everything goes through the
//! [`System`] seam, relative to the lock directory's handle.

use crate::error::Error;
use crate::liveness::{judge, Judgement, Probe};
use crate::options::{Backoff, Persist};
use crate::owner::Owner;
use crate::paths::{OWNER_FILE, OWNER_LIMIT};
use crate::sys::{gone, is, CancelHandle, Errno, Identity, Kind, Meta, System, Wake};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A lock directory `D`: its handle, its path (for messages) and the user it belongs to.
pub(crate) struct Space<'a, S: System> {
    pub sys: &'a S,
    pub dir: &'a S::Dir,
    pub path: &'a Path,
    pub uid: u32,
    /// The group that shares the lock directory (mode 2770, setgid, this process a member):
    /// its members' locks are trusted as ours, and what we make is theirs to read, judge and
    /// take over. `None` for a directory private to this user.
    pub shared: Option<u32>,
}

/// What is at `NAME` right now (short-lived: its size does not matter).
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

/// How many times in a row [`Space::observe`] looks at a NAME whose directory is replaced
/// under it before it calls the lock released.
pub(crate) const LOOKS: u32 = 3;

/// Why an owner record could not be used.
pub(crate) enum Unreadable {
    /// It was read (or looked at) and is not a valid, private record: never trusted, never
    /// removed automatically.
    Malformed(String),
    /// It could not be read (out of descriptors, EIO...): an I/O error, never a judgement.
    Io(io::Error),
}

/// How something dirlock would trust breaks the privacy rule ([`breach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Breach {
    /// Another user owns it.
    Owner,
    /// `anyone` or `its group` ([`writers`]) may write it.
    Written(&'static str),
}

/// Who besides its owner may write something with permission bits `mode`: `anyone`, `its
/// group`, or (`None`) no one.
pub(crate) fn writers(mode: u32) -> Option<&'static str> {
    if mode & 0o002 != 0 {
        Some("anyone")
    } else if mode & 0o020 != 0 {
        Some("its group")
    } else {
        None
    }
}

/// The privacy rule, stated once: what dirlock trusts (the lock directory, each lock, guard
/// and owner record in it) is **owned by this user (`uid`) and written by no one else**.
/// Others may read it: a record holds nothing secret, and another operating system's program
/// sharing the directory (a Windows one under Wine) makes its locks readable by all; only
/// writing lets others replace or remove a lock. In a lock directory a group shares
/// (`shared`; see [`Space::shared`]), its group may write too and what a member owns is as
/// trusted as ours, but what anyone may write never is. `None` when it keeps the rule.
pub(crate) fn breach(meta: &Meta, uid: u32, shared: bool) -> Option<Breach> {
    if shared {
        return (meta.mode & 0o002 != 0).then_some(Breach::Written("anyone"));
    }
    if meta.uid != uid {
        return Some(Breach::Owner);
    }
    writers(meta.mode).map(Breach::Written)
}

impl<S: System> Space<'_, S> {
    /// The mode of a directory we make: private, or, in a group's directory, the group's too
    /// (setgid kept, so that what is made inside is the group's).
    pub fn dir_mode(&self) -> u32 {
        if self.shared.is_some() {
            0o2770
        } else {
            0o700
        }
    }

    /// The mode to give a file we make: exactly 0600 where the umask took owner bits away
    /// (`fix`), else as made; in a group's directory, always readable by the group.
    pub fn file_mode(&self, fix: bool) -> Option<u32> {
        if self.shared.is_some() {
            Some(0o640)
        } else {
            fix.then_some(0o600)
        }
    }

    /// Directory `dir` (at `path`) as a space of its own, for the entries inside it (a shared
    /// lock's readers, a queue's waiters).
    pub fn within<'b>(&'b self, dir: &'b S::Dir, path: &'b Path) -> Space<'b, S> {
        Space { dir, path, ..*self }
    }

    pub fn entry(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn io(&self, op: &'static str, name: &str, e: io::Error) -> Error {
        Error::io(op, self.entry(name), e)
    }

    /// Checks that an entry can be trusted by the privacy rule ([`breach`]); `what` names it in
    /// the problem. What this crate makes is private (0700, 0600) all the same.
    pub fn private_problem(&self, meta: &Meta, what: &str) -> Option<String> {
        Some(match breach(meta, self.uid, self.shared.is_some())? {
            Breach::Owner => format!(
                "{what} is owned by {}, not {}",
                crate::sys::owner_words(meta.uid),
                crate::sys::owner_words(self.uid)
            ),
            Breach::Written(_) => format!("{what} has {}", crate::sys::mode_words(meta.mode)),
        })
    }

    /// Whether the lock directory itself was removed (a temp cleaner, `rm -rf`): nothing can
    /// be staged in it any more, and the caller opens (re-creates) it again.
    pub fn removed(&self) -> bool {
        self.sys.unlinked(self.dir)
    }

    /// Reads and checks `NAME` through one directory handle, so that the record, the mtime and
    /// the beacon all belong to the same directory. `Gone` means NAME was found missing. A
    /// directory that vanishes while it is looked at sends the look back to NAME, which may
    /// name the next lock by then; after [`LOOKS`] such looks in a row (a lock released and
    /// taken again each time), `Gone` (released, each time).
    pub fn observe(&self, name: &str) -> Result<Seen<S>, Error> {
        for _ in 0..LOOKS {
            if let Some(seen) = self.look(name)? {
                return Ok(seen);
            }
        }
        Ok(Seen::Gone)
    }

    /// One look at NAME for [`observe`](Self::observe): `None` when what it opened there was
    /// replaced or removed before it could be judged.
    fn look(&self, name: &str) -> Result<Option<Seen<S>>, Error> {
        let dir = match self.sys.open_dir_at(self.dir, name) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(Seen::Gone)),
            Err(e) if is_not_dir(&e) => {
                return match self.sys.meta_at(self.dir, name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(Seen::Gone)),
                    Ok(m) if m.kind == Kind::Dir => Ok(None), // replaced meanwhile
                    Ok(m) => Ok(Some(Seen::Malformed(format!(
                        "the lock path is a {}, not a directory",
                        kind_name(m.kind)
                    )))),
                    Err(e) => Err(self.io("inspect the lock", name, e)),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                // Not ours to open: someone else's lock (or a hostile one) in our directory.
                return match self.sys.meta_at(self.dir, name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(Seen::Gone)),
                    Ok(m) => Ok(Some(Seen::Malformed(
                        self.private_problem(&m, "the lock directory")
                            .unwrap_or_else(|| "the lock directory cannot be opened".into()),
                    ))),
                    Err(_) => Err(self.io("open the lock", name, e)),
                };
            }
            Err(e) => return Err(self.io("open the lock", name, e)),
        };
        let meta = match self.sys.meta(&dir) {
            Ok(m) => m,
            // Some FUSE filesystems answer fstat of a moved directory with ENOENT, NFS that of
            // a removed one with ESTALE: NAME may hold the next lock by now.
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(self.io("inspect the lock", name, e)),
        };
        let problem = match self.private_problem(&meta, "the lock directory") {
            Some(p) => Unreadable::Malformed(p),
            None => match self.read_owner(&dir) {
                Ok(owner) => return Ok(Some(Seen::Owned { dir, meta, owner })),
                Err(u) => u,
            },
        };
        self.unreadable(name, dir, meta, problem)
    }

    /// The lock at `name`, whose directory `dir` (`meta`, when opened) has a record that
    /// cannot be read (`problem`).
    fn unreadable(
        &self,
        name: &str,
        dir: S::Dir,
        meta: Meta,
        problem: Unreadable,
    ) -> Result<Option<Seen<S>>, Error> {
        // A record we cannot read counts against the lock only if NAME still names the
        // directory we looked into; otherwise the holder released (or someone reclaimed)
        // meanwhile. The same identity proves that only while our directory still exists:
        // where an open handle does not keep its inode number (bindfs and other FUSE
        // filesystems passing the backing numbers through, NFS), a directory removed since we
        // opened it frees the number, and the next one made (the next lock at NAME) can have
        // it. Linked after the look at NAME, it was linked at that look, and the number was
        // its own.
        match self.sys.meta_at(self.dir, name) {
            Ok(now) if now.id == meta.id => match self.sys.meta(&dir) {
                Ok(m) if m.nlink == 0 => Ok(None),
                Err(e) if gone(&e) => Ok(None),
                Err(e) => Err(self.io("inspect the lock", name, e)),
                Ok(_) => match problem {
                    Unreadable::Malformed(problem)
                        if self.sys.try_lock(&dir, false).ok() == Some(false) =>
                    {
                        Ok(Some(Seen::InUse { dir, meta, problem }))
                    }
                    Unreadable::Malformed(p) => Ok(Some(Seen::Malformed(p))),
                    Unreadable::Io(e) => Err(self.io("read the owner record of", name, e)),
                },
            },
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(Seen::Gone)),
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
        Owner::parse(&bytes).map_err(|e| Unreadable::Malformed(e.to_string()))
    }

    /// Judges the owner of an observed lock.
    pub fn judge(&self, dir: &S::Dir, owner: &Owner, me: &Identity) -> Judgement {
        let mut probe = LiveProbe {
            sys: self.sys,
            dir,
            readers: owner.is_shared(),
        };
        judge(owner, me, &mut probe)
    }
}

/// The real facts behind a judgement.
struct LiveProbe<'a, S: System> {
    sys: &'a S,
    dir: &'a S::Dir,
    /// A shared lock's: its beacon is its readers' shared `flock`s.
    readers: bool,
}

/// Whether nobody holds the beacon of `dir`. An exclusive holder's is probed with a shared
/// `flock`, which is kept (it conflicts only with an exclusive one, which nobody takes on a
/// beacon let go); a shared lock's (`readers`) with an exclusive one, let go at once, since it
/// would keep readers out.
pub(crate) fn beacon_free<S: System>(sys: &S, dir: &S::Dir, readers: bool) -> io::Result<bool> {
    if !readers {
        return sys.try_lock(dir, false);
    }
    let free = sys.try_lock(dir, true)?;
    if free {
        sys.unlock(dir)?;
    }
    Ok(free)
}

impl<S: System> Probe for LiveProbe<'_, S> {
    fn beacon_free(&mut self) -> Option<bool> {
        beacon_free(self.sys, self.dir, self.readers).ok()
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

pub(crate) fn is_not_dir(e: &io::Error) -> bool {
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
pub(crate) fn not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
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
/// gives it mode exactly 0700 and takes its `flock`: exclusive, or, for a shared lock's first
/// reader, shared (`exclusive: false`). On failure it is removed.
pub(crate) fn make_candidate<S: System>(
    sp: &Space<S>,
    name: &str,
    exclusive: bool,
) -> Result<Fresh<S::Dir>, Error> {
    sp.sys.mkdir_at(sp.dir, name).map_err(|e| {
        // The first thing an acquisition makes: a read-only filesystem or a directory we may
        // not write fails here, and the user reads of the lock they asked for.
        let lock = match crate::paths::classify(name) {
            crate::paths::Entry::Candidate { lock, .. } => lock,
            _ => name.to_owned(),
        };
        sp.io("make the lock", &lock, e)
    })?;
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
        // the record's 0600 does too (0700 & ~u == 0700 implies 0600 & ~u == 0600). In a
        // group's directory the group gets in, before the record is written.
        let umask_stripped = meta.mode & 0o777 != 0o700;
        if umask_stripped || sp.shared.is_some() {
            sp.sys
                .set_mode(&dir, sp.dir_mode())
                .map_err(|e| sp.io("set the mode of the candidate directory", name, e))?;
        }
        let flocked = lock_fresh(sp, &dir, name, exclusive)?;
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

/// Takes the `flock` of a directory we just made. Nobody contends for it, but an observer
/// (status, sweep) may be peeking at it for an instant: retried. `Ok(false)` where the
/// filesystem has no `flock` (the lock then works, judged by pid).
pub(crate) fn lock_fresh<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    exclusive: bool,
) -> Result<bool, Error> {
    match lock_past_peekers(sp, dir, name, exclusive, "lock the candidate directory")? {
        Some(true) => Ok(true),
        None => Ok(false),
        Some(false) => Err(sp.io(
            "lock the fresh candidate directory",
            name,
            io::Error::new(
                io::ErrorKind::WouldBlock,
                "another process keeps a lock on it",
            ),
        )),
    }
}

/// Takes the `flock` of `dir` (entry `name`), exclusive or shared, retrying (with backoff)
/// past observers that hold a conflicting one for an instant (status and sweep peek at an
/// exclusive lock with a shared one, at a shared lock with an exclusive one): `Some(true)`
/// taken, `Some(false)` still held by someone, `None` where the filesystem has no `flock`.
/// `op` names the taking in an error.
pub(crate) fn lock_past_peekers<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    exclusive: bool,
    op: &'static str,
) -> Result<Option<bool>, Error> {
    let how = Persist {
        first: Duration::from_micros(100),
        most: Duration::from_millis(10),
        tries: 20,
        patience: None,
    };
    lock_persisting(sp, dir, name, exclusive, op, &how, None)
}

/// As [`lock_past_peekers`], retrying as `how` says, and no more once `cancel` fires.
pub(crate) fn lock_persisting<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    name: &str,
    exclusive: bool,
    op: &'static str,
    how: &Persist,
    cancel: Option<&CancelHandle>,
) -> Result<Option<bool>, Error> {
    let since = how.patience.map(|p| (sp.sys.monotonic(), p));
    // What is left of the patience (no pause is longer).
    let left = || since.map(|(s, p)| p.saturating_sub(sp.sys.monotonic().saturating_sub(s)));
    let mut pause = Backoff::new(how.first, how.most);
    for _ in 0..how.tries {
        match sp.sys.try_lock(dir, exclusive) {
            Ok(true) => return Ok(Some(true)),
            Ok(false) => {
                let next = match (pause.next_pause(), left()) {
                    (_, Some(Duration::ZERO)) => break,
                    (next, left) => left.map_or(next, |l| l.min(next)),
                };
                if let Ok(Wake::Cancelled) = sp.sys.sleep(None, Some(next), cancel) {
                    break;
                }
            }
            Err(e) if is(&e, Errno::LockUnsupported) => return Ok(None),
            Err(e) => return Err(sp.io(op, name, e)),
        }
    }
    Ok(Some(false))
}

/// Removes an entry of ours, `name` in `at`, open as `dir` (a reader's, a writer's, a queued
/// waiter's): its record through the handle, then the handle closed (letting its `flock` go;
/// an open directory cannot be removed on Windows), then the directory. Best effort.
pub(crate) fn remove_entry_dir<S: System>(sys: &S, at: &S::Dir, name: &str, dir: S::Dir) {
    let _ = sys.remove_file_at(&dir, OWNER_FILE);
    drop(dir);
    remove_tree(sys, at, name);
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
    // Again when something inside was being removed by another at the same time (a shared
    // lock's writer taking its entry out of the retired lock): it is gone by the next pass.
    for _ in 0..3 {
        match go(sys, at, name, 0) {
            Ok(()) => return true,
            // Someone else reaped it first: tombstones are anyone's to delete.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
            Err(e) if is(&e, Errno::NotEmpty) || is(&e, Errno::Exists) => {}
            Err(_) => return false,
        }
    }
    false
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
            Creator::Alive(format!(
                "the run that made it may still be running ({})",
                judgement.reason
            ))
        }
    };
    match record {
        Some(owner) if !owner.has_beacon() => return by_record(owner),
        _ => {}
    }
    match beacon_free(sp.sys, dir, record.is_some_and(Owner::is_shared)) {
        Ok(true) => Creator::Gone,
        Ok(false) => Creator::Alive("the run that made it is still running".into()),
        // No flock here after all: judge by the record, if there is one yet.
        Err(e) if is(&e, Errno::LockUnsupported) => record.map_or(Creator::Gone, by_record),
        Err(_) => Creator::Untold("whether the run that made it still runs cannot be told".into()),
    }
}
