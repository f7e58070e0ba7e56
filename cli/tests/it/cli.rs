//! The `dirlock` command, run for real: every subcommand and exit code, signal forwarding,
//! the beacon kept by a command whose wrapper was killed, nested runs, JSON status.

use crate::common::*;
use crate::BIN;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn dirlock(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args.iter().take(1))
        .arg("--dir")
        .arg(dir)
        .args(&args[1..])
        .output()
        .unwrap()
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits (up to 20 s) for `path` to exist.
pub(crate) fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn run_passes_the_exit_status_through_and_releases() {
    let fx = Fixture::new();
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "--lock",
            "r.lock",
            "--",
            "sh",
            "-c",
            "echo hi; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        text(&out.stdout),
        "hi\n",
        "only the command's output on stdout"
    );
    assert_eq!(fx.entries(), Vec::<String>::new(), "released");
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "-n",
            "--lock",
            "r.lock",
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ],
    );
    assert_eq!(out.status.code(), Some(128 + 15));
    // The command starts with no signal of ours blocked.
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "--lock",
            "r.lock",
            "--",
            "grep",
            "SigBlk",
            "/proc/self/status",
        ],
    );
    assert_eq!(text(&out.stdout).trim(), "SigBlk:\t0000000000000000");
    let out = dirlock(
        fx.dir(),
        &["run", "-n", "--lock", "r.lock", "--", "/nonexistent/cmd"],
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(
        text(&out.stderr).contains("cannot run"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn a_held_lock_exits_75_and_usage_errors_64() {
    let fx = Fixture::new();
    let _h = Holder::start(fx.dir(), &["--lock", "r.lock", "--purpose", "deploy"]);
    let out = dirlock(fx.dir(), &["run", "-n", "--lock", "r.lock", "--", "true"]);
    assert_eq!(out.status.code(), Some(75));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("dirlock: ") && err.contains("purpose: deploy"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one paragraph: {err}");
    for bad in [
        &["run", "-n", "--lock", "r.lock"][..],
        &["run", "--", "true"],
        &["frobnicate"],
        &["run", "--lock", "r.lock", "--timeout", "x", "--", "true"],
    ] {
        let out = Command::new(BIN).args(bad).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(64),
            "{bad:?}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        Command::new(BIN)
            .arg("--help")
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    for sub in ["run", "status", "unlock", "sweep", "path", "hold"] {
        let out = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        assert!(
            out.status.success() && text(&out.stdout).contains("Examples:"),
            "{sub} --help"
        );
    }
}

#[test]
fn a_waiting_run_says_once_who_holds_the_lock() {
    let fx = Fixture::new();
    let _h = Holder::start(fx.dir(), &["--lock", "r.lock", "--purpose", "sync"]);
    let out = dirlock(
        fx.dir(),
        &["run", "--lock", "r.lock", "--timeout", "0.5", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(75));
    let err = text(&out.stderr);
    assert_eq!(err.matches("waiting for").count(), 1, "{err}");
    assert!(
        err.contains("(purpose: sync)") && err.contains("after waiting"),
        "{err}"
    );
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "-q",
            "--lock",
            "r.lock",
            "--timeout",
            "0.2",
            "--",
            "true",
        ],
    );
    assert!(!text(&out.stderr).contains("waiting for"), "quiet");
}

#[test]
fn sigint_is_forwarded_and_the_lock_released_after_the_command_exits() {
    let fx = Fixture::new();
    let ready = fx.tmp.path().join("ready");
    let got = fx.tmp.path().join("got");
    let script = format!(
        "trap 'echo int > {}; exit 5' INT; echo > {}; while :; do sleep 0.02; done",
        got.display(),
        ready.display()
    );
    let mut run = ChildGuard::spawn(
        Command::new(BIN)
            .args(["run", "--dir"])
            .arg(fx.dir())
            .args(["--lock", "s.lock", "--", "sh", "-c", &script])
            .stdout(Stdio::null()),
    );
    wait_for(&ready);
    assert!(signal(run.0.id(), libc::SIGINT));
    let status = run.0.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(5),
        "the command's status after its trap"
    );
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "int\n");
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "released after the command exited"
    );
}

/// The command dies with a killed wrapper (hardening tests), but what it started in the
/// background inherited the beacon: dirlock contenders stay out until that is gone too, and
/// then the kernel proves the owner gone and the lock is taken at once.
#[test]
fn what_the_command_left_running_keeps_the_lock_until_it_exits() {
    let fx = Fixture::new();
    let pidfile = fx.tmp.path().join("pid");
    let script = format!(
        "sleep 300 & echo $! > {}.tmp && mv {0}.tmp {0}; wait",
        pidfile.display()
    );
    let mut run = ChildGuard::spawn(
        Command::new(BIN)
            .args(["run", "--dir"])
            .arg(fx.dir())
            .args(["--lock", "k.lock", "--", "sh", "-c", &script]),
    );
    let background = read_pid(&pidfile);
    let _background = PidGuard(background);
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    let out = dirlock(fx.dir(), &["run", "-n", "--lock", "k.lock", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "the background process still holds the beacon: {}",
        text(&out.stderr)
    );
    assert!(signal(background, libc::SIGKILL));
    // The kernel now proves the owner gone: taken at once (the process may take a moment to die).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = dirlock(fx.dir(), &["run", "-n", "--lock", "k.lock", "--", "true"]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_nested_run_of_the_same_lock_is_told_its_parent_holds_it() {
    let fx = Fixture::new();
    let inner = format!(
        "{BIN} run --dir {} --lock n.lock --wait-forever -- true; echo nested=$?",
        fx.dir().display()
    );
    let out = dirlock(
        fx.dir(),
        &["run", "-n", "--lock", "n.lock", "--", "sh", "-c", &inner],
    );
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "nested=75\n");
    assert!(
        text(&out.stderr).contains("held by this process's parent"),
        "{}",
        text(&out.stderr)
    );
    // Another lock inside is fine.
    let inner = format!(
        "{BIN} run --dir {} --lock other.lock -- true; echo nested=$?",
        fx.dir().display()
    );
    let out = dirlock(
        fx.dir(),
        &["run", "-n", "--lock", "n.lock", "--", "sh", "-c", &inner],
    );
    assert_eq!(text(&out.stdout), "nested=0\n");
}

#[test]
fn status_json_parses_back() {
    let fx = Fixture::new();
    let free: serde_json::Value = serde_json::from_slice(
        &dirlock(fx.dir(), &["status", "--lock", "j.lock", "--json"]).stdout,
    )
    .unwrap();
    assert_eq!(free["state"], "free");
    assert_eq!(free["schema"], 1);
    let h = Holder::start(fx.dir(), &["--lock", "j.lock", "--purpose", "sync"]);
    let out = dirlock(fx.dir(), &["status", "--lock", "j.lock", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "held");
    assert_eq!(v["owner"]["pid"], h.pid());
    assert_eq!(v["owner"]["purpose"], "sync");
    assert_eq!(v["owner"]["beacon"], true);
    assert_eq!(v["guard"]["state"], "absent");
    assert!(v["since_unix_ms"].as_u64().unwrap() > 0);
    assert_eq!(v["path"], fx.dir().join("j.lock").to_str().unwrap());
    let text_out = text(&dirlock(fx.dir(), &["status", "-v", "--lock", "j.lock"]).stdout);
    assert!(
        text_out.contains("state:      held") && text_out.contains("judged by its beacon"),
        "{text_out}"
    );
    h.kill();
    let v: serde_json::Value = serde_json::from_slice(
        &dirlock(fx.dir(), &["status", "--lock", "j.lock", "--json"]).stdout,
    )
    .unwrap();
    assert_eq!(v["state"], "dead-by-proof");
    // A reference-format record of a dead pid, fresh: dead by evidence, with time left.
    plant(
        fx.dir(),
        "e.lock",
        &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
        Duration::from_secs(10),
    );
    let all: serde_json::Value =
        serde_json::from_slice(&dirlock(fx.dir(), &["status", "--all", "--json"]).stdout).unwrap();
    let locks = all["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2);
    let e = locks.iter().find(|l| l["name"] == "e.lock").unwrap();
    assert_eq!(e["state"], "dead-by-evidence");
    let left = e["grace_remaining_ms"].as_u64().unwrap();
    assert!((45_000..=50_000).contains(&left), "{left}");
}

#[test]
fn unlock_removes_only_the_dead() {
    let fx = Fixture::new();
    assert_eq!(
        text(&dirlock(fx.dir(), &["unlock", "--lock", "u.lock"]).stdout),
        format!(
            "nothing to remove: {} is not locked\n",
            fx.dir().join("u.lock").display()
        )
    );
    // Live: refused, and says why.
    let h = Holder::start(fx.dir(), &["--lock", "u.lock"]);
    let out = dirlock(fx.dir(), &["unlock", "--lock", "u.lock"]);
    assert_eq!(out.status.code(), Some(75));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("is held by pid {}", h.pid())),
        "{err}"
    );
    // The advice is this subcommand's: unlock has no --wait to offer.
    assert!(
        err.contains("removes only a lock whose holder has ended"),
        "{err}"
    );
    assert!(!err.contains("--wait"), "{err}");
    assert!(fx.dir().join("u.lock/owner.json").exists());
    h.release();
    // Dead by evidence, however fresh: an operator asked.
    plant(
        fx.dir(),
        "u.lock",
        &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
        Duration::ZERO,
    );
    let out = dirlock(fx.dir(), &["unlock", "--lock", "u.lock"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("removed"));
    assert_eq!(fx.entries(), Vec::<String>::new());
    // Malformed: refused without --force, removed with it.
    plant(fx.dir(), "u.lock", "garbage", Duration::ZERO);
    let out = dirlock(fx.dir(), &["unlock", "--lock", "u.lock"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    let out = dirlock(fx.dir(), &["unlock", "--lock", "u.lock", "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn unlock_force_refuses_a_malformed_lock_whose_beacon_is_held() {
    let fx = Fixture::new();
    let h = Holder::start(fx.dir(), &["--lock", "b.lock"]);
    // Corrupt the live holder's record: malformed, but its beacon is held.
    std::fs::write(fx.dir().join("b.lock/owner.json"), "garbage").unwrap();
    let out = dirlock(fx.dir(), &["unlock", "--lock", "b.lock", "--force"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("in use and a forced unlock refuses it"),
        "{}",
        text(&out.stderr)
    );
    assert!(fx.dir().join("b.lock").exists());
    drop(h);
}

#[test]
fn sweep_removes_only_what_it_may() {
    let fx = Fixture::new();
    let old = Duration::from_secs(120);
    // Tombstones: anyone's to delete.
    plant(
        fx.dir(),
        "s.lock.tombstone.1",
        r#"{"pid":1,"token":"t"}"#,
        Duration::ZERO,
    );
    // A dead creator's old candidate: removed. A fresh one: kept for its grace period (its
    // creator's death is not what keeps it).
    plant(
        fx.dir(),
        "s.lock.candidate.dead",
        &format!(r#"{{"pid":{},"token":"dead"}}"#, dead_pid()),
        old,
    );
    for fresh in ["fresh", "fresh-too"] {
        plant(
            fx.dir(),
            &format!("s.lock.candidate.{fresh}"),
            &format!(r#"{{"pid":{},"token":"{fresh}"}}"#, dead_pid()),
            Duration::ZERO,
        );
    }
    // A live waiter's candidate (it holds its beacon), made old: kept.
    let h = Holder::start(fx.dir(), &["--lock", "s.lock"]);
    let waiter = std::thread::spawn({
        let dir = fx.dir().to_owned();
        move || {
            dirlock(
                &dir,
                &[
                    "run",
                    "-q",
                    "--lock",
                    "s.lock",
                    "--timeout",
                    "20",
                    "--",
                    "true",
                ],
            )
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        // Fully staged (its record written, which would refresh its mtime), so that aging it
        // below sticks.
        let found = fx.entries().into_iter().find(|e| {
            e.starts_with("s.lock.candidate.")
                && !e.ends_with("dead")
                && !e.contains("fresh")
                && fx.dir().join(e).join("owner.json").exists()
        });
        // (And queued: its place in the lock's queue is taken after its first look.)
        let queued = fx.dir().join("s.lock.queue").exists();
        if let (Some(c), true) = (found, queued) {
            break c;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    };
    set_age(&fx.dir().join(&waiting), old);
    let canary = fx.tmp.path().join("canary");
    std::fs::write(&canary, "x").unwrap();
    std::fs::write(fx.dir().join("notes.txt"), "not ours").unwrap();

    let out = dirlock(fx.dir(), &["sweep"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    // In the user's words: counted per lock, why each was kept (the names under -v).
    assert!(
        report.contains("removed 2 leftovers of named lock s\n"),
        "{report}"
    );
    // (Two kept for one reason: one line. Once a line each, thousands for thousands.)
    assert!(
        report.contains("kept 2 leftovers of named lock s: it is younger than the grace period\n"),
        "{report}"
    );
    assert!(
        report.contains("kept 1 leftover of named lock s: the run that made it is still running"),
        "{report}"
    );
    for word in ["candidate", "tombstone", "beacon", "creator"] {
        assert!(!report.contains(word), "{word}: {report}");
    }
    let _ = &waiting;
    // (The waiter waits its turn in the lock's queue.)
    let mut want = vec![
        "notes.txt".to_owned(),
        "s.lock".into(),
        "s.lock.candidate.fresh".into(),
        "s.lock.candidate.fresh-too".into(),
        "s.lock.queue".into(),
        waiting.clone(),
    ];
    want.sort();
    assert_eq!(fx.entries(), want);
    assert!(canary.exists());
    // The waiter is unharmed: it gets the lock when the holder releases.
    h.release();
    assert!(waiter.join().unwrap().status.success());
}

#[test]
fn path_and_hold_and_lock_paths_with_a_directory() {
    let fx = Fixture::new();
    let lock = fx.dir().join("p.lock");
    let out = Command::new(BIN)
        .args(["path", "--lock"])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), format!("{}\n", lock.display()));
    let out = Command::new(BIN)
        .args(["path", "--app", "x", "--lock"])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "DIR/NAME and --app conflict");
    let out = Command::new(BIN)
        .args(["run", "-n", "--lock"])
        .arg(&lock)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// What a sweep cannot remove is counted per lock and reason, not listed a line each (a
/// candidate set aside but not removed once gave a reason naming its new name, so no two were
/// alike). Run as uid 65534 when root, whom no mode keeps out.
#[test]
fn sweep_counts_what_it_could_not_remove() {
    use std::os::unix::fs::PermissionsExt;
    let test = "cli::sweep_counts_what_it_could_not_remove";
    let Some((tmp, dir)) = crate::advice::normal_users_dir(test) else {
        return;
    };
    let mut made = vec![dir.clone()];
    for i in 0..3 {
        // A dead run's old candidate that holds what cannot be removed.
        let c = dir.join(format!("z.lock.candidate.c{i}"));
        std::fs::create_dir_all(c.join("stuck")).unwrap();
        std::fs::write(c.join("stuck").join("f"), "").unwrap();
        made.extend([c.clone(), c.join("stuck"), c.join("stuck").join("f")]);
        std::fs::set_permissions(c.join("stuck"), PermissionsExt::from_mode(0o500)).unwrap();
        set_age(&c, Duration::from_secs(7200));
    }
    let args = ["sweep", "--dir", dir.to_str().unwrap()];
    let theirs: Vec<&Path> = made.iter().map(std::path::PathBuf::as_path).collect();
    let out = crate::advice::as_a_normal_user(&args, tmp.path(), &theirs);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        said, "kept 3 leftovers of named lock z: it could not be removed\n",
        "{said}"
    );
    // (Leave nothing the temporary directory's removal cannot remove.)
    for e in std::fs::read_dir(&dir).unwrap() {
        let stuck = e.unwrap().path().join("stuck");
        std::fs::set_permissions(stuck, PermissionsExt::from_mode(0o700)).unwrap();
    }
}
