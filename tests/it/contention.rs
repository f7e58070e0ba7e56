//! Contention inside one process: threads really contend (each acquisition has its own token
//! and beacon), the same thread is refused at once, the lock order is enforced.

use crate::common::*;
use dirlock::{Error, Liveness, Wait};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn threads_exclude_each_other() {
    let fx = Fixture::new();
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let (threads, rounds) = (6, 40);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (inside, counter, locks) = (inside.clone(), counter.clone(), fx.locks.clone());
            s.spawn(move || {
                for _ in 0..rounds {
                    let g = locks
                        .named_lock("counter.lock")
                        .wait(Wait::Forever)
                        .durable(false)
                        .acquire()
                        .unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                    // A torn read-modify-write: any overlap loses an increment.
                    let v = counter.load(Ordering::SeqCst);
                    std::thread::yield_now();
                    counter.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    g.release().unwrap();
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), threads * rounds);
    assert_eq!(fx.entries(), Vec::<String>::new(), "leftovers");
}

#[test]
fn another_thread_fails_fast_with_the_holder_named() {
    let fx = Fixture::new();
    let g = fx
        .locks
        .repository_lock(fx.repo())
        .purpose("sync")
        .acquire()
        .unwrap();
    let err = std::thread::scope(|s| {
        s.spawn(|| fx.locks.repository_lock(fx.repo()).acquire().unwrap_err())
            .join()
            .unwrap()
    });
    match &err {
        Error::Locked {
            owner, judgement, ..
        } => {
            assert_eq!(owner.pid, std::process::id());
            assert_eq!(owner.purpose.as_deref(), Some("sync"));
            assert_eq!(judgement.liveness, Liveness::Live);
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(err.is_contended());
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert!(
        msg.contains("purpose: sync") && msg.contains("retry"),
        "{msg}"
    );
    // The holder is this very process; the message, for an application's users, names no
    // Rust API (advice for developers lives in the docs) and no protocol term.
    assert!(msg.contains("held by this process (pid"), "{msg}");
    assert!(!msg.contains("::") && !msg.contains('`'), "{msg}");
    assert!(!msg.contains("beacon") && !msg.contains("judged"), "{msg}");
    assert!(!msg.contains("--wait"), "{msg}");
    g.release().unwrap();
}

#[test]
fn the_same_thread_is_refused_at_once() {
    let fx = Fixture::new();
    let g = fx.locks.global_setup_lock(fx.repo()).acquire().unwrap();
    // Wait::Forever would wait on ourselves forever: refused instead.
    let err = fx.locks.global_setup_lock(fx.repo()).acquire().unwrap_err();
    assert!(matches!(err, Error::AlreadyHeld { .. }), "{err:?}");
    g.release().unwrap();
    fx.locks
        .global_setup_lock(fx.repo())
        .acquire()
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn setup_after_repository_is_refused() {
    let fx = Fixture::new();
    let home = fx.tmp.path();
    let err = fx
        .locks
        .with_repository_lock(fx.repo(), || {
            fx.locks.with_global_setup_lock(home, || Ok::<_, Error>(()))
        })
        .unwrap_err();
    assert!(matches!(err, Error::LockOrder { .. }), "{err:?}");
    assert!(err.to_string().contains("global setup lock first"), "{err}");
    // The right order works, and leaves nothing behind.
    let v = fx
        .locks
        .with_setup_locks(home, fx.repo(), || Ok::<_, Error>(7))
        .unwrap();
    assert_eq!(v, 7);
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn closures_release_on_error_and_on_panic() {
    let fx = Fixture::new();
    #[derive(Debug)]
    enum AppError {
        #[allow(dead_code)] // carried, not inspected, here
        Lock(Error),
        Failed,
    }
    impl From<Error> for AppError {
        fn from(e: Error) -> Self {
            AppError::Lock(e)
        }
    }
    let r: Result<(), AppError> = fx
        .locks
        .with_repository_lock(fx.repo(), || Err(AppError::Failed));
    assert!(matches!(r, Err(AppError::Failed)));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fx.locks
            .with_repository_lock(fx.repo(), || -> Result<(), Error> { panic!("boom") })
    }));
    assert!(caught.is_err());
    // Both released: the lock is free and nothing is left.
    assert_eq!(fx.entries(), Vec::<String>::new());
    let r: Result<(), AppError> = fx.locks.with_repository_lock(fx.repo(), || Ok(()));
    assert!(r.is_ok());
}

/// A lock whose record names our pid but was written elsewhere (pid 1 of another pid
/// namespace is every container's main process) is not "held by this process": this process
/// is its holder only when it wrote the record. (A pid alone once made it so.)
#[test]
fn a_record_with_our_pid_from_elsewhere_is_not_this_process() {
    let fx = Fixture::new();
    let rec = format!(
        r#"{{"pid":{},"token":"t-elsewhere","pid_namespace":"pid:[1]","beacon":false}}"#,
        std::process::id()
    );
    plant(fx.dir(), "ns.lock", &rec, std::time::Duration::ZERO);
    let err = fx.locks.named_lock("ns.lock").acquire().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    assert!(!msg.contains("this process"), "{msg}");
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
}
