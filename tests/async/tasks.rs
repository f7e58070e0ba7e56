//! The asynchronous acquisition's tests (see `tests/async.rs`).

#[path = "../common/portable.rs"]
mod portable;

use dirlock::{Cancel, Error, Locks, State, Wait};
use portable::Holder;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const LOCK: &str = "async.lock";

/// The holder process of [`start_holder`]; does nothing as an ordinary test.
#[test]
#[ignore = "a holder process for the other tests, started by them"]
fn async_holder() {
    portable::hold();
}

/// A process that holds `LOCK` in `dir` until `until` exists, once it holds it.
fn start_holder(dir: &Path, until: &Path) -> Holder {
    portable::start_self_holder("tasks::async_holder", dir, LOCK, until)
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let until = tmp.path().join("release-now");
    (tmp, dir, until)
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
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
async fn within<T>(secs: u64, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("still waiting after {secs} s"))
}

/// The names in the lock directory (the lock, candidates, guards, tombstones), sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
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
        let head = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let err = locks
            .named_lock(LOCK)
            .wait(Duration::from_millis(300))
            .on_wait({
                let told = told.clone();
                move |w| told.lock().unwrap().push(w.owner.pid)
            })
            .acquire_async()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(err.owner().map(|o| o.pid), Some(holder.pid()), "{err}");
        assert_eq!(*told.lock().unwrap(), vec![holder.pid()]);
        std::fs::write(&until, "").unwrap();
        within(30, head).await.unwrap().unwrap().release().unwrap();
    });
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
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
    let cpu = thread_cpu_ticks();
    let started = std::time::Instant::now();
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
    if let (Some(before), Some(after)) = (cpu, thread_cpu_ticks()) {
        assert!(
            after - before < 20,
            "the waiter used {} CPU ticks",
            after - before
        );
    }
    std::fs::write(&until, "").unwrap();
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// This thread's CPU time in clock ticks (Linux), for a check that a wait does not spin.
fn thread_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Tasks queued with a cancel hold no descriptor each (a queue of thousands must not run
/// the process out of them, and an error registering one is never reported as a cancel).
#[cfg(target_os = "linux")]
#[test]
fn queued_tasks_with_a_cancel_hold_no_descriptor_each() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    runtime(1).block_on(async {
        let cancel = Cancel::new().unwrap();
        let spawn = |n: usize| -> Vec<_> {
            (0..n)
                .map(|_| {
                    let req = locks.named_lock(LOCK).wait(Wait::Forever).cancel(&cancel);
                    tokio::spawn(req.acquire_async())
                })
                .collect()
        };
        let head = spawn(1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = open();
        let queued = spawn(200);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let grew = open().saturating_sub(before);
        assert!(grew < 20, "200 queued tasks opened {grew} descriptors");
        cancel.cancel();
        for t in head.into_iter().chain(queued) {
            let err = within(30, t).await.unwrap().unwrap_err();
            assert!(matches!(err, Error::Cancelled { .. }), "{err}");
        }
    });
    std::fs::write(&until, "").unwrap();
    holder.finish();
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// Polls `fut` once with a waker that does nothing.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// A future dropped after any number of polls (queued behind another task, waiting for another
/// process, or woken and about to look again) leaves no candidate, guard or lock behind, and
/// the holder's lock untouched; one that completed holds the lock in its guard.
#[test]
fn dropping_the_future_at_any_point_leaves_nothing_behind() {
    let (_tmp, dir, until) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let rt = runtime(1);
    let _enter = rt.enter();
    for polls in 0..6 {
        // Waiting for another process.
        let holder = start_holder(&dir, &until);
        let mut fut = Box::pin(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        for _ in 0..polls {
            assert!(poll_once(fut.as_mut()).is_pending());
        }
        drop(fut);
        assert_eq!(entries(&dir), vec![LOCK.to_owned()], "after {polls} polls");
        // Queued behind a task of ours that holds it.
        drop(holder);
        let ours = rt
            .block_on(rt.spawn(locks.named_lock(LOCK).acquire_async()))
            .unwrap()
            .unwrap();
        let mut fut = Box::pin(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        for _ in 0..polls {
            assert!(poll_once(fut.as_mut()).is_pending());
        }
        drop(fut);
        assert_eq!(entries(&dir), vec![LOCK.to_owned()], "after {polls} polls");
        ours.release().unwrap();
        assert_eq!(entries(&dir), Vec::<String>::new(), "after {polls} polls");
    }
    // Woken by the release and dropped before it looked again; then one that completes.
    let holder = start_holder(&dir, &until);
    let mut fut = Box::pin(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
    assert!(poll_once(fut.as_mut()).is_pending());
    std::fs::write(&until, "").unwrap();
    holder.finish();
    drop(fut);
    assert_eq!(entries(&dir), Vec::<String>::new());
    let mut fut = Box::pin(locks.named_lock(LOCK).acquire_async());
    let Poll::Ready(Ok(guard)) = poll_once(fut.as_mut()) else {
        panic!("a free lock is taken at the first poll");
    };
    assert_eq!(locks.named_lock(LOCK).status().unwrap().state, State::Held);
    drop(guard);
    drop(fut);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

#[test]
fn a_task_is_refused_its_own_lock_and_the_wrong_order_while_others_wait() {
    let (tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    // One thread: the other task runs on the same thread, and must wait, not be refused.
    runtime(1).block_on(async {
        let guard = locks.named_lock(LOCK).acquire_async().await.unwrap();
        let err = locks
            .named_lock(LOCK)
            .wait(Wait::Forever)
            .acquire_async()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::AlreadyHeld { .. }), "{err}");
        // A blocking acquisition inside the task is the task's too.
        let err = locks.named_lock(LOCK).acquire().unwrap_err();
        assert!(matches!(err, Error::AlreadyHeld { .. }), "{err}");
        // Futures joined in one task are that task: the second is refused, not left to wait
        // for a guard the join keeps until both are done.
        let (first, second) = tokio::join!(
            async { locks.named_lock("joined.lock").acquire_async().await },
            async {
                locks
                    .named_lock("joined.lock")
                    .wait(Wait::Forever)
                    .acquire_async()
                    .await
            }
        );
        let err = second.unwrap_err();
        assert!(matches!(err, Error::AlreadyHeld { .. }), "{err}");
        first.unwrap().release().unwrap();
        // Another task waits for it, and gets it once released.
        let other = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!other.is_finished());
        guard.release().unwrap();
        within(30, other).await.unwrap().unwrap().release().unwrap();
        // Setup inside a repository lock: refused; the helper takes them in order.
        let r = locks.repository_lock(&repo).acquire_async().await.unwrap();
        let err = locks
            .global_setup_lock(&home)
            .acquire_async()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::LockOrder { .. }), "{err}");
        r.release().unwrap();
        let n = locks
            .with_setup_locks_async(&home, &repo, || async { Ok::<_, Error>(7) })
            .await
            .unwrap();
        assert_eq!(n, 7);
        let n = locks
            .with_repository_lock_async(&repo, || async {
                tokio::task::yield_now().await;
                Ok::<_, Error>(8)
            })
            .await
            .unwrap();
        assert_eq!(n, 8);
    });
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// The future is `Send`: it can be spawned on a multi-threaded runtime.
#[test]
fn the_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let fut = locks.named_lock(LOCK).acquire_async();
    send(&fut);
    let fut = locks.with_repository_lock_async(".", || async { Ok::<_, Error>(()) });
    send(&fut);
}

/// `run_with_async` hands the work its guard, and keeps the work's value when the release
/// fails after it.
#[test]
fn run_with_async_hands_over_the_guard_and_keeps_the_value_when_the_release_fails() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let path = locks
            .named_lock(LOCK)
            .run_with_async(async |guard: &dirlock::LockGuard| {
                tokio::task::yield_now().await;
                Ok::<_, Error>(guard.path().to_owned())
            })
            .await
            .unwrap();
        assert_eq!(path, dir.join(LOCK));
        let err = locks
            .named_lock(LOCK)
            .run_with_async(async |guard: &dirlock::LockGuard| {
                #[expect(clippy::disallowed_methods, reason = "a thief moves the lock away")]
                std::fs::rename(guard.path(), dir.join("stolen")).unwrap();
                Ok::<_, Error>(7u8)
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotReleased { .. }), "{err:?}");
        assert_eq!(err.into_value::<u8>().unwrap(), 7);
    });
    assert_eq!(entries(&dir), vec!["stolen".to_owned()]);
}

