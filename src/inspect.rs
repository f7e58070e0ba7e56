//! Looking at a lock without changing it: its state, its owner, its guard and its leftovers.

use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::options::{grace_left, since, Ages};
use crate::owner::Owner;
use crate::paths::{classify, guard_name, Entry, GUARD_MARKER};
use crate::reclaim::{open_guard, stranger, Guard};
use crate::space::{creator, Creator, Seen, Space};
use crate::sys::{gone, Identity, Meta, System};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

mod parties;
use parties::{parties, queued};

/// What a lock looks like right now (see [`crate::LockRequest::status`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Status {
    /// The lock's path.
    pub path: PathBuf,
    /// The lock's name in its directory.
    pub name: String,
    /// Its state.
    pub state: State,
    /// The owner record, when there is a readable one.
    pub owner: Option<Owner>,
    /// Why the owner was judged as it was (or what is malformed).
    pub reason: Option<String>,
    /// The recorded owner has exited and a process it started holds the lock (see
    /// [`crate::Judgement::owner_exited`]).
    pub owner_exited: bool,
    /// When the lock was taken (its directory's modification time). For a shared lock, when
    /// its record was last written (its readers rewrite it every 15 s or so): when each reader
    /// came in is its own [`Party::since`].
    pub since: Option<SystemTime>,
    /// The reclaim guard.
    pub guard: GuardState,
    /// Candidates staged for this lock (being acquired, or left by a crash).
    pub candidates: Vec<Leftover>,
    /// Tombstones of this lock (released or reclaimed, not yet reaped).
    pub tombstones: Vec<Leftover>,
    /// Whether the lock is shared (a read lock: its record says `"shared": true`). Its
    /// readers are then [`Status::readers`], and [`Status::owner`] is the record of one of
    /// them (the one named for programs that know only exclusive locks). [`State::Held`]
    /// means that readers hold it: another reader could join it (unless a writer waits), but
    /// an exclusive acquisition could not ([`Status::takeable`]).
    pub shared: bool,
    /// A shared lock's readers: those that read it now (they hold their entry's `flock`), and
    /// those that cannot be checked from here ([`Liveness::Unknown`]), oldest first. A reader
    /// that died without leaving is never here, but in [`Status::departed`]. Empty for an
    /// exclusive lock.
    pub readers: Vec<Party>,
    /// Writers waiting in a shared lock for its readers to leave (live, or that cannot be
    /// checked from here), oldest first: new readers wait for them.
    pub writers: Vec<Party>,
    /// The processes waiting their turn in the lock's queue (live, or that cannot be checked
    /// from here), first come first: the order in which they will be served. An entry there
    /// that cannot be read is listed too, with no owner, its path in [`Party::reason`]
    /// (waiters pass over one they may not open).
    pub queue: Vec<Party>,
    /// A shared lock's readers and waiting writers (and the queue's waiters) that died without
    /// leaving (their entry's `flock` is free, which the kernel proves): they no longer count,
    /// and what they left inside the lock is removed with it.
    pub departed: Vec<Party>,
    /// For a damaged lock directory, an entry in it that a lock never holds: it may be no lock
    /// at all (a directory of one's own at a mistyped path), and a forced
    /// [`unlock`](crate::LockRequest::unlock) refuses it.
    pub stranger: Option<String>,
    /// The grace period it was judged with.
    grace: Duration,
}

impl Status {
    /// Whether an acquisition would take the lock now, without waiting: it is free, or its
    /// owner is gone and its grace period over (at once when the kernel proves the owner
    /// gone), and no other process is reclaiming it (a reclaim guard left by a crash of this
    /// crate's is reused at once; another implementation's is respected for the grace
    /// period; an unsafe one is refused). An acquisition judges by the same rules, so the two
    /// agree on one look at an unchanging lock. (A look at the guard is a shared lock on it,
    /// which another look does not stand in the way of: a program that keeps a shared lock on
    /// a guard, which no implementation does, is seen only by the acquisition.)
    pub fn takeable(&self) -> bool {
        let reclaimable = match &self.state {
            State::Free => return true,
            State::DeadByProof => true,
            State::DeadByEvidence { remaining } => remaining.is_zero(),
            State::Held | State::Unknown | State::Malformed { .. } => false,
        };
        reclaimable
            && match &self.guard {
                GuardState::Absent => true,
                GuardState::Busy | GuardState::Unsafe { .. } => false,
                GuardState::Leftover { marked, age } => *marked || *age >= self.grace,
            }
    }

