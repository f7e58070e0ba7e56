//! Lock names: golden values from the reference implementation's formula
//! (`sha256("repository\0" + realpath)` in Node.js), and the per-user layout.

use crate::common::Fixture;
use dirlock::paths::{global_setup_lock_name, repository_lock_name};
use std::path::Path;

/// Computed with Node.js from the reference implementation's expressions.
const GOLDEN: &[(&str, &str, &str)] = &[
    (
        "/srv/repo",
        "repository-ac95e04a97dd381f7eedfec47b3ffe40576873f192e804a35f3c1ecff372934c.lock",
        "global-setup-56fbd4488a935d52a1dee088db7a6a8cecda8501e8d507d93abfd4bb83497d71.lock",
    ),
    (
        "/home/user",
        "repository-6e732dae97385ed05cdf5a5c417b66dc6bc5ee1a6754121a24e09a985022abaf.lock",
        "global-setup-fcdd7819a6028a89a4c65df3cc6bc7510f7380781d5ee9377e4d970507bccc10.lock",
    ),
    (
        "/tmp/with space/ünïcode",
        "repository-5b46cc8447f2f4e00ab082d80454ce7a64c6cdab325063d9a5567641a98f6793.lock",
        "global-setup-003ae0b3ca7c5eb72f0ac6e9718eee6b284ee342872b8c4b76ea834a022e5b85.lock",
    ),
    (
        "/",
        "repository-43f19dcaee1f32a1fc1ebd5dec8b85e7f56e6325ce9943bd7db39f6d0381d45b.lock",
        "global-setup-bcddecc93f411b77079d5b160a1d59238b277a05150e342299b0fdc9f55fe7cc.lock",
    ),
];

#[test]
fn names_match_the_reference_formula() {
    for (path, repo, setup) in GOLDEN {
        assert_eq!(repository_lock_name(Path::new(path)), *repo, "{path}");
        assert_eq!(global_setup_lock_name(Path::new(path)), *setup, "{path}");
    }
}

/// A lock for any path: every spelling of one file (a symlink to it, a `..`, a name not yet
/// made) is one lock, and two files are two.
#[test]
fn a_path_lock_is_one_lock_for_every_spelling_of_the_path() {
    let fx = Fixture::new();
    let conf = fx.tmp.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    std::os::unix::fs::symlink(&conf, fx.tmp.path().join("alias")).unwrap();
    let settings = conf.join("settings.toml"); // not made yet
    let held = fx.locks.path_lock(&settings).acquire().unwrap();
    let name = dirlock::paths::path_lock_name(
        &std::fs::canonicalize(&conf).unwrap().join("settings.toml"),
    );
    assert_eq!(held.path(), fx.dir().join(&name));
    assert!(
        name.starts_with("path-") && name.ends_with(".lock"),
        "{name}"
    );
    for spelling in [
        fx.tmp.path().join("alias/settings.toml"),
        conf.join("../conf/settings.toml"),
    ] {
        // This thread holds it: the same lock, refused as already held.
        let err = fx.locks.path_lock(&spelling).acquire().unwrap_err();
        assert!(
            matches!(err, dirlock::Error::AlreadyHeld { .. }),
            "{spelling:?}: {err}"
        );
        assert!(err.to_string().contains("settings.toml"), "{err}");
    }
    // A symbolic link to it, dangling until the file is made (and a link to that link).
    std::os::unix::fs::symlink("settings.toml", conf.join("link")).unwrap();
    std::os::unix::fs::symlink(conf.join("link"), fx.tmp.path().join("link2")).unwrap();
    for spelling in [conf.join("link"), fx.tmp.path().join("link2")] {
        let err = fx.locks.path_lock(&spelling).acquire().unwrap_err();
        assert!(
            matches!(err, dirlock::Error::AlreadyHeld { .. }),
            "{spelling:?}: {err}"
        );
    }
    // Made since: still the same lock.
    std::fs::write(&settings, "x").unwrap();
    assert!(matches!(
        fx.locks.path_lock(&settings).acquire().unwrap_err(),
        dirlock::Error::AlreadyHeld { .. }
    ));
    // Another file is another lock.
    fx.locks
        .path_lock(conf.join("other.toml"))
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    held.release().unwrap();
    // A missing parent is an error naming it.
    let err = fx
        .locks
        .path_lock(fx.tmp.path().join("nope/x"))
        .acquire()
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}