/// Outside a runtime the future says what is wrong instead of panicking.
#[test]
fn outside_a_runtime_the_future_is_refused() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let mut fut = Box::pin(locks.named_lock(LOCK).acquire_async());
    let Poll::Ready(Err(err)) = poll_once(fut.as_mut()) else {
        panic!("expected a refusal");
    };
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("tokio runtime"), "{err}");
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// No duration a caller can pass panics: `Duration::MAX` waits without a deadline, as it does
/// for a blocking acquisition.
#[test]
fn the_longest_durations_wait_without_a_deadline() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    runtime(1).block_on(async {
        let waiter = tokio::spawn(
            locks
                .named_lock(LOCK)
                .wait(Wait::Timeout(Duration::MAX))
                .grace(Duration::MAX)
                .acquire_async(),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "the task waits");
        std::fs::write(&until, "").unwrap();
        within(30, waiter)
            .await
            .unwrap()
            .unwrap()
            .release()
            .unwrap();
    });
    holder.finish();
}

/// Each runtime's tasks queue on their own: a task at the head of a lock's queue on a runtime
/// that is no longer driven (its `block_on` returned) holds back no other runtime's tasks.
/// (Once, the queue was the process's: a task of another runtime timed out while the lock was
/// free.)
#[test]
fn a_runtime_no_longer_driven_holds_back_no_other_runtimes_tasks() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let idle = runtime(1);
    // Its task waits for the holder at the head of the queue; then the runtime stops.
    let stuck = idle.spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
    idle.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    std::fs::write(&until, "").unwrap();
    holder.finish();
    let got = runtime(1).block_on(
        locks
            .named_lock(LOCK)
            .wait(Duration::from_secs(5))
            .acquire_async(),
    );
    got.expect("the free lock, while another runtime's task waits undriven")
        .release()
        .unwrap();
    stuck.abort();
    drop(idle);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// Where the worker of [`out_of_descriptors_an_async_wait_degrades_as_a_blocking_one_does`]