    /// A lock with nothing at or beside it: free.
    pub(crate) fn free(path: PathBuf, name: String, grace: Duration) -> Status {
        Status {
            grace,
            path,
            name,
            state: State::Free,
            owner: None,
            reason: None,
            owner_exited: false,
            since: None,
            guard: GuardState::Absent,
            candidates: Vec::new(),
            tombstones: Vec::new(),
            shared: false,
            readers: Vec::new(),
            writers: Vec::new(),
            queue: Vec::new(),
            departed: Vec::new(),
            stranger: None,
        }
    }
}

/// One reader of a shared lock, or one writer waiting in it for the readers (see
/// [`Status::readers`]), as its own record inside the lock says: each has an entry there,
/// `reader.<token>` or `writer.<token>`, holding its record, and holds an exclusive `flock` on
/// that entry for as long as it reads or waits. It is judged by that `flock` (a free one
/// proves it gone) and its record, as an owner is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Party {
    /// Whether it reads, or waits to write.
    pub role: Role,
    /// Its entry's name inside the lock: `reader.<token>` or `writer.<token>`.
    pub entry: String,
    /// Its own record (its pid, purpose, host...): `None` while a reader coming in has not
    /// written it yet, or when it cannot be trusted (the reason says why).
    pub owner: Option<Owner>,
    /// Since when it reads, or waits to write: the time its record gives
    /// (`acquired_unix_ms`), else its entry's modification time.
    pub since: Option<SystemTime>,
    /// How it was judged: [`Liveness::Live`] while it holds its entry's `flock`,
    /// [`Liveness::Unknown`] when that cannot be tested from here (another host or operating
    /// system), dead (in [`Status::departed`]) once it is gone.
    pub liveness: Liveness,
    /// Why it was judged so (or what is wrong with its record).
    pub reason: String,
}

/// What a [`Party`] to a shared lock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// It reads the lock, beside any other readers.
    Reader,
    /// It waits for the readers to leave, to hold the lock alone; new readers wait for it.
    Writer,
    /// It waits its turn in the lock's queue.
    Queued,
}

impl Role {
    /// A stable one-word name: `reader`, `writer`, `queued`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Queued => "queued",
        }
    }
}

/// The state of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Nobody holds it.
    Free,
    /// A live owner holds it.
    Held,
    /// Its owner is gone, proven by the kernel: the next acquisition reclaims it at once.
    DeadByProof,
    /// Its owner is gone by evidence; it is reclaimed once `remaining` is zero.
    DeadByEvidence {
        /// Time left in the grace period.
        remaining: Duration,
    },
    /// Its owner cannot be judged from here (another host or pid namespace).
    Unknown,
    /// Its record cannot be trusted.
    Malformed {
        /// What is wrong.
        problem: String,
    },
}

impl State {
    /// A stable one-word name: `free`, `held`, `dead-by-proof`, `dead-by-evidence`, `unknown`,
    /// `malformed`.
    pub fn name(&self) -> &'static str {
        match self {
            State::Free => "free",
            State::Held => "held",
            State::DeadByProof => "dead-by-proof",
            State::DeadByEvidence { .. } => "dead-by-evidence",
            State::Unknown => "unknown",
            State::Malformed { .. } => "malformed",
        }
    }
}

