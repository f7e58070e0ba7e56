//! What each simulated process does: workers, observers, hostile planters and cleaners.

use super::*;

/// What one simulated process does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Script {
    /// Acquire and release `rounds` times, with this wait policy.
    Worker { rounds: u32, wait: Wait },
    /// Sweep the lock directory once.
    Sweeper,
    /// An operator's `unlock` (dead owners only).
    Unlocker,
    /// Hostile input: makes an empty directory at the lock path while it is free.
    Intruder,
    /// Hostile input: plants a complete, valid lock whose record says `Plant` while the lock
    /// is free.
    Planter(Plant),
    /// An observer: looks at the lock's status a few times.
    Observer,
    /// Looks at the lock's status and at once (alone, on a stopped clock) tries a fail-fast
    /// acquisition, a few times: the acquisition must succeed exactly when the status says
    /// the lock can be taken ([`Status::takeable`](crate::Status::takeable)).
    Prober,
    /// A [`Script::Prober`] that lets half a second of virtual time pass before each look, so
    /// that it looks while others hold the lock, read it or wait for it.
    SlowProber,
    /// `sweep --grace 0` beside acquisitions.
    SweeperNow,
    /// A temp cleaner (`rm -rf`): removes the whole lock directory whenever no lock is
    /// published in it (removing a held lock would break any lock; removing everything else,
    /// waiters' candidates included, must break none).
    Cleaner,
    /// A temp cleaner that removes old entries one by one: removes the waiters' candidates,
    /// a lock published or not, a few times (each waiter must stage anew; the invariants hold
    /// as they do beside any script).
    CandidateCleaner,
    /// A worker that forks once it holds the lock: the next process ([`Script::Forked`]) is
    /// its child, with its descriptors (the beacon's flock shared) and a copy of its guard.
    Forker { wait: Wait },
    /// The child of the [`Script::Forker`] before it: drops its copy of the parent's guard,
    /// which must do nothing, then waits for the lock (a while) like any other process.
    Forked,
    /// Another thread of the process before it (the first script: a process of its own),
    /// which takes the lock twice, blocking.
    Thread { wait: Wait },
    /// A process whose runtime runs `n` tasks, each taking the lock once asynchronously
    /// (see [`tasks`](super::tasks::tasks)); `cancel`: which task's acquisition is dropped,
    /// at which of its pending polls.
    Tasks {
        n: u8,
        wait: Wait,
        cancel: Option<(u8, u8)>,
    },
    /// A runtime of `n` reader tasks, as [`Script::Tasks`]: they read together, each with its
    /// own entry.
    ReaderTasks {
        n: u8,
        wait: Wait,
        cancel: Option<(u8, u8)>,
    },
    /// A runtime of `n` tasks, as [`Script::Tasks`], every other one a reader (the first a
    /// writer): writers and readers of one runtime in one queue.
    MixedTasks {
        n: u8,
        wait: Wait,
        cancel: Option<(u8, u8)>,
    },
    /// A reader: takes the lock shared `rounds` times and reads for `hold` seconds each time,
    /// its keeper looking at the record every second (see [`read`]).
    Reader { rounds: u8, wait: Wait, hold: u8 },
    /// The reference implementation (see [`reference`](super::reference)): takes the lock
    /// `rounds` times, waiting for a live holder `tries` times a second at most.
    Reference { rounds: u8, tries: u8 },
    /// A process stopped (`SIGSTOP`) while it held the exclusive `flock` of the directory
    /// beside the lock named `LOCK` + `beside` (`.queue`: a waiter taking its number;
    /// `.writers`: a status peeking): it looks for the directory (makes it, if `make`), locks
    /// it, keeps it locked for `hold` seconds, and lets go.
    #[cfg_attr(not(test), allow(dead_code))]
    Stopped {
        beside: &'static str,
        make: bool,
        hold: u8,
    },
}

/// What a planted lock's record says.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Plant {
    /// A dead owner's beacon record whose token is not a safe name (`/`, `..`, 300 bytes, a
    /// NUL): never a path component.
    Token(u8),
    /// A record of our format (its pid namespace ours, no beacon) naming the pid of a live
    /// simulated process (the last one started
    /// that is not a forked child) with a token that process never wrote: dead to
    /// it, live to the others until it exits.
    TheirOwnPid,
    /// A dead owner's beacon record from another host name on this kernel (our boot id).
    OtherHostThisKernel,
    /// A dead owner's reference record whose directory's mtime is an hour in the future.
    Future,
}

