//! The corners a hostile or careless user finds: a killed wrapper whose command lives on,
//! unsafe and relative temporary directories, hostile record contents, signals while waiting,
//! holders in other UTS namespaces, clocks set back, self-waits, observers beside acquirers,
//! kernel limits, closed pipes and full disks, terminal injection. Each test here failed on the
//! code before its fix (the note on issue 9 lists them).

use crate::common::*;
use dirlock::{Error, Wait};
use std::path::Path;
use std::time::{Duration, SystemTime};

// ---- 7. A lock modified in the future -----------------------------------------------------

fn set_future(path: &Path, ahead: Duration) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(SystemTime::now() + ahead).unwrap();
}

#[test]
fn a_lock_from_the_future_is_reclaimed_after_the_grace_period_as_observed() {
    let fx = Fixture::new();
    let rec = format!(r#"{{"pid":{},"token":"t-future"}}"#, dead_pid());
    let lock = plant(fx.dir(), "f.lock", &rec, Duration::ZERO);
    set_future(&lock, Duration::from_secs(3600));
    // Failing fast, the message tells the truth about the clock.
    let err = fx
        .locks
        .named_lock("f.lock")
        .grace(Duration::from_secs(1))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err:?}");
    assert!(err.to_string().contains("in the future"), "{err}");
    // Waiting, it is reclaimed once it has sat unchanged for the grace period.
    let start = std::time::Instant::now();
    let g = fx
        .locks
        .named_lock("f.lock")
        .grace(Duration::from_secs(1))
        .wait(Duration::from_secs(20))
        .acquire()
        .unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(g.reclaimed_from().unwrap().token, "t-future");
    g.release().unwrap();
    let lock = plant(fx.dir(), "f.lock", &rec, Duration::ZERO);
    set_future(&lock, Duration::from_secs(3600));
    let st = fx.locks.named_lock("f.lock").status().unwrap();
    assert!(
        st.reason.as_deref().unwrap_or("").contains("in the future"),
        "{:?}",
        st.reason
    );
}

#[test]
fn a_record_naming_this_process_with_a_foreign_token_is_a_dead_owners() {
    let fx = Fixture::new();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    // A record of our own format (it says its pid namespace: ours), without a beacon, as on a
    // filesystem without flock.
    let rec = format!(
        r#"{{"pid":{},"token":"not-ours","pid_namespace":"{}","beacon":false}}"#,
        std::process::id(),
        ns.display()
    );
    // A reference record naming our pid could come from another pid namespace (another
    // container's process with the same pid): unknown, and said so, never reclaimed.
    let reference = format!(r#"{{"pid":{},"token":"not-ours"}}"#, std::process::id());
    plant(fx.dir(), "ref.lock", &reference, Duration::ZERO);
    let err = fx
        .locks
        .named_lock("ref.lock")
        .grace(Duration::ZERO)
        .acquire()
        .unwrap_err();
    match &err {
        Error::Locked { judgement, .. } => {
            assert_eq!(judgement.liveness, dirlock::Liveness::Unknown, "{err}")
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("another pid namespace"), "{err}");
    plant(fx.dir(), "me.lock", &rec, Duration::ZERO);
    let st = fx.locks.named_lock("me.lock").status().unwrap();
    assert!(
        matches!(st.state, dirlock::State::DeadByEvidence { .. }),
        "{:?}: {:?}",
        st.state,
        st.reason
    );
    let g = fx
        .locks
        .named_lock("me.lock")
        .grace(Duration::ZERO)
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, "not-ours");
    // Our own live lock, judged from another thread of this process, is live.
    std::thread::scope(|s| {
        let err = s
            .spawn(|| {
                fx.locks
                    .named_lock("me.lock")
                    .grace(Duration::ZERO)
                    .acquire()
                    .unwrap_err()
            })
            .join()
            .unwrap();
        assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    });
    g.release().unwrap();
}

// ---- 9. Observers never make an acquisition fail ------------------------------------------

/// A temp cleaner removes the lock directory between two acquisitions by one `Locks` (and
/// `mkdir` makes another at its path): the next acquisition takes its lock in the directory at
/// the path, where others see it, not in the removed one, where it would exclude no one (nor
/// in none: the directory it kept open takes no lock).
#[test]
fn an_acquisition_after_the_lock_directory_was_removed_takes_the_lock_where_others_look() {
    let fx = Fixture::new();
    let once = || fx.locks.named_lock("c.lock").acquire().unwrap();
    once().release().unwrap();
    for remake in [false, true] {
        std::fs::remove_dir_all(fx.dir()).unwrap();
        if remake {
            private_dir(fx.dir());
        }
        let g = once();
        assert!(fx.dir().join("c.lock").join("owner.json").is_file());
        g.release().unwrap();
    }
}

#[test]
fn waiters_survive_the_lock_directory_being_removed() {
    let fx = Fixture::new();
    let holder = fx.locks.named_lock("c.lock").acquire().unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            fx.locks
                .named_lock("c.lock")
                .wait(Duration::from_secs(20))
                .acquire()
        });
        assert!(eventually(Duration::from_secs(20), || fx
            .entries()
            .iter()
            .any(|e| e.contains(".candidate."))));
        std::thread::sleep(Duration::from_millis(50));
        // `rm -rf` of the whole directory, the waiter's candidate first, then the held lock,
        // then the directory (the order `rm -rf` may take).
        let candidate = fx
            .entries()
            .into_iter()
            .find(|e| e.contains(".candidate."))
            .unwrap();
        std::fs::remove_dir_all(fx.dir().join(candidate)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // The waiter stages again meanwhile: like `rm -rf`, retry until the directory is gone.
        assert!(eventually(Duration::from_secs(20), || {
            std::fs::remove_dir_all(fx.dir()).is_ok()
        }));
        let g = waiter
            .join()
            .unwrap()
            .expect("a cleaner made a waiter fail");
        // Taken in the re-created directory; or, when it won in the old one between the
        // cleaner's removal of the held lock and of the directory, removed with the rest (a
        // cleaner that removes a held lock breaks any lock): its release then says so.
        if fx.dir().join("c.lock").exists() {
            g.release().unwrap();
        } else {
            let err = g.release().unwrap_err();
            assert!(matches!(err, Error::Lost { .. }), "{err:?}");
        }
    });
    // The holder's lock went with the directory: its release says so.
    let err = holder.release().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}