/// waits, and how many descriptors it has to spare.
#[cfg(target_os = "linux")]
const SPARE_DIR: &str = "DIRLOCK_TEST_SPARE_DIR";
#[cfg(target_os = "linux")]
const SPARE_FDS: &str = "DIRLOCK_TEST_SPARE_FDS";
#[cfg(target_os = "linux")]
const SPARE_ASYNC: &str = "DIRLOCK_TEST_SPARE_ASYNC";

/// The worker: with only a few descriptors to spare, waits (at most 20 s) for a held lock,
/// asynchronously or (without `SPARE_ASYNC`) blocking.
#[cfg(target_os = "linux")]
#[test]
#[ignore = "a worker process for the other tests, started by them"]
#[allow(unsafe_code, reason = "setrlimit, on this process")]
fn spare_descriptors_worker() {
    let (Some(dir), Some(spare)) = (std::env::var_os(SPARE_DIR), std::env::var(SPARE_FDS).ok())
    else {
        return;
    };
    let rt = runtime(1);
    let locks = Locks::in_dir(&dir).unwrap();
    let highest = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap();
    // Fill the holes below it (a new descriptor takes the lowest free number), so that exactly
    // `spare` more can be opened.
    let mut fillers = Vec::new();
    loop {
        let f = std::fs::File::open("/dev/null").unwrap();
        if std::os::fd::AsRawFd::as_raw_fd(&f) as u64 > highest {
            break;
        }
        fillers.push(f);
    }
    let cancel = Cancel::new().unwrap();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = highest + 1 + spare.parse::<u64>().unwrap();
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    let request = locks
        .named_lock(LOCK)
        .wait(Duration::from_secs(20))
        .cancel(&cancel);
    let got = if std::env::var_os(SPARE_ASYNC).is_some() {
        rt.block_on(request.acquire_async())
    } else {
        request.acquire()
    };
    match got {
        Ok(g) => {
            drop(g);
            println!("\ngot it");
            std::process::exit(0)
        }
        Err(e) => {
            println!("\nfailed: {e}");
            std::process::exit(1)
        }
    }
}

