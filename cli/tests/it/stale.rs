//! Looks at a directory removed or replaced under them: NFS's stale handles (`fstat` of a
//! directory removed on the server, by another client or another process, answers `ESTALE`),
//! injected with strace at each `fstat` in turn (`strace -y` names each descriptor's path, so
//! that each test knows which faults hit what it checks), and a lock handed on while a look
//! reads its record (the look held still by strace).
use crate::common::*;
use crate::{dirlock_in, BIN};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// NFS answers `fstat` of an open directory removed on the server with `ESTALE`: a lock whose
/// directory says so while a contender looks at it was released meanwhile, not an I/O error.
/// `ESTALE` is injected at each `fstat` in turn of a `run -n` and of a `status` that find the
/// lock held (`strace -y` names the path of each descriptor): where it hits the lock's own
/// directory, each looks at the lock again and says "held" (75), as it does with no fault.
/// (The run said "cannot inspect the lock"; then the status said "free".)
#[test]
fn a_stale_handle_of_the_lock_looked_at_is_a_release_not_an_error() {
    if lacks(
        "stale::a_stale_handle_of_the_lock_looked_at_is_a_release_not_an_error",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let log = tmp.path().join("trace");
    let holder = Holder::start(&dir, &["--lock", "f.lock"]);
    let lock = format!("{}>", holder.path.display());
    let d = dir.to_str().unwrap();
    let run = ["run", "-n", "--dir", d, "--lock", "f.lock", "--", "true"];
    let status = ["status", "--dir", d, "--lock", "f.lock"];
    for args in [&run[..], &status] {
        let mut hit = 0;
        each_fstat(|syscall, when| {
            let (out, trace) = with_estale(&log, syscall, when, args);
            let on_lock = trace
                .lines()
                .any(|l| l.contains("(INJECTED)") && l.contains(&lock));
            if on_lock {
                hit += 1;
                assert_eq!(
                    out.status.code(),
                    Some(75),
                    "{syscall}=ESTALE#{when} on the lock's directory, {}: {}{}",
                    args[0],
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            trace
        });
        assert!(
            hit > 0,
            "{}: no fault reached the lock's directory",
            args[0]
        );
    }
    holder.release();
}

/// As of the lock itself, `ESTALE` from `fstat` of what was opened beside it (a reclaim guard
/// a crashed reclaimer left, the queue a waiter joins) says it was removed meanwhile, and the
/// look goes on. `ESTALE` at each `fstat` in turn of a run that takes over a dead lock beside
/// such a guard (it takes it: 0), of the status of that lock (takeable: 0), and of a run that
/// waits 0.1 s behind a live holder (it gives up: 75) or behind a reader (the same, as a
/// writer waiting for readers); where the fault hits the guard, the queue or the writers'
/// directory, each answers as with no fault. (Each was an I/O error, status 1, but the
/// queue's, which the waiter dropped, to join at its next look: this test cannot tell that
/// case from the fixed one, and the writers' directory is what catches `hold_beside`.)
#[test]
fn a_stale_handle_beside_the_lock_is_a_removal_not_an_error() {
    if lacks(
        "stale::a_stale_handle_beside_the_lock_is_a_removal_not_an_error",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("trace");
    let cases: [(&str, &str, &[&str], i32); 4] = [
        ("takeover", "reclaim", &["run", "--wait", "20s"], 0),
        ("status", "reclaim", &["status"], 0),
        ("wait", "queue", &["run", "--wait", "0.1s"], 75),
        (
            "wait for readers",
            "writers",
            &["run", "--wait", "0.1s"],
            75,
        ),
    ];
    for (case, beside, args, want) in cases {
        let mut hit = 0;
        each_fstat(|syscall, when| {
            // A directory of its own: what a fault left is not the next run's.
            let dir = tmp
                .path()
                .join(format!("{beside}-{}-{syscall}-{when}", args[0]));
            let holder = match beside {
                "writers" => Holder::start(&dir, &["--lock", "f.lock", "--shared"]),
                _ => Holder::start(&dir, &["--lock", "f.lock"]),
            };
            let _holder = match beside {
                "reclaim" => {
                    holder.kill();
                    dead_lock_and_guard(&dir);
                    None
                }
                _ => Some(holder),
            };
            let mut all: Vec<OsString> = args.iter().map(Into::into).collect();
            all.extend([
                "--dir".into(),
                dir.clone().into(),
                "--lock".into(),
                "f.lock".into(),
            ]);
            if args[0] == "run" {
                all.extend(["--".into(), "true".into()]);
            }
            let (out, trace) = with_estale(&log, syscall, when, &all);
            // The fstat of the guard or the queue itself (not of a name inside it).
            let target = format!("{}>", dir.join(format!("f.lock.{beside}")).display());
            if trace.lines().any(|l| {
                l.contains("(INJECTED)")
                    && (l.contains(&format!("{target}, \"\""))
                        || l.contains("fstat(") && l.contains(&target))
            }) {
                hit += 1;
                assert_eq!(
                    out.status.code(),
                    Some(want),
                    "{case}: {syscall}=ESTALE#{when} on {target}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            trace
        });
        assert!(hit > 0, "{case}: no fault reached f.lock.{beside}");
    }
}

/// Calls `fault(syscall, when)` for each of the first 24 `fstat`s in turn, glibc's
/// (`newfstatat`) and musl's (`fstat`); `fault` returns its run's trace, and a libc's call
/// that the first run never made is not tried again.
fn each_fstat(mut fault: impl FnMut(&str, u32) -> String) {
    for syscall in ["newfstatat", "fstat"] {
        for when in 1..=24 {
            let trace = fault(syscall, when);
            if !trace.lines().any(|l| l.contains(&format!(" {syscall}("))) {
                break; // the other libc's
            }
        }
    }
}

/// Runs `dirlock ARGS` under strace, `ESTALE` injected at its `when`-th `syscall`, with each
/// descriptor's path in the trace (`-y`): what it did, and the trace.
fn with_estale(
    log: &Path,
    syscall: &str,
    when: u32,
    args: &[impl AsRef<OsStr>],
) -> (Output, String) {
    let (trace, inject) = (
        format!("trace={syscall}"),
        format!("inject={syscall}:error=ESTALE:when={when}"),
    );
    let strace = strace_injecting(log.to_str().unwrap(), &trace, &inject);
    let out = Command::new(strace[0])
        .args(&strace[1..])
        .args(["-qq", "-y"])
        .arg(BIN)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    (out, std::fs::read_to_string(log).unwrap())
}

/// Leaves in `dir` what a reclaimer SIGKILLed mid-reclaim leaves: the dead owner's lock
/// (its holder already killed) and the reclaimer's guard beside it. The reclaimer is killed at
/// its fourth `renameat2`: the dead lock's retirement, just after its guard's.
fn dead_lock_and_guard(dir: &Path) {
    let out = Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "-e", "trace=renameat2", "-e"])
        .arg("inject=renameat2:signal=SIGKILL:when=4")
        .args([BIN, "run", "--dir"])
        .arg(dir)
        .args(["--lock", "f.lock", "--", "true"])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        dir.join("f.lock").is_dir() && dir.join("f.lock.reclaim").exists(),
        "the reclaimer left no guard beside the lock: {out:?}"
    );
}

/// A status that opened the lock, and finds its record gone (the holder released, and reaped
/// its lock) and another lock at the name (the waiter's, handed over), looks at the name again
/// and says who holds it now: "held" (75). (It said "free".) strace stops the status with
/// SIGSTOP right after its `openat` of the lock, before it reads the record; the holder
/// releases, and the status goes on.
#[test]
fn a_status_that_loses_the_record_it_opened_looks_at_the_lock_again() {
    if lacks(
        "stale::a_status_that_loses_the_record_it_opened_looks_at_the_lock_again",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, log) = (tmp.path().join("locks"), tmp.path().join("trace"));
    let holder = Holder::start(&dir, &["--lock", "f.lock"]);
    let status = |inject: &[&str]| {
        let mut c = Command::new("strace");
        c.args(["-qq", "-f", "-y", "-o"])
            .arg(&log)
            .args(["-e", "trace=openat"])
            .args(inject)
            .args([BIN, "status", "--dir"])
            .arg(&dir)
            .args(["--lock", "f.lock"])
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    // Which `openat` opens the lock, just before the record's (the same in every status of a
    // held lock).
    let out = status(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let trace = std::fs::read_to_string(&log).unwrap();
    let record = "f.lock>, \"owner.json\"";
    let when = trace
        .lines()
        .position(|l| l.contains(record))
        .expect("the status read no record");
    // A waiter, queued behind the holder: the release hands it the lock.
    let marker = tmp.path().join("taken");
    let script = format!("echo > {}; sleep 30", marker.display());
    let waiter = ChildGuard::spawn(
        dirlock_in(
            &dir,
            &["run", "--lock", "f.lock", "--", "sh", "-c", &script],
        )
        .stderr(Stdio::null()),
    );
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_dir(dir.join("f.lock.queue")).is_ok_and(|d| d.count() > 0)
    }));
    let inject = format!("inject=openat:signal=SIGSTOP:when={when}");
    let mut looking = ChildGuard::spawn(status(&["-e", &inject]));
    let mut stopped = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            let trace = std::fs::read_to_string(&log).unwrap_or_default();
            stopped = trace.lines().find_map(|l| {
                // (strace pads the pid to five columns.)
                let (pid, what) = l.split_once(' ')?;
                (what.trim_start() == "--- stopped by SIGSTOP ---")
                    .then(|| pid.parse::<u32>().ok())?
            });
            stopped.is_some()
        }),
        "the status never stopped at openat #{when}:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    holder.release();
    assert!(eventually(Duration::from_secs(10), || marker.exists()));
    assert!(signal(stopped.unwrap(), libc::SIGCONT));
    let out = looking.output();
    let trace = std::fs::read_to_string(&log).unwrap();
    assert!(
        trace
            .lines()
            .any(|l| l.contains("\"owner.json\"") && l.contains("= -1 ENOENT")),
        "the status still read the released lock's record:\n{trace}"
    );
    let now = format!("held by pid {}", waiter.id());
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(75), "{said}");
    assert!(
        said.contains(&now),
        "the status did not say {now:?}: {said}"
    );
}
