//! The simulation's own tests: exhaustive and random schedules, hostile input, observers.
use super::*;

mod shared;
mod tasks;

/// The most schedules an exhaustive test explores: `SIM_LIMIT`, or no bound.
fn limit() -> usize {
    std::env::var("SIM_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX)
}

fn workers(n: usize, wait: Wait) -> Vec<Script> {
    vec![Script::Worker { rounds: 2, wait }; n]
}

fn config(scripts: Vec<Script>, mutant: Mutant) -> Config {
    Config {
        scripts,
        mutant,
        grace: Duration::from_secs(5),
        crashes: 1,
        crashes_in_all: None,
        preemptions: None,
        no_flock: false,
        fuse: false,
        no_pidfd: false,
        lossy: false,
        split_convert: false,
        no_exchange: false,
        turns: false,
        deadline_slack: None,
        poll_limit: None,
    }
}

/// Runs `seeds` random schedules; panics with the seed and the violation on the first.
fn random(cfg: &Config, seeds: std::ops::Range<u64>) -> usize {
    let mut steps = 0;
    for seed in seeds {
        match run(cfg, &mut Random::new(seed)) {
            Ok(n) => steps += n,
            Err(v) => panic!("seed {seed} ({cfg:?}):\n{v}"),
        }
    }
    steps
}

/// Depth-first search over every schedule within the config's bounds; returns the number
/// of schedules explored, or the first violation with its choice sequence.
fn exhaustive(cfg: &Config, limit: usize) -> Result<usize, String> {
    let mut prefix: Vec<usize> = Vec::new();
    let mut runs = 0;
    loop {
        let mut replay = Replay {
            prefix: prefix.clone(),
            taken: Vec::new(),
        };
        runs += 1;
        if let Err(v) = run(cfg, &mut replay) {
            return Err(format!(
                "schedule {:?}:\n{v}",
                replay.taken.iter().map(|c| c.0).collect::<Vec<_>>()
            ));
        }
        // Next schedule: bump the deepest choice that has an untried option.
        let mut taken = replay.taken;
        loop {
            match taken.pop() {
                None => return Ok(runs),
                Some((c, n)) if c + 1 < n => {
                    prefix = taken.iter().map(|t| t.0).collect();
                    prefix.push(c + 1);
                    break;
                }
                Some(_) => {}
            }
        }
        if runs >= limit {
            return Ok(runs);
        }
    }
}

#[test]
fn regressions() {
    // On FUSE, a reclaimer's fresh file guard was taken over before it locked it, retired by
    // the one that took it, and then locked (an unlinked file) by its maker, which worked
    // beside the maker of the next guard: I5 (found by the review of issue 18).
    let mut scripts = workers(5, Wait::Forever);
    scripts.push(Script::Unlocker);
    let mut cfg = config(scripts, Mutant::None);
    cfg.fuse = true;
    for seed in [341, 1423, 18490] {
        if let Err(v) = run(&cfg, &mut Random::new(seed)) {
            panic!("seed {seed} (FUSE):\n{v}");
        }
    }
    // On FUSE, fstat of a lock removed since it was opened fails (seed 1264; since a
    // runtime's tasks shared their tries for the queue's `flock`, seed 1 of four; since the
    // uncontended cycle asks the lock directory's link count, seed 12), and a lock
    // released and reaped while `observe` read it can give its inode number to the next lock
    // published at NAME, which was then judged malformed, "it has no owner.json" (seed 1814;
    // CI's hardening test on bindfs).
    for (n, wait, seed) in [
        (3, Wait::Forever, 1264),
        (4, Wait::Immediately, 12),
        (4, Wait::Immediately, 1814),
    ] {
        let mut scripts = workers(n, wait);
        scripts.push(Script::Sweeper);
        let mut cfg = config(scripts, Mutant::None);
        cfg.fuse = true;
        if let Err(v) = run(&cfg, &mut Random::new(seed)) {
            panic!("seed {seed} (FUSE):\n{v}");
        }
    }
    // The lock published with a reaped one's inode number, found again since the uncontended
    // cycle asks the lock directory's link count: four workers cycling three times (seed 3359).
    let mut scripts = vec![
        Script::Worker {
            rounds: 3,
            wait: Wait::Immediately,
        };
        4
    ];
    scripts.push(Script::Sweeper);
    let mut cfg = config(scripts, Mutant::None);
    cfg.fuse = true;
    if let Err(v) = run(&cfg, &mut Random::new(3359)) {
        panic!("seed 3359 (FUSE, three rounds):\n{v}");
    }
    // A sweep reaped a releaser's fresh tombstone before the releaser checked it; the
    // release reported its lock lost although it had retired it (found by the soak at
    // seed 18619; the schedule is seed 11925 since the model gained the lock's queue).
    let mut scripts = workers(3, Wait::Timeout(Duration::from_secs(3)));
    scripts.push(Script::Sweeper);
    if let Err(v) = run(&config(scripts, Mutant::None), &mut Random::new(11925)) {
        panic!("seed 11925:\n{v}");
    }
    // Four waiting workers: a queued writer waits on the writer just ahead of it only if it
    // saw that one when it looked; one numbered after it looked may wait on it in turn (I7).
    let mut cfg = config(workers(4, Wait::Forever), Mutant::None);
    cfg.crashes = 0;
    if let Err(v) = run(&cfg, &mut Random::new(45)) {
        panic!("seed 45 (four waiting workers):\n{v}");
    }
    // Workers that fail fast beside a sweep with no grace: a maker giving up its candidate
    // keeps its `flock` until its record is gone, or the sweep takes it for a dead one's (I6).
    let mut scripts = workers(3, Wait::Immediately);
    scripts.push(Script::SweeperNow);
    let mut cfg = config(scripts, Mutant::None);
    (cfg.crashes, cfg.no_pidfd) = (0, true);
    if let Err(v) = run(&cfg, &mut Random::new(14)) {
        panic!("seed 14 (a sweep beside workers that fail fast):\n{v}");
    }
    // Fuzz inputs. First: a planted record named the pid of a forked child, which in the model
    // exists (live) before its parent forks it: the parent waited for it forever, it for its
    // parent (the fuzz smoke of issue 18's CI; a deadlock of the scenario, not the protocol).
    // Second: a temp cleaner removed the directory an unlock staged its reclaim guard in, and
    // the unlock failed, "cannot mark the reclaim guard" (found by the fuzz target's proptest
    // mirror; the input is one found again, by a search with that failure put back, since the
    // uncontended cycle asks the lock directory's link count).
    for data in [
        &[55, 55, 11, 55][..],
        &[
            53, 43, 190, 236, 41, 101, 57, 74, 237, 171, 242, 246, 152, 54, 73, 7, 253, 247, 232,
            223, 135, 112, 100, 213, 97, 255, 243, 52, 121,
        ],
    ] {
        if let Err(v) = super::fuzz(data) {
            panic!("fuzz input {data:?}:\n{v}");
        }
    }
}

#[test]
fn two_processes_exhaustively_within_bounds() {
    // Every schedule of two fail-fast workers with up to one crash each and one preemption,
    // and of two waiting workers with no crash and two preemptions.
    let mut cfg = config(
        vec![
            Script::Worker {
                rounds: 1,
                wait: Wait::Immediately
            };
            2
        ],
        Mutant::None,
    );
    cfg.preemptions = Some(1);
    let limit = limit();
    let a = exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("{v}"));
    let mut cfg = config(
        vec![
            Script::Worker {
                rounds: 1,
                wait: Wait::Forever
            };
            2
        ],
        Mutant::None,
    );
    cfg.crashes = 0;
    cfg.preemptions = Some(2);
    let b = exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("{v}"));
    eprintln!("exhaustive: {a} + {b} schedules");
    assert!(
        a > 100 && b > 100,
        "the search explored {a} and {b} schedules"
    );
}

