//! Fork and exec: a forked child dropping or releasing an inherited guard does nothing, and an
//! exec'd program does not keep a lock alive (the beacon is close-on-exec). A test binary of its
//! own, with one test, so that it forks while no other thread runs.
#![cfg(unix)] // fork(2) is Unix
#![allow(unsafe_code)]

use dirlock::{Error, Locks, Wait};
use std::process::Command;
use std::time::Duration;

/// Runs `child` in a forked process that ends with its return value; returns its pid.
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: this test binary runs a single test, and forks only while no other thread runs,
    // so no lock the child could need is held; the child leaves through _exit without running
    // the parent's destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child at once, as a crash would, without unwinding.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Runs `child` in a forked process and returns its exit status.
fn in_fork(child: impl FnOnce() -> i32) -> i32 {
    let pid = fork(child);
    let mut status = 0;
    // SAFETY: waits for the child we just forked; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally");
    libc::WEXITSTATUS(status)
}

#[test]
fn forked_children_and_execd_programs_do_not_own_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let locks = Locks::in_dir(tmp.path().join("locks")).unwrap();

    // 1. A forked child that releases or drops an inherited guard leaves the parent's lock.
    let guard = locks.named_lock("f.lock").acquire().unwrap();
    let token = guard.owner().token.clone();
    let code = in_fork(|| {
        // The child's copy of the guard: release must be a no-op that reports success.
        match unsafe_take(&guard).release() {
            Ok(()) => 0,
            Err(_) => 1,
        }
    });
    assert_eq!(code, 0);
    let code = in_fork(|| {
        drop(unsafe_take(&guard));
        0
    });
    assert_eq!(code, 0);
    let record = std::fs::read_to_string(guard.path().join("owner.json")).unwrap();
    assert!(
        record.contains(&token),
        "the parent's lock is still in place"
    );
    let err = std::thread::scope(|s| {
        s.spawn(|| locks.named_lock("f.lock").acquire().unwrap_err())
            .join()
            .unwrap()
    });
    assert!(matches!(err, Error::Locked { .. }), "still held: {err:?}");
    guard.release().unwrap();

    // 2. A holder that spawns a long-running program and then dies: the program did not
    // inherit the beacon, so the lock is proven dead at once.
    let pidfile = tmp.path().join("sleeper.pid");
    let code = in_fork(|| {
        let g = locks.named_lock("e.lock").acquire().unwrap();
        #[expect(
            clippy::zombie_processes,
            reason = "reaped by init once this forked child exits"
        )]
        let sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(&pidfile, sleeper.id().to_string()).unwrap();
        std::mem::forget(g); // die holding it
        0
    });
    assert_eq!(code, 0);
    let sleeper: i32 = std::fs::read_to_string(&pidfile).unwrap().parse().unwrap();
    let result = locks.named_lock("e.lock").acquire();
    // SAFETY: kills and reaps nothing but the sleeper the child started (it was reparented,
    // so only the signal is ours to send).
    unsafe { libc::kill(sleeper, libc::SIGKILL) };
    let g = result.expect("the exec'd program must not keep the lock alive");
    assert!(g.reclaimed_from().is_some());
    g.release().unwrap();

    // 3. A holder forks a child that lives on with a copy of the beacon, then releases: a
    // waiter blocked in the beacon's flock (an unbounded wait) and one woken by inotify (a
    // timed wait) both get the lock while the child still lives, though the child's copy
    // shares the lock (the release unlocks it explicitly, not just by closing).
    for wait in [Wait::Forever, Wait::Timeout(Duration::from_secs(120))] {
        let g = locks.named_lock("w.lock").acquire().unwrap();
        // No other thread runs now (the previous waiter was joined).
        let child = fork(|| {
            std::thread::sleep(Duration::from_secs(30));
            0
        });
        let (acquired, child_alive) = std::thread::scope(|s| {
            let waiter = s.spawn(|| locks.named_lock("w.lock").wait(wait).acquire());
            std::thread::sleep(Duration::from_millis(200)); // let it block
            g.release().unwrap();
            let acquired = waiter.join().unwrap();
            let mut status = 0;
            // SAFETY: polls our own child without blocking; `status` is a valid out-pointer.
            let alive = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0;
            (acquired, alive)
        });
        // SAFETY: kills and reaps the child forked above.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        let acquired = acquired.expect("the waiter gets the released lock");
        assert!(
            child_alive,
            "{wait:?}: the waiter got the lock only once the child holding a copy of the \
             beacon had exited"
        );
        acquired.release().unwrap();
    }

    // 4. A forked child starts with no task queues: its parent's asynchronous guard (kept by
    // this thread, which the child's main thread is a copy of) is another process's lock.
    #[cfg(feature = "tokio")]
    {
        let rt = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        // Waiting (not failing fast), so that it holds its place in the queue.
        let wait = locks.named_lock("q.lock").wait(Wait::Forever);
        let g = rt().block_on(wait.acquire_async()).unwrap();
        let code = in_fork(|| {
            let wait = locks.named_lock("q.lock").wait(Duration::from_millis(300));
            match rt().block_on(wait.acquire_async()) {
                Err(Error::Timeout { .. }) => 0,
                Err(Error::AlreadyHeld { .. }) => 1,
                _ => 2,
            }
        });
        assert_eq!(
            code, 0,
            "the child waits for its parent's lock as for another process's"
        );
        g.release().unwrap();
    }
}

/// The forked child's view of the parent's guard: a bitwise copy, as fork made of the whole
/// address space. Only ever called in a forked child, where the parent's value is never used.
fn unsafe_take(guard: &dirlock::LockGuard) -> dirlock::LockGuard {
    // SAFETY: in the forked child the parent's `guard` is never touched again (the child ends
    // with _exit), so moving a bitwise copy out of it duplicates nothing that is still used.
    unsafe { std::ptr::read(guard) }
}
