//! The asynchronous acquisition at its edges (see `tests/async.rs`): futures dropped at
//! every point, refusals, the runtime's limits (descriptors, durations, lost wake-ups).

#[cfg(target_os = "linux")]
use super::tasks::portable::{self, Holder};
use super::tasks::{entries, runtime, setup, start_holder, within, LOCK};
#[cfg(target_os = "linux")]
use dirlock::Cancel;
use dirlock::{Error, Locks, State, Wait};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Tasks queued with a cancel hold descriptors only near the head of their runtime's queue
/// (a candidate, an entry in the lock's queue and that queue, for each of the first 32): a queue of
/// thousands must not run the process out of them, and an error registering one is never
/// reported as a cancel. Run alone, allowed 4,096 files where it may be (the most it may
/// otherwise): at 1,024, a common default, the process's budget of places on disk is 32 too,
/// and could not tell the two bounds apart (it needs 1,300 at least: 40 places).
#[cfg(target_os = "linux")]
#[test]
fn queued_tasks_hold_descriptors_only_near_the_head() {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max open files"));
    let hard = line.and_then(|l| l.split_whitespace().nth(4)?.parse::<u64>().ok());
    if crate::machine::lacks(
        "edges::queued_tasks_hold_descriptors_only_near_the_head",
        "a hard limit of 1,300 open files at least",
        hard.is_none_or(|h| h >= 1300),
    ) {
        return;
    }
    super::order::alone(
        "edges::tasks_queued_with_a_cancel",
        "{ ulimit -n 4096 || ulimit -n \"$(ulimit -Hn)\"; } 2>/dev/null; ",
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "run by queued_tasks_hold_descriptors_only_near_the_head, alone in a process"]
fn tasks_queued_with_a_cancel() {
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
        assert!(
            grew < 3 * 32 + 20,
            "200 queued tasks opened {grew} descriptors"
        );
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
    // Told when it waits, so that the holder lets go only then (println! needs no descriptor).
    let request = locks
        .named_lock(LOCK)
        .wait(Duration::from_secs(20))
        .cancel(&cancel)
        .on_wait(|_| println!("\nwaiting"));
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
            "edges::spare_descriptors_worker",
            "--nocapture",
        ])
        .env(SPARE_DIR, &dir)
        .env(SPARE_FDS, spare.to_string())
        .stdout(std::process::Stdio::piped());
        if asynchronous {
            cmd.env(SPARE_ASYNC, "1");
        }
        let mut child = cmd.spawn().unwrap();
        let lines = portable::lines_of(child.stdout.take().unwrap());
        let worker = Holder::adopt(child);
        // The holder lets go once the worker waits (or has failed): a release before it
        // sleeps in its wait would leave the way it waits untested.
        let mut said = String::new();
        loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    said.push_str(&line);
                    said.push('\n');
                    if line == "waiting" {
                        // (One that has ended is judged below, by what it said.)
                        let settled = (0..20_000).any(|_| {
                            std::thread::sleep(Duration::from_millis(1));
                            asleep_or_ended(worker.pid())
                        });
                        assert!(settled, "the worker neither slept in its wait nor ended");
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break, // it ended
                Err(e) => panic!("the worker neither waited nor ended: {e}, {said:?}"),
            }
        }
        std::fs::write(&until, "").unwrap();
        holder.finish();
        let status = worker.output().status;
        said.extend(lines.iter().map(|l| l + "\n"));
        // A worker that ran nothing (its name mistyped) would pass as one that got the lock.
        assert!(
            said.contains("got it") || said.contains("failed:"),
            "the worker said {said:?}"
        );
        (status.success(), said)
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

/// Whether every thread of process `pid` sleeps (state `S` in `/proc`), or the process has
/// ended (a zombie, `Z`, until it is reaped).
#[cfg(target_os = "linux")]
fn asleep_or_ended(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(Result::ok).all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            matches!(state, Some("S" | "Z"))
        })
    })
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