/// The state of a lock's reclaim guard.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardState {
    /// No guard: nobody is reclaiming.
    Absent,
    /// A process is reclaiming under it right now.
    Busy,
    /// Left behind by a crash. A `marked` one (this crate's) is reused at once by the next
    /// reclaimer; an unmarked one (another implementation's) once it is older than the grace
    /// period.
    Leftover {
        /// Whether it carries this crate's marker.
        marked: bool,
        /// How old it is.
        age: Duration,
    },
    /// Not private (another user's, or writable by others): an acquisition refuses to use it,
    /// and it is never removed automatically.
    Unsafe {
        /// The guard's path.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

impl GuardState {
    /// A stable one-word name: `absent`, `busy`, `leftover`, `unsafe`.
    pub fn name(&self) -> &'static str {
        match self {
            GuardState::Absent => "absent",
            GuardState::Busy => "busy",
            GuardState::Leftover { .. } => "leftover",
            GuardState::Unsafe { .. } => "unsafe",
        }
    }
}

/// A candidate or tombstone directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leftover {
    /// Its name in the lock directory.
    pub name: String,
    /// How old it is (since its last modification).
    pub age: Duration,
    /// For a candidate: whether its creator still holds its beacon (`None` when it cannot be
    /// told, or for a tombstone).
    pub creator_alive: Option<bool>,
}

/// The entries of a lock directory that belong to one lock, besides the lock itself.
#[derive(Debug, Default)]
pub(crate) struct Related {
    candidates: Vec<String>,
    tombstones: Vec<String>,
}

/// Groups a lock directory's listing by lock name (each entry classified once), sorted: the
/// locks that have any entry (lock, candidate, tombstone, guard), with their leftovers.
pub(crate) fn group(entries: &[String]) -> BTreeMap<String, Related> {
    let mut locks: BTreeMap<String, Related> = BTreeMap::new();
    for entry in entries {
        match classify(entry) {
            Entry::Lock(n) | Entry::Guard { lock: n } | Entry::Queue { lock: n } => {
                locks.entry(n).or_default();
            }
            Entry::Candidate { lock, .. } => locks
                .entry(lock)
                .or_default()
                .candidates
                .push(entry.clone()),
            Entry::Tombstone { lock } => locks
                .entry(lock)
                .or_default()
                .tombstones
                .push(entry.clone()),
            Entry::Writers { .. } | Entry::Other => {}
        }
    }
    locks
}

/// The status of lock `name`, given its related entries (see [`group`]).
pub(crate) fn status<S: System>(
    sp: &Space<S>,
    name: &str,
    me: &Identity,
    grace: Duration,
    related: &Related,
) -> Result<Status, Error> {
    let mut st = Status::free(sp.entry(name), name.to_owned(), grace);
    match sp.observe(name)? {
        Seen::Gone => {}
        Seen::Malformed(problem) => {
            st.reason = Some(problem.clone());
            st.state = State::Malformed { problem };
            // (An observer: what cannot be listed is no reason to fail.)
            st.stranger = sp
                .sys
                .open_dir_at(sp.dir, name)
                .ok()
                .and_then(|d| stranger(sp.sys, &d).ok().flatten());
        }
        Seen::InUse { problem, .. } => {
            let problem = format!("{problem}, and a process holds a lock on it");
            st.reason = Some(problem.clone());
            st.state = State::Malformed { problem };
        }
        Seen::Owned { dir, meta, owner } => {
            let (state, judgement) = judged(sp, &dir, &meta, &owner, me, grace);
            st.state = state;
            st.reason = Some(judgement.reason);
            st.owner_exited = judgement.owner_exited;
            st.since = Some(meta.mtime);
            if owner.is_shared() {
                st.shared = true;
                parties(sp, name, &dir, &owner, me, &mut st)?;
            }
            st.owner = Some(owner);
        }
    }
    st.guard = guard_state(sp, name)?;
    queued(sp, name, me, &mut st);
    (st.candidates, st.tombstones) = leftovers(sp, me, related);
    Ok(st)
}

