//! Advice that is safe to follow: never to change a directory others may share, in this
//! command's own terms.

use crate::cli::{dirlock, text};
use crate::common::*;
use crate::BIN;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// How setpriv(1) runs a program as uid 65534 (a normal user).
pub(crate) const NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// Runs the command as uid 65534 (a normal user), when this test runs as root.
pub(crate) fn as_nobody(args: &[&str], tmpdir: &Path) -> Option<Output> {
    (is_root() && have("setpriv")).then(|| {
        Command::new(NOBODY[0])
            .args(&NOBODY[1..])
            .arg(BIN)
            .args(args)
            .env("TMPDIR", tmpdir)
            .output()
            .unwrap()
    })
}

/// Runs the command as a normal user: this one, or, as root (whom no mode keeps out), uid
/// 65534, to whom `theirs` is given first (see [`give_to_nobody`]). A caller as root checks
/// for setpriv(1) first ([`normal_users_dir`]).
pub(crate) fn as_a_normal_user(args: &[&str], tmpdir: &Path, theirs: &[&Path]) -> Output {
    if !is_root() {
        return Command::new(BIN).args(args).output().unwrap();
    }
    theirs.iter().for_each(|p| give_to_nobody(p));
    as_nobody(args, tmpdir).expect("setpriv(1)")
}

/// Gives `path` to uid 65534, when this test runs as root (as whom [`as_a_normal_user`] runs
/// the command).
pub(crate) fn give_to_nobody(path: &Path) {
    if is_root() {
        std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    }
}

/// For test `test`, which runs the command as a normal user ([`as_a_normal_user`]): a
/// temporary directory open to all, and a private lock directory `locks` in it. `None` (the
/// test skips, saying so) as root without setpriv(1).
pub(crate) fn normal_users_dir(test: &str) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    if is_root() && lacks(test, "setpriv", have("setpriv")) {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let dir = private_dir(&tmp.path().join("locks"));
    Some((tmp, dir))
}

/// A directory the user names may be shared (/tmp), or used by others for something else (a
/// project checkout, /usr as root): the advice never is to change it, and speaks in this
/// command's options, not the library's API.
#[test]
fn a_shared_directory_is_never_to_be_changed() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, mode) in [("shared", 0o1777), ("team", 0o775)] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let lock = format!("{}/x.lock", dir.display());
        let check = |out: &Output, who: &str| {
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}, {who}: {err}");
            assert!(
                !err.contains("chmod")
                    && !err.contains("remove")
                    && err.contains("only you can write"),
                "{name}, {who}: dangerous or missing advice: {err}"
            );
            assert!(
                err.contains("--lock NAME") && err.contains("--dir") && !err.contains("Locks::"),
                "{name}, {who}: {err}"
            );
        };
        check(
            &Command::new(BIN)
                .args(["run", "-n", "--lock", &lock, "--", "true"])
                .output()
                .unwrap(),
            "this user",
        );
        // As another (normal) user, the directory is not even theirs: still no advice to
        // change it.
        if let Some(out) = as_nobody(&["run", "-n", "--lock", &lock, "--", "true"], tmp.path()) {
            check(&out, "uid 65534");
        }
        assert_eq!(
            crate::common::mode(&dir),
            mode,
            "{name}: refused, not changed"
        );
    }
}

#[test]
fn relative_lock_paths_resolve_against_the_working_directory() {
    let fx = Fixture::new();
    let out = Command::new(BIN)
        .args(["run", "-n", "--lock", "./locks/r.lock", "--", "true"])
        .current_dir(fx.tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = Command::new(BIN)
        .args(["path", "--lock", "locks/r.lock"])
        .current_dir(fx.tmp.path())
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim_end(),
        fx.dir().join("r.lock").display().to_string()
    );
    let out = Command::new(BIN)
        .args(["path", "--dir", ".", "--lock", "r.lock"])
        .current_dir(fx.dir())
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim_end(),
        fx.dir().join("r.lock").display().to_string()
    );
}

#[test]
fn the_command_advises_in_its_own_terms() {
    let fx = Fixture::new();
    let _h = Holder::start(fx.dir(), &["--lock", "a.lock"]);
    let err = text(&dirlock(fx.dir(), &["run", "-n", "--lock", "a.lock", "--", "true"]).stderr);
    assert!(
        err.contains("--wait-forever") && !err.contains("Wait::"),
        "{err}"
    );
    plant(fx.dir(), "m.lock", "garbage", Duration::ZERO);
    let err = text(&dirlock(fx.dir(), &["run", "-n", "--lock", "m.lock", "--", "true"]).stderr);
    assert!(
        err.contains("dirlock unlock --force") && !err.contains("LockRequest"),
        "{err}"
    );
}

