//! Fork and exec: a forked child dropping or releasing an inherited guard does nothing, and an
//! exec'd program does not keep a lock alive (the beacon is close-on-exec); a child forked while
//! other threads and tasks take and release locks never blocks on the library's own locks. A
//! test binary of its own, so that its first test forks while no other thread runs (the second
//! forks beside busy threads in a process of its own: this binary, run again).
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

/// This thread's id (Linux), or 0.
fn this_thread() -> i64 {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid takes no arguments and cannot fail.
    return unsafe { libc::syscall(libc::SYS_gettid) };
    #[cfg(not(target_os = "linux"))]
    0
}

/// Returns once the thread whose id `tid` holds (once it is set) sleeps in `flock(2)`, as
/// `/proc` tells on x86-64 Linux (fails the test after 10 s); elsewhere after 200 ms.
fn blocked_in_flock(tid: &std::sync::atomic::AtomicI64) {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        std::thread::sleep(Duration::from_millis(200));
        return;
    }
    let blocked = || {
        let tid = tid.load(std::sync::atomic::Ordering::SeqCst);
        let read = |f: &str| std::fs::read_to_string(format!("/proc/self/task/{tid}/{f}"));
        let in_flock = read("syscall").is_ok_and(|s| s.split(' ').next() == Some("73"));
        // The state follows the command name, in parentheses.
        let stat = read("stat").unwrap_or_default();
        let state = stat.rsplit_once(')').map(|(_, s)| s.trim_start());
        tid != 0 && in_flock && state.is_some_and(|s| s.starts_with('S'))
    };
    for _ in 0..10_000 {
        if blocked() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the waiter never blocked in flock");
}

/// A forked child, killed and reaped when dropped (also when the test fails).
struct ReapedFork(libc::pid_t);

impl Drop for ReapedFork {
    fn drop(&mut self) {
        // SAFETY: kills and reaps our own child, forked by `fork`.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
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
        let child = ReapedFork(fork(|| {
            std::thread::sleep(Duration::from_secs(30));
            0
        }));
        let tid = std::sync::atomic::AtomicI64::new(0);
        let (acquired, child_alive) = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                tid.store(this_thread(), std::sync::atomic::Ordering::SeqCst);
                locks.named_lock("w.lock").wait(wait).acquire()
            });
            if wait == Wait::Forever {
                blocked_in_flock(&tid);
            } else {
                std::thread::sleep(Duration::from_millis(200)); // let it wait
            }
            g.release().unwrap();
            let acquired = waiter.join().unwrap();
            let mut status = 0;
            // SAFETY: polls our own child without blocking; `status` is a valid out-pointer.
            let alive = unsafe { libc::waitpid(child.0, &mut status, libc::WNOHANG) } == 0;
            (acquired, alive)
        });
        drop(child);
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

/// Where the busy forker of [`children_forked_beside_busy_threads_never_block`] works.
const BUSY_DIR: &str = "DIRLOCK_TEST_BUSY_FORK_DIR";

/// How many children the busy forker forks.
const CHILDREN: usize = 300;

/// A child forked at any moment while other threads (and, with the `tokio` feature, tasks)
/// take, wait for and release locks never blocks on a lock of the library's that a thread of
/// its parent held at fork time: neither dropping the guard it inherited (which does nothing)
/// nor taking a lock of its own. The forking runs in a process of its own (this binary again),
/// which reports the children that did not finish. (Once, 11 to 15 of 300 blocked forever in
/// `LockDir::current`, `Real::own_token` and `held::unregister`.)
#[test]
fn children_forked_beside_busy_threads_never_block() {
    let tmp = tempfile::tempdir().unwrap();
    let mut forker = Command::new(std::env::current_exe().unwrap());
    forker
        .args(["--ignored", "--exact", "busy_forker", "--quiet"])
        .env(BUSY_DIR, tmp.path())
        .stdout(std::process::Stdio::null());
    let mut forker = Reaped(forker.spawn().unwrap());
    let mut status = None;
    for _ in 0..12_000 {
        status = forker.0.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(forker); // with the children it left
    let said = std::fs::read_to_string(tmp.path().join("said")).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "the busy forker: {status:?}: {said}"
    );
    assert!(said.contains(&format!("{CHILDREN} children")), "{said}");
}

