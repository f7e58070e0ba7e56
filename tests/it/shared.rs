//! Shared (read) locks across processes: readers together, a writer alone, a killed reader out
//! at once, a waiting writer keeping new readers out, and the record kept naming a live reader
//! for programs that judge by pid.

use crate::common::*;
use dirlock::{Error, Liveness, Owner, Party, Role, State, Wait};
use std::path::Path;
use std::time::Duration;

fn record(lock: &Path) -> Owner {
    Owner::parse(&std::fs::read(lock.join("owner.json")).unwrap()).unwrap()
}

/// The entries of the readers that joined (the first reader's record is the lock's).
fn readers(lock: &Path) -> Vec<String> {
    let mut r: Vec<String> = std::fs::read_dir(lock)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("reader."))
        .collect();
    r.sort();
    r
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let fx = Fixture::new();
    let a = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    let b = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    assert_eq!(a.path, b.path, "both read the same lock");
    assert_eq!(readers(&a.path).len(), 1, "the second joined the first's");
    let rec = record(&a.path);
    assert!(rec.is_shared());
    assert!(
        [a.pid(), b.pid()].contains(&rec.pid),
        "the record names a reader"
    );
    // A writer is refused while they read, naming a reader.
    match fx.locks.named_lock("x.lock").acquire().unwrap_err() {
        Error::Locked { owner, .. } => assert!([a.pid(), b.pid()].contains(&owner.pid)),
        other => panic!("expected Locked, got {other:?}"),
    }
    // A third reader in this process comes in.
    let c = fx.locks.named_lock("x.lock").shared().acquire().unwrap();
    assert!(c.is_shared());
    assert_eq!(readers(&a.path).len(), 2);
    a.release();
    b.release();
    c.release().unwrap();
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "the last reader retires it"
    );
    let w = fx.locks.named_lock("x.lock").acquire().unwrap();
    assert!(!w.is_shared());
    // A reader is refused while the writer holds it.
    let err = Holder::try_start(fx.dir(), &["--lock", "x.lock", "--shared"]).err();
    assert!(err.expect("reader refused").contains("is held by pid"));
    w.release().unwrap();
}

#[test]
fn a_killed_reader_is_out_at_once() {
    let fx = Fixture::new();
    let a = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    let b = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    a.kill();
    // One reader is left: a writer still waits.
    assert!(fx.locks.named_lock("x.lock").acquire().is_err());
    b.kill();
    // None is left: the kernel proves it, no grace period.
    let w = fx.locks.named_lock("x.lock").acquire().unwrap();
    assert!(w.reclaimed_from().is_some_and(Owner::is_shared));
    w.release().unwrap();
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn a_waiting_writer_keeps_new_readers_out() {
    let fx = Fixture::new();
    let a = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    let dir = fx.dir().to_owned();
    let writer = std::thread::spawn(move || {
        let locks = dirlock::Locks::in_dir(dir).unwrap();
        let g = locks
            .named_lock("x.lock")
            .wait(Duration::from_secs(30))
            .acquire()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        g.release().unwrap();
    });
    let lock = fx.dir().join("x.lock");
    assert!(eventually(Duration::from_secs(10), || writer_waits_in(
        &lock
    )));
    // A new reader is refused (failing fast) while the writer waits, though only readers hold it.
    let err = fx
        .locks
        .named_lock("x.lock")
        .shared()
        .acquire()
        .unwrap_err();
    assert!(err.is_contended(), "{err}");
    // A waiting reader gets in after the writer has had its turn.
    let started = std::time::Instant::now();
    let b = fx
        .locks
        .named_lock("x.lock")
        .shared()
        .wait(Duration::from_secs(30));
    let waiter = std::thread::spawn(move || b.acquire().map(|g| g.release()));
    std::thread::sleep(Duration::from_millis(100));
    a.release();
    writer.join().unwrap();
    waiter.join().unwrap().unwrap().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the reader came after the writer"
    );
}

