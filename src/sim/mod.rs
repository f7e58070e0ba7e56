//! Deterministic simulation of the protocol (test builds only).
//!
//! The crate's own code (the acquisition driver [`crate::acquire`], blocking and with tasks,
//! [`protocol::release`], [`crate::sweep::sweep`], [`crate::reclaim::unlock`], the reclaim
//! under them and [`crate::inspect::status`]) runs over [`SimSys`], an in-memory model of the
//! few system calls of the [`System`] seam: directories and files with modes and mtimes,
//! open file descriptions with `flock`s, processes with pids and start times, a virtual clock,
//! and inotify-like change counters. Each simulated process runs its script on an OS thread of
//! its own, but only one runs at a time: every system call is a scheduling point where it hands
//! a baton back to the scheduler, which picks who runs next (seeded at random, or exhaustively
//! by depth-first search within a preemption bound) and may crash any process there, as
//! `SIGKILL` would: its descriptors close (dropping its `flock`s) and its thread unwinds
//! without touching the model again. After every step the invariants I1 to I15 of the protocol
//! (`docs/internals.md`, Invariants) are checked against the model's ground truth.
//!
//! Shared locks ([`readers`]): readers read for virtual seconds, their keeper looking at the
//! record every second, beside writers and the reference implementation, modelled step by
//! step ([`reference`]). I10: nobody writes (a writer, or the reference holding the lock)
//! while another reads or writes, and nobody moves a shared lock away while it is read. I11:
//! no reader comes into a shared lock whose live writer's entry was made and locked before the
//! reader looked for writers, unless the reader queued before that writer. I12: while a reader reads, the record names a live reader (or
//! one still leaving), or did within a keeper's period and a half; the lock directory never
//! gets older than the keeper lets it (so the reference, which waits 60 s from there, never
//! takes the lock from readers); and a named reader that leaves while others read hands the
//! record over. I7 covers shared locks too: after the crashes, a reader and then a writer get
//! the lock; and an acquisition that fails or is dropped leaves no entry of its own behind.
//!
//! A failing seed prints the violation and the last steps; `SIM_DEBUG=1` also prints every
//! scheduling decision. Modes: working `flock` (owners judged by their beacon), no `flock`
//! (judged by pid, grace periods waited out, pids reused), hostile input (an intruder's empty
//! directory at the lock path), and the test-only mutants of [`Mutant`].

use crate::acquire::{self, Acquired, Blocking};
use crate::error::Error;
use crate::options::{Options, Wait};
use crate::owner::Owner;
use crate::paths::{classify, guard_name, Entry, OWNER_FILE};
use crate::protocol;
use crate::space::Space;
use crate::sys::{CancelHandle, Clock, FileId, Identity, Kind, Meta, Renamed, System, Wake};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod model;
mod queue;
mod readers;
mod reference;
mod schedule;
mod scripts;
mod system;
mod tasks;
#[cfg(test)]
mod tests;

use model::*;
use readers::*;
use reference::*;
use schedule::*;
use scripts::*;
use system::*;
use tasks::*;

/// The directory that holds the lock directory (the per-user base directory).
pub(crate) const PARENT: Ino = 1;

/// The lock directory's name in `PARENT` (a cleaner may remove it; it is made again).
pub(crate) const LOCKS: &str = "locks";

pub(crate) const UID: u32 = 1000;

pub(crate) const LOCK: &str = "x.lock";

/// Each system call takes this long on the virtual clock.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// A deliberately broken model, for showing that the checks see what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutant {
    /// The model as it is.
    None,
    /// `rename` replaces an empty directory while the protocol believes it exclusive.
    PlainRename,
}

