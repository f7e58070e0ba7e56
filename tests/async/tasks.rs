//! The asynchronous acquisition's tests (see `tests/async.rs`).

#[path = "../common/portable.rs"]
pub(crate) mod portable;

use crate::machine::Watch;
use dirlock::{Cancel, Error, Locks, Wait};
pub(crate) use portable::entries;
use portable::Holder;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const LOCK: &str = "async.lock";

/// The holder process of [`start_holder`]; does nothing as an ordinary test.
#[test]
#[ignore = "a holder process for the other tests, started by them"]
fn async_holder() {
    portable::hold();
}

/// A process that holds `LOCK` in `dir` until `until` exists, once it holds it.
pub(crate) fn start_holder(dir: &Path, until: &Path) -> Holder {
    portable::start_self_holder("tasks::async_holder", dir, LOCK, until)
}

pub(crate) fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let until = tmp.path().join("release-now");
    (tmp, dir, until)
}

pub(crate) fn runtime(threads: usize) -> tokio::runtime::Runtime {
    if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    }
    .enable_all()
    .build()
    .unwrap()
}

/// `fut`, or a failure after `secs` (a wait that never ends fails the test, not hangs it).
pub(crate) async fn within<T>(secs: u64, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("still waiting after {secs} s"))
}

#[test]
fn tasks_exclude_each_other_and_each_gets_the_lock_once() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    for threads in [1, 4] {
        let inside = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicUsize::new(0));
        runtime(threads).block_on(async {
            let tasks: Vec<_> = (0..40)
                .map(|_| {
                    let (locks, inside, count) = (locks.clone(), inside.clone(), count.clone());
                    tokio::spawn(async move {
                        let guard = locks
                            .named_lock(LOCK)
                            .wait(Wait::Forever)
                            .acquire_async()
                            .await
                            .unwrap();
                        assert!(!inside.swap(true, Ordering::SeqCst), "two tasks inside");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        count.fetch_add(1, Ordering::SeqCst);
                        inside.store(false, Ordering::SeqCst);
                        guard.release().unwrap();
                    })
                })
                .collect();
            for t in tasks {
                within(60, t).await.unwrap();
            }
        });
        assert_eq!(count.load(Ordering::SeqCst), 40);
        assert_eq!(entries(&dir), Vec::<String>::new(), "{threads} threads");
    }
}

/// The tasks of one process waiting for a lock are served in the order they asked, whoever
/// released it (here another process first, then each task in turn).
#[test]
fn waiting_tasks_are_served_in_the_order_they_asked() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    runtime(4).block_on(async {
        let mut tasks = Vec::new();
        for i in 0..12 {
            let (locks, order) = (locks.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let guard = locks
                    .named_lock(LOCK)
                    .wait(Wait::Forever)
                    .acquire_async()
                    .await
                    .unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().unwrap();
            }));
            // Each asks after the one before is queued.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(&until, "").unwrap();
        for t in tasks {
            within(60, t).await.unwrap();
        }
    });
    holder.finish();
    assert_eq!(*order.lock().unwrap(), (0..12).collect::<Vec<_>>());
}

#[test]
fn a_task_waits_for_another_process_and_takes_over_from_a_killed_one() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let rt = runtime(1);
    // Released: the waiting task takes it.
    rt.block_on(async {
        let waiter = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiter.is_finished(),
            "the task did not wait for the holder"
        );
        std::fs::write(&until, "").unwrap();
        let guard = within(30, waiter).await.unwrap().unwrap();
        assert!(guard.reclaimed_from().is_none());
        guard.release().unwrap();
    });
    holder.finish();
    std::fs::remove_file(&until).unwrap();
    // Killed: the waiting task proves it dead and reclaims at once (no grace period).
    let holder = start_holder(&dir, &until);
    let pid = holder.pid();
    rt.block_on(async {
        let waiter = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished());
        holder.kill();
        let guard = within(30, waiter).await.unwrap().unwrap();
        assert_eq!(guard.reclaimed_from().map(|o| o.pid), Some(pid));
        guard.release().unwrap();
    });
    assert_eq!(entries(&dir), Vec::<String>::new());
}

