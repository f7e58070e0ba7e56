//! Release: a lock taken away or replaced is reported lost, and the new owner is spared.

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