/// A child process killed (with its process group: the forker's children) and reaped when
/// dropped.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: signals our own child and the process group it leads; kill takes no pointers.
        unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The busy forker: threads (and tasks) cycle through locks while the main thread, holding a
/// guard, forks [`CHILDREN`] children that drop their copy of it and take a lock themselves.
/// Prints how many finished; exits 1 if any did not (within 30 s of the last fork).
#[test]
#[ignore = "started by children_forked_beside_busy_threads_never_block"]
fn busy_forker() {
    let Some(dir) = std::env::var_os(BUSY_DIR) else {
        return;
    };
    // Its own process group: the test kills it with every child it left.
    // SAFETY: setpgid on ourselves takes no pointers.
    unsafe { libc::setpgid(0, 0) };
    let locks =
        std::sync::Arc::new(Locks::in_dir(std::path::Path::new(&dir).join("locks")).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut busy = Vec::new();
    for t in 0..4 {
        let (locks, stop) = (locks.clone(), stop.clone());
        busy.push(std::thread::spawn(move || {
            let names = ["a.lock", "b.lock"];
            let mut i = t;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                // Waits of both kinds (a deadline sleeps on inotify), statuses, releases.
                let wait = if i % 2 == 0 {
                    Wait::Forever
                } else {
                    Wait::Timeout(Duration::from_secs(5))
                };
                if let Ok(g) = locks.named_lock(names[i % 2]).wait(wait).acquire() {
                    let _ = locks.named_lock(names[(i + 1) % 2]).status();
                    let _ = g.release();
                }
            }
        }));
    }
    #[cfg(feature = "tokio")]
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Tasks cycle through the same locks, the main thread's among them: they queue behind its
    // guard (taken on their runtime), so its queue is busy whenever the main thread forks.
    #[cfg(feature = "tokio")]
    for t in 0..4 {
        let (locks, stop) = (locks.clone(), stop.clone());
        rt.spawn(async move {
            let names = ["a.lock", "b.lock", "m.lock"];
            let mut i = t;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                // Short waits for the main thread's lock join and leave its queue all the time.
                let wait = match i % 3 {
                    2 => Duration::from_millis(1),
                    _ => Duration::from_secs(5),
                };
                let request = locks.named_lock(names[i % 3]).wait(wait);
                if let Ok(g) = request.acquire_async().await {
                    let _ = g.release();
                }
            }
        });
    }
    let mut children = Vec::new();
    for n in 0..CHILDREN {
        // The main thread's guard, which each child inherits (with the `tokio` feature, taken
        // in async form: with a place in the runtime's queue for the lock).
        #[cfg(feature = "tokio")]
        let guard = rt
            .block_on(
                locks
                    .named_lock("m.lock")
                    .wait(Wait::Forever)
                    .acquire_async(),
            )
            .unwrap();
        #[cfg(not(feature = "tokio"))]
        let guard = locks.named_lock("m.lock").acquire().unwrap();
        // SAFETY: the child touches only what it inherited by copy (the guard, the locks, the
        // library's state), never stdout, and leaves through _exit without unwinding or
        // running its parent's destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            drop(unsafe_take(&guard));
            let mine = format!("child-{}.lock", n % 3);
            let got = locks
                .named_lock(&mine)
                .wait(Duration::from_secs(5))
                .acquire();
            drop(got);
            // SAFETY: ends the child at once, as in `fork`.
            unsafe { libc::_exit(0) };
        }
        children.push(pid);
        guard.release().unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut hung = Vec::new();
    for pid in children {
        let mut status = 0;
        loop {
            // SAFETY: polls our own child; `status` is a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                hung.push(pid);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let said = format!(
        "{CHILDREN} children, {} did not finish: {hung:?}",
        hung.len()
    );
    std::fs::write(std::path::Path::new(&dir).join("said"), said).unwrap();
    // The test kills what is left with the process group.
    std::process::exit(i32::from(!hung.is_empty()));
}