#[test]
fn the_record_names_a_live_reader_after_its_reader_leaves_or_dies() {
    let fx = Fixture::new();
    let shared = ["--lock", "x.lock", "--shared"];
    let a = Holder::start(fx.dir(), &shared);
    let lock = a.path.clone();
    assert_eq!(
        record(&lock).pid,
        a.pid(),
        "the first reader's record is the lock's"
    );
    let mut others = vec![
        Holder::start(fx.dir(), &shared),
        Holder::start(fx.dir(), &shared),
        Holder::start(fx.dir(), &shared),
    ];
    let named = |others: &[Holder]| {
        let pid = record(&lock).pid;
        others.iter().position(|h| h.pid() == pid)
    };
    // The first reader (judged by its pid: it has no entry) is killed: another reader's
    // keeper names itself within a second or two.
    a.kill();
    assert!(
        eventually(Duration::from_secs(10), || named(&others).is_some()),
        "the record still names {}",
        record(&lock).pid
    );
    // The named reader leaves: it hands the record to another. The others are stopped
    // meanwhile, so that their keepers (which would name themselves within a second) cannot
    // do it for the leaver.
    let leaver = others.remove(named(&others).unwrap());
    let pids: Vec<u32> = others.iter().map(Holder::pid).collect();
    crate::common::sys::stop(&pids);
    leaver.release();
    let after = named(&others);
    crate::common::sys::resume(&pids);
    assert!(after.is_some(), "names {}", record(&lock).pid);
    // The named reader (judged by its entry) is killed: the other's keeper names itself.
    others.remove(named(&others).unwrap()).kill();
    assert!(
        eventually(Duration::from_secs(10), || named(&others) == Some(0)),
        "the record still names {}",
        record(&lock).pid
    );
    // A record older than the grace period would let a pid-judging program in: kept fresh.
    set_age(&lock, Duration::from_secs(3600));
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::metadata(&lock)
            .unwrap()
            .modified()
            .unwrap()
            .elapsed()
            .is_ok_and(|age| age < Duration::from_secs(60))
    }));
    assert_eq!(named(&others), Some(0), "a refresh names the same reader");
    others.remove(0).release();
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn one_thread_cannot_read_inside_its_own_read_or_write() {
    let fx = Fixture::new();
    let r = fx.locks.named_lock("x.lock").shared().acquire().unwrap();
    for shared in [true, false] {
        let mut req = fx.locks.named_lock("x.lock").wait(Wait::Forever);
        if shared {
            req = req.shared();
        }
        assert!(matches!(req.acquire(), Err(Error::AlreadyHeld { .. })));
    }
    drop(r);
    let w = fx.locks.named_lock("x.lock").acquire().unwrap();
    let again = fx
        .locks
        .named_lock("x.lock")
        .shared()
        .wait(Wait::Forever)
        .acquire();
    assert!(matches!(again, Err(Error::AlreadyHeld { .. })));
    drop(w);
}

fn pids(v: &[Party]) -> Vec<u32> {
    let mut pids: Vec<u32> = v.iter().map(|p| p.owner.as_ref().unwrap().pid).collect();
    pids.sort();
    pids
}

