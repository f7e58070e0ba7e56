//! The protocol across processes, with nothing but the public API and `std`, so that the same
//! tests run on every platform: on Linux with the rest of the suite, and on Windows under Wine
//! in CI (`.ci/run`). Holders are this test binary again (`portable_holder`), killed with
//! `Child::kill` (`SIGKILL`, `TerminateProcess`): a holder that dies without releasing.

use dirlock::{Cancel, Error, Locks, State, Unlocked, Wait};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LOCK: &str = "portable.lock";

#[path = "common/portable.rs"]
mod portable;
use portable::{entries, Holder};

/// A process that holds `LOCK` in `dir` until `until` exists, once it holds it.
fn start_holder(dir: &Path, until: &Path) -> Holder {
    portable::start_self_holder("portable_holder", dir, LOCK, until)
}

/// The holder process of [`start_holder`]; does nothing as an ordinary test.
#[test]
#[ignore = "a holder process for the other tests, started by them"]
fn portable_holder() {
    portable::hold();
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let until = tmp.path().join("release-now");
    (tmp, dir, until)
}

#[test]
fn a_live_holder_excludes_and_a_killed_one_is_reclaimed_at_once() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let pid = holder.pid();
    let locks = Locks::in_dir(&dir).unwrap();
    let err = locks
        .named_lock(LOCK)
        .wait(Wait::Immediately)
        .acquire()
        .unwrap_err();
    assert!(err.is_contended(), "not refused as held: {err}");
    assert_eq!(err.owner().map(|o| o.pid), Some(pid), "{err}");
    let status = locks.named_lock(LOCK).status().unwrap();
    assert_eq!(status.state, State::Held, "{status:?}");

    holder.kill();
    let status = locks.named_lock(LOCK).status().unwrap();
    assert_eq!(status.state, State::DeadByProof, "{status:?}");
    // Reclaimed at once: no grace period is waited out (the default is 60 s).
    let started = Instant::now();
    let guard = locks
        .named_lock(LOCK)
        .wait(Wait::Immediately)
        .acquire()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(guard.reclaimed_from().map(|o| o.pid), Some(pid));
    guard.release().unwrap();
    assert_eq!(locks.named_lock(LOCK).status().unwrap().state, State::Free);
}

#[test]
fn a_release_hands_the_lock_to_a_waiter() {
    let (_tmp, dir, until) = setup();
    let _holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let waiter = std::thread::spawn({
        let dir = dir.clone();
        move || {
            let locks = Locks::in_dir(&dir).unwrap();
            let guard = locks.named_lock(LOCK).wait(Wait::Forever).acquire();
            guard.map(|g| (g.reclaimed_from().is_some(), g.release()))
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    std::fs::write(&until, b"").unwrap();
    let (reclaimed, released) = waiter.join().unwrap().unwrap();
    assert!(!reclaimed, "a released lock was reclaimed");
    released.unwrap();
    assert_eq!(locks.named_lock(LOCK).status().unwrap().state, State::Free);
}

#[test]
fn a_timeout_and_a_cancel_end_a_wait() {
    let (_tmp, dir, until) = setup();
    let _holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    let err = locks
        .named_lock(LOCK)
        .wait(Duration::from_millis(300))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");

    let cancel = Cancel::new().unwrap();
    let waiter = spawn_waiter(&dir, &cancel);
    std::thread::sleep(Duration::from_millis(200));
    cancel.cancel();
    let err = within(30, waiter, || {}).unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
}

/// A thread waiting for `LOCK` in `dir` however long it takes, unless `cancel` is fired.
fn spawn_waiter(dir: &Path, cancel: &Cancel) -> std::thread::JoinHandle<Result<(), Error>> {
    let (dir, cancel) = (dir.to_owned(), cancel.clone());
    std::thread::spawn(move || {
        Locks::in_dir(&dir)
            .unwrap()
            .named_lock(LOCK)
            .wait(Wait::Forever)
            .cancel(&cancel)
            .acquire()
            .map(drop)
    })
}

/// The result of `thread` if it ends within `secs`. Else the test fails: `stop` is called
/// (a cancel) and the thread given ten more seconds, so that it closes its handles before the
/// temporary directory is removed (on Windows a directory some handle holds cannot be, and
/// removing it would hang the failing test instead); a thread that does not stop even then
/// ends the whole test binary, with the reason, rather than hang it.
fn within<T: Send + 'static>(
    secs: u64,
    thread: std::thread::JoinHandle<T>,
    stop: impl FnOnce(),
) -> T {
    let finished = |secs| {
        let end = Instant::now() + Duration::from_secs(secs);
        while !thread.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        thread.is_finished()
    };
    if finished(secs) {
        return thread.join().unwrap();
    }
    stop();
    if !finished(10) {
        eprintln!("still waiting after {secs} s, and not stopped: ending the test binary");
        std::process::exit(101);
    }
    panic!("still waiting after {secs} s");
}

/// Writes a private lock directory `name` in `dir` holding `record`, as another
/// implementation (or damage) would leave it.
fn plant(dir: &Path, name: &str, record: &str) {
    let lock = dir.join(name);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&lock)
            .unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(lock.join("owner.json"))
            .unwrap();
        std::io::Write::write_all(&mut f, record.as_bytes()).unwrap();
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir(&lock).unwrap();
        std::fs::write(lock.join("owner.json"), record).unwrap();
    }
}

