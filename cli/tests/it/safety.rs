//! I8: everything private whatever the umask; symlinks, foreign owners and open modes refused
//! with an error naming the path and the fix. Permission cases run in a child that dropped
//! privileges (the suite runs as root in CI).

use crate::common::*;
use crate::BIN;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn uid() -> u32 {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap())
}

#[test]
fn modes_are_exact_whatever_the_umask() {
    for umask in ["0777", "0000", "0022"] {
        let tmp = tempfile::tempdir().unwrap();
        let until = tmp.path().join("until");
        std::fs::write(&until, "").unwrap(); // release at once
        let script = format!(
            "umask {umask}; exec \"$0\" hold --app app --lock m.lock --until \"$1\" && ls -l >/dev/null"
        );
        let out = Command::new("sh")
            .args(["-c", &script, BIN])
            .arg(&until)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "umask {umask}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let base = tmp.path().join(format!("app-{}", uid()));
        assert_eq!(mode(&base), 0o700, "umask {umask}");
        assert_eq!(mode(&base.join("operation-locks")), 0o700, "umask {umask}");
    }
}

/// Runs the binary as uid/gid 4242 with TMPDIR set.
fn as_user(tmpdir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=4242", "--regid=4242", "--clear-groups", BIN])
        .args(args)
        .env("TMPDIR", tmpdir)
        .output()
        .unwrap()
}

#[test]
fn an_unprivileged_user_refuses_a_base_directory_planted_by_another_user() {
    if lacks(
        "safety::an_unprivileged_user_refuses_a_base_directory_planted_by_another_user",
        "root and setpriv(1) (a second uid)",
        is_root() && have("setpriv"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o1777)).unwrap();
    // Another user (root here) pre-creates the victim's base directory, private to itself.
    let planted = tmp.path().join("app-4242");
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, PermissionsExt::from_mode(0o777)).unwrap();
    let out = as_user(
        tmp.path(),
        &["run", "--app", "app", "--lock", "x.lock", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&planted.display().to_string()) && err.contains("owned by uid 0"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&planted).unwrap().count(),
        0,
        "nothing created inside"
    );
}

#[test]
fn an_unprivileged_user_gets_a_clear_permission_error() {
    if lacks(
        "safety::an_unprivileged_user_gets_a_clear_permission_error",
        "root and setpriv(1) (a second uid)",
        is_root() && have("setpriv"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    // 4242 cannot create its base directory in a directory it may not write.
    let out = as_user(
        tmp.path(),
        &["run", "--app", "app", "--lock", "x.lock", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create the lock directory")
            && err.contains("app-4242")
            && err.contains("Permission denied"),
        "{err}"
    );
    // And it works for 4242 in a directory it may write, with its files its own.
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o1777)).unwrap();
    let until = tmp.path().join("until");
    std::fs::write(&until, "").unwrap();
    let out = as_user(
        tmp.path(),
        &[
            "hold",
            "--app",
            "app",
            "--lock",
            "x.lock",
            "--until",
            until.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = tmp.path().join("app-4242");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&base).unwrap()),
        4242
    );
    assert_eq!(mode(&base), 0o700);
}