/// A lock whose holder cannot be checked from here (another host) is removed by hand: status
/// says so, as run does, and not to run `dirlock unlock`, which refuses it. (Status once
/// advised `dirlock unlock`.)
#[test]
fn an_unknown_holder_is_to_be_removed_by_hand() {
    let fx = Fixture::new();
    let rec = r#"{"pid":1,"token":"t","host":"elsewhere.example"}"#;
    plant(fx.dir(), "u.lock", rec, Duration::ZERO);
    let status = dirlock(fx.dir(), &["status", "--lock", "u.lock"]);
    let said = text(&status.stdout) + &text(&status.stderr);
    assert!(
        said.contains("by hand") && !said.contains("dirlock unlock"),
        "{said}"
    );
    let unlock = dirlock(fx.dir(), &["unlock", "--lock", "u.lock"]);
    assert_eq!(unlock.status.code(), Some(75), "{}", text(&unlock.stderr));
    assert!(fx.dir().join("u.lock").join("owner.json").exists());
}

/// A plain file at the lock path that this user cannot open cannot be checked for a process's
/// `flock`: a forced unlock refuses it and says to remove it by hand (it once failed with a
/// bare "Permission denied" after advising `--force`). Run as uid 65534 when root, whom no
/// mode keeps out.
#[test]
fn a_file_a_forced_unlock_cannot_open_is_left_to_remove_by_hand() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    if is_root()
        && lacks(
            "advice::a_file_a_forced_unlock_cannot_open_is_left_to_remove_by_hand",
            "setpriv",
            have("setpriv"),
        )
    {
        return;
    }
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("locks");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();
    let file = dir.join("m.lock");
    std::fs::write(&file, "someone's").unwrap();
    std::fs::set_permissions(&file, PermissionsExt::from_mode(0o000)).unwrap();
    let args = [
        "unlock",
        "--force",
        "--dir",
        dir.to_str().unwrap(),
        "--lock",
        "m.lock",
    ];
    let out = as_a_normal_user(&args, tmp.path(), &[&dir, &file]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot be opened") && err.contains("by hand") && !err.contains("--force"),
        "{err}"
    );
    assert!(file.exists(), "removed unchecked");
}

/// A run that waits for a lock whose holder has ended says so, and what it waits for: the
/// grace period, or another program's interrupted takeover; and so does its timeout (each
/// once said "held by" the dead pid, and the second waited without a word).
#[test]
fn a_wait_for_an_ended_holder_says_what_it_waits_for() {
    let fx = Fixture::new();
    let pid = dead_pid();
    // The reference implementation's record: dead by evidence only.
    let lock = plant(
        fx.dir(),
        "x.lock",
        &format!(r#"{{"pid":{pid},"token":"t"}}"#),
        Duration::from_secs(5),
    );
    let wait = || {
        let out = dirlock(fx.dir(), &["run", "-w", "0.3", "--lock", "x", "--", "true"]);
        assert_eq!(out.status.code(), Some(75));
        let err = text(&out.stderr);
        let lines: Vec<String> = err.lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 2, "{err}");
        (lines[0].clone(), lines[1].clone())
    };
    let (waiting, gave_up) = wait();
    assert!(
        waiting.starts_with(&format!(
            "dirlock: waiting for named lock x: held by pid {pid} since "
        )) && waiting.contains(&format!(
            ", which seems to have ended (no process has pid {pid}); it can be taken over in 5"
        )),
        "{waiting}"
    );
    assert!(
        gave_up.starts_with("dirlock: gave up on named lock x ")
            && gave_up.contains(&format!(
                ": it was held by pid {pid}, which seems to have ended; it can be taken over in 5"
            ))
            && gave_up.ends_with(" s (retry then, or wait longer)"),
        "{gave_up}"
    );
    // Its time in the future (a clock was set back): the grace period counts from when a
    // wait first sees it, so a new run starts it again, and retrying is no use.
    let ahead = std::time::SystemTime::now() + Duration::from_secs(3600);
    std::fs::File::open(&lock)
        .unwrap()
        .set_times(
            std::fs::FileTimes::new()
                .set_accessed(ahead)
                .set_modified(ahead),
        )
        .unwrap();
    let (waiting, gave_up) = wait();
    assert!(
        waiting.contains("; its time is in the future (a clock was set back), so it can be taken over only this far into the wait: "),
        "{waiting}"
    );
    assert!(
        gave_up.ends_with(": a wait longer than the grace period takes it over")
            && !gave_up.contains("retry"),
        "{gave_up}"
    );
    // Past the grace period, behind a takeover another program began and left.
    set_age(&lock, Duration::from_secs(61));
    let guard = private_dir(&fx.dir().join("x.lock.reclaim"));
    let (waiting, gave_up) = wait();
    let tail = format!(
        ", which has ended; the marker {} that another program left for its takeover is respected ",
        guard.display()
    );
    assert!(
        waiting.starts_with(&format!(
            "dirlock: waiting for named lock x: held by pid {pid} since "
        )) && waiting.contains(&tail),
        "{waiting}"
    );
    assert!(
        gave_up.starts_with("dirlock: gave up on named lock x ")
            && gave_up.contains(&format!(": it was held by pid {pid}{tail}")),
        "{gave_up}"
    );
    assert!(
        lock.is_dir() && guard.is_dir(),
        "the lock and the marker stay"
    );
}