#[test]
fn status_and_sweep_beside_acquisitions_never_make_one_fail() {
    let fx = Fixture::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = fx.locks.statuses();
                    let _ = fx.locks.sweep(Duration::ZERO);
                }
            });
        }
        let workers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..300 {
                        match fx
                            .locks
                            .named_lock("o.lock")
                            .wait(Wait::Forever)
                            .durable(false)
                            .acquire()
                        {
                            Ok(g) => {
                                if let Err(e) = g.release() {
                                    failures.lock().unwrap().push(e.to_string());
                                }
                            }
                            Err(e) => failures.lock().unwrap().push(e.to_string()),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(failures.into_inner().unwrap(), Vec::<String>::new());
}

// ---- 10. No kernel resource outlives its wait ---------------------------------------------

fn inotify_instances() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.as_os_str() == "anon_inode:inotify")
        .count()
}

#[test]
fn waiting_threads_do_not_pin_an_inotify_instance_each() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "i.lock"]);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let mut threads = Vec::new();
    for _ in 0..20 {
        let (locks, done) = (fx.locks.clone(), done_rx.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        threads.push(std::thread::spawn(move || {
            let r = locks
                .named_lock("i.lock")
                .wait(Duration::from_millis(20))
                .acquire();
            tx.send(matches!(r, Err(Error::Timeout { .. }))).unwrap();
            // Stay alive until the count is taken.
            let _ = done.lock().unwrap().recv();
        }));
        assert!(rx.recv().unwrap(), "the wait did not time out");
    }
    let n = inotify_instances();
    drop(done_tx);
    for t in threads {
        t.join().unwrap();
    }
    assert!(n <= 1, "{n} inotify instances for 20 finished waits");
}

// ---- 14. A filesystem without RENAME_NOREPLACE --------------------------------------------