#[test]
fn status_lists_the_readers_and_not_a_killed_one() {
    let fx = Fixture::new();
    let a = Holder::start(
        fx.dir(),
        &["--lock", "x.lock", "--shared", "--purpose", "a"],
    );
    let b = Holder::start(
        fx.dir(),
        &["--lock", "x.lock", "--shared", "--purpose", "b"],
    );
    let status = || fx.locks.named_lock("x.lock").status().unwrap();
    let st = status();
    assert!(
        st.shared && st.state == State::Held && !st.takeable(),
        "{st:?}"
    );
    let mut who: Vec<(u32, Option<&str>)> = st
        .readers
        .iter()
        .map(|p| {
            let o = p.owner.as_ref().unwrap();
            (o.pid, o.purpose.as_deref())
        })
        .collect();
    who.sort();
    let mut want = vec![(a.pid(), Some("a")), (b.pid(), Some("b"))];
    want.sort();
    assert_eq!(who, want);
    assert!(st
        .readers
        .iter()
        .all(|p| p.role == Role::Reader && p.liveness == Liveness::Live && p.since.is_some()));
    assert!(st.writers.is_empty() && st.departed.is_empty());
    // The reader the record names is killed: out at once, and the others hold the lock (not a
    // process it started, as for an exclusive holder whose pid is gone).
    let named = st.owner.as_ref().unwrap().pid;
    let (killed, left) = if named == a.pid() { (a, b) } else { (b, a) };
    // The other is stopped meanwhile: its keeper would name itself in the record within a
    // second or two, and the lock would no longer be the killed one's to judge.
    crate::common::sys::stop(&[left.pid()]);
    let (killed, left_pid) = (killed.kill(), left.pid());
    let st = status();
    assert_eq!(st.state, State::Held);
    assert!(!st.owner_exited, "{:?}", st.reason);
    assert_eq!(pids(&st.readers), [left_pid]);
    // The killed one is listed as gone (by its pid: the first reader has no entry of its own)
    // until the reader left names itself in the record, a second or two later.
    assert!(st.departed.iter().all(|p| p.liveness.is_dead()));
    assert!(pids(&st.departed).iter().all(|p| *p == killed));
    // None is left: an exclusive acquisition takes it at once; the last one (which joined,
    // with an entry of its own) is proven gone.
    left.kill();
    let st = status();
    assert!(st.state == State::DeadByProof && st.takeable(), "{st:?}");
    assert!(st.readers.is_empty());
    assert!(st
        .departed
        .iter()
        .any(|p| p.owner.as_ref().unwrap().pid == left_pid && p.liveness == Liveness::DeadByProof));
    // An exclusive lock has none.
    drop(fx.locks.named_lock("x.lock").acquire().unwrap());
    let g = fx.locks.named_lock("y.lock").acquire().unwrap();
    let st = fx.locks.named_lock("y.lock").status().unwrap();
    assert!(!st.shared && st.readers.is_empty() && st.departed.is_empty());
    g.release().unwrap();
}

/// A status looking at a shared lock (an exclusive `flock` for an instant) while its last
/// reader leaves never makes the reader leave the lock behind, to be taken over as a crashed
/// reader's by the next writer.
#[test]
fn a_status_beside_the_last_reader_leaving_leaves_no_lock_behind() {
    let fx = Fixture::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let lock = fx.dir().join("x.lock");
    let (mut cycles, mut left) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fx.locks.named_lock("x.lock").status();
            }
        });
        let end = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < end {
            let g = fx
                .locks
                .named_lock("x.lock")
                .shared()
                .durable(false)
                .acquire();
            g.unwrap().release().unwrap();
            cycles += 1;
            if lock.exists() {
                left += 1;
                std::fs::remove_dir_all(&lock).unwrap();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(left, 0, "{left} of {cycles} releases left the lock behind");
}

/// A reader's wait (behind a writer) and a writer's (for the readers) end at their timeout or
/// cancel, leaving no entry of theirs behind.
#[test]
fn timed_out_and_cancelled_waits_of_readers_and_writers_leave_nothing() {
    let fx = Fixture::new();
    let lock = fx.dir().join("x.lock");
    let entries = || {
        let mut e: Vec<String> = std::fs::read_dir(&lock)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        e.retain(|n| n.starts_with("reader.") || n.starts_with("writer."));
        e
    };
    let short = Wait::Timeout(Duration::from_millis(200));
    // A writer holds it: a reader times out, or is cancelled.
    let w = Holder::start(fx.dir(), &["--lock", "x.lock"]);
    let err = fx
        .locks
        .named_lock("x.lock")
        .shared()
        .wait(short)
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let cancel = dirlock::Cancel::new().unwrap();
    let c2 = cancel.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        c2.cancel();
    });
    let err = fx
        .locks
        .named_lock("x.lock")
        .shared()
        .wait(Wait::Forever)
        .cancel(&cancel)
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    t.join().unwrap();
    w.release();
    // Readers hold it: a writer times out, and takes its entry out (readers come in again).
    let r = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    let err = fx
        .locks
        .named_lock("x.lock")
        .wait(short)
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(entries(), Vec::<String>::new());
    let again = fx.locks.named_lock("x.lock").shared().acquire().unwrap();
    r.release();
    again.release().unwrap();
    assert_eq!(fx.entries(), Vec::<String>::new());
}

