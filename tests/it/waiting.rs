//! Waiting: woken by the holder's release or death, bounded by timeouts, cancellable, and
//! never leaving a candidate behind.

use crate::common::machine::Watch;
use crate::common::*;
use dirlock::{Cancel, Error, Wait};
use std::time::{Duration, Instant};

#[test]
fn a_waiter_gets_the_lock_when_the_holder_releases() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| fx.locks.named_lock("w.lock").wait(Wait::Forever).acquire());
        // Let the waiter block, then release.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the waiter waits");
        holder.release();
        let g = waiter.join().unwrap().unwrap();
        assert!(g.reclaimed_from().is_none());
    });
}

#[test]
fn a_waiter_takes_over_when_the_holder_is_killed() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    let pid = holder.pid();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| fx.locks.named_lock("w.lock").wait(Wait::Forever).acquire());
        std::thread::sleep(Duration::from_millis(100));
        holder.kill();
        let g = waiter.join().unwrap().unwrap();
        assert_eq!(g.reclaimed_from().unwrap().pid, pid);
    });
}

#[test]
fn a_refused_or_timed_out_wait_leaves_nothing_behind() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    // Failing fast, a contender never queues: its candidate is removed as it was staged.
    let err = fx.locks.named_lock("w.lock").acquire().unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert_eq!(fx.entries(), vec!["w.lock".to_owned()], "no candidate left");
    // Waiting, it queues, and gives its place and its candidate up at the timeout.
    let start = Instant::now();
    let err = fx
        .locks
        .named_lock("w.lock")
        .wait(Duration::from_millis(300))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(err.is_contended());
    assert_eq!(fx.entries(), vec!["w.lock".to_owned()], "no candidate left");
}

#[test]
fn a_cancelled_wait_leaves_nothing_behind() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    let cancel = Cancel::new().unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            fx.locks
                .named_lock("w.lock")
                .wait(Wait::Forever)
                .cancel(&cancel)
                .acquire()
        });
        std::thread::sleep(Duration::from_millis(100));
        cancel.cancel();
        let err = waiter.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    });
    assert_eq!(fx.entries(), vec!["w.lock".to_owned()]);
}

#[test]
fn a_dead_owner_inside_the_grace_period_is_waited_out() {
    let fx = Fixture::new();
    let rec = format!(r#"{{"pid":{},"token":"t-1"}}"#, dead_pid());
    plant(fx.dir(), "w.lock", &rec, Duration::ZERO);
    let g = fx
        .locks
        .named_lock("w.lock")
        .grace(Duration::from_millis(400))
        .wait(Duration::from_secs(20))
        .acquire()
        .unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, "t-1");
}

#[test]
fn the_global_setup_lock_waits_by_default() {
    let fx = Fixture::new();
    let home = fx.tmp.path().to_str().unwrap().to_owned();
    let holder = Holder::start(fx.dir(), &["--global-setup", &home]);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            fx.locks
                .with_global_setup_lock(&home, || Ok::<_, Error>("installed"))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished());
        holder.release();
        assert_eq!(waiter.join().unwrap().unwrap(), "installed");
    });
}

/// Whether test `test` can tell how its waiter spends its time (see [`Watch`]); else it skips.
fn watchable(test: &str) -> bool {
    let need = "/proc/thread-self/schedstat (Linux, with schedstats)";
    !lacks(test, need, Watch::start().is_some())
}

/// A watch on how this thread spends its time, once [`watchable`] said it can.
fn watch() -> Watch {
    Watch::start().expect("a watch, as a moment ago")
}

#[test]
fn an_unknown_owner_is_waited_for_without_spinning() {
    let fx = Fixture::new();
    // A lock from another host whose record claims a beacon: its flock (free here) means
    // nothing, so the waiter must sleep, not re-probe it in a loop.
    let rec = format!(
        r#"{{"pid":{},"token":"t","host":"elsewhere.example","beacon":true}}"#,
        dead_pid()
    );
    plant(fx.dir(), "u.lock", &rec, Duration::ZERO);
    if !watchable("waiting::an_unknown_owner_is_waited_for_without_spinning") {
        return;
    }
    let watch = watch();
    let err = fx
        .locks
        .named_lock("u.lock")
        .wait(Duration::from_millis(400))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    if let Err(how) = watch.slept() {
        panic!("the waiter spun: {how}");
    }
}

#[test]
fn a_live_holder_is_waited_for_without_spinning() {
    // An unbounded wait sleeps in the beacon's flock; a timed one in poll, woken by inotify.
    if !watchable("waiting::a_live_holder_is_waited_for_without_spinning") {
        return;
    }
    for wait in [Wait::Forever, Wait::Timeout(Duration::from_secs(60))] {
        let fx = Fixture::new();
        let holder = Holder::start(fx.dir(), &["--lock", "s.lock"]);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let watch = watch();
                let g = fx.locks.named_lock("s.lock").wait(wait).acquire();
                (g, watch.slept())
            });
            std::thread::sleep(Duration::from_millis(400));
            assert!(!waiter.is_finished(), "{wait:?}: the waiter waits");
            holder.release();
            let (g, slept) = waiter.join().unwrap();
            g.unwrap().release().unwrap();
            if let Err(how) = slept {
                panic!("{wait:?}: the waiter spun: {how}");
            }
        });
    }
}