/// A directory of one's own at the lock path (a mistyped `--lock`): status does not advise a
/// forced unlock, which refuses it and leaves all it holds.
#[test]
fn a_directory_that_is_no_lock_is_to_be_looked_at_not_forced() {
    let fx = Fixture::new();
    let mine = private_dir(&fx.dir().join("photos.lock"));
    std::fs::write(mine.join("a.jpg"), "precious").unwrap();
    let says = text(&dirlock(fx.dir(), &["status", "--lock", "photos"]).stdout);
    assert!(
        says.contains("and holds a.jpg, which a lock never holds")
            && says.contains("remove it by hand")
            && !says.contains("--force"),
        "{says}"
    );
    let out = dirlock(fx.dir(), &["unlock", "--force", "--lock", "photos"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("it holds a.jpg, which a lock never holds"),
        "{err}"
    );
    assert_eq!(std::fs::read(mine.join("a.jpg")).unwrap(), b"precious");
}

/// Entries in a lock's queue that no run can open (mode 000: a numbered one, a draft):
/// `status` lists the numbered one in the queue by its path, and `sweep` keeps the queue,
/// naming both (it said "a run waits its turn in it" for the draft). A queue that holds what
/// no run names (a file whose name is not UTF-8) is kept for what its removal said. A queue no
/// run can open is named by both, as unreadable (status failed, for every lock with
/// `--all`). Run as uid 65534 when root, whom no mode keeps out.
#[test]
fn a_queue_entry_no_run_can_open_is_named_by_its_path() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let test = "advice::a_queue_entry_no_run_can_open_is_named_by_its_path";
    let Some((tmp, dir)) = normal_users_dir(test) else {
        return;
    };
    let queue = private_dir(&dir.join("q.lock.queue"));
    let barred = [queue.join("00000000000000000000.w.x"), queue.join("new.y")];
    let odd = private_dir(&dir.join("r.lock.queue"));
    let stray = odd.join(std::ffi::OsStr::from_bytes(b"\xff"));
    std::fs::write(&stray, "").unwrap();
    let shut = private_dir(&dir.join("s.lock.queue"));
    let mut theirs = vec![dir.as_path(), &queue, &odd, &stray, &shut];
    for b in &barred {
        std::fs::create_dir(b).unwrap();
        theirs.push(b);
    }
    let d = dir.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = as_a_normal_user(&[args, &["--dir", d]].concat(), tmp.path(), &theirs);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let mode = |m| {
        for b in &barred {
            std::fs::set_permissions(b, PermissionsExt::from_mode(m)).unwrap();
        }
    };
    mode(0o000);
    std::fs::set_permissions(&shut, PermissionsExt::from_mode(0o000)).unwrap();
    let status = run(&["status", "--lock", "q"]);
    let all = run(&["status", "--all"]);
    let sweep = run(&["sweep"]);
    std::fs::set_permissions(&shut, PermissionsExt::from_mode(0o700)).unwrap();
    mode(0o700);
    let path = barred[0].display();
    assert!(
        status.contains(&format!("\n  in the queue: {path} cannot be read\n")),
        "{status}"
    );
    let both = format!("{path}, {}", barred[1].display());
    let lines: Vec<&str> = sweep.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "kept 1 leftover of named lock q: you may not open {both} (your runs pass them by)"
        )
    );
    let odd = "kept 1 leftover of named lock r: it could not be removed: Directory not empty";
    let shut_out = "kept 1 leftover of named lock s: it cannot be read: Permission denied";
    assert!(
        lines[1].starts_with(odd) && lines[2].starts_with(shut_out) && lines.len() == 3,
        "{sweep}"
    );
    let unread = format!(
        "\n  in the queue: {} cannot be read (Permission denied",
        shut.display()
    );
    assert!(all.contains(&unread), "{all}");
}