/// Readers coming back at once, so that the lock is never without one: a writer that waits
/// gets in before any reader that came after it (neither joining the readers' lock, nor
/// taking the lock anew once its last reader retired it), whatever the stream.
#[test]
fn a_writer_among_a_stream_of_readers_gets_in_before_readers_that_came_after_it() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let fx = Fixture::new();
    let lock = fx.dir().join("x.lock");
    let (entered, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    // The readers stop however the test ends (a failed assertion included).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    std::thread::scope(|s| {
        let _stop = Stop(&stop);
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(SeqCst) {
                    let g = fx.locks.named_lock("x.lock").shared().wait(Wait::Forever);
                    let g = g.acquire().unwrap();
                    entered.fetch_add(1, SeqCst);
                    std::thread::sleep(Duration::from_millis(3));
                    g.release().unwrap();
                }
            });
        }
        for round in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            let writer = s.spawn(|| {
                let wait = Wait::Timeout(Duration::from_secs(20));
                let g = fx.locks.named_lock("x.lock").wait(wait).acquire();
                let after = entered.load(SeqCst);
                g.map(|g| g.release().unwrap()).map(|()| after)
            });
            // Once the writer's entry is in the lock, it holds the writers' flock.
            while !writer_waits_in(&lock) && !writer.is_finished() {
                std::thread::yield_now();
            }
            let before = entered.load(SeqCst);
            let after = writer
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: the writer never got in: {e}"));
            // Only readers past their look for writers when it came in may still get in.
            assert!(
                after.saturating_sub(before) <= 4,
                "round {round}: {} readers got in past the waiting writer",
                after - before
            );
        }
    });
}

/// A file planted where waiting writers keep their directory (`NAME.writers`) stops a writer
/// with an error that names it and the fix, and a sweep removes it.
#[test]
fn a_file_where_the_waiting_writers_directory_goes_is_named_and_swept() {
    let fx = Fixture::new();
    let planted = fx.dir().join("x.lock.writers");
    std::fs::write(&planted, "").unwrap();
    let (r, err) = a_writer_beside_a_reader(&fx);
    match &err {
        Error::Unsafe { path, fix, .. } => {
            assert_eq!(path, &planted);
            assert!(fix.contains("remove it"), "{fix}");
        }
        other => panic!("expected Unsafe, got {other:?}"),
    }
    r.release();
    let swept = fx.locks.sweep(Duration::ZERO).unwrap();
    assert!(
        swept.removed.iter().any(|n| n == "x.lock.writers"),
        "{swept:?}"
    );
    assert!(!planted.exists());
}

/// A waiting writers' directory that others may write is refused, named with the fix.
#[test]
fn a_waiting_writers_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let planted = fx.dir().join("x.lock.writers");
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (r, err) = a_writer_beside_a_reader(&fx);
    assert!(
        matches!(&err, Error::Unsafe { path, .. } if *path == planted),
        "{err:?}"
    );
    r.release();
}

/// Whether a writer waits in the shared lock directory `lock` (its entry is there).
fn writer_waits_in(lock: &std::path::Path) -> bool {
    std::fs::read_dir(lock).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("writer.")))
    })
}

/// A writer of `x.lock` that finds a reader (the process returned, still reading) and fails:
/// its error.
fn a_writer_beside_a_reader(fx: &Fixture) -> (Holder, Error) {
    let r = Holder::start(fx.dir(), &["--lock", "x.lock", "--shared"]);
    let err = fx
        .locks
        .named_lock("x.lock")
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap_err();
    (r, err)
}