#[test]
fn a_pid_judged_owner_is_live_while_its_process_runs_and_dead_after() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    // A reference implementation's record: a pid and a token, no beacon.
    plant(
        &dir,
        "ref.lock",
        &format!(r#"{{"pid":{},"token":"7f1c0e52-reference"}}"#, holder.pid()),
    );
    let status = locks.named_lock("ref.lock").status().unwrap();
    assert_eq!(status.state, State::Held, "{status:?}");
    holder.kill();
    let status = locks.named_lock("ref.lock").status().unwrap();
    assert!(
        matches!(status.state, State::DeadByEvidence { .. }),
        "{status:?}"
    );
}

#[test]
fn a_waiter_on_a_damaged_lock_in_use_hears_when_its_holder_dies() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    // Damage the held lock's record: the waiter can only wait for its beacon to be let go.
    std::fs::write(dir.join(LOCK).join("owner.json"), b"garbage").unwrap();
    let cancel = Cancel::new().unwrap();
    let waiter = spawn_waiter(&dir, &cancel);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !waiter.is_finished(),
        "the waiter did not wait for the holder"
    );
    holder.kill();
    // Once its holder is gone, the damaged lock is reported, not waited on forever.
    let err = within(30, waiter, || cancel.cancel()).unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err}");
}

#[test]
fn unlock_refuses_a_live_owner_and_retires_a_dead_one() {
    let (_tmp, dir, until) = setup();
    let holder = start_holder(&dir, &until);
    let locks = Locks::in_dir(&dir).unwrap();
    assert!(
        locks.named_lock(LOCK).unlock(false).is_err(),
        "a live owner was unlocked"
    );
    holder.kill();
    match locks.named_lock(LOCK).unlock(false).unwrap() {
        Unlocked::Removed { owner } => assert!(owner.is_some()),
        other => panic!("not removed: {other:?}"),
    }
    assert_eq!(locks.named_lock(LOCK).status().unwrap().state, State::Free);
    locks.sweep(Duration::ZERO).unwrap();
    // Nothing is left in the lock directory.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `A.lock` and `a.lock` are one lock where the filesystem folds case, so taking the second
/// while holding the first is this thread waiting for itself: refused, as the same name is.
/// Where it does not, they are two locks, and both are taken.
#[test]
fn names_that_differ_only_in_case_are_one_lock_where_the_filesystem_says_so() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let upper = locks.named_lock("Case.lock").acquire().unwrap();
    let lower = locks
        .named_lock("case.lock")
        .wait(Duration::from_secs(5))
        .acquire();
    // Whether this filesystem folds case (Windows', macOS's by default; not Linux's).
    if dir.with_file_name("LOCKS").exists() {
        let err = lower.map(drop).unwrap_err();
        assert!(matches!(err, Error::AlreadyHeld { .. }), "{err:?}");
    } else {
        lower.unwrap().release().unwrap();
    }
    upper.release().unwrap();
}