#[test]
fn a_timeout_and_a_cancel_end_an_async_wait_leaving_nothing_behind() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let err = locks
            .named_lock(LOCK)
            .wait(Duration::from_millis(300))
            .acquire_async()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(err.owner().map(|o| o.pid), Some(holder.pid()), "{err}");
        let err = locks
            .named_lock(LOCK)
            .wait(Wait::Immediately)
            .acquire_async()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Locked { .. }), "{err}");
        let cancel = Cancel::new().unwrap();
        let waiter = tokio::spawn(
            locks
                .named_lock(LOCK)
                .wait(Wait::Forever)
                .cancel(&cancel)
                .acquire_async(),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
        let err = within(30, waiter).await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Cancelled { .. }), "{err}");
        // Dropped under a timeout of the caller's.
        let dropped = tokio::time::timeout(
            Duration::from_millis(200),
            locks.named_lock(LOCK).wait(Wait::Forever).acquire_async(),
        )
        .await;
        assert!(dropped.is_err());
    });
    assert_eq!(entries(&dir), vec![LOCK.to_owned()]);
    let status = locks.named_lock(LOCK).status().unwrap();
    assert_eq!(status.owner.map(|o| o.pid), Some(holder.pid()));
}

/// A waiting task keeps one candidate staged for its whole wait, as a blocking waiter does,
/// and publishes that very candidate when the holder releases (a waiter that staged anew at
/// each look would publish late, and lose nearly every race against blocking waiters).
#[test]
fn a_waiting_task_keeps_its_candidate_staged_and_publishes_it() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let waiter = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let staged: Vec<String> = entries(&dir)
            .into_iter()
            .filter(|e| e.starts_with(&format!("{LOCK}.candidate.")))
            .collect();
        assert_eq!(staged.len(), 1, "{:?}", entries(&dir));
        let token = staged[0].rsplit('.').next().unwrap().to_owned();
        std::fs::write(&until, "").unwrap();
        let guard = within(30, waiter).await.unwrap().unwrap();
        assert_eq!(guard.owner().token, token);
        guard.release().unwrap();
    });
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// A task queued behind another task of its process is told who holds the lock, and its
/// timeout names the holder, as a waiter at the head of the queue would be.
#[test]
fn a_task_queued_behind_another_is_told_who_holds_the_lock() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let (head, told, err) = behind_a_head(&locks, |w| w.owner.pid).await;
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(err.owner().map(|o| o.pid), Some(holder.pid()), "{err}");
        assert_eq!(told, vec![holder.pid()]);
        std::fs::write(&until, "").unwrap();
        within(30, head).await.unwrap().unwrap().release().unwrap();
    });
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// A task that waits 300 ms for `LOCK` behind another (`head`, waiting for it with no
/// deadline): what its `on_wait` was told (each time, as `note` takes it), and how it failed.
async fn behind_a_head<T: Send + 'static>(
    locks: &Locks,
    note: impl Fn(&dirlock::Waiting) -> T + Send + Sync + 'static,
) -> (
    tokio::task::JoinHandle<Result<dirlock::LockGuard, Error>>,
    Vec<T>,
    Error,
) {
    let head = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let err = locks
        .named_lock(LOCK)
        .wait(Duration::from_millis(300))
        .on_wait({
            let told = told.clone();
            move |w| told.lock().unwrap().push(note(w))
        })
        .acquire_async()
        .await
        .unwrap_err();
    let told = std::mem::take(&mut *told.lock().unwrap());
    (head, told, err)
}

/// A task queued behind another, at a lock whose holder seems to have ended, is told so, and
/// its timeout says so (it said "it is held by" the dead pid).
#[cfg(unix)]
#[test]
fn a_task_queued_behind_another_is_told_that_the_holder_has_ended() {
    use dirlock::Blocked;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    // The reference implementation's record of a process that has exited: dead by evidence.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir.join(LOCK))
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(LOCK).join("owner.json"))
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, format!(r#"{{"pid":{pid},"token":"t"}}"#).as_bytes())
        })
        .unwrap();
    let grace = |b: Option<&Blocked>| matches!(b, Some(Blocked::Grace { remaining, .. }) if *remaining > Duration::from_secs(50));
    runtime(1).block_on(async {
        let (head, told, err) = behind_a_head(&locks, |w| w.blocked.clone()).await;
        match &err {
            Error::Timeout { blocked, .. } => assert!(grace(blocked.as_deref()), "{err:?}"),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(
            err.to_string().contains("which seems to have ended"),
            "{err}"
        );
        assert!(told.len() == 1 && grace(told.first()), "{told:?}");
        head.abort();
        assert!(head.await.is_err(), "the head waited out the grace period");
    });
}