/// Four processes cycling three times each, scheduled in bursts
/// ([`Bursts`](crate::sim::schedule::Bursts)): a process left behind for long stretches.
/// Seeds 398 and 482 (1049 too, of the first 4,000; 221 and 293 before the uncontended cycle
/// asked the lock directory's link count, 208 and 294 before a runtime's tasks shared their
/// tries for the queue's `flock`, 185 and 322 before a dead verdict was checked against
/// `NAME`) find a waiter handed the lock that kept its queue entry's `flock`:
/// two releases later, a holder took it for a waiter still, and exchanged the lock with what
/// its candidate's name held then, the lock a stalled holder was retiring (I6).
#[test]
fn bursty_schedules_of_four_workers() {
    let rounds = Script::Worker {
        rounds: 3,
        wait: Wait::Forever,
    };
    let cfg = config(vec![rounds; 4], Mutant::None);
    for seed in (0..40).chain([398, 482]) {
        if let Err(v) = run(&cfg, &mut crate::sim::schedule::Bursts::new(seed, 20)) {
            panic!("seed {seed} (bursts of 20 on average):\n{v}");
        }
    }
}

#[test]
fn random_schedules_of_three_and_four_processes() {
    let mut steps = 0;
    // On FUSE: plain renames, verified; fstat of a removed directory fails (first: what only FUSE
    // reaches, the file guard, is then found broken within CI's time limit for one test).
    for wait in [Wait::Forever, Wait::Immediately] {
        let mut scripts = workers(3, wait);
        scripts.push(Script::Sweeper);
        let mut cfg = config(scripts, Mutant::None);
        cfg.fuse = true;
        steps += random(&cfg, 0..300);
    }
    steps += random(&config(workers(3, Wait::Forever), Mutant::None), 0..300);
    steps += random(&config(workers(3, Wait::Immediately), Mutant::None), 0..300);
    let mut mixed = workers(2, Wait::Timeout(Duration::from_secs(3)));
    mixed.push(Script::Sweeper);
    mixed.push(Script::Unlocker);
    steps += random(&config(mixed, Mutant::None), 0..300);
    let mut hostile = workers(2, Wait::Immediately);
    hostile.push(Script::Intruder);
    steps += random(&config(hostile, Mutant::None), 0..200);
    // Without flock: judged by pid, grace periods waited out, pids reused.
    for wait in [Wait::Forever, Wait::Immediately] {
        let mut cfg = config(workers(3, wait), Mutant::None);
        cfg.no_flock = true;
        steps += random(&cfg, 0..300);
    }
    // Without an exchange of names: no handoff, the queue's order kept by its waiters, some of
    // which give up (and a sweeper removes what dead ones left).
    for wait in [Wait::Forever, Wait::Timeout(Duration::from_secs(3))] {
        let mut scripts = workers(3, wait);
        scripts.push(Script::Sweeper);
        let mut cfg = config(scripts, Mutant::None);
        cfg.no_exchange = true;
        steps += random(&cfg, 0..300);
    }
    // A turn at every release (where two seconds never pass in a schedule): the lock left
    // free, waiters pausing for whoever polls (the reference, a try), some giving up.
    let mut scripts = workers(2, Wait::Timeout(Duration::from_secs(3)));
    scripts.push(Script::Reference {
        rounds: 2,
        tries: 5,
    });
    scripts.push(Script::Sweeper);
    let mut cfg = config(scripts, Mutant::None);
    cfg.turns = true;
    steps += random(&cfg, 0..300);
    let mut cfg = config(workers(3, Wait::Forever), Mutant::None);
    cfg.turns = true;
    steps += random(&cfg, 0..300);
    eprintln!("random: {steps} steps");
}

