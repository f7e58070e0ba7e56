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

/// A lock directory a team shares: root's, group 4300's, mode 2770. Its members (4242 and
/// 4243) take, wait for and take over each other's locks; an outsider (4244) can do nothing,
/// and changes nothing; a group directory that is not setgid, or is sticky, is refused.
#[test]
fn a_group_shares_a_lock_directory_and_outsiders_can_do_nothing() {
    if lacks(
        "safety::a_group_shares_a_lock_directory_and_outsiders_can_do_nothing",
        "root and setpriv(1) (three users)",
        is_root() && have("setpriv"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let team = tmp.path().join("team");
    std::fs::create_dir(&team).unwrap();
    std::os::unix::fs::chown(&team, Some(0), Some(4300)).unwrap();
    std::fs::set_permissions(&team, PermissionsExt::from_mode(0o2770)).unwrap();
    let lock = format!("{}/deploy", team.display());
    let user = |uid: u32, member: bool| {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg(if member {
                "--groups=4300".to_owned()
            } else {
                "--clear-groups".to_owned()
            })
            .arg(BIN)
            .env_remove("DIRLOCK_DIR");
        c
    };
    let said = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    // Member A holds it.
    let until = tmp.path().join("until");
    let mut a = ChildGuard::spawn(
        user(4242, true)
            .args(["hold", "--lock", &lock, "--until"])
            .arg(&until)
            .stdout(std::process::Stdio::piped()),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(a.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("held "), "{line}");
    let held = team.join("deploy.lock");
    assert_eq!(
        mode(&held) & 0o7777,
        0o2770,
        "the group may read, judge and take it over"
    );
    assert_eq!(mode(&held.join("owner.json")), 0o640);
    assert_eq!(
        std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&held).unwrap()),
        4300
    );
    // Member B sees it held by A, and is refused at once with -n.
    let o = user(4243, true)
        .args(["run", "-n", "--lock", &lock, "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", said(&o));
    assert!(
        said(&o).contains(&format!("held by pid {}", a.id())),
        "{}",
        said(&o)
    );
    // The outsider can do nothing: not run, not look, not remove; and changes nothing.
    let before = std::fs::read_dir(&team).unwrap().count();
    for args in [
        &["run", "-n", "--lock", &lock, "true"][..],
        &["status", "--lock", &lock],
        &["unlock", "--force", "--lock", &lock],
        &["sweep", "--dir", team.to_str().unwrap(), "--grace", "0"],
    ] {
        let o = user(4244, false).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", said(&o));
        assert!(
            said(&o).contains("Permission denied"),
            "{args:?}: {}",
            said(&o)
        );
    }
    assert_eq!(std::fs::read_dir(&team).unwrap().count(), before);
    assert!(held.join("owner.json").exists());
    // A is killed: B takes it over at once, and says so.
    let dead = a.id();
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let o = user(4243, true)
        .args(["run", "-n", "--lock", &lock, "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", said(&o));
    assert!(
        said(&o).contains(&format!("took over named lock deploy from pid {dead}")),
        "{}",
        said(&o)
    );
    assert_eq!(
        std::fs::read_dir(&team).unwrap().count(),
        0,
        "nothing left once B released it"
    );
    // A group directory that is not setgid, or is sticky, is refused, saying why.
    for (bits, why) in [(0o770, "not setgid"), (0o3770, "sticky bit")] {
        std::fs::set_permissions(&team, PermissionsExt::from_mode(bits)).unwrap();
        let o = user(4243, true)
            .args(["run", "-n", "--lock", &lock, "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{bits:o}: {}", said(&o));
        assert!(said(&o).contains(why), "{bits:o}: {}", said(&o));
    }
}