impl Plant {
    /// The record. Where there is no flock, a record claiming a beacon could never have been
    /// written (and one that cannot be probed judges its owner live, as it must): the beacon
    /// records say `false` there, and are judged by pid.
    pub(crate) fn record(self, victim: u32, no_flock: bool) -> String {
        let dead = 9_999;
        let beacon = !no_flock;
        match self {
            Plant::Token(n) => {
                let token = match n % 5 {
                    0 => "a/b".to_owned(),
                    1 => "..".to_owned(),
                    2 => "x".repeat(300),
                    3 => "nul\\u0000".to_owned(),
                    _ => "../../escape".to_owned(),
                };
                format!(r#"{{"pid":{dead},"token":"{token}","beacon":{beacon}}}"#)
            }
            Plant::TheirOwnPid => format!(
                r#"{{"pid":{victim},"token":"planted","pid_namespace":"pid:[sim]","beacon":false}}"#
            ),
            Plant::OtherHostThisKernel => format!(
                r#"{{"pid":{dead},"token":"planted","host":"elsewhere","boot_id":"sim-boot","beacon":{beacon}}}"#
            ),
            Plant::Future => format!(r#"{{"pid":{dead},"token":"planted"}}"#),
        }
    }

    /// Whether only the grace period can clear it (no kernel proof).
    pub(crate) fn evidence_only(self, no_flock: bool) -> bool {
        no_flock || matches!(self, Plant::TheirOwnPid | Plant::Future)
    }
}

/// The lock directory `dir` as the protocol sees it.
pub(crate) fn space<'a>(sys: &'a SimSys, dir: &'a SimDir) -> Space<'a, SimSys> {
    Space {
        sys,
        dir,
        path: Path::new("/sim"),
        uid: UID,
        shared: None,
    }
}

/// What a simulated process does.
pub(crate) fn play(sys: &SimSys, script: Script, grace: Duration, recovery: bool) {
    let me = sys.identity();
    let root = sys.lock_dir();
    let sp = space(sys, &root);
    match script {
        Script::Worker { rounds, wait } => {
            for _ in 0..rounds {
                work(sys, wait, grace, recovery, None);
            }
            if recovery {
                if let Err(e) = crate::sweep::sweep(&space(sys, &sys.lock_dir()), grace) {
                    report(sys, format!("sweep failed: {e}"));
                }
            }
        }
        Script::Sweeper | Script::SweeperNow => {
            let grace = match script {
                Script::SweeperNow => Duration::ZERO,
                _ => grace,
            };
            if let Err(e) = crate::sweep::sweep(&sp, grace) {
                report(sys, format!("sweep failed: {e}"));
            }
        }
        Script::Unlocker => match acquire::in_current_dir(&SimSite { sys }, |sp| {
            crate::reclaim::unlock(sp, LOCK, "sim", &me, grace, false)
        }) {
            Ok(_) => {}
            Err(e) if e.is_contended() => {}
            Err(Error::Malformed { .. }) if intruded(sys) => {}
            Err(e) => report(sys, format!("unlock failed: {e}")),
        },
        Script::Observer => observe(sys, &sp, &me, grace),
        Script::Prober => probe(sys, &me, grace, Duration::ZERO),
        Script::SlowProber => probe(sys, &me, grace, Duration::from_millis(500)),
        Script::Cleaner => {
            for whole in [false, false, true, true] {
                sys.call(
                    &format!("clean the lock directory (whole: {whole})"),
                    |st, _| st.clean(whole),
                );
            }
        }
        Script::CandidateCleaner => {
            for _ in 0..3 {
                sys.call("remove the candidates", |st, _| st.clean_candidates());
            }
        }
        Script::Intruder => intrude(sys),
        Script::Planter(plant) => plant_lock(sys, plant),
        Script::Forker { wait } => work(sys, wait, grace, recovery, Some(sys.slot + 1)),
        Script::Forked => forked(sys, grace),
        Script::Tasks { n, wait, cancel } => tasks(sys, n, wait, grace, cancel, |_| false),
        Script::ReaderTasks { n, wait, cancel } => tasks(sys, n, wait, grace, cancel, |_| true),
        Script::MixedTasks { n, wait, cancel } => {
            tasks(sys, n, wait, grace, cancel, |i| i % 2 == 1)
        }
        Script::Thread { wait } => {
            for _ in 0..2 {
                work(sys, wait, grace, recovery, None);
            }
        }
        Script::Reader { rounds, wait, hold } => {
            for _ in 0..rounds {
                read(sys, wait, hold, grace, recovery);
            }
        }
        Script::Reference { rounds, tries } => {
            for _ in 0..rounds {
                reference(sys, tries);
            }
        }
        Script::Stopped { beside, make, hold } => {
            super::queue::stop_holding(sys, &root, beside, make, hold)
        }
    }
}

impl SimSys {
    /// Forks: process `child` (a [`Script::Forked`] waiting for it) gets this process's
    /// descriptors (the same open descriptions: their flocks are shared) and a copy of
    /// `held`, the lock this process holds. (A child crashed before it is forked was never
    /// born, nor one that is not there: nothing happens.)
    pub(crate) fn fork(&self, child: usize, held: &crate::protocol::Held<SimSys>) {
        self.call(&format!("fork p{child}"), |st, slot| {
            if st.procs.get(child).is_none_or(|p| !p.alive) {
                return;
            }
            for o in st.ofds.values_mut() {
                if o.holders.contains(&slot) {
                    o.holders.push(child);
                }
            }
            st.forks.insert(
                child,
                Inherited {
                    name: held.name.clone(),
                    owner: held.owner.clone(),
                    fd: held.beacon.fd,
                    id: held.id,
                },
            );
            st.bump(PARENT); // the child's wake-up
        });
    }
}

/// The child of the forker in the slot before: waits for the fork (or for its parent to end
/// without forking), drops the guard it inherited (nothing may happen to the lock), then
/// waits for the lock itself, a while.
fn forked(sys: &SimSys, grace: Duration) {
    let parent = sys.slot - 1;
    let inherited = loop {
        let watch = {
            let st = sys.world.lock();
            if let Some(i) = st.forks.get(&sys.slot) {
                break i.clone();
            }
            if st.procs[parent].status == Status::Done || !st.procs[parent].alive {
                return; // it never forked
            }
            SimWatch {
                ino: PARENT,
                epoch: st.inodes[&PARENT].epoch,
                slot: Some(parent),
                recheck: false,
                lossy: false,
            }
        };
        let _ = sys.sleep(Some(&watch), None, None);
    };
    let root = sys.lock_dir();
    let acquirer = inherited.owner.pid;
    let copy = crate::protocol::Held {
        name: inherited.name,
        owner: inherited.owner,
        beacon: sys.dir(inherited.fd),
        id: inherited.id,
        reclaimed_from: None,
        last_seen: None,
        shared: false,
        entry: None,
        ticket: None,
    };
    if let Err(e) = protocol::release(&space(sys, &root), copy, "sim", acquirer) {
        report(
            sys,
            format!("p{}: dropping an inherited guard failed: {e}", sys.slot),
        );
    }
    work(
        sys,
        Wait::Timeout(Duration::from_secs(2)),
        grace,
        false,
        None,
    );
}

/// One round of a worker: acquire (in the current lock directory, re-opened if a cleaner
/// removed it, as `Locks` does), a critical section with a scheduling point, release.
fn work(sys: &SimSys, wait: Wait, grace: Duration, recovery: bool, fork_to: Option<usize>) {
    let started = sys.monotonic();
    let got = acquire::now(acquisition(sys, wait, grace, 0).run(&Blocking));
    on_time(sys, wait, started, &got);
    match got {
        Ok(Acquired { held, dir: d, .. }) => {
            if let Some(child) = fork_to {
                sys.fork(child, &held);
            }
            enter(sys);
            // The critical section: a scheduling point where others may run.
            let _ = sys.meta_at(&d, OWNER_FILE);
            leave(sys);
            let pid = sys.pid();
            if let Err(e) = protocol::release(&space(sys, &d), held, "sim", pid) {
                // Only a cleaner may take a lock away (never a held one).
                report(sys, format!("I9/I1: p{} lost its lock: {e}", sys.slot));
            }
        }
        Err(e) if e.is_contended() && !recovery => left_nothing(sys, 0),
        Err(Error::Malformed { .. }) if intruded(sys) => {}
        Err(e) => report(sys, format!("p{} failed to acquire: {e}", sys.slot)),
    }
}

/// What an observer's look at the lock saw, step by step: a look may find the lock gone only
/// if NAME was missing at some moment of it, or was replaced under it as many times as
/// `Space::observe` looks again.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The directory it looks in.
    pub(crate) dir: Ino,
    /// Whether NAME was missing there at some moment.
    pub(crate) missing: bool,
    /// Each directory that NAME was.
    pub(crate) locks: std::collections::BTreeSet<Ino>,
}

impl Watch {
    /// Whether the look may find the lock gone.
    pub(crate) fn gone_allowed(&self) -> bool {
        self.missing || self.locks.len() > crate::space::LOOKS as usize
    }
}

/// An observer: three statuses, none of which may fail, each followed by a look at the lock
/// (what the status starts with), which may find it gone only as a [`Watch`] allows.
fn observe(sys: &SimSys, sp: &Space<SimSys>, me: &Identity, grace: Duration) {
    for _ in 0..3 {
        let status = sys
            .list(sp.dir)
            .map_err(|e| Error::io("list", "/sim", e))
            .and_then(|entries| {
                let related = crate::inspect::group(&entries)
                    .remove(LOCK)
                    .unwrap_or_default();
                crate::inspect::status(sp, LOCK, me, grace, &related)
            });
        match status {
            Ok(_) => {}
            Err(Error::Malformed { .. }) if intruded(sys) => {}
            Err(e) => report(sys, format!("status failed: {e}")),
        }
        // Not a scheduling point: the model's own bookkeeping.
        {
            let mut st = sys.world.lock();
            let dir = sys.ino(&st, sp.dir).unwrap_or(0);
            let watch = Watch {
                dir,
                missing: false,
                locks: Default::default(),
            };
            st.watching.insert(sys.slot, watch);
            st.watch();
        }
        let seen = sp.observe(LOCK);
        let watch = sys.world.lock().watching.remove(&sys.slot);
        match seen {
            Ok(crate::space::Seen::Gone) if !watch.is_some_and(|w| w.gone_allowed()) => report(
                sys,
                "a look found the lock gone, though NAME named a lock throughout, replaced less often than a look looks again".into(),
            ),
            Ok(_) => {}
            Err(Error::Malformed { .. }) if intruded(sys) => {}
            Err(e) => report(sys, format!("a look at the lock failed: {e}")),
        }
    }
}

/// A status and a fail-fast acquisition with nothing in between, three times, each after
/// `pause` (of virtual time): they agree, and the status never says a shared lock can be
/// taken while one of its readers reads.
fn probe(sys: &SimSys, me: &Identity, grace: Duration, pause: Duration) {
    for _ in 0..3 {
        if !pause.is_zero() {
            let _ = sys.sleep(None, Some(pause), None);
        }
        sys.call("probe (alone)", |st, slot| st.exclusive = Some(slot));
        let root = sys.lock_dir();
        let sp = space(sys, &root);
        let status = sys
            .list(sp.dir)
            .map_err(|e| Error::io("list", "/sim", e))
            .and_then(|entries| {
                let related = crate::inspect::group(&entries).remove(LOCK);
                crate::inspect::status(&sp, LOCK, me, grace, &related.unwrap_or_default())
            });
        let got = acquire::now(acquisition(sys, Wait::Immediately, grace, 0).run(&Blocking));
        let (took, verdict) = match &got {
            Ok(_) => (true, "took it".to_owned()),
            Err(e) => (false, format!("failed: {e}")),
        };
        let reader = reading_now(sys);
        match status {
            Ok(s) if s.takeable() && reader.is_some() => {
                let (r, t) = reader.unwrap_or_default();
                let state = &s.state;
                report(
                    sys,
                    format!("I6: a status says the lock can be taken ({state:?}) while p{r}.{t} reads it"),
                )
            }
            Ok(s) if s.takeable() != took => report(
                sys,
                format!(
                    "status and acquisition disagree: {:?} (guard {:?}) says takeable: {}, \
                     and an acquisition {verdict}",
                    s.state,
                    s.guard,
                    s.takeable()
                ),
            ),
            Ok(_) | Err(Error::Malformed { .. }) => {}
            Err(e) => report(sys, format!("status failed: {e}")),
        }
        if let Ok(Acquired { held, dir, .. }) = got {
            enter(sys);
            leave(sys);
            let pid = sys.pid();
            if let Err(e) = protocol::release(&space(sys, &dir), held, "sim", pid) {
                report(sys, format!("I9/I1: p{} lost its lock: {e}", sys.slot));
            }
        }
        sys.call("probe done", |st, _| st.exclusive = None);
    }
}

/// Another user's process makes a bare directory at the lock's name.
fn intrude(sys: &SimSys) {
    sys.call("intrude", |st, _| {
        let d = st.d();
        if st.lookup(d, LOCK).is_ok() {
            return false;
        }
        let ino = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, true);
        st.dir_entries_mut(d)
            .is_ok_and(|e| e.insert(LOCK.into(), ino).is_none())
    });
}