/// Waiters in a hurry (5 ms, where each system call of another process takes a virtual
/// millisecond): most give up, some at the moment a release hands them the lock, and one that
/// gave up as it was handed the lock hands it on in turn. Such a lock is released at once
/// (I13), no release finds its lock lost, and a waiter that gave up leaves nothing of its own
/// behind but what another's give-up withdrew from its candidate's name to reap (seed 2).
#[test]
fn waiters_that_give_up_as_they_are_handed_the_lock() {
    let hurried = Script::Worker {
        rounds: 3,
        wait: Wait::Timeout(Duration::from_millis(5)),
    };
    let mut steps = 0;
    for crashes in [0, 1] {
        let mut cfg = config(vec![hurried; 4], Mutant::None);
        cfg.crashes = crashes;
        steps += random(&cfg, 0..300);
    }
    eprintln!("waiters giving up: {steps} steps");
}

/// Observers beside acquirers (status, sweep with grace 0, a temp cleaner removing the
/// lock directory, an operator's unlock) never make an acquisition fail, and hostile
/// records (unsafe tokens, our own pid, another host name on this kernel, a clock set
/// back) neither wedge nor spin: every waiting worker gets the lock.
#[test]
fn observers_and_hostile_records_never_make_an_acquisition_fail() {
    let steps = observers_and_hostile_records(0..60);
    eprintln!("observers and hostile records: {steps} steps");
}