/// A runtime that cannot serve a wait (no time; on Unix, no I/O) makes the first call panic
/// with tokio's message, even on a free lock, rather than only once there is contention; and
/// nothing is left behind.
#[test]
fn a_runtime_without_time_or_io_fails_at_the_first_call() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let kinds: &[(bool, bool)] = if cfg!(unix) {
        &[(false, true), (true, false)]
    } else {
        &[(false, true)]
    };
    for &(time, io) in kinds {
        let mut b = tokio::runtime::Builder::new_current_thread();
        if time {
            b.enable_time();
        }
        if io {
            b.enable_io();
        }
        let rt = b.build().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(locks.named_lock(LOCK).acquire_async())
        }));
        let msg = r.map(|_| String::new()).unwrap_err();
        let msg = msg
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| msg.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let want = if time { "enable_io" } else { "enable_time" };
        assert!(msg.contains(want), "time {time}, io {io}: {msg}");
        assert_eq!(entries(&dir), Vec::<String>::new());
    }
}

/// Futures joined in one task are that task also when the lock is held elsewhere: the
/// second is refused as soon as it would queue behind the first, instead of waiting for a
/// guard the join keeps until both are done.
#[test]
fn a_second_future_joined_in_a_task_is_refused_while_the_first_waits() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let wanted = || locks.named_lock(LOCK).wait(Wait::Forever).acquire_async();
        let release = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            std::fs::write(&until, "").unwrap();
        };
        // A second future that would wait, and one that would fail fast: both are refused.
        let at_once = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            locks
                .named_lock(LOCK)
                .wait(Wait::Immediately)
                .acquire_async()
                .await
        };
        let (first, second, third, ()) = within(30, async {
            tokio::join!(wanted(), wanted(), at_once, release)
        })
        .await;
        for err in [second.unwrap_err(), third.unwrap_err()] {
            assert!(matches!(err, Error::AlreadyHeld { .. }), "{err}");
        }
        first.unwrap().release().unwrap();
    });
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// A panic that unwinds past a waiting acquisition (a `select!` whose other branch panics; a
/// panicking `on_wait` of a blocking one) still removes its candidate.
#[test]
fn a_panic_past_a_waiting_acquisition_leaves_no_candidate() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime(1).block_on(async {
            let waiting = locks.named_lock(LOCK).wait(Wait::Forever).acquire_async();
            tokio::select! {
                _ = waiting => {}
                () = async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    panic!("elsewhere in the task");
                } => {}
            }
        })
    }));
    assert!(r.is_err());
    assert_eq!(entries(&dir), vec![LOCK.to_owned()]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        locks
            .named_lock(LOCK)
            .wait(Wait::Forever)
            .on_wait(|_| panic!("in on_wait"))
            .acquire()
    }));
    assert!(r.is_err());
    assert_eq!(entries(&dir), vec![LOCK.to_owned()]);
    std::fs::write(&until, "").unwrap();
    holder.finish();
}

/// On a runtime whose clock is paused (tokio's `test-util`), whose timers fire at once, a wait
/// still lasts its real time, and sleeps rather than spinning through it.
#[test]
fn a_paused_runtime_clock_neither_shortens_a_wait_nor_makes_it_spin() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (watch, started) = (Watch::start(), std::time::Instant::now());
    let err = rt
        .block_on(
            locks
                .named_lock(LOCK)
                .wait(Duration::from_millis(500))
                .acquire_async(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // (Where the kernel counts how a thread spends its time.)
    if let Some(Err(how)) = watch.map(|w| w.slept()) {
        panic!("the waiter spun: {how}");
    }
    std::fs::write(&until, "").unwrap();
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// Reader tasks of one runtime read together (a reader does not keep its runtime's queue
/// waiting behind it), and writer tasks among them are alone.
#[test]
fn reader_tasks_read_together_and_writer_tasks_alone() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let readers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    runtime(4).block_on(async {
        let tasks: Vec<_> = (0..24)
            .map(|i| {
                let (locks, readers, most, writing) = (
                    locks.clone(),
                    readers.clone(),
                    most.clone(),
                    writing.clone(),
                );
                tokio::spawn(async move {
                    let mut req = locks.named_lock(LOCK).wait(Wait::Forever);
                    let shared = i % 6 != 0;
                    if shared {
                        req = req.shared();
                    }
                    let guard = req.acquire_async().await.unwrap();
                    assert_eq!(guard.is_shared(), shared);
                    if shared {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        assert!(!writing.load(Ordering::SeqCst), "a reader beside a writer");
                    } else {
                        assert!(!writing.swap(true, Ordering::SeqCst), "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if shared {
                        readers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        writing.store(false, Ordering::SeqCst);
                    }
                    guard.release().unwrap();
                })
            })
            .collect();
        for t in tasks {
            within(60, t).await.unwrap();
        }
    });
    assert!(
        most.load(Ordering::SeqCst) > 1,
        "readers never read together"
    );
    assert_eq!(entries(&dir), Vec::<String>::new());
}