/// Out of descriptors but a few, an asynchronous wait for a held lock gets it when the holder
/// lets go wherever a blocking wait does: where it cannot register what wakes it with the
/// reactor, it looks again now and then, as a blocking wait without a watch does. (With 5 to 7
/// to spare it once failed at once: "Too many open files".)
#[cfg(target_os = "linux")]
#[test]
fn out_of_descriptors_an_async_wait_degrades_as_a_blocking_one_does() {
    let got = |spare: u32, asynchronous: bool| {
        let (_tmp, dir, until) = setup();
        let holder = start_holder(&dir, &until);
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "tasks::spare_descriptors_worker",
            "--nocapture",
        ])
        .env(SPARE_DIR, &dir)
        .env(SPARE_FDS, spare.to_string())
        .stdout(std::process::Stdio::piped());
        if asynchronous {
            cmd.env(SPARE_ASYNC, "1");
        }
        let worker = Holder::adopt(cmd.spawn().unwrap());
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(&until, "").unwrap();
        holder.finish();
        let out = worker.output();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let mut both = 0;
    for spare in 1..=9 {
        let (blocking, _) = got(spare, false);
        let (asynchronous, said) = got(spare, true);
        assert!(
            asynchronous || !blocking,
            "{spare} descriptors to spare: a blocking wait got the lock, an async one {said}"
        );
        both += u32::from(blocking);
    }
    assert!(
        both >= 3,
        "the blocking wait worked with too few limits to compare"
    );
}

/// A task whose lock's release was lost in an overflow of its process's kernel event queue
/// (the runtime was blocked while readers of another lock a task waits on flooded it) gets the
/// lock once the runtime runs again. (The overflow was once ignored: the task slept on the
/// free lock for as long as it was watched.)
#[cfg(target_os = "linux")]
#[test]
fn a_task_whose_wake_up_was_lost_in_an_overflow_gets_the_lock() {
    let (tmp, dir, until) = setup();
    let until_b = tmp.path().join("release-b");
    let holder_a = start_holder(&dir, &until);
    let holder_b = portable::start_self_holder("tasks::async_holder", &dir, "b.lock", &until_b);
    let locks = Locks::in_dir(&dir).unwrap();
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(16384);
    runtime(1).block_on(async {
        let a = tokio::spawn(locks.named_lock(LOCK).wait(Wait::Forever).acquire_async());
        let b = tokio::spawn(
            locks
                .named_lock("b.lock")
                .wait(Wait::Forever)
                .acquire_async(),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!a.is_finished() && !b.is_finished(), "both wait");
        // The runtime is blocked (no task reads the events) while `dirlock status` loops
        // flood the queue with b.lock's events (two kinds in turn: identical events in a row
        // are merged) and a.lock is released: its events are among those lost.
        let b_lock = dir.join("b.lock");
        for _ in 0..max / 2 + 100 {
            drop(std::fs::File::open(&b_lock).unwrap());
            std::fs::read(b_lock.join("owner.json")).unwrap();
        }
        std::fs::write(&until, "").unwrap();
        holder_a.finish();
        let got = within(20, a).await.unwrap().unwrap();
        got.release().unwrap();
        std::fs::write(&until_b, "").unwrap();
        within(20, b).await.unwrap().unwrap().release().unwrap();
    });
    holder_b.finish();
}