/// The shapes of [`observers_and_hostile_records_never_make_an_acquisition_fail`], over
/// `seeds` for each.
fn observers_and_hostile_records(seeds: std::ops::Range<u64>) -> usize {
    let timed = Wait::Timeout(Duration::from_secs(30));
    let mut shapes: Vec<(Vec<Script>, bool)> = Vec::new();
    for observer in [Script::Observer, Script::SweeperNow, Script::Cleaner] {
        for wait in [Wait::Forever, timed] {
            let mut scripts = workers(2, wait);
            scripts.push(observer);
            shapes.push((scripts, false));
        }
    }
    let mut all = workers(2, Wait::Forever);
    all.extend([
        Script::Observer,
        Script::SweeperNow,
        Script::Cleaner,
        Script::Unlocker,
    ]);
    shapes.push((all, false));
    for plant in [
        Plant::Token(0),
        Plant::Token(1),
        Plant::Token(2),
        Plant::Token(3),
        Plant::TheirOwnPid,
        Plant::OtherHostThisKernel,
        Plant::Future,
    ] {
        let mut scripts = vec![Script::Planter(plant)];
        scripts.extend(workers(2, Wait::Forever));
        shapes.push((scripts.clone(), false));
        shapes.push((scripts, true));
    }
    let mut steps = 0;
    for (scripts, no_flock) in shapes {
        let mut cfg = config(scripts, Mutant::None);
        cfg.no_flock = no_flock;
        steps += random(&cfg, seeds.clone());
    }
    steps
}

/// An operator's unlock beside a temp cleaner that removes the whole lock directory (while no
/// lock is published in it) goes on in the directory made anew: the lock is not there, which
/// is no error. (Found by the soak: unlock failed to make its guard in the removed directory.)
#[test]
fn an_unlock_beside_a_temp_cleaner_never_fails() {
    let mut scripts = workers(2, Wait::Forever);
    scripts.extend([
        Script::Observer,
        Script::SweeperNow,
        Script::Cleaner,
        Script::Unlocker,
    ]);
    // (Seed 173 is the soak's finding.)
    let steps = random(&config(scripts, Mutant::None), 150..250);
    eprintln!("unlock beside a cleaner: {steps} steps");
}

/// A waiter on a holder judged by its pid alone (a record without a beacon naming a live
/// process) wakes when that process dies: by the kernel's process watch (pidfd), or, where
/// there is none, by looking again on its own. (A watch that forgets the pid leaves every
/// waiter asleep forever once the holder is killed: I7.)
#[test]
fn a_waiter_on_a_pid_judged_holder_wakes_when_it_dies() {
    let mut steps = 0;
    for no_pidfd in [false, true] {
        // The record names the last process started: an observer that exits when its looks
        // are done, or a waiter that may crash.
        for last in [
            Script::Observer,
            Script::Worker {
                rounds: 1,
                wait: Wait::Forever,
            },
        ] {
            let mut scripts = vec![Script::Planter(Plant::TheirOwnPid)];
            scripts.extend(workers(1, Wait::Forever));
            scripts.push(last);
            let mut cfg = config(scripts, Mutant::None);
            cfg.no_pidfd = no_pidfd;
            steps += random(&cfg, 0..150);
        }
    }
    eprintln!("pid-judged holders: {steps} steps");
}