/// A simulation's shape.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub scripts: Vec<Script>,
    pub mutant: Mutant,
    pub grace: Duration,
    /// Crashes allowed per process.
    pub crashes: u32,
    /// Crashes allowed in all (None: only the bound per process).
    pub crashes_in_all: Option<u32>,
    /// Context switches away from a runnable process allowed (None: unbounded).
    pub preemptions: Option<u32>,
    /// Simulate a filesystem without flock.
    pub no_flock: bool,
    /// Simulate a FUSE filesystem without no-replace renames (see `State::fuse`).
    pub fuse: bool,
    /// Simulate a kernel that cannot watch a process's exit (no pidfd): waiters on a
    /// pid-judged holder must look again on their own (see `SimWatch::recheck`).
    pub no_pidfd: bool,
    /// Any notification a sleeper waits for may be lost (an inotify queue that overflowed, a
    /// watch a platform dropped) or merged with others: at each point where one has come, the
    /// schedule decides whether it is delivered. Waiters must still never wedge (I7).
    pub lossy: bool,
    /// A lock's conversion (shared to exclusive, or back) lets go first and asks for the new
    /// kind in a second step, another process's lock coming in between: as on Windows, where
    /// a lock is an open handle's sharing mode, and as flock(2) allows (it does not promise
    /// to convert atomically; Linux does).
    pub split_convert: bool,
    /// No atomic exchange of two names (FreeBSD, Windows, NFS): a release never hands the
    /// lock over, and the queue's order is kept by its waiters alone.
    pub no_exchange: bool,
    /// A release that finds a live waiter gives a turn to those that do not queue whenever
    /// the queue's turn file is there (not only two seconds after the last): it leaves the
    /// lock free, and waiters that find it free pause (see `System::turn_every`).
    pub turns: bool,
    /// Each timed acquisition must return within this past its deadline, on the virtual clock
    /// (its last steps, and the other processes' steps between them: a bound for one shape,
    /// found by running it); `None`: not checked.
    pub deadline_slack: Option<Duration>,
    /// The longest a runtime's tasks may sleep in one pass over those woken, each polled once
    /// (a blocking sleep keeps the runtime's thread from every other task and from its timers),
    /// on the virtual clock; `None`: not checked.
    pub poll_limit: Option<Duration>,
}

/// One simulation shaped and scheduled by arbitrary bytes (the fuzz target and its proptest
/// mirror): the first bytes choose 2 to 4 processes and their scripts (a byte from 240 up: a
/// runtime of tasks, every other one a reader from 248, all from 252; from 224, a prober, slow at odd bytes; from 208, another thread of the process before;
/// from 204, the reference implementation; from 192, a reader) and whether flock works (or an
/// intruder's empty directory), the rest drive every scheduling decision and crash.
///
/// # Errors
///
/// The invariant violations found, with the steps that led to them.
pub fn fuzz(data: &[u8]) -> Result<(), String> {
    let (head, rest) = data.split_at(data.len().min(6));
    let at = |i: usize| head.get(i).copied().unwrap_or(0);
    let n = 2 + at(0) as usize % 3;
    let scripts: Vec<Script> = (0..n)
        .map(|i| {
            let b = at(1 + i);
            if let Some(k) = b.checked_sub(240) {
                // A runtime of two or three tasks (from 248: every other one a reader; from
                // 252: all), one of whose acquisitions may be dropped.
                let n = 2 + k % 2;
                let wait = if k / 2 % 2 == 0 {
                    Wait::Forever
                } else {
                    Wait::Timeout(Duration::from_secs(3))
                };
                let cancel = (k >= 4).then(|| (k % 2, k / 4 * 2 - 1));
                return match k / 4 {
                    3 => Script::ReaderTasks { n, wait, cancel },
                    2 => Script::MixedTasks { n, wait, cancel },
                    _ => Script::Tasks { n, wait, cancel },
                };
            }
            if b >= 224 {
                return match b % 2 {
                    0 => Script::Prober,
                    _ => Script::SlowProber,
                };
            }
            if b >= 208 {
                // Another thread of the process before it.
                return Script::Thread {
                    wait: if b % 2 == 0 {
                        Wait::Forever
                    } else {
                        Wait::Immediately
                    },
                };
            }
            if let Some(k) = b.checked_sub(204) {
                return Script::Reference {
                    rounds: 1 + k % 2,
                    tries: if k < 2 { 3 } else { 30 },
                };
            }
            if let Some(k) = b.checked_sub(192) {
                // A reader, reading for an instant or past the keeper's freshness bound.
                return Script::Reader {
                    rounds: 1 + k % 2,
                    wait: [
                        Wait::Forever,
                        Wait::Immediately,
                        Wait::Timeout(Duration::from_secs(3)),
                    ][k as usize / 2 % 3],
                    hold: if k < 6 { 0 } else { 18 },
                };
            }
            match b % 12 {
                11 => Script::Forker {
                    wait: if b / 12 % 2 == 0 {
                        Wait::Forever
                    } else {
                        Wait::Immediately
                    },
                },
                0 => Script::Worker {
                    rounds: 2,
                    wait: Wait::Immediately,
                },
                1 | 2 => Script::Worker {
                    rounds: 2,
                    wait: Wait::Forever,
                },
                3 => Script::Worker {
                    rounds: 1,
                    wait: Wait::Timeout(Duration::from_secs(3)),
                },
                4 => Script::Sweeper,
                5 => Script::Unlocker,
                6 => Script::Intruder,
                7 => Script::Planter(match b / 11 % 4 {
                    0 => Plant::Token(b / 44),
                    1 => Plant::TheirOwnPid,
                    2 => Plant::OtherHostThisKernel,
                    _ => Plant::Future,
                }),
                8 => Script::Observer,
                9 => Script::SweeperNow,
                10 if b / 12 % 2 == 1 => Script::CandidateCleaner,
                _ => Script::Cleaner,
            }
        })
        .collect();
    let fuse = at(5) % 4 == 1;
    // On a filesystem without no-replace renames, a plain rename replaces an empty directory
    // at the lock path: an intruder's empty directory there is a known limit (docs/limits.md), not a
    // finding; and the reference always renames plainly.
    let plain = fuse
        || scripts
            .iter()
            .any(|s| matches!(s, Script::Reference { .. }));
    let mut scripts: Vec<Script> = scripts
        .into_iter()
        .map(|s| match s {
            Script::Intruder if plain => Script::Observer,
            s => s,
        })
        .collect();
    // A forker's child is the process after it (a forker in the last place forks no one).
    for i in 1..scripts.len() {
        if let Script::Forker { .. } = scripts[i - 1] {
            scripts[i] = Script::Forked;
        }
    }
    let cfg = Config {
        scripts,
        mutant: Mutant::None,
        grace: Duration::from_secs(5),
        crashes: 1,
        crashes_in_all: None,
        preemptions: None,
        no_flock: at(5) % 4 == 0,
        fuse,
        no_pidfd: at(5) / 4 % 2 == 1,
        lossy: at(5) / 8 % 2 == 1,
        split_convert: at(5) / 16 % 2 == 1,
        no_exchange: at(5) / 32 % 2 == 1,
        turns: at(5) / 64 % 2 == 1,
        deadline_slack: None,
        poll_limit: None,
    };
    let mut strategy = Bytes {
        data: rest,
        pos: 0,
        rest: Random::new(data.len() as u64),
    };
    run(&cfg, &mut strategy).map(drop)
}