/// A holder judged by its pid alone (a record without a beacon, as on a filesystem without
/// flock) wakes its waiter when it dies, also where the kernel cannot watch a process (no
/// pidfd: kernels before 5.3, some sandboxes): the waiter looks again on its own every 100 ms
/// (its `poll` says so; a lost notification's bound is a second) instead of sleeping until
/// something else touches the lock.
#[test]
fn a_waiter_on_a_pid_judged_holder_wakes_when_it_dies_even_without_pidfd() {
    if lacks(
        "waiting::a_waiter_on_a_pid_judged_holder_wakes_when_it_dies_even_without_pidfd",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let mut victim = ChildGuard::spawn(std::process::Command::new("sleep").arg("60"));
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let rec = format!(
        r#"{{"pid":{},"token":"victim","pid_namespace":"{}","beacon":false}}"#,
        victim.id(),
        ns.display()
    );
    // Old enough that its holder's death, once seen, is all it takes (no grace to wait out).
    plant(fx.dir(), "p.lock", &rec, Duration::from_secs(3600));
    let trace = fx.tmp.path().join("strace.out");
    let trace_s = trace.to_str().unwrap();
    let strace = strace_injecting(
        trace_s,
        "trace=pidfd_open,poll",
        "inject=pidfd_open:error=ENOSYS",
    );
    // The holder is started from this thread (its death signal follows the thread that
    // spawned it); the victim is killed from another once the waiter sleeps.
    let refused = std::thread::scope(|s| {
        let killer = s.spawn(|| {
            // The waiter asked for a pidfd and was refused: it sleeps on the lock's inotify
            // watch alone.
            let refused = eventually(Duration::from_secs(20), || {
                std::fs::read_to_string(&trace).is_ok_and(|t| t.contains("ENOSYS"))
            });
            // Killed once the waiter sleeps (a few of its looks), not between its request and
            // its first sleep: a waiter that finds the holder gone then never sleeps at all.
            std::thread::sleep(Duration::from_millis(300));
            victim.kill().unwrap();
            victim.wait().unwrap();
            refused
        });
        let holder = Holder::try_start_under(&strace, fx.dir(), &["--lock", "p.lock", "--wait"]);
        let refused = killer.join().unwrap();
        let holder = holder.expect("the waiter gets the lock once its holder is dead");
        holder.release();
        refused
    });
    assert!(refused, "the waiter never asked for a pidfd");
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(
        trace
            .lines()
            .any(|l| l.contains("poll(") && l.contains("], 4, 100)")),
        "the waiter did not look again every 100 ms:\n{trace}"
    );
}

/// An asynchronous waiter sleeps like a blocking one: a wake-up that changed nothing (here a
/// zombie holder judged by pid, whose pidfd stays readable, and readers opening the lock
/// directory) sends it back to sleep without an attempt, so it spends next to no CPU.
#[cfg(feature = "tokio")]
#[test]
fn an_async_waiter_does_not_spin_on_wake_ups_that_change_nothing() {
    if !watchable("waiting::an_async_waiter_does_not_spin_on_wake_ups_that_change_nothing") {
        return;
    }
    let fx = Fixture::new();
    // A zombie: killed, not reaped, so its pid still "runs" and its pidfd is readable.
    let mut zombie = ChildGuard::spawn(std::process::Command::new("sleep").arg("60"));
    zombie.kill().unwrap();
    let rec = format!(r#"{{"pid":{},"token":"z"}}"#, zombie.id());
    plant(fx.dir(), "z.lock", &rec, Duration::ZERO);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::read_dir(fx.dir().join("z.lock"));
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let watch = watch();
        let err = rt
            .block_on(
                fx.locks
                    .named_lock("z.lock")
                    .wait(Duration::from_millis(600))
                    .acquire_async(),
            )
            .unwrap_err();
        let slept = watch.slept();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        // An attempt per wake-up (the zombie's pidfd stays readable) never sleeps.
        if let Err(how) = slept {
            panic!("the waiter spun: {how}");
        }
    });
    assert_eq!(fx.entries(), vec!["z.lock".to_owned()]);
}

/// No duration a caller can pass panics: a wait or a grace period of `Duration::MAX` is a wait
/// without a deadline (it once overflowed the clock: "overflow when adding duration to
/// instant").
#[test]
fn the_longest_durations_wait_without_a_deadline() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            fx.locks
                .named_lock("w.lock")
                .wait(Wait::Timeout(Duration::MAX))
                .grace(Duration::MAX)
                .acquire()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the waiter waits");
        holder.release();
        waiter.join().unwrap().unwrap().release().unwrap();
    });
}
