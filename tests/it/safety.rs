//! I8: everything private whatever the umask; symlinks, foreign owners and open modes refused
//! with an error naming the path and the fix. Permission cases run in a child that dropped
//! privileges (the suite runs as root in CI).

use crate::common::*;
use dirlock::{Error, Locks};
use std::os::unix::fs::PermissionsExt;

#[test]
fn lock_and_record_modes_are_exact() {
    let fx = Fixture::new();
    let g = fx.locks.named_lock("m.lock").acquire().unwrap();
    assert_eq!(mode(fx.dir()), 0o700);
    assert_eq!(mode(g.path()), 0o700);
    assert_eq!(mode(&g.path().join("owner.json")), 0o600);
}

#[test]
fn a_symlinked_lock_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, PermissionsExt::from_mode(0o700)).unwrap();
    let link = tmp.path().join("locks");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let err = Locks::in_dir(&link).unwrap_err();
    match &err {
        Error::Unsafe { path, .. } => assert_eq!(path, &link),
        other => panic!("expected Unsafe, got {other:?}"),
    }
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing created through the link"
    );
}

#[test]
fn open_modes_are_refused_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    for (bits, who) in [(0o775, "its group"), (0o757, "anyone"), (0o1777, "anyone")] {
        let dir = tmp.path().join(format!("locks-{bits:o}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(bits)).unwrap();
        let err = Locks::in_dir(&dir).unwrap_err();
        assert!(matches!(err, Error::Unsafe { .. }), "{bits:o}: {err:?}");
        let msg = err.to_string();
        // A directory the caller named may be shared (a project, /usr): never advise changing
        // it.
        assert!(
            msg.contains(&format!("mode {bits:o}: {who}"))
                && msg.contains("may write it")
                && msg.contains("a directory only you can write")
                && !msg.contains("chmod")
                && !msg.contains("::"),
            "{msg}"
        );
        assert_eq!(mode(&dir), bits, "refused, not silently changed");
    }
}

/// A directory only its owner can write (a project's, mode 755) hosts locks, as OpenSSH's
/// StrictModes trusts it; each lock inside is private all the same.
#[test]
fn a_directory_others_may_only_read_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    let locks = Locks::in_dir(&dir).unwrap();
    let guard = locks.named_lock("build").acquire().unwrap();
    assert_eq!(guard.path(), dir.join("build.lock"));
    assert_eq!(mode(&dir.join("build.lock")), 0o700);
    assert_eq!(mode(&dir.join("build.lock").join("owner.json")), 0o600);
    guard.release().unwrap();
    assert_eq!(mode(&dir), 0o755, "left as it was");
}

#[test]
fn a_foreign_owner_is_refused() {
    if lacks(
        "safety::a_foreign_owner_is_refused",
        "root (to make a directory another user owns)",
        is_root(),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let err = Locks::in_dir(&dir).unwrap_err();
    assert!(err.to_string().contains("owned by uid 65534"), "{err}");
}