/// The state of a lock with a readable record, and why.
fn judged<S: System>(
    sp: &Space<S>,
    dir: &S::Dir,
    meta: &Meta,
    owner: &Owner,
    me: &Identity,
    grace: Duration,
) -> (State, Judgement) {
    let mut judgement = sp.judge(dir, owner, me);
    let reason = &mut judgement.reason;
    let state = match judgement.liveness {
        Liveness::Live => State::Held,
        Liveness::Unknown => State::Unknown,
        Liveness::DeadByProof => State::DeadByProof,
        Liveness::DeadByEvidence => {
            if sp.sys.now() < meta.mtime {
                reason.push_str(
                    "; its modification time is in the future (a clock was set back): \
                     its grace period counts from when a waiting acquisition first sees \
                     it unchanged",
                );
            }
            // The age and the rule an acquisition's first look uses.
            let (age, _) = Ages::default().age(sp.sys, meta.id, meta.mtime);
            State::DeadByEvidence {
                remaining: grace_left(judgement.liveness, age, grace).unwrap_or_default(),
            }
        }
    };
    (state, judgement)
}

/// The candidates and tombstones of one lock, with their ages (and, for a candidate, whether
/// its creator still works on it). Entries gone meanwhile are left out.
fn leftovers<S: System>(
    sp: &Space<S>,
    me: &Identity,
    related: &Related,
) -> (Vec<Leftover>, Vec<Leftover>) {
    let (mut candidates, mut tombstones) = (Vec::new(), Vec::new());
    for entry in &related.candidates {
        let Ok(meta) = sp.sys.meta_at(sp.dir, entry) else {
            continue; // gone meanwhile
        };
        let creator_alive = sp.sys.open_dir_at(sp.dir, entry).ok().and_then(|d| {
            let record = sp.read_owner(&d).ok();
            match creator(sp, &d, record.as_ref(), me) {
                Creator::Alive(_) => Some(true),
                Creator::Gone => Some(false),
                Creator::Untold(_) => None,
            }
        });
        candidates.push(Leftover {
            name: entry.clone(),
            age: since(sp.sys, meta.mtime).unwrap_or_default(),
            creator_alive,
        });
    }
    for entry in &related.tombstones {
        if let Ok(meta) = sp.sys.meta_at(sp.dir, entry) {
            tombstones.push(Leftover {
                name: entry.clone(),
                age: since(sp.sys, meta.mtime).unwrap_or_default(),
                creator_alive: None,
            });
        }
    }
    (candidates, tombstones)
}

fn guard_state<S: System>(sp: &Space<S>, name: &str) -> Result<GuardState, Error> {
    let gname = guard_name(name);
    let (guard, file) = match open_guard(sp, &gname) {
        Ok(Guard::Gone) => return Ok(GuardState::Absent),
        Ok(Guard::Dir(g)) => (g, false),
        Ok(Guard::File(g)) => (g, true),
        // Another platform's: whether it is in use cannot be told here.
        Ok(Guard::Foreign) => return Ok(GuardState::Busy),
        // A symlink, FIFO or socket: what it blocks is told, not an error of the look.
        Err(Error::Unsafe { path, problem, .. }) => {
            return Ok(GuardState::Unsafe { path, problem })
        }
        Err(e) => return Err(e),
    };
    let meta = match sp.sys.meta(&guard) {
        Ok(m) => m,
        // Retired meanwhile (see `sys::gone`).
        Err(e) if gone(&e) => return Ok(GuardState::Absent),
        Err(e) => {
            return Err(Error::io(
                "inspect the takeover marker",
                sp.entry(&gname),
                e,
            ))
        }
    };
    // As a reclaimer finds it: first whether it is safe to use at all.
    if let Some(problem) = sp.private_problem(&meta, "the takeover marker") {
        let path = sp.entry(&gname);
        return Ok(GuardState::Unsafe { path, problem });
    }
    // A shared probe: it never conflicts with another prober, only with a reclaimer.
    if !sp.sys.try_lock(&guard, false).unwrap_or(true) {
        return Ok(GuardState::Busy);
    }
    Ok(GuardState::Leftover {
        marked: file || sp.sys.meta_at(&guard, GUARD_MARKER).is_ok(),
        age: since(sp.sys, meta.mtime).unwrap_or_default(),
    })
}
