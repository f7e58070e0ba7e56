//! The corners a hostile or careless user finds: a killed wrapper whose command lives on,
//! unsafe and relative temporary directories, hostile record contents, signals while waiting,
//! holders in other UTS namespaces, clocks set back, self-waits, observers beside acquirers,
//! kernel limits, closed pipes and full disks, terminal injection. Each test here failed on the
//! code before its fix (the note on issue 9 lists them).

use crate::common::*;
use crate::{dirlock_in, BIN};
use dirlock::Error;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn out(mut cmd: impl std::borrow::BorrowMut<Command>) -> Output {
    cmd.borrow_mut().output().unwrap()
}

// ---- 1. A killed `dirlock run` takes its command with it ----------------------------------

/// The command of a SIGKILLed `dirlock run` does not outlive it, even when it closed every
/// inherited descriptor (the beacon included): a second `run` never starts beside it.
#[test]
fn a_command_that_closed_the_beacon_dies_with_its_killed_wrapper() {
    if lacks(
        "hardening::a_command_that_closed_the_beacon_dies_with_its_killed_wrapper",
        "bash",
        have("bash"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let pidfile = fx.tmp.path().join("pid");
    let script = format!(
        "for fd in $(ls /proc/$$/fd); do [ $fd -gt 2 ] && eval \"exec $fd>&-\"; done; echo $$ > {}.tmp && mv {0}.tmp {0}; exec sleep 300",
        pidfile.display()
    );
    let mut wrapper = ChildGuard::spawn(dirlock_in(
        fx.dir(),
        &["run", "-n", "--lock", "k.lock", "--", "bash", "-c", &script],
    ));
    let command = read_pid(&pidfile);
    let _command = PidGuard(command);
    // It closed what it inherited: no descriptor of it is the lock (the beacon).
    let lock = fx.dir().join("k.lock");
    let beacons = std::fs::read_dir(format!("/proc/{command}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| *t == lock)
        .count();
    assert_eq!(beacons, 0, "the command closed the beacon it inherited");
    wrapper.0.kill().unwrap();
    wrapper.0.wait().unwrap();
    // Whenever a second run gets the lock, the first command must be gone.
    let got_in = eventually(Duration::from_secs(20), || {
        let o = out(dirlock_in(
            fx.dir(),
            &["run", "-n", "--lock", "k.lock", "--", "true"],
        ));
        if o.status.success() {
            assert!(
                !alive(command),
                "a second run got the lock while the first command (pid {command}) runs"
            );
            true
        } else {
            false
        }
    });
    assert!(got_in, "the lock never became free");
    assert!(!alive(command), "the command outlived its killed wrapper");
}

/// The command of a killed wrapper dies with it, so a pid-judged contender (the reference)
/// cannot find the wrapper's pid dead while the command still runs.
#[test]
fn the_command_of_a_killed_wrapper_dies_with_it() {
    let fx = Fixture::new();
    let pidfile = fx.tmp.path().join("pid");
    let script = format!(
        "echo $$ > {}.tmp && mv {0}.tmp {0}; exec sleep 300",
        pidfile.display()
    );
    let mut wrapper = ChildGuard::spawn(dirlock_in(
        fx.dir(),
        &["run", "-n", "--lock", "k.lock", "--", "sh", "-c", &script],
    ));
    let command = read_pid(&pidfile);
    let _command = PidGuard(command);
    wrapper.0.kill().unwrap();
    wrapper.0.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !alive(command)),
        "the command (pid {command}) outlived its SIGKILLed wrapper"
    );
    // Once every process is gone, the lock is reclaimable at once (the beacon proves it).
    let o = out(dirlock_in(
        fx.dir(),
        &["run", "-n", "--lock", "k.lock", "--", "true"],
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
}

// ---- 2 and 3. Temporary directories that would split a lock --------------------------------

fn run_with_tmpdir(tmpdir: &OsStr, cwd: &Path) -> Output {
    Command::new(BIN)
        .args([
            "run",
            "--app",
            "hardening",
            "--lock",
            "t.lock",
            "--",
            "true",
        ])
        .env("TMPDIR", tmpdir)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn a_temp_dir_others_may_write_without_the_sticky_bit_is_refused() {
    let fx = Fixture::new();
    for (mode, refused) in [
        (0o777, true),
        (0o770, true),
        (0o1777, false),
        (0o700, false),
    ] {
        let t = fx.tmp.path().join(format!("t{mode:o}"));
        std::fs::create_dir(&t).unwrap();
        std::fs::set_permissions(&t, PermissionsExt::from_mode(mode)).unwrap();
        let o = run_with_tmpdir(t.as_os_str(), fx.tmp.path());
        let err = text(&o.stderr);
        if refused {
            assert_eq!(o.status.code(), Some(1), "mode {mode:o}: {err}");
            assert!(
                err.contains(&t.display().to_string()) && err.contains("sticky"),
                "mode {mode:o}: {err}"
            );
            assert!(!err.contains("chmod"), "never advise changing it: {err}");
            assert!(!t.join(format!("hardening-{}", uid())).exists());
        } else {
            assert!(o.status.success(), "mode {mode:o}: {err}");
        }
    }
    // An ancestor others may write is as bad: they can rename the whole subtree away.
    let open = fx.tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, PermissionsExt::from_mode(0o777)).unwrap();
    let inner = private_dir(&open.join("mine"));
    let o = run_with_tmpdir(inner.as_os_str(), fx.tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("sticky"), "{}", text(&o.stderr));
    // The same goes for a lock directory of one's own.
    let o = out(Command::new(BIN)
        .args(["run", "--dir"])
        .arg(inner.join("locks"))
        .args(["--lock", "t.lock", "--", "true"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
}

fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}

#[test]
fn a_relative_temp_dir_is_refused() {
    let fx = Fixture::new();
    for cwd in ["a", "b"] {
        let cwd = fx.tmp.path().join(cwd);
        private_dir(&cwd);
        private_dir(&cwd.join("tmp"));
        let o = run_with_tmpdir(OsStr::new("tmp"), &cwd);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.contains("relative") && err.contains("TMPDIR"), "{err}");
    }
}

// ---- 4. Record contents never become path components ---------------------------------------

#[test]
fn hostile_tokens_neither_wedge_nor_spin() {
    for token in [
        "a/b".to_owned(),
        "..".to_owned(),
        "../../escape".to_owned(),
        "x".repeat(300),
        "nul\\u0000byte".to_owned(),
        ".".to_owned(),
    ] {
        let fx = Fixture::new();
        let record = format!(
            r#"{{"pid":{},"token":"{token}","beacon":true}}"#,
            dead_pid()
        );
        plant(fx.dir(), "h.lock", &record, Duration::ZERO);
        // Fail fast and with a deadline: the dead owner's lock is reclaimed at once (its beacon
        // is free), and the run returns.
        for args in [
            &["run", "-n", "--lock", "h.lock", "--", "true"][..],
            &["run", "--lock", "h.lock", "--timeout", "2", "--", "true"],
        ] {
            let mut c = ChildGuard::spawn(
                dirlock_in(fx.dir(), args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            );
            let status = c.wait_for(Duration::from_secs(20));
            assert!(
                status.is_some_and(|s| s.success()),
                "token {token:?}: {args:?} ended {status:?}"
            );
            plant(fx.dir(), "h.lock", &record, Duration::ZERO);
        }
        assert!(fx.tmp.path().join("locks").exists());
        assert!(!fx.tmp.path().join("escape").exists());
    }
}

// ---- 6. Another host name on this kernel --------------------------------------------------

#[test]
fn a_dead_holder_with_another_host_name_on_this_kernel_is_reclaimed_at_once() {
    let fx = Fixture::new();
    let record = format!(
        r#"{{"pid":{},"token":"8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10","host":"container-7","boot_id":"{}","beacon":true}}"#,
        dead_pid(),
        boot_id()
    );
    plant(fx.dir(), "u.lock", &record, Duration::ZERO);
    let st = fx.locks.named_lock("u.lock").status().unwrap();
    assert_eq!(st.state, dirlock::State::DeadByProof, "{:?}", st.reason);
    let o = out(dirlock_in(fx.dir(), &["unlock", "--lock", "u.lock"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    plant(fx.dir(), "u.lock", &record, Duration::ZERO);
    let g = fx.locks.named_lock("u.lock").acquire().unwrap();
    assert_eq!(
        g.reclaimed_from().unwrap().host.as_deref(),
        Some("container-7")
    );
    // Another kernel (another boot id) with another host name stays unknown.
    g.release().unwrap();
    let record = record.replace(&boot_id(), "00000000-0000-4000-8000-000000000000");
    plant(fx.dir(), "u.lock", &record, Duration::ZERO);
    let err = fx.locks.named_lock("u.lock").acquire().unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
}

// ---- 8. Self-waits ------------------------------------------------------------------------

#[test]
fn a_nested_run_spelled_differently_is_told_its_parent_holds_it() {
    let fx = Fixture::new();
    // A symlinked lock directory is refused; a symlink above it is an ordinary path.
    let link = fx.tmp.path().join("link");
    symlink(fx.tmp.path(), &link).unwrap();
    let spellings = [
        format!("--dir {}/locks", link.display()),
        format!("--dir {}/../locks", fx.repo().display()),
        "--dir ./locks".to_owned(),
        "--dir locks/".to_owned(),
        format!("--lock {}/locks/n.lock", link.display()),
    ];
    for spelling in spellings {
        let lock_arg = if spelling.starts_with("--lock") {
            String::new()
        } else {
            "--lock n.lock".into()
        };
        let inner =
            format!("{BIN} run {spelling} {lock_arg} --wait-forever -- true; echo nested=$?");
        let mut c = ChildGuard::spawn(
            dirlock_in(
                fx.dir(),
                &["run", "-n", "--lock", "n.lock", "--", "sh", "-c", &inner],
            )
            .current_dir(fx.tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        );
        let status = c.wait_for(Duration::from_secs(20));
        assert!(
            status.is_some(),
            "{spelling}: the nested run waits for its parent"
        );
        let o = c.output();
        assert_eq!(
            text(&o.stdout),
            "nested=75\n",
            "{spelling}: {}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("parent"),
            "{spelling}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn a_nested_run_under_an_odd_temp_dir_is_told_its_parent_holds_it() {
    let fx = Fixture::new();
    for name in [&b"new\nline"[..], &b"not-utf8-\xff"[..]] {
        let tmpdir = fx.tmp.path().join(OsStr::from_bytes(name));
        private_dir(&tmpdir);
        let inner =
            format!("{BIN} run --app odd --lock n.lock --wait-forever -- true; echo nested=$?");
        let mut c = ChildGuard::spawn(
            Command::new(BIN)
                .args([
                    "run", "--app", "odd", "--lock", "n.lock", "--", "sh", "-c", &inner,
                ])
                .env("TMPDIR", &tmpdir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let status = c.wait_for(Duration::from_secs(20));
        assert!(
            status.is_some(),
            "{name:?}: the nested run waits for its parent"
        );
        let o = c.output();
        assert_eq!(
            text(&o.stdout),
            "nested=75\n",
            "{name:?}: {}",
            text(&o.stderr)
        );
    }
}

// ---- 11. An I/O error is not a judgement --------------------------------------------------

#[test]
fn out_of_descriptors_is_an_io_error_never_a_malformed_lock() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "e.lock"]);
    let mut held = 0;
    for n in 4..40 {
        for args in [
            "status --lock e.lock",
            "run -n --lock e.lock -- true",
            "unlock --lock e.lock",
        ] {
            let o = out(Command::new("sh").arg("-c").arg(format!(
                "ulimit -n {n} && exec {BIN} {} --dir {} {}",
                &args[..args.find(' ').unwrap()],
                fx.dir().display(),
                &args[args.find(' ').unwrap()..]
            )));
            let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
            assert!(
                !all.contains("malformed") && !all.contains("by hand"),
                "ulimit -n {n}, {args}: {all}"
            );
            if all.contains(" is held by pid ") {
                held += 1;
            }
        }
    }
    assert!(held > 0, "status never worked");
}

// ---- 12. Closed pipes, full disks and non-UTF-8 paths -------------------------------------

/// Runs `cmd` with its stdout a pipe whose reader is gone. The reader is closed just after the
/// spawn, so on a loaded machine the command may write before that and succeed: such a run
/// shows nothing and is made again, after `prepare` (a command that never sees the closed pipe
/// fails the test after 20 runs).
fn closed_stdout(cmd: &mut Command, prepare: impl Fn()) -> Output {
    for _ in 0..20 {
        prepare();
        let mut c = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(c.stdout.take());
        let o = c.wait_with_output().unwrap();
        if o.status.code() != Some(0) {
            return o;
        }
    }
    panic!("20 runs wrote before their stdout's reader closed it, or a closed pipe is ignored");
}

#[test]
fn closed_pipes_and_full_disks_end_quietly_or_with_one_error() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "a.lock"]);
    let tombstone = || {
        let _ = std::fs::remove_dir_all(fx.dir().join("a.lock.tombstone.x"));
        plant(
            fx.dir(),
            "a.lock.tombstone.x",
            r#"{"pid":1,"token":"t"}"#,
            Duration::ZERO,
        );
    };
    for args in [
        &["status", "--all"][..],
        &["status", "--all", "--json"],
        &["status", "--lock", "a.lock"],
        &["sweep"],
        &["path", "--lock", "a.lock"],
    ] {
        let o = closed_stdout(&mut dirlock_in(fx.dir(), args), tombstone);
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stderr), "", "{args:?}: quietly");
        tombstone();
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = out(dirlock_in(fx.dir(), args).stdout(full));
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(
            err.starts_with("dirlock: ")
                && err.contains("No space left")
                && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn status_json_represents_non_utf8_paths() {
    let fx = Fixture::new();
    let parent = private_dir(&fx.tmp.path().join(OsStr::from_bytes(b"odd-\xff")));
    let dir = parent.join("locks");
    let o = out(Command::new(BIN)
        .args(["status", "--json", "--lock", "j.lock", "--dir"])
        .arg(&dir));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bytes: Vec<u8> = v["path_bytes"]
        .as_array()
        .expect("path_bytes for a non-UTF-8 path")
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, dir.join("j.lock").as_os_str().as_bytes());
    assert!(v["path"].as_str().unwrap().contains('\u{fffd}'));
    let o = out(Command::new(BIN)
        .args(["status", "--all", "--json", "--dir"])
        .arg(&dir));
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// A lock path that is not UTF-8 is refused as a usage error naming it, in either form, and
/// its control characters escaped (it must not forge a line).
#[test]
fn a_lock_path_that_is_not_utf8_is_named_in_the_refusal() {
    let fx = Fixture::new();
    let lock = fx.tmp.path().join(OsStr::from_bytes(b"odd-\xff")).join("x");
    let forged = OsStr::from_bytes(b"x\xff\ndirlock: lock is free\r");
    let o = out(Command::new(BIN).args(["status", "--lock"]).arg(forged));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(64), "{err}");
    assert!(
        err.lines().count() == 1 && err.contains("\\u{a}dirlock"),
        "{err}"
    );
    for flag in [Some("--lock"), None] {
        let o = out(Command::new(BIN)
            .arg("run")
            .args(flag)
            .arg(&lock)
            .arg("true"));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{flag:?}: {err}");
        assert!(
            err.contains("odd-\u{fffd}/x") && err.contains("is not UTF-8: give a UTF-8 path"),
            "{flag:?}: {err}"
        );
    }
}

// ---- 13. Text from disk is escaped --------------------------------------------------------

#[test]
fn record_text_cannot_inject_into_a_terminal() {
    let fx = Fixture::new();
    let evil = r#"\u001b[2J\u001b]0;owned\u0007\ndirlock: fake line\r\u009b"#;
    let sleeper = ChildGuard::spawn(Command::new("sleep").arg("60"));
    let rec = format!(
        r#"{{"pid":{},"token":"t","host":"{evil}","purpose":"{evil}","writer":"{evil}","boot_id":"{}"}}"#,
        sleeper.0.id(),
        boot_id()
    );
    plant(fx.dir(), "x.lock", &rec, Duration::ZERO);
    let clean = |s: &str, what: &str, lines: usize| {
        assert!(
            !s.chars().any(|c| c.is_control() && c != '\n'),
            "{what}: raw control characters: {s:?}"
        );
        assert_eq!(s.trim_end().lines().count(), lines, "{what}: {s:?}");
        assert!(!s.contains("\ndirlock: fake"), "{what}: {s:?}");
    };
    let o = out(dirlock_in(
        fx.dir(),
        &["run", "-n", "--lock", "x.lock", "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(75));
    clean(&text(&o.stderr), "Locked", 1);
    let o = out(dirlock_in(
        fx.dir(),
        &["run", "--lock", "x.lock", "--timeout", "0.2", "--", "true"],
    ));
    clean(&text(&o.stderr), "waiting line and Timeout", 2);
    let o = out(dirlock_in(fx.dir(), &["status", "--lock", "x.lock"]));
    clean(&text(&o.stdout), "status", 2);
    let o = out(dirlock_in(fx.dir(), &["status", "-v", "--lock", "x.lock"]));
    clean(&text(&o.stdout), "status -v", 9);
    let err = fx.locks.named_lock("x.lock").acquire().unwrap_err();
    let msg = err.to_string();
    assert!(!msg.chars().any(char::is_control), "Display: {msg:?}");
    drop(sleeper);
}

/// A candidate without a record, young, may be between its creator's `mkdir` and its beacon:
/// even `sweep --grace 0` leaves it (its creator would only have to stage again), until it is
/// old enough to be a crash's leftover.
#[test]
fn sweep_with_grace_zero_leaves_a_candidate_being_staged() {
    let fx = Fixture::new();
    let fresh = private_dir(&fx.dir().join("s.lock.candidate.staging"));
    let o = out(dirlock_in(fx.dir(), &["sweep", "-v", "--grace", "0"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("kept s.lock.candidate.staging: it has no record yet"),
        "{}",
        text(&o.stdout)
    );
    set_age(&fresh, Duration::from_secs(11));
    let o = out(dirlock_in(fx.dir(), &["sweep", "-v", "--grace", "0"]));
    assert!(
        text(&o.stdout).contains("removed s.lock.candidate.staging"),
        "{}",
        text(&o.stdout)
    );
}

/// A message goes out in one write, so that the lines of runs that share a log never mix (it
/// once took three: "dirlock: ", the text, the newline).
#[test]
fn a_message_is_written_whole() {
    if lacks(
        "hardening::a_message_is_written_whole",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    plant(fx.dir(), "m.lock", "garbage", Duration::ZERO);
    let trace = fx.tmp.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=write", "-o"])
        .arg(&trace)
        .args([BIN, "run", "-n", "--dir"])
        .arg(fx.dir())
        .args(["--lock", "m.lock", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    let to_stderr: Vec<&str> = trace.lines().filter(|l| l.contains("write(2,")).collect();
    assert!(
        to_stderr.len() == 1 && to_stderr[0].contains("write(2, \"dirlock: "),
        "{trace}"
    );
}