/// Runs one simulation; `Err` holds the violations found, with the steps that led to them.
pub(crate) fn run(cfg: &Config, strategy: &mut dyn Strategy) -> Result<usize, String> {
    let world = new_world(cfg);
    let mut steps = schedule(&world, &cfg.scripts, cfg, strategy);
    let recovery = Config {
        crashes: 0,
        preemptions: None,
        ..cfg.clone()
    };
    // I7, the kernel-proof half: where flock works and nothing foreign was planted, every owner
    // and every guard a crash left behind is proven dead by the kernel, so the lock is
    // acquirable at once, well before any grace period ends.
    let planted_evidence = cfg.scripts.iter().any(|s| match s {
        Script::Intruder => true,
        Script::Planter(p) => p.evidence_only(cfg.no_flock),
        _ => false,
    });
    // (A killed reference leaves a lock or a guard judged by its pid or age alone.)
    let reference_killed = cfg
        .scripts
        .iter()
        .enumerate()
        .any(|(i, s)| matches!(s, Script::Reference { .. }) && world.lock().procs[i].crashed);
    // Shared locks: acquirable again by a reader too.
    let readers = cfg.scripts.iter().any(|s| {
        matches!(
            s,
            Script::Reader { .. } | Script::ReaderTasks { .. } | Script::MixedTasks { .. }
        )
    });
    // (On FUSE too, without no-replace renames: the reclaim guard is then a file made in place,
    // which only this crate makes, and a crash before it is locked leaves it free to take.)
    if !cfg.no_flock && !planted_evidence && !reference_killed {
        steps += recover_at_once(&world, &recovery, readers);
    }
    // I7: whatever happened, the lock is acquirable again by itself once the grace period has
    // passed, and a sweep leaves no candidate or tombstone behind.
    steps += recover_after_the_grace_period(&world, &recovery, readers);
    let st = world.lock();
    if st.violations.is_empty() {
        Ok(steps)
    } else {
        Err(st.violations.join("\n\n"))
    }
}

