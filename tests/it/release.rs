//! Release: a lock taken away or replaced is reported lost, and the new owner is spared; a
//! release hands the lock on only to a waiter that waits.

use crate::common::*;
use dirlock::Error;

#[test]
fn a_stolen_lock_is_reported_and_the_new_owner_spared() {
    let fx = Fixture::new();
    let a = fx.locks.named_lock("x.lock").acquire().unwrap();
    // A thief moves A's lock away; B then takes the free name.
    std::fs::rename(a.path(), fx.dir().join("stolen")).unwrap();
    let b = std::thread::scope(|s| {
        s.spawn(|| fx.locks.named_lock("x.lock").acquire().unwrap())
            .join()
            .unwrap()
    });
    let b_token = b.owner().token.clone();
    // Asked mid-work, the guard says what its release would.
    let err = a.check().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("another owner's lock is in its place"),
        "{err}"
    );
    b.check().unwrap();
    let err = a.release().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("another owner's lock is in its place"),
        "{err}"
    );
    // B's lock is untouched and B releases normally.
    let record = std::fs::read_to_string(fx.dir().join("x.lock/owner.json")).unwrap();
    assert!(record.contains(&b_token), "{record}");
    b.release().unwrap();
}

#[test]
fn a_vanished_lock_is_reported() {
    let fx = Fixture::new();
    let a = fx.locks.named_lock("x.lock").acquire().unwrap();
    a.check().unwrap();
    std::fs::rename(a.path(), fx.dir().join("gone")).unwrap();
    assert!(a.check().unwrap_err().to_string().contains("is gone"));
    let err = a.release().unwrap_err();
    assert!(err.to_string().contains("is gone"), "{err}");
}

#[test]
fn a_closure_whose_lock_was_lost_fails() {
    let fx = Fixture::new();
    let r = fx.locks.with_repository_lock(fx.repo(), || {
        let name = dirlock::paths::repository_lock_name(&std::fs::canonicalize(fx.repo()).unwrap());
        std::fs::rename(fx.dir().join(name), fx.dir().join("gone")).unwrap();
        Ok::<_, Error>(1)
    });
    assert!(matches!(r, Err(Error::Lost { .. })), "{r:?}");
}

/// `run_with` hands the work its guard (a crashed predecessor is visible there), and when the
/// release fails after the work succeeded, the work's value is kept in the error.
#[test]
fn run_with_shows_the_predecessor_and_keeps_the_value_when_the_release_fails() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "x.lock"]);
    let pid = holder.kill();
    let seen = fx
        .locks
        .named_lock("x.lock")
        .run_with(|guard| Ok::<_, Error>(guard.reclaimed_from().map(|o| o.pid)))
        .unwrap();
    assert_eq!(seen, Some(pid));
    let err = fx
        .locks
        .named_lock("x.lock")
        .run_with(|guard| {
            // A thief moves the lock away while the work runs.
            std::fs::rename(guard.path(), fx.dir().join("stolen")).unwrap();
            Ok::<_, Error>(vec![4, 2])
        })
        .unwrap_err();
    match &err {
        Error::NotReleased { error, .. } => {
            assert!(matches!(**error, Error::Lost { .. }), "{error:?}")
        }
        other => panic!("expected NotReleased, got {other:?}"),
    }
    assert!(
        err.to_string().contains("what it returned is kept"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
    // Asked for another type, the error stays whole; asked for the right one, the value.
    let err = err.into_value::<String>().unwrap_err();
    assert_eq!(err.into_value::<Vec<i32>>().unwrap(), vec![4, 2]);
    // The closure's own error passes through, and the lock is released.
    let err = fx
        .locks
        .named_lock("y.lock")
        .run_with(|_| {
            Err::<(), _>(Error::InvalidInput {
                what: "w".into(),
                problem: "p".into(),
            })
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }));
    assert_eq!(fx.entries(), vec!["stolen".to_owned()]);
}

/// A release hands the lock only to a waiter that holds its entry's exclusive `flock`, not
/// for the shared one that the writer queued behind it is granted when the waiter lets go
/// (and keeps until it publishes itself). Planted here: that shared `flock` on an entry whose
/// waiter is done with it, and a directory at its candidate's name, as the lock's previous
/// directory is there until the release that handed the lock on retires it. The release
/// leaves both alone (it handed the lock to that name once: found by a test of quick
/// handoffs, when a release yielded its CPU to the waiter it woke before it retired).
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
fn a_release_passes_an_entry_that_only_the_writer_behind_holds() {
    use crate::queue::LOCK;
    use std::os::unix::fs::DirBuilderExt;
    let fx = Fixture::new();
    let test = "release::a_release_passes_an_entry_that_only_the_writer_behind_holds";
    if crate::common::sys::lacks_exchange(test, fx.tmp.path()) {
        return;
    }
    let held = fx.locks.named_lock(LOCK).acquire().unwrap();
    let token = "0b6f8b5e-3c8e-4c1a-9a55-2d1f3f0e7a10";
    let private = |path: &std::path::Path| {
        std::fs::DirBuilder::new().mode(0o700).create(path).unwrap();
    };
    let queue = fx.dir().join(format!("{LOCK}.queue"));
    private(&queue);
    let entry = queue.join(format!("00000000000000000001.w.{token}"));
    private(&entry);
    let behind = crate::common::sys::flocked_shared(&entry);
    let previous = fx.dir().join(format!("{LOCK}.candidate.{token}"));
    private(&previous);
    std::fs::write(previous.join("previous"), b"").unwrap();
    held.release().unwrap();
    drop(behind);
    assert!(
        previous.join("previous").exists(),
        "the release handed the lock to the name of a waiter that held it no more"
    );
    let st = fx.locks.named_lock(LOCK).status().unwrap();
    assert_eq!(st.state, dirlock::State::Free, "the lock is not free");
}