/// Any notification a waiter sleeps on may be lost or merged with others (an inotify queue that
/// overflowed, a watch a platform dropped): waiters still never wedge (I7), since none sleeps
/// on a watch longer than it takes to look again. (Without that bound, a waiter whose holder's
/// release or death was lost slept forever.)
#[test]
fn lost_notifications_never_wedge_a_waiter() {
    let mut steps = 0;
    for (no_flock, no_pidfd) in [(true, false), (true, true), (false, false)] {
        let mut shapes = vec![
            workers(3, Wait::Forever),
            workers(2, Wait::Timeout(Duration::from_secs(30))),
        ];
        let mut planted = vec![Script::Planter(Plant::TheirOwnPid)];
        planted.extend(workers(2, Wait::Forever));
        shapes.push(planted);
        let mut observed = workers(2, Wait::Forever);
        observed.push(Script::Observer);
        shapes.push(observed);
        for scripts in shapes {
            let mut cfg = config(scripts, Mutant::None);
            (cfg.no_flock, cfg.no_pidfd, cfg.lossy) = (no_flock, no_pidfd, true);
            steps += random(&cfg, 0..100);
        }
    }
    eprintln!("lost notifications: {steps} steps");
}

/// A holder that forks: its child shares the beacon's open description (its flock) and has a
/// copy of the guard. The child dropping that copy does nothing to the lock; while the child
/// lives, a crashed parent's lock stays held (the shared flock) and nobody enters beside the
/// parent; the parent's release lets the waiters in although the child still holds a copy of
/// the beacon; and once the child is gone too, a crashed parent's lock is reclaimed.
#[test]
fn a_forked_child_never_takes_its_parents_lock() {
    let mut steps = 0;
    for (no_flock, lossy) in [(false, false), (true, false), (false, true)] {
        for wait in [Wait::Forever, Wait::Immediately] {
            let mut scripts = vec![Script::Forker { wait }, Script::Forked];
            scripts.extend(workers(1, Wait::Forever));
            let mut cfg = config(scripts, Mutant::None);
            (cfg.no_flock, cfg.lossy) = (no_flock, lossy);
            steps += random(&cfg, 0..150);
        }
    }
    eprintln!("forks: {steps} steps");
}

#[test]
#[ignore = "soak: run with `cargo test --release --lib sim -- --ignored`"]
fn soak_exhaustive_with_more_preemptions() {
    let mut cfg = config(
        vec![
            Script::Worker {
                rounds: 1,
                wait: Wait::Immediately
            };
            2
        ],
        Mutant::None,
    );
    cfg.preemptions = Some(2);
    let n = exhaustive(&cfg, usize::MAX).unwrap_or_else(|v| panic!("{v}"));
    let mut cfg = config(
        vec![
            Script::Worker {
                rounds: 1,
                wait: Wait::Forever
            };
            2
        ],
        Mutant::None,
    );
    cfg.preemptions = Some(1);
    cfg.no_flock = true;
    let m = exhaustive(&cfg, usize::MAX).unwrap_or_else(|v| panic!("{v}"));
    eprintln!("exhaustive soak: {n} + {m} schedules");
}

#[test]
#[ignore = "soak: run with `cargo test --release --lib sim -- --ignored`"]
fn soak_random_schedules() {
    let per = 25_000;
    observers_and_hostile_records(0..per / 10);
    random(&config(workers(3, Wait::Forever), Mutant::None), 0..per);
    random(&config(workers(4, Wait::Immediately), Mutant::None), 0..per);
    let mut mixed = workers(3, Wait::Timeout(Duration::from_secs(3)));
    mixed.push(Script::Sweeper);
    random(&config(mixed, Mutant::None), 0..per);
    let mut mixed = workers(2, Wait::Forever);
    mixed.push(Script::Unlocker);
    mixed.push(Script::Sweeper);
    random(&config(mixed, Mutant::None), 0..per);
    let mut cfg = config(workers(4, Wait::Forever), Mutant::None);
    cfg.no_flock = true;
    random(&cfg, 0..per);
}