/// On FUSE (bindfs: `renameat2` refuses `RENAME_NOREPLACE`, and `fstat` of a removed directory
/// says `ENOENT`), a lock vanishing while it is looked at is ordinary contention: fail-fast
/// acquisitions report the lock held or get it, never an error.
#[test]
fn contention_on_fuse_is_never_an_error() {
    let Some(fuse) = Fuse::mount("hardening::contention_on_fuse_is_never_an_error") else {
        return;
    };
    let locks = dirlock::Locks::in_dir(fuse.path().join("locks")).unwrap();
    let errors = std::sync::Mutex::new(Vec::new());
    let took = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..400 {
                    match locks.named_lock("f.lock").durable(false).acquire() {
                        Ok(g) => {
                            took.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if let Err(e) = g.release() {
                                errors.lock().unwrap().push(e.to_string());
                            }
                        }
                        Err(e) if e.is_contended() => {}
                        Err(e) => errors.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    assert!(
        errors.is_empty(),
        "{} errors, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    assert!(
        took.into_inner() > 100,
        "too few acquisitions to prove anything"
    );
}

/// A filesystem without `RENAME_NOREPLACE` makes renames plain there only: after a FUSE mount
/// refused it, a lock elsewhere in the same process still refuses to rename over an empty
/// directory at its path.
#[test]
fn a_fuse_mount_never_makes_renames_plain_elsewhere() {
    let Some(fuse) = Fuse::mount("hardening::a_fuse_mount_never_makes_renames_plain_elsewhere")
    else {
        return;
    };
    let there = dirlock::Locks::in_dir(fuse.path().join("locks")).unwrap();
    there
        .named_lock("f.lock")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let fx = Fixture::new();
    private_dir(&fx.dir().join("x.lock"));
    let err = fx.locks.named_lock("x.lock").acquire().unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
    assert_eq!(
        std::fs::read_dir(fx.dir().join("x.lock")).unwrap().count(),
        0
    );
}

/// The reference implementation stages candidates with a `{pid, token}` record and no
/// `flock`: a sweep must judge their creators by pid, not by a beacon they never take (a
/// `sweep --grace 0` used to retire a live reference candidate mid-acquisition).
#[test]
fn sweep_judges_a_reference_candidate_by_its_pid() {
    let fx = Fixture::new();
    let live = ChildGuard::spawn(std::process::Command::new("sleep").arg("60"));
    let staging = "r.lock.candidate.5f0c6a3e-9d7b-4c1e-8f2a-0b1c2d3e4f50";
    plant(
        fx.dir(),
        staging,
        &format!(
            r#"{{"pid":{},"token":"5f0c6a3e-9d7b-4c1e-8f2a-0b1c2d3e4f50"}}"#,
            live.id()
        ),
        Duration::ZERO,
    );
    let dead = "r.lock.candidate.6f0c6a3e-9d7b-4c1e-8f2a-0b1c2d3e4f51";
    plant(
        fx.dir(),
        dead,
        &format!(
            r#"{{"pid":{},"token":"6f0c6a3e-9d7b-4c1e-8f2a-0b1c2d3e4f51"}}"#,
            dead_pid()
        ),
        Duration::ZERO,
    );
    let report = fx.locks.sweep(Duration::ZERO).unwrap();
    assert!(
        report
            .kept
            .iter()
            .any(|(n, why)| n == staging && why.contains("still be running")),
        "{report:?}"
    );
    assert!(report.removed.iter().any(|n| n == dead), "{report:?}");
    assert!(fx.dir().join(staging).join("owner.json").exists());
    let st = fx.locks.named_lock("r.lock").status().unwrap();
    let c = st.candidates.iter().find(|c| c.name == staging).unwrap();
    assert_eq!(c.creator_alive, Some(true), "status: {c:?}");
}

/// A lock whose record a temp cleaner removed (caught halfway through `rm -rf`) while its
/// holder lives is in use, not a malformed lock to give up on: a waiting acquisition waits for
/// the holder, and gets the lock when it lets go.
#[test]
fn a_damaged_lock_in_use_is_waited_for() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "d.lock"]);
    std::fs::remove_file(fx.dir().join("d.lock/owner.json")).unwrap();
    let err = fx.locks.named_lock("d.lock").acquire().unwrap_err();
    assert!(
        matches!(err, Error::Malformed { .. })
            && err.to_string().contains("a process holds a lock on it"),
        "{err}"
    );
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            fx.locks
                .named_lock("d.lock")
                .wait(Duration::from_secs(20))
                .acquire()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the waiter gave up on a lock in use");
        holder.release();
        let g = waiter.join().unwrap().expect("the waiter gets the lock");
        g.release().unwrap();
    });
}

/// Entries whose names are not UTF-8 are not the protocol's: a sweep leaves them (and does not
/// claim to have removed a lossy copy of the name), and `statuses` does not list a lock by a
/// name that is not its own.
#[test]
fn names_that_are_not_utf8_are_left_alone() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let odd = fx
        .dir()
        .join(std::ffi::OsStr::from_bytes(b"a.lock.tombstone.\xff"));
    private_dir(&odd);
    private_dir(&fx.dir().join(std::ffi::OsStr::from_bytes(b"b\xfe.lock")));
    let report = fx.locks.sweep(Duration::ZERO).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(odd.exists());
    assert!(fx.locks.statuses().unwrap().is_empty());
}