/// An empty world: the per-user directory and, in it, the lock directory.
fn new_world(cfg: &Config) -> Arc<World> {
    let world = Arc::new(World {
        state: Mutex::new(State {
            turn: None,
            procs: Vec::new(),
            inodes: HashMap::new(),
            next_ino: PARENT + 1,
            free_numbers: Vec::new(),
            ofds: HashMap::new(),
            next_fd: 3,
            mono: Duration::from_secs(1),
            tokens: HashMap::new(),
            next_token: 0,
            inside: Vec::new(),
            progressed: Duration::ZERO,
            violations: Vec::new(),
            trace: Vec::new(),
            mutant: cfg.mutant,
            no_flock: cfg.no_flock,
            victim: cfg
                .scripts
                .iter()
                .rposition(|s| !matches!(s, Script::Forked))
                .unwrap_or(0),
            fuse: cfg.fuse,
            no_pidfd: cfg.no_pidfd,
            lossy: cfg.lossy,
            split_convert: cfg.split_convert,
            no_exchange: cfg.no_exchange,
            turns: cfg.turns,
            deadline_slack: cfg.deadline_slack,
            poll_limit: cfg.poll_limit,
            marked_by: HashMap::new(),
            watching: BTreeMap::new(),
            exclusive: None,
            owned: Default::default(),
            forks: HashMap::new(),
            book: Book::default(),
        }),
        cv: Condvar::new(),
    });
    {
        let mut st = world.lock();
        st.inodes.insert(
            PARENT,
            Inode {
                node: Node::Dir(BTreeMap::new()),
                mode: 0o700,
                mtime: Duration::ZERO,
                epoch: 0,
                foreign: false,
                linked: true,
                number: PARENT,
            },
        );
        let d = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
        st.dir_entries_mut(PARENT)
            .expect("the parent")
            .insert(LOCKS.into(), d);
    }
    world
}

/// With flock, before the clock may pass the grace period: no crash left the reclaim guard
/// unmarked (only the grace period could clear it), and a new worker gets the lock (after a
/// new reader, where `readers` read).
fn recover_at_once(world: &Arc<World>, recovery: &Config, readers: bool) -> usize {
    let first = {
        let mut st = world.lock();
        let unmarked = st.lookup(st.d(), &guard_name(LOCK)).is_ok_and(|g| {
            st.dir_entries(g)
                .is_ok_and(|e| !e.contains_key(crate::paths::GUARD_MARKER))
        });
        if unmarked {
            st.violation("I7: a crash left the reclaim guard unmarked".into());
        }
        st.procs.len()
    };
    let wait = Wait::Timeout(recovery.grace / 2);
    let steps = recover(world, first, recovery, readers, wait);
    let mut st = world.lock();
    if st
        .violations
        .iter()
        .any(|v| v.contains("failed to acquire"))
    {
        st.violation(
            "I7: with flock, the lock was not acquirable at once after the crashes".into(),
        );
    }
    steps
}

/// Past the grace period (and the floor under which a sweep leaves a candidate without a
/// record alone), a new worker gets the lock and its sweep leaves no candidate or tombstone.
fn recover_after_the_grace_period(world: &Arc<World>, recovery: &Config, readers: bool) -> usize {
    let first = {
        let mut st = world.lock();
        st.mono += recovery.grace.max(crate::sweep::STAGING_FLOOR) + Duration::from_secs(1);
        st.inside.clear();
        st.book.reading.clear();
        st.procs.len()
    };
    let steps = recover(
        world,
        first,
        recovery,
        readers,
        Wait::Timeout(recovery.grace * 4),
    );
    let mut st = world.lock();
    let left: Vec<String> = st
        .dir_entries(st.d())
        .map(|e| {
            e.iter()
                .filter(|(n, i)| {
                    matches!(
                        classify(n),
                        Entry::Candidate { .. } | Entry::Tombstone { .. }
                    ) && !st.inodes[*i].foreign
                })
                .map(|(n, _)| n.clone())
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        st.violation(format!("I7: a sweep after recovery left {left:?}"));
    }
    steps
}

/// A recovery: a new reader (where `readers` read) and then a new worker, from slot `first`,
/// each waiting as `wait` says, get the lock (each reports it if it does not).
fn recover(world: &Arc<World>, first: usize, cfg: &Config, readers: bool, wait: Wait) -> usize {
    let mut steps = 0;
    let mut first = first;
    if readers {
        let reader = Script::Reader {
            rounds: 1,
            wait,
            hold: 0,
        };
        steps += schedule_from(world, &[reader], first, cfg, &mut Random::new(1), true);
        first += 1;
    }
    let worker = Script::Worker { rounds: 1, wait };
    steps + schedule_from(world, &[worker], first, cfg, &mut Random::new(1), true)
}