/// Replays one input of the fuzz target or its proptest mirror, with its steps:
/// `SIM_DATA=94,0,0,161 cargo test --lib sim::tests::replay -- --ignored --nocapture`.
#[test]
#[ignore = "a debugging aid: replays SIM_DATA"]
fn replay() {
    let Ok(data) = std::env::var("SIM_DATA") else {
        return;
    };
    let data: Vec<u8> = data
        .split(',')
        .filter_map(|b| b.trim().parse().ok())
        .collect();
    if let Err(v) = fuzz(&data) {
        panic!("{v}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// The stable mirror of the stateful fuzz target: arbitrary bytes shape and schedule a
    /// simulation; no schedule violates an invariant.
    #[test]
    fn arbitrary_schedules_keep_the_invariants(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
        if let Err(v) = fuzz(&data) {
            panic!("{v}");
        }
    }
}

/// A mutant is caught when some seed finds a violation.
fn caught(cfg: &Config, seeds: u64) -> Option<(u64, String)> {
    (0..seeds).find_map(|seed| run(cfg, &mut Random::new(seed)).err().map(|v| (seed, v)))
}

/// Several reclaimers of one dead owner, crashing anywhere: under the guard and the token
/// check, never two inside, and never a live owner's lock moved, also on FUSE, where the
/// guard is a file made in place and then locked. (`.ci/mutants.py` skips the guard, and the
/// token check, and this test must fail.)
#[test]
fn reclaimers_of_one_dead_owner_never_overlap() {
    let mut reclaimers = workers(3, Wait::Forever);
    reclaimers[0] = Script::Worker {
        rounds: 1,
        wait: Wait::Forever,
    };
    let mut cfg = config(reclaimers, Mutant::None);
    cfg.fuse = true; // first: where a reclaim past the token check is found (seed 184)
    random(&cfg, 0..1000);
    cfg.fuse = false;
    random(&cfg, 0..3000);
}

#[test]
fn the_simulation_sees_a_plain_rename_replace_a_directory() {
    // A plain rename replaces an empty directory found at the lock path.
    let mut hostile = workers(2, Wait::Immediately);
    hostile.insert(0, Script::Intruder);
    let cfg = config(hostile, Mutant::PlainRename);
    let (seed, v) = caught(&cfg, 3000).expect("PlainRename was not caught");
    assert!(v.contains("I3"), "{v}");
    eprintln!(
        "PlainRename: seed {seed}: {}",
        v.lines().next().unwrap_or("")
    );
}

/// A status and an acquisition agree on every state the schedules reach: the acquisition
/// takes the lock exactly when the status says it can be taken, beside workers that crash,
/// reclaimers, an unlock, planted records and an intruder, with and without flock, and on
/// FUSE.
#[test]
fn status_and_acquisition_agree_on_every_state() {
    let mut steps = 0;
    for (no_flock, fuse) in [(false, false), (true, false), (false, true)] {
        for extra in [
            Script::Unlocker,
            Script::Planter(Plant::TheirOwnPid),
            Script::Planter(Plant::Future),
            Script::Planter(Plant::OtherHostThisKernel),
            Script::Planter(Plant::Token(1)),
            Script::Intruder,
            Script::SweeperNow,
        ] {
            if fuse && matches!(extra, Script::Intruder) {
                continue; // a known limit on FUSE (see `fuzz`)
            }
            let mut scripts = workers(2, Wait::Timeout(Duration::from_secs(3)));
            scripts.extend([extra, Script::Prober, Script::Prober]);
            let mut cfg = config(scripts, Mutant::None);
            (cfg.no_flock, cfg.fuse) = (no_flock, fuse);
            steps += random(&cfg, 0..25);
        }
    }
    assert!(steps > 10_000, "only {steps} steps");
}
