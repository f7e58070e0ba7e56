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
    std::fs::rename(a.path(), fx.dir().join("gone")).unwrap();
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
