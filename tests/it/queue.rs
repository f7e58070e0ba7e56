//! The queue of waiters: served in the order they came, listed by `status` in that order, and
//! left with nothing behind by a waiter that gives up.

use crate::common::*;
use dirlock::{Error, Wait};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) const LOCK: &str = "q.lock";

/// How many waiters are in `fx`'s queue of [`LOCK`] (as `status` lists them).
pub(crate) fn queued(fx: &Fixture) -> Vec<String> {
    let st = fx.locks.named_lock(LOCK).status().unwrap();
    st.queue
        .iter()
        .map(|p| {
            p.owner
                .as_ref()
                .and_then(|o| o.purpose.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// Starts a thread that waits (as `wait` says) for [`LOCK`] with purpose `purpose`, and
/// returns once it is in the queue; the thread records `purpose` in `served` when it holds the
/// lock, holds it a moment, and returns what its acquisition returned. A purpose that starts
/// with `reader` reads (takes the lock shared).
pub(crate) fn waiter<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    fx: &'s Fixture,
    purpose: &str,
    wait: Wait,
    served: &'s Arc<Mutex<Vec<String>>>,
) -> std::thread::ScopedJoinHandle<'s, Result<(), Error>> {
    waiter_holding(s, fx, purpose, wait, served, Duration::from_millis(5))
}

/// [`waiter`], holding the lock for `hold`.
pub(crate) fn waiter_holding<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    fx: &'s Fixture,
    purpose: &str,
    wait: Wait,
    served: &'s Arc<Mutex<Vec<String>>>,
    hold: Duration,
) -> std::thread::ScopedJoinHandle<'s, Result<(), Error>> {
    let before = queued(fx).len();
    let p = purpose.to_owned();
    let handle = s.spawn(move || {
        let request = fx.locks.named_lock(LOCK).wait(wait).purpose(&p);
        let request = match p.starts_with("reader") {
            true => request.shared(),
            false => request,
        };
        let g = request.acquire()?;
        served.lock().unwrap().push(p);
        std::thread::sleep(hold);
        g.release()
    });
    assert!(
        eventually(Duration::from_secs(10), || queued(fx).len() > before),
        "{purpose} never queued"
    );
    handle
}

/// Makes the queue's turn file anew, as a release that started its clock `age` ago would have:
/// the next release gives a turn if `age` is past the turn's period.
pub(crate) fn date_turn(fx: &Fixture, age: Duration) {
    let turn = fx.dir().join(format!("{LOCK}.queue")).join("turn");
    let file = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(turn);
    let old = std::time::SystemTime::now() - age;
    file.unwrap().set_modified(old).unwrap();
}

/// `n` waiters queue, one after another, behind a holder that then releases: `status` lists
/// them as they came, and they are served in that order.
fn served_in_turn(fx: &Fixture, n: usize) {
    let served = Arc::new(Mutex::new(Vec::new()));
    let names: Vec<String> = (0..n).map(|i| format!("waiter {i}")).collect();
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|p| waiter(s, fx, p, Wait::Forever, &served))
            .collect();
        assert_eq!(queued(fx), names, "status lists the waiters as they came");
        held.release().unwrap();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    });
    assert_eq!(*served.lock().unwrap(), names, "served out of order");
}

#[test]
fn waiters_are_served_in_the_order_they_came_and_status_lists_them_so() {
    let fx = Fixture::new();
    served_in_turn(&fx, 6);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A writer queued behind another writer waits on that one's entry in the queue, not on the
/// holder, so that a handoff wakes the next in line and not every waiter: with two writers
/// queued behind a holder, the first one's entry is open twice (by itself, and by the second,
/// which sleeps on it).
#[cfg(target_os = "linux")]
#[test]
fn a_writer_waits_on_the_writer_ahead_of_it_not_on_the_holder() {
    let fx = Fixture::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    let opened = |entry: &std::path::Path| {
        let fds = std::fs::read_dir("/proc/self/fd").unwrap().flatten();
        fds.filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == entry))
            .count()
    };
    std::thread::scope(|s| {
        let first = waiter(s, &fx, "first", Wait::Forever, &served);
        let second = waiter(s, &fx, "second", Wait::Forever, &served);
        let mut entries: Vec<_> = std::fs::read_dir(&queue)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".w."))
            .map(|e| std::fs::canonicalize(e.path()).unwrap())
            .collect();
        entries.sort();
        assert_eq!(entries.len(), 2, "two writers queued: {entries:?}");
        let in_line = eventually(Duration::from_secs(10), || opened(&entries[0]) == 2);
        let counts = (opened(&entries[0]), opened(&entries[1]));
        held.release().unwrap();
        first.join().unwrap().unwrap();
        second.join().unwrap().unwrap();
        assert!(
            in_line,
            "the second writer does not wait on the first one's entry (open {counts:?} times)"
        );
    });
    assert_eq!(*served.lock().unwrap(), ["first", "second"]);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// Readers that wait behind a writer take their places in the queue (`status` lists them):
