//! The queue's turns: waiters that hand the lock to each other without end leave it free now
//! and then for those that do not queue (the reference implementation, a dirlock from before
//! the queue, a try that fails fast), and let it be meanwhile; a turn file dated by another
//! program holds no waiter back for good.

use super::queue::{date_turn, queued, waiter, waiter_holding, worker, LOCK};
use crate::common::*;
use dirlock::Wait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A holder that found the lock free, with no one waiting, hands it to the waiter that came
/// meanwhile, however long ago that was: it was no part of waiters keeping the lock among
/// themselves, and the turn's clock starts only at the release of a holder that queued. (Found
/// by review: a clock started by the first waiter's coming made the release after a hold of
/// two seconds leave the lock free for 50 ms, to whoever polled, instead of handing it on.)
#[test]
fn a_holder_that_did_not_queue_hands_the_lock_on_however_long_the_waiter_waited() {
    let fx = Fixture::new();
    let turn = fx.dir().join(format!("{LOCK}.queue")).join("turn");
    let served = Arc::new(Mutex::new(Vec::new()));
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    std::thread::scope(|s| {
        let hold = Duration::from_millis(300);
        let w = waiter_holding(s, &fx, "waiter", Wait::Forever, &served, hold);
        // The waiter's turn file, as it made it, dated as if it had come an hour ago: once it
        // is written (dated while still empty, it would say an hour-old clock had started).
        assert!(eventually(Duration::from_secs(10), || std::fs::read(&turn)
            .is_ok_and(|c| c == b"queued\n")));
        let file = std::fs::File::options().write(true).open(&turn).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        held.release().unwrap();
        assert!(eventually(Duration::from_secs(10), || !served
            .lock()
            .unwrap()
            .is_empty()));
        let given = std::fs::read(&turn).is_ok_and(|c| c == b"given\n");
        assert!(
            !given,
            "the release gave a turn instead of handing the lock on"
        );
        w.join().unwrap().unwrap();
    });
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A crash does not restart the turn's clock: the one that takes the lock over from a killed
/// holder counts the clock that holder left, and gives the turn when it is due. (Restarting it
/// at each takeover, tried and backed out, let holders killed less than two seconds apart keep
/// those that do not queue out for many seconds: a review saw a try every 15 ms get in twice
/// in 30 s.) The cost: a clock that a killed holder's queue kept for long gives one turn of
/// 50 ms at the first release that finds a waiter there.
#[test]
fn a_lock_taken_over_from_the_dead_counts_the_turns_clock_it_left() {
    let fx = Fixture::new();
    let turn = private_dir(&fx.dir().join(format!("{LOCK}.queue"))).join("turn");
    let holder = Holder::start(fx.dir(), &["--lock", LOCK]);
    // Waiters handed the lock on for three seconds (the clock started then: an empty file).
    date_turn(&fx, Duration::from_secs(3));
    holder.kill();
    let taken = fx.locks.named_lock(LOCK).acquire().unwrap();
    assert!(taken.reclaimed_from().is_some(), "not taken over");
    let served = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        // Holding it a second: the file, made when the turn was given, stays until it lets go.
        let hold = Duration::from_secs(1);
        let w = waiter_holding(s, &fx, "waiter", Wait::Forever, &served, hold);
        taken.release().unwrap();
        let given = std::fs::read(&turn).is_ok_and(|c| c == b"given\n");
        assert!(given, "no turn was given: the clock was restarted");
        w.join().unwrap().unwrap();
    });
    assert_eq!(*served.lock().unwrap(), ["waiter"]);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A turn file that another program keeps dating now (as a release does when it leaves the
/// lock free for those that do not queue) holds a waiter back once, not for good. (Dated 40 ms
/// ahead every 5 ms, first among threads where it may be: a turn is on until the file is
/// 50 ms old, and a loaded machine must not let it lapse.)
#[test]
fn a_turn_file_kept_fresh_holds_no_waiter_back_for_good() {
    let fx = Fixture::new();
    let turn = fx.dir().join(format!("{LOCK}.queue")).join("turn");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let served = Arc::new(Mutex::new(Vec::new()));
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    std::thread::scope(|s| {
        let w = waiter(s, &fx, "waiter", Wait::Forever, &served);
        // An hour old: the release leaves the lock free instead of handing it over (and makes
        // the file anew); from then on it is dated now, again and again.
        date_turn(&fx, Duration::from_secs(3600));
        held.release().unwrap();
        s.spawn(|| {
            crate::common::sys::run_first();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(f) = std::fs::File::options().write(true).open(&turn) {
                    let ahead = std::time::SystemTime::now() + Duration::from_millis(40);
                    let _ = f.set_modified(ahead);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let done = eventually(Duration::from_secs(10), || w.is_finished());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(done, "the waiter never took the lock");
        w.join().unwrap().unwrap();
    });
    assert_eq!(*served.lock().unwrap(), ["waiter"]);
}

/// A process that does not queue (the reference implementation, a dirlock from before the
/// queue, a try that fails fast) is not starved by waiters that hand the lock to each other
/// without end: the lock is left free for a moment now and then (at least every two seconds),
/// and the waiters let it be meanwhile. Three turns are given (the turn file says so), none
/// is taken by a waiter (each worker notes a lock it got while the file says a turn is on),
/// and a try every 10 ms finds the lock free.
#[test]
fn endless_handoffs_leave_the_lock_free_now_and_then() {
    let fx = Fixture::new();
    let stop = fx.tmp.path().join("stop");
    let mut workers: Vec<ChildGuard> = (0..3).map(|_| worker(&fx, Some(&stop))).collect();
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    assert!(
        eventually(Duration::from_secs(30), || queue.exists()),
        "no queue"
    );
    // A loaded machine's queue may empty now and then, which starts the turn's clock again: a
    // turn not given for 2.5 s is made due by dating the file back (never sooner: a waiter
    // lets the lock be once in half a turn's interval at most).
    let turn = queue.join("turn");
    let (mut given, mut last, mut seen) = (0, std::time::Instant::now(), None);
    while given < 3 && last.elapsed() < Duration::from_secs(30) {
        let made = std::fs::metadata(&turn).and_then(|m| m.modified()).ok();
        let fresh = made.is_some_and(|m| m.elapsed().is_ok_and(|a| a < Duration::from_secs(1)));
        if fresh && made != seen && std::fs::read(&turn).is_ok_and(|c| c == b"given\n") {
            (given, last, seen) = (given + 1, std::time::Instant::now(), made);
        } else if last.elapsed() > Duration::from_millis(2500) {
            // (Never made here: a release may be making it anew.)
            if let Ok(f) = std::fs::File::options().write(true).open(&turn) {
                let _ = f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(given, 3, "turns given");
    let start = std::time::Instant::now();
    let mut taken = 0;
    while taken < 3 && start.elapsed() < Duration::from_secs(30) {
        if let Ok(g) = fx.locks.named_lock(LOCK).acquire() {
            taken += 1;
            // Held until the turn is over: the waiter its release hands the lock to took no
            // turn, and would be counted as one that did (as would those it hands it on to).
            std::thread::sleep(Duration::from_millis(60));
            g.release().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(&stop, "").unwrap();
    for w in &mut workers {
        let status = w
            .wait_for(Duration::from_secs(60))
            .expect("a worker wedged");
        assert!(status.success(), "a worker failed: {status}");
    }
    let in_turn = std::fs::read_to_string(fx.tmp.path().join("stop.in-turn")).unwrap_or_default();
    let first = in_turn.lines().next().unwrap_or_default();
    assert!(
        in_turn.is_empty(),
        "waiters took the lock {} times while a turn was on (the first, the turn {first} old)",
        in_turn.lines().count()
    );
    assert_eq!(
        taken, 3,
        "tries every 10 ms for 30 s found the lock free {taken} times"
    );
    // The last release out removed the queue, and the file that says when it gave a turn.
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// The first `turn` file, the first waiter's, says the clock has not started, and a waiter
/// does not pause for it (nor for the empty one that starts the clock). The file made when a
/// release leaves the lock free for a turn says so.
#[test]
fn only_a_turn_given_is_marked_as_one() {
    let fx = Fixture::new();
    let turn = fx.dir().join(format!("{LOCK}.queue")).join("turn");
    let h = fx.locks.named_lock(LOCK).acquire().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (fx, turn) = (&fx, &turn);
    let wait = move || fx.locks.named_lock(LOCK).wait(Wait::Forever).acquire();
    std::thread::scope(|s| {
        // Dropped should the test fail: W1 goes on (no thread is left waiting).
        let tx = tx;
        let before = queued(fx).len();
        let w1 = s.spawn(move || {
            let g = wait().unwrap();
            rx.recv().unwrap();
            g.release().unwrap();
        });
        assert!(eventually(Duration::from_secs(10), || queued(fx).len() > before));
        h.release().unwrap();
        assert!(
            eventually(Duration::from_secs(10), || turn.exists()),
            "no turn file"
        );
        assert_eq!(
            std::fs::read(turn).unwrap(),
            b"queued\n",
            "the first waiter's file"
        );
        // W1 holds; W2 queues; the clock is run out; W1's release gives the turn.
        let before = queued(fx).len();
        let w2 = s.spawn(move || {
            let g = wait().unwrap();
            let given = std::fs::read(turn).unwrap();
            g.release().unwrap();
            given
        });
        assert!(eventually(Duration::from_secs(10), || queued(fx).len() > before));
        date_turn(fx, Duration::from_secs(5));
        tx.send(()).unwrap();
        w1.join().unwrap();
        assert_eq!(w2.join().unwrap(), b"given\n", "a turn given");
    });
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}