/// A lock with a hostile or dead owner's record appears at the lock's name.
fn plant_lock(sys: &SimSys, plant: Plant) {
    sys.call(&format!("plant {plant:?}"), |st, _| {
        let d = st.d();
        if st.lookup(d, LOCK).is_ok() || st.dir_entries(d).is_err() {
            return false;
        }
        let victim = st.procs.get(st.victim).map_or(0, |p| p.pid);
        let record = plant.record(victim, st.no_flock).into_bytes();
        let lock = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
        let file = st.new_inode(Node::File(record), 0o600, false);
        if let Ok(e) = st.dir_entries_mut(lock) {
            e.insert(OWNER_FILE.into(), file);
        }
        if let Plant::Future = plant {
            let ahead = st.mono + Duration::from_secs(3600);
            if let Some(i) = st.inodes.get_mut(&lock) {
                i.mtime = ahead;
            }
        }
        st.dir_entries_mut(d)
            .is_ok_and(|e| e.insert(LOCK.into(), lock).is_none())
    });
}

pub(crate) fn intruded(sys: &SimSys) -> bool {
    let st = sys.world.lock();
    st.inodes.values().any(|i| i.foreign)
}

pub(crate) fn report(sys: &SimSys, what: String) {
    sys.world.lock().violation(what);
}

