//! The queue of waiters: served in the order they came, listed by `status` in that order, and
//! left with nothing behind by a waiter that gives up.

use crate::common::*;
use dirlock::{Error, Wait};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LOCK: &str = "q.lock";

/// How many waiters are in `fx`'s queue of [`LOCK`] (as `status` lists them).
fn queued(fx: &Fixture) -> Vec<String> {
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
/// lock, holds it a moment, and returns what its acquisition returned.
fn waiter<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    fx: &'s Fixture,
    purpose: &str,
    wait: Wait,
    served: &'s Arc<Mutex<Vec<String>>>,
) -> std::thread::ScopedJoinHandle<'s, Result<(), Error>> {
    let before = queued(fx).len();
    let p = purpose.to_owned();
    let handle = s.spawn(move || {
        let g = fx.locks.named_lock(LOCK).wait(wait).purpose(&p).acquire()?;
        served.lock().unwrap().push(p);
        std::thread::sleep(Duration::from_millis(5));
        g.release()
    });
    assert!(
        eventually(Duration::from_secs(10), || queued(fx).len() > before),
        "{purpose} never queued"
    );
    handle
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
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    std::fs::create_dir(&queue).unwrap();
    std::fs::set_permissions(&queue, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
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

/// Waiters handed the lock in quick succession, in four processes: each release finds its lock
/// where it left it (once, a holder's own entry, still in the queue, was handed the lock again:
/// the lock went back to the name the previous holder was retiring, which that release then
/// reported lost).
#[test]
fn quick_handoffs_between_processes_never_touch_anothers_lock() {
    let fx = Fixture::new();
    let mut workers: Vec<ChildGuard> = (0..4)
        .map(|_| {
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args(["--exact", "queue::queue_worker", "--ignored", "--quiet"])
                .env("DIRLOCK_QUEUE_WORKER_DIR", fx.dir())
                .stdout(std::process::Stdio::null());
            ChildGuard::spawn(cmd)
        })
        .collect();
    for w in &mut workers {
        let status = w
            .wait_for(Duration::from_secs(120))
            .expect("a worker wedged");
        assert!(status.success(), "a worker's release failed: {status}");
    }
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

/// The worker of [`quick_handoffs_between_processes_never_touch_anothers_lock`]: 1,500 cycles.
#[test]
#[ignore = "a worker, started by quick_handoffs_between_processes_never_touch_anothers_lock"]
fn queue_worker() {
    let Some(dir) = std::env::var_os("DIRLOCK_QUEUE_WORKER_DIR") else {
        return;
    };
    let locks = dirlock::Locks::in_dir(std::path::PathBuf::from(dir)).unwrap();
    for _ in 0..1500 {
        let g = locks.named_lock(LOCK).wait(Wait::Forever).durable(false);
        g.acquire().unwrap().release().unwrap();
    }
}

/// A queue left with only a dead waiter's entry (a waiter killed while it waited) is gone
/// after the next release, whoever made it: the next holder does not pay for it for good.
#[test]
fn a_release_removes_a_queue_left_to_the_dead() {
    let fx = Fixture::new();
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    std::fs::create_dir(&queue).unwrap();
    std::fs::set_permissions(&queue, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::create_dir(queue.join("00000000000000000001.w.dead")).unwrap();
    let held = fx.locks.named_lock(LOCK).acquire().unwrap(); // fails fast: takes no number
    held.release().unwrap();
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}