/// they come in after that writer, together, and before a writer that came after them. That
/// later writer keeps readers out (`NAME.writers`) while the first one holds the lock, which it
/// holds long enough for the readers to wait for it as a holder: when it is done, they look
/// for waiting writers afresh, and must not wait for one queued after them.
#[test]
fn readers_behind_a_writer_go_before_a_writer_that_came_after_them() {
    let fx = Fixture::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let names = ["writer 1", "reader 1", "reader 2", "writer 2"].map(String::from);
    let held = fx.locks.named_lock(LOCK).shared().acquire().unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|p| {
                let hold = Duration::from_millis(if p == "writer 1" { 300 } else { 5 });
                waiter_holding(s, &fx, p, Wait::Forever, &served, hold)
            })
            .collect();
        assert_eq!(queued(&fx), names, "status lists the waiters as they came");
        // Both writers wait for the read lock too (their entries in it keep new readers out),
        // which is where the second keeps the readers out while the first holds the lock.
        let lock = fx.dir().join(LOCK);
        let writers = || {
            let entries = std::fs::read_dir(&lock).into_iter().flatten().flatten();
            let names = entries.map(|e| e.file_name().to_string_lossy().into_owned());
            names.filter(|n| n.starts_with("writer.")).count()
        };
        assert!(
            eventually(Duration::from_secs(10), || writers() == 2),
            "the writers never marked the read lock"
        );
        held.release().unwrap();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    });
    let mut served = served.lock().unwrap().clone();
    served[1..3].sort();
    assert_eq!(served, names, "served out of order");
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A reader that finds a read lock takes a number when others are queued, and lets a writer
/// queued before it go first, although that writer is not yet in the lock: held up in its
/// `on_wait`, it was left the lock by a release that gave a turn, and a reader took it.
#[test]
fn a_reader_lets_a_writer_queued_before_it_go_first_though_not_yet_in_the_lock() {
    let fx = Fixture::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let holder = fx.locks.named_lock(LOCK).acquire().unwrap();
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let writer_served = Arc::clone(&served);
    std::thread::scope(|s| {
        // Dropped should the test fail: the writer goes on (no thread is left waiting).
        let go = go;
        let writer = s.spawn(|| {
            let g = fx.locks.named_lock(LOCK).purpose("writer");
            let g = g.wait(Wait::Forever);
            let g = g.on_wait(move |_| {
                let _ = gate.lock().unwrap().recv();
            });
            let g = g.acquire().unwrap();
            writer_served.lock().unwrap().push("writer".to_owned());
            g.release().unwrap();
        });
        assert!(
            eventually(Duration::from_secs(10), || queued(&fx) == ["writer"]),
            "the writer never queued"
        );
        // The turn is due: the release leaves the lock free, to a reader that reads on.
        date_turn(&fx, Duration::from_secs(5));
        holder.release().unwrap();
        let first = fx.locks.named_lock(LOCK).shared().wait(Wait::Forever);
        let first = first.acquire().unwrap();
        let late = waiter(s, &fx, "reader", Wait::Forever, &served);
        assert_eq!(queued(&fx), ["writer", "reader"]);
        go.send(()).unwrap();
        first.release().unwrap();
        writer.join().unwrap();
        late.join().unwrap().unwrap();
    });
    assert_eq!(
        *served.lock().unwrap(),
        ["writer", "reader"],
        "served out of order"
    );
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A queued reader is not held up by a stalled writer queued ahead of it that is not in the
/// lock, when a writer queued after it waits in the lock: it passes the stalled one after
/// the bounded deferral, and comes in before the later writer (it once waited on the stalled
/// writer for good, and the later writer went first).
#[test]
fn a_stalled_writer_ahead_holds_a_reader_back_only_for_a_moment() {
    let fx = Fixture::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let holder = fx.locks.named_lock(LOCK).acquire().unwrap();
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let stalled_now = Arc::new(AtomicBool::new(false));
    let stalling = Arc::clone(&stalled_now);
    std::thread::scope(|s| {
        // Dropped should the test fail: the stalled writer goes on.
        let go = go;
        let stalled = s.spawn(|| {
            let g = fx
                .locks
                .named_lock(LOCK)
                .purpose("stalled")
                .wait(Wait::Forever);
            let g = g.on_wait(move |_| {
                stalling.store(true, Ordering::SeqCst);
                let _ = gate.lock().unwrap().recv();
            });
            g.acquire().unwrap().release().unwrap();
        });
        // Queued, and stalled in its callback (a writer handed the lock before it got there,
        // on a loaded machine, never stalled).
        assert!(eventually(Duration::from_secs(10), || {
            queued(&fx) == ["stalled"] && stalled_now.load(Ordering::SeqCst)
        }));
        date_turn(&fx, Duration::from_secs(5));
        holder.release().unwrap();
        let first = fx.locks.named_lock(LOCK).shared().wait(Wait::Forever);
        let first = first.acquire().unwrap();
        let (sv, fxr) = (Arc::clone(&served), &fx);
        let reader = s.spawn(move || {
            let r = fxr.locks.named_lock(LOCK).shared().purpose("reader");
            let g = r.wait(Wait::Timeout(Duration::from_secs(20))).acquire()?;
            sv.lock().unwrap().push("reader".to_owned());
            std::thread::sleep(Duration::from_millis(5));
            g.release()
        });
        let seen = || queued(&fx).contains(&"reader".to_owned());
        let came = || !served.lock().unwrap().is_empty();
        assert!(eventually(Duration::from_secs(10), || seen() || came()));
        let late = waiter(s, &fx, "writer", Wait::Forever, &served);
        assert!(
            eventually(Duration::from_secs(10), came),
            "the reader never came in"
        );
        first.release().unwrap();
        // (The stalled writer is handed the lock now, and goes on.)
        go.send(()).unwrap();
        reader.join().unwrap().unwrap();
        late.join().unwrap().unwrap();
        stalled.join().unwrap();
    });
    assert_eq!(
        *served.lock().unwrap(),
        ["reader", "writer"],
        "served out of order"
    );
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

#[test]
fn a_waiter_that_gives_up_leaves_its_place_and_nothing_behind() {
    let fx = Fixture::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    std::thread::scope(|s| {
        let quitter = waiter(
            s,
            &fx,
            "quitter",
            Wait::Timeout(Duration::from_millis(300)),
            &served,
        );
        let stayer = waiter(s, &fx, "stayer", Wait::Forever, &served);
        match quitter.join().unwrap() {
            Err(Error::Timeout { .. }) => {}
            other => panic!("the quitter did not time out: {other:?}"),
        }
        assert_eq!(queued(&fx), ["stayer"], "the quitter left its place");
        held.release().unwrap();
        stayer.join().unwrap().unwrap();
    });
    assert_eq!(*served.lock().unwrap(), ["stayer"]);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

#[test]
fn planted_entries_neither_fail_nor_reorder_the_queue() {
    let fx = Fixture::new();
    let queue = private_dir(&fx.dir().join(format!("{LOCK}.queue")));
    // A number at the top (one more would overflow), a file and a directory nobody locks.
    std::fs::create_dir(queue.join("18446744073709551615.w.top")).unwrap();
    std::fs::write(queue.join("00000000000000000001.w.file"), "").unwrap();
    std::fs::create_dir(queue.join("00000000000000000002.w.nobody")).unwrap();
    served_in_turn(&fx, 4);
    // The dead and the planted are passed over and removed; what is no entry stays.
    let left: Vec<String> = std::fs::read_dir(&queue)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(left, ["18446744073709551615.w.top"]);
}

/// A live entry planted at the highest number an entry can have: waiters that come after it
/// take that number too (one more would be no entry: `status` listed none of them, and no
/// release handed them the lock), and are served.
#[test]
fn waiters_behind_a_planted_top_number_stay_in_the_queue() {
    let fx = Fixture::new();
    let queue = private_dir(&fx.dir().join(format!("{LOCK}.queue")));
    let top = queue.join("09999999999999999999.w.planted");
    std::fs::create_dir(&top).unwrap();
    let planted = crate::common::sys::flocked(&top);
    let served = Arc::new(Mutex::new(Vec::new()));
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    std::thread::scope(|s| {
        let a = waiter(s, &fx, "a", Wait::Forever, &served);
        let b = waiter(s, &fx, "b", Wait::Forever, &served);
        let mut listed = queued(&fx);
        listed.sort();
        assert_eq!(listed, ["a", "b"], "status lists both waiters");
        drop(planted);
        held.release().unwrap();
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    assert_eq!(served.lock().unwrap().len(), 2);
}

/// Waiters handed the lock in quick succession, in four processes: each release finds its lock
/// where it left it (once, a holder's own entry, still in the queue, was handed the lock again:
/// the lock went back to the name the previous holder was retiring, which that release then
/// reported lost).
#[test]
fn quick_handoffs_between_processes_never_touch_anothers_lock() {
    let fx = Fixture::new();
    let mut workers: Vec<ChildGuard> = (0..4).map(|_| worker(&fx, None)).collect();
    for w in &mut workers {
        let status = w
            .wait_for(Duration::from_secs(120))
            .expect("a worker wedged");
        assert!(status.success(), "a worker's release failed: {status}");
    }
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// A release hands the lock to the first waiter in one step, where the filesystem exchanges
/// names (Linux, macOS): a waiter stopped (`SIGSTOP`) while it waits, which cannot take a free
/// lock itself, holds the lock as soon as `release` returns, and finds it its own when it goes
/// on. (Where names are not exchanged, the lock would be free until the waiter runs.)
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
fn a_release_hands_the_lock_to_a_stopped_waiter() {
    let fx = Fixture::new();
    let test = "queue::a_release_hands_the_lock_to_a_stopped_waiter";
    if !crate::common::sys::lacks_exchange(test, fx.tmp.path()) {
        hand_to_a_stopped_waiter(&fx, &[]);
        assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
    }
}

/// The handoff of [`a_release_hands_the_lock_to_a_stopped_waiter`] in `fx`, where `status`
/// lists the queue (by purpose) as `ahead` and the stopped waiter.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(crate) fn hand_to_a_stopped_waiter(fx: &Fixture, ahead: &[&str]) {
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "queue::waiting_process", "--ignored", "--quiet"])
        .env("DIRLOCK_QUEUE_WORKER_DIR", fx.dir())
        .stdout(std::process::Stdio::null());
    let mut child = ChildGuard::spawn(cmd);
    let listed = [ahead, &["stopped"]].concat();
    assert!(
        eventually(Duration::from_secs(30), || queued(fx) == listed),
        "the waiting process never queued: {:?}",
        queued(fx)
    );
    // Stopped for certain: a waiter still running could take a free lock itself, and a
    // release that handed nothing on would pass.
    crate::common::sys::stop(&[child.id()]);
    held.release().unwrap();
    let st = fx.locks.named_lock(LOCK).status().unwrap();
    let holder = st.owner.as_ref().map(|o| (o.pid, o.purpose.clone()));
    crate::common::sys::resume(&[child.id()]);
    assert_eq!(
        (st.state, holder),
        (
            dirlock::State::Held,
            Some((child.id(), Some("stopped".to_owned())))
        ),
        "when the release returned, the lock was not the stopped waiter's"
    );
    let status = child
        .wait_for(Duration::from_secs(60))
        .expect("the waiter wedged");
    assert!(status.success(), "the waiter failed: {status}");
}

/// The waiter of [`a_release_hands_the_lock_to_a_stopped_waiter`]: takes [`LOCK`] in
/// `DIRLOCK_QUEUE_WORKER_DIR` (purpose `stopped`), however long it waits, and releases it.
#[test]
#[ignore = "a waiter, started by the test of a handoff to a stopped waiter"]
fn waiting_process() {
    let Some(dir) = std::env::var_os("DIRLOCK_QUEUE_WORKER_DIR") else {
        return;
    };
    let locks = dirlock::Locks::in_dir(std::path::PathBuf::from(dir)).unwrap();
    let request = locks
        .named_lock(LOCK)
        .wait(Wait::Forever)
        .purpose("stopped");
    let held = request.acquire().unwrap();
    assert!(
        held.reclaimed_from().is_none(),
        "the handed lock was reclaimed"
    );
    held.release().unwrap();
}

/// A process running [`queue_worker`] in `fx`'s lock directory, until `stop` exists (at most a
/// minute) or for 1,500 cycles.
pub(crate) fn worker(fx: &Fixture, stop: Option<&std::path::Path>) -> ChildGuard {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "queue::queue_worker", "--ignored", "--quiet"])
        .env("DIRLOCK_QUEUE_WORKER_DIR", fx.dir())
        .stdout(std::process::Stdio::null());
    if let Some(stop) = stop {
        cmd.env("DIRLOCK_QUEUE_WORKER_STOP", stop);
    }
    ChildGuard::spawn(cmd)
}

/// The worker of [`quick_handoffs_between_processes_never_touch_anothers_lock`]: 1,500 cycles,
/// or, holding the lock 2 ms each time, as many as fit before `DIRLOCK_QUEUE_WORKER_STOP`
/// names a file (at most a minute); then it notes in `STOP.in-turn` each time it got the lock
/// while the queue's turn file said a turn was on (saying so, under 50 ms old).
#[test]
#[ignore = "a worker, started by the tests of quick handoffs"]
fn queue_worker() {
    let Some(dir) = std::env::var_os("DIRLOCK_QUEUE_WORKER_DIR") else {
        return;
    };
    let stop = std::env::var_os("DIRLOCK_QUEUE_WORKER_STOP").map(std::path::PathBuf::from);
    let locks = dirlock::Locks::in_dir(std::path::PathBuf::from(dir)).unwrap();
    let start = std::time::Instant::now();
    for i in 0.. {
        let done = match &stop {
            Some(stop) => stop.exists() || start.elapsed() > Duration::from_secs(60),
            None => i == 1500,
        };
        if done {
            break;
        }
        let g = locks.named_lock(LOCK).wait(Wait::Forever).durable(false);
        let held = g.acquire().unwrap();
        if let Some(stop) = &stop {
            let turn = locks.dir().join(format!("{LOCK}.queue/turn"));
            let age = std::fs::metadata(&turn).and_then(|m| m.modified()).ok();
            let age = age.and_then(|m| m.elapsed().ok());
            if age.is_some_and(|a| a < Duration::from_millis(50))
                && std::fs::read(&turn).is_ok_and(|c| c == b"given\n")
            {
                let mut note = stop.clone().into_os_string();
                note.push(".in-turn");
                let mut f = std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(note)
                    .unwrap();
                std::io::Write::write_all(&mut f, format!("{age:?}\n").as_bytes()).unwrap();
            }
            std::thread::sleep(Duration::from_millis(2)); // the others queue meanwhile
        }
        held.release().unwrap();
    }
}

/// A sweep removes the drafts of waiters that died taking their numbers (`new.<token>`, its
/// `flock` free) and what is no directory at such a name, and keeps a draft whose maker holds
/// it, and the queue with it.
#[test]
fn a_sweep_removes_dead_drafts_and_keeps_a_live_one() {
    let fx = Fixture::new();
    let queue = private_dir(&fx.dir().join(format!("{LOCK}.queue")));
    std::fs::create_dir(queue.join("new.dead")).unwrap();
    std::fs::write(queue.join("new.file"), "").unwrap();
    std::os::unix::fs::symlink("/", queue.join("new.link")).unwrap();
    std::fs::create_dir(queue.join("new.live")).unwrap();
    let live = crate::common::sys::flocked(&queue.join("new.live"));
    let swept = fx.locks.sweep(Duration::ZERO).unwrap();
    assert_eq!(
        swept.removed,
        Vec::<String>::new(),
        "a queue with a live draft removed"
    );
    let left = std::fs::read_dir(&queue).unwrap().flatten();
    let left: Vec<_> = left.map(|e| e.file_name()).collect();
    assert_eq!(left, ["new.live"]);
    drop(live);
    let swept = fx.locks.sweep(Duration::ZERO).unwrap();
    assert_eq!(swept.removed, [format!("{LOCK}.queue")]);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers of a sweep");
}

/// A queue left with only a dead waiter's entry (a waiter killed while it waited) and its turn
/// file (or a directory at its name) is gone after the next release, whoever made it (the next
/// holder does not pay for it for good), or after a sweep.
#[test]
fn a_release_or_a_sweep_removes_a_queue_left_to_the_dead() {
    let fx = Fixture::new();
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    let turn = queue.join("turn");
    let plant = |age: Option<Duration>| {
        private_dir(&queue);
        std::fs::create_dir(queue.join("00000000000000000001.w.dead")).unwrap();
        match age {
            Some(age) => std::fs::File::create(&turn)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - age)
                .unwrap(),
            None => std::fs::create_dir(&turn).unwrap(),
        }
    };
    let cycle = || {
        fx.locks
            .named_lock(LOCK)
            .acquire()
            .unwrap()
            .release()
            .unwrap()
    }; // no number
    for turn in [Some(Duration::ZERO), None] {
        plant(turn);
        cycle();
        assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers of a release");
        plant(turn);
        let swept = fx.locks.sweep(Duration::ZERO).unwrap();
        assert_eq!(swept.removed, [format!("{LOCK}.queue")]);
        assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers of a sweep");
    }
}