#[test]
fn readers_in_processes_share_a_writer_waits_and_killed_readers_are_out_at_once() {
    let (tmp, dir, _) = setup();
    let (until_a, until_b) = (tmp.path().join("a"), tmp.path().join("b"));
    let a = portable::start_self_reader("portable_holder", &dir, LOCK, &until_a);
    let b = portable::start_self_reader("portable_holder", &dir, LOCK, &until_b);
    let locks = Locks::in_dir(&dir).unwrap();
    // Readers together; a writer fails fast, naming one of them; a third reader comes in.
    match locks.named_lock(LOCK).acquire() {
        Err(Error::Locked { owner, .. }) => {
            assert!(owner.is_shared() && [a.pid(), b.pid()].contains(&owner.pid));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let c = locks.named_lock(LOCK).shared().acquire().unwrap();
    assert!(c.is_shared());
    // A waiting writer keeps new readers out, and gets the lock once the last reader is gone.
    let writer = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            locks
                .named_lock(LOCK)
                .wait(Duration::from_secs(60))
                .acquire()
                .map(|g| g.reclaimed_from().is_some())
        })
    };
    let waiting = |d: &Path| d.join(format!("{LOCK}.writers")).exists();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiting(&dir) {
        assert!(Instant::now() < deadline, "the writer never waited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = std::thread::scope(|s| {
        s.spawn(|| locks.named_lock(LOCK).shared().acquire().err())
            .join()
            .unwrap()
    });
    assert!(
        refused.is_some_and(|e| e.is_contended()),
        "a reader got in past a waiting writer"
    );
    c.release().unwrap();
    drop(a); // killed
    std::fs::write(&until_b, "").unwrap();
    drop(b);
    // The killed reader's lock is the writer's at once (no grace period to wait out).
    let started = Instant::now();
    writer.join().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// The last reader out retires the lock, leaving nothing: alone, after a reader that joined
/// it, and with a writer waiting in it; and so does a writer that takes over from a killed
/// reader. (On Wine, a directory's handle keeps the name it was opened by; on Windows, a
/// directory cannot be removed while one inside it, such as a waiting writer's, is open.)
#[test]
fn the_last_reader_out_leaves_nothing_behind() {
    let (_tmp, dir, until) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let read = || locks.named_lock(LOCK).shared().acquire().unwrap();
    read().release().unwrap();
    assert_eq!(entries(&dir), Vec::<String>::new(), "after a reader alone");
    let first = read();
    // (Another thread: one thread reading a lock twice is refused.)
    std::thread::scope(|s| s.spawn(|| read().release().unwrap()).join().unwrap());
    first.release().unwrap();
    assert_eq!(entries(&dir), Vec::<String>::new(), "after two readers");
    let first = read();
    behind_a_writer(&locks, &dir, || first.release().unwrap());
    assert_eq!(
        entries(&dir),
        Vec::<String>::new(),
        "after a waiting writer"
    );
    let reader = portable::start_self_reader("portable_holder", &dir, LOCK, &until);
    behind_a_writer(&locks, &dir, || drop(reader)); // killed
    assert_eq!(entries(&dir), Vec::<String>::new(), "after a killed reader");
}

/// Runs `leave` (the readers of `LOCK` leave) once a writer waits in the lock, and returns
/// once that writer has had the lock and let it go.
fn behind_a_writer(locks: &Locks, dir: &Path, leave: impl FnOnce()) {
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let wait = locks.named_lock(LOCK).wait(Duration::from_secs(60));
            wait.acquire().unwrap().release().unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let entered = || {
            std::fs::read_dir(dir.join(LOCK)).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("writer.")))
            })
        };
        while !entered() {
            assert!(Instant::now() < deadline, "the writer never waited");
            std::thread::sleep(Duration::from_millis(10));
        }
        leave();
        writer.join().unwrap();
    });
}

/// Threads that take a lock in turn, readers and writers, never fail and always find their
/// lock's record in place while they hold it: a release touches nothing at `NAME` once it
/// has retired its own lock, and a reader that finds the lock retired as it joins looks
/// again. (Under Wine, a path through a lock's directory handle once reached the next
/// holder's lock, and a reader's join failed on a retired lock.)
#[test]
fn holders_in_turn_never_touch_each_others_lock() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let record = dir.join(LOCK).join("owner.json");
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..3 {
            let (locks, record, failures) = (&locks, &record, &failures);
            s.spawn(move || {
                for i in 0..60 {
                    let mut req = locks.named_lock(LOCK).wait(Wait::Forever);
                    if (t + i) % 3 != 0 {
                        req = req.shared();
                    }
                    match req.acquire() {
                        Ok(g) => {
                            std::thread::sleep(Duration::from_millis(1));
                            if !record.exists() {
                                failures
                                    .lock()
                                    .unwrap()
                                    .push("a held lock without its record".into());
                            }
                            g.release().unwrap();
                        }
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of 180: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}