/// I1 and I10: entering the critical section (writing) while another live process is inside
/// or reads is a violation.
pub(crate) fn enter(sys: &SimSys) {
    let mut st = sys.world.lock();
    let me = (sys.slot, sys.task.get());
    if let Some((s, t)) = st.inside.iter().copied().find(|(s, _)| st.procs[*s].alive) {
        st.violation(format!(
            "I1: p{}.{} entered while p{s}.{t} is inside",
            me.0, me.1
        ));
    }
    let reader = st
        .book
        .reading
        .iter()
        .copied()
        .find(|(s, _)| st.procs[*s].alive);
    if let Some((s, t)) = reader {
        st.violation(format!(
            "I10: p{}.{} writes while p{s}.{t} reads",
            me.0, me.1
        ));
    }
    st.inside.push(me);
    st.progressed = st.mono;
    st.trace.push(format!("p{}.{} ENTER", me.0, me.1));
}

pub(crate) fn leave(sys: &SimSys) {
    let mut st = sys.world.lock();
    let me = (sys.slot, sys.task.get());
    st.inside.retain(|s| *s != me);
    st.trace.push(format!("p{}.{} LEAVE", me.0, me.1));
}

impl State {
    /// Removes what is in the lock directory (`whole`: and the directory itself), as a temp
    /// cleaner or `rm -rf` would, unless a lock is published in it. Handles stay open on what
    /// they named, now unlinked and empty.
    pub(crate) fn clean(&mut self, whole: bool) -> bool {
        let d = self.d();
        let Ok(entries) = self.dir_entries(d) else {
            return false;
        };
        if entries
            .keys()
            .any(|n| matches!(classify(n), Entry::Lock(_)))
        {
            return false;
        }
        if !whole {
            let inside: Vec<Ino> = self
                .dir_entries_mut(d)
                .map(|e| std::mem::take(e).into_values().collect())
                .unwrap_or_default();
            self.unlink_trees(inside);
            self.bump(d);
            return true;
        }
        self.unlink_trees(vec![d]);
        if let Ok(p) = self.dir_entries_mut(PARENT) {
            p.remove(LOCKS);
        }
        true
    }

    /// Removes the candidates in the lock directory (see [`Script::CandidateCleaner`]).
    pub(crate) fn clean_candidates(&mut self) -> bool {
        let d = self.d();
        let Ok(entries) = self.dir_entries_mut(d) else {
            return false;
        };
        let names: Vec<String> = entries
            .keys()
            .filter(|n| matches!(classify(n), Entry::Candidate { .. }))
            .cloned()
            .collect();
        let inos = names.iter().filter_map(|n| entries.remove(n)).collect();
        self.unlink_trees(inos);
        self.bump(d);
        true
    }
}
