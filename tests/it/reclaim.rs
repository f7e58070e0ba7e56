//! Owners judged by evidence: reference-format `{pid, token}` records, previous boots, reused
//! pids, other hosts and namespaces; malformed locks; reclaim guards left by crashes.

use crate::common::*;
use dirlock::paths::repository_lock_name;
use dirlock::{Blocked, Error, Liveness, Wait};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOKEN: &str = "5f0c6a3e-9d7b-4c1e-8f2a-0b1c2d3e4f50";
const OLD: Duration = Duration::from_secs(61);
const DAY: Duration = Duration::from_secs(86_400);

fn reference_record(pid: u32) -> String {
    format!(r#"{{"pid":{pid},"token":"{TOKEN}"}}"#)
}

fn lock_name(fx: &Fixture) -> String {
    repository_lock_name(&std::fs::canonicalize(fx.repo()).unwrap())
}

struct Sleeper(Child);
impl Sleeper {
    fn new() -> Sleeper {
        Sleeper(Command::new("sleep").arg("60").spawn().unwrap())
    }
}
impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A wait of `wait` for the repository lock: what its `on_wait` was told is blocking it, and
/// how it ended.
fn wait_briefly(fx: &Fixture, wait: Duration) -> (Option<Blocked>, Error) {
    let told = Arc::new(Mutex::new(None));
    let tell = told.clone();
    let err = fx
        .locks
        .repository_lock(fx.repo())
        .wait(Wait::Timeout(wait))
        .on_wait(move |w| *tell.lock().unwrap() = Some(w.blocked.clone()))
        .acquire()
        .unwrap_err();
    let told = told.lock().unwrap().take();
    (told, err)
}

fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn a_dead_reference_owner_waits_out_the_grace_period() {
    let fx = Fixture::new();
    let lock = plant(
        fx.dir(),
        &lock_name(&fx),
        &reference_record(dead_pid()),
        Duration::from_secs(5),
    );
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    match &err {
        Error::Stale {
            remaining,
            judgement,
            ..
        } => {
            assert_eq!(judgement.liveness, Liveness::DeadByEvidence);
            assert!(
                *remaining > Duration::from_secs(50) && *remaining <= Duration::from_secs(55),
                "{remaining:?}"
            );
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(err.to_string().contains("can be taken over in"), "{err}");
    // A wait is told, and its timeout says, that the holder has ended and when the lock can
    // be taken over (not that it is held).
    let (told, err) = wait_briefly(&fx, Duration::from_millis(300));
    assert!(
        matches!(told, Some(Blocked::Grace { remaining, clock_ahead: false }) if remaining > Duration::from_secs(50)),
        "{told:?}"
    );
    match &err {
        Error::Timeout {
            blocked: Some(b), ..
        } if matches!(**b, Blocked::Grace { remaining, clock_ahead: false } if remaining > Duration::from_secs(50)) =>
            {}
        other => panic!("expected a timeout in the grace period, got {other:?}"),
    }
    let says = err.to_string();
    assert!(
        says.contains("which seems to have ended; it can be taken over in")
            && !says.contains("is held by"),
        "{says}"
    );
    assert!(
        lock.join("owner.json").exists(),
        "not removed inside the grace period"
    );

    set_age(&lock, OLD);
    let g = fx.locks.repository_lock(fx.repo()).acquire().unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, TOKEN);
    g.release().unwrap();
    assert_eq!(fx.entries(), Vec::<String>::new());
}

/// A wait is told again when what keeps it out changes kind: a holder that ran, then ended
/// (its record names a pid that has gone); not again while it stays so.
#[test]
fn a_wait_is_told_again_when_its_holder_ends() {
    let fx = Fixture::new();
    let mut sleeper = Sleeper::new();
    plant(
        fx.dir(),
        &lock_name(&fx),
        &reference_record(sleeper.0.id()),
        Duration::ZERO,
    );
    let told = Arc::new(Mutex::new(Vec::new()));
    let waiter = {
        let (locks, repo, told) = (fx.locks.clone(), fx.repo(), told.clone());
        std::thread::spawn(move || {
            locks
                .repository_lock(repo)
                .wait(Wait::Timeout(Duration::from_secs(2)))
                .on_wait(move |w| told.lock().unwrap().push(w.blocked.clone()))
                .acquire()
        })
    };
    let count = || told.lock().unwrap().len();
    assert!(eventually(Duration::from_secs(10), || count() == 1));
    sleeper.0.kill().unwrap();
    sleeper.0.wait().unwrap();
    let err = waiter.join().unwrap().unwrap_err();
    let told = told.lock().unwrap().clone();
    assert!(
        matches!(&told[..], [Blocked::Holder, Blocked::Grace { .. }]),
        "{told:?}"
    );
    assert!(
        err.to_string().contains("which seems to have ended"),
        "{err}"
    );
}

#[test]
fn a_shorter_grace_period_is_honoured() {
    let fx = Fixture::new();
    plant(
        fx.dir(),
        &lock_name(&fx),
        &reference_record(dead_pid()),
        Duration::from_secs(5),
    );
    let g = fx
        .locks
        .repository_lock(fx.repo())
        .grace(Duration::from_secs(2))
        .acquire()
        .unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, TOKEN);
}

#[test]
fn live_owners_are_never_reclaimed_however_old() {
    let fx = Fixture::new();
    let sleeper = Sleeper::new();
    // (A record naming this very process with a token it never wrote is a dead writer's whose
    // pid we reuse: hardening::a_record_naming_this_process_with_a_foreign_token_is_a_dead_owners.)
    for pid in [sleeper.0.id(), 1] {
        let lock = plant(fx.dir(), &lock_name(&fx), &reference_record(pid), DAY);
        let err = fx
            .locks
            .repository_lock(fx.repo())
            .grace(Duration::ZERO)
            .acquire()
            .unwrap_err();
        match &err {
            Error::Locked {
                owner, judgement, ..
            } => {
                assert_eq!(owner.pid, pid);
                assert_eq!(judgement.liveness, Liveness::Live);
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(lock.join("owner.json").exists());
        std::fs::remove_dir_all(&lock).unwrap();
    }
}

#[test]
fn a_reused_pid_is_dead_by_evidence() {
    let fx = Fixture::new();
    let sleeper = Sleeper::new();
    let pid = sleeper.0.id();
    let start = start_time(pid);
    // The recorded start time is the pid's: live.
    let same = format!(r#"{{"pid":{pid},"token":"{TOKEN}","start_time":{start}}}"#);
    let lock = plant(fx.dir(), &lock_name(&fx), &same, DAY);
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    assert!(
        matches!(&err, Error::Locked { judgement, .. } if judgement.liveness == Liveness::Live),
        "{err:?}"
    );
    std::fs::remove_dir_all(&lock).unwrap();
    // Another start time: the pid now belongs to someone else.
    let reused = format!(
        r#"{{"pid":{pid},"token":"{TOKEN}","start_time":{}}}"#,
        start + 1
    );
    plant(fx.dir(), &lock_name(&fx), &reused, OLD);
    let g = fx.locks.repository_lock(fx.repo()).acquire().unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, TOKEN);
}

#[test]
fn a_previous_boot_is_dead_by_evidence() {
    let fx = Fixture::new();
    // Our own (live) pid, but another boot: the record is from before a reboot.
    let rec = format!(
        r#"{{"pid":{},"token":"{TOKEN}","boot_id":"00000000-0000-0000-0000-000000000000"}}"#,
        std::process::id()
    );
    let lock = plant(fx.dir(), &lock_name(&fx), &rec, Duration::from_secs(1));
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    assert!(matches!(&err, Error::Stale { .. }), "{err:?}");
    set_age(&lock, OLD);
    let g = fx.locks.repository_lock(fx.repo()).acquire().unwrap();
    assert!(g.reclaimed_from().is_some());
}

#[test]
fn other_hosts_and_namespaces_are_unknown_and_never_reclaimed() {
    let fx = Fixture::new();
    for extra in [
        r#""host":"elsewhere.example""#,
        r#""pid_namespace":"pid:[1]""#,
    ] {
        let rec = format!(r#"{{"pid":{},"token":"{TOKEN}",{extra}}}"#, dead_pid());
        let lock = plant(fx.dir(), &lock_name(&fx), &rec, DAY);
        let err = fx
            .locks
            .repository_lock(fx.repo())
            .grace(Duration::ZERO)
            .acquire()
            .unwrap_err();
        match &err {
            Error::Locked { judgement, .. } => assert_eq!(judgement.liveness, Liveness::Unknown),
            other => panic!("{extra}: expected Locked, got {other:?}"),
        }
        assert!(
            err.to_string().contains("never reclaimed automatically"),
            "{err}"
        );
        assert!(lock.join("owner.json").exists());
        std::fs::remove_dir_all(&lock).unwrap();
    }
}

/// A lock taken by another operating system's program sharing the directory (Windows under
/// Wine, Windows beside WSL) is unknown, never dead, whatever its beacon and pid say here, and
/// readable by all as Wine makes it (mode 755, its record 644) is no reason to call it
/// malformed: only what others may write is untrusted. (It was judged dead by proof, or
/// malformed.)
#[test]
fn another_operating_systems_lock_is_unknown_and_never_reclaimed() {
    let fx = Fixture::new();
    let boot = boot_id();
    let host = String::from_utf8(
        std::process::Command::new("hostname")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for (os, boot) in [
        ("windows", None),
        ("windows", Some(&boot)),
        ("macos", Some(&boot)),
    ] {
        let boot = boot.map_or(String::new(), |b| format!(r#","boot_id":"{b}""#));
        let rec = format!(
            r#"{{"pid":{},"token":"{TOKEN}","host":"{}","beacon":true,"os":"{os}"{boot}}}"#,
            dead_pid(),
            host.trim()
        );
        let lock = plant(fx.dir(), &lock_name(&fx), &rec, DAY);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&lock, PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::set_permissions(lock.join("owner.json"), PermissionsExt::from_mode(0o644))
            .unwrap();
        let err = fx
            .locks
            .repository_lock(fx.repo())
            .grace(Duration::ZERO)
            .acquire()
            .unwrap_err();
        match &err {
            Error::Locked { judgement, .. } => assert_eq!(judgement.liveness, Liveness::Unknown),
            other => panic!("{os}: expected Locked, got {other:?}"),
        }
        assert!(
            err.to_string().contains("another operating system"),
            "{err}"
        );
        assert!(
            matches!(
                fx.locks.repository_lock(fx.repo()).unlock(true),
                Err(Error::Locked { .. })
            ),
            "{os}: a forced unlock removed it"
        );
        assert!(lock.join("owner.json").exists());
        std::fs::remove_dir_all(&lock).unwrap();
    }
}

#[test]
fn malformed_locks_are_reported_and_never_removed() {
    let fx = Fixture::new();
    let name = lock_name(&fx);
    let cases: &[(&str, &str)] = &[
        ("{not json", "not JSON"),
        (r#"{"pid":0,"token":"t"}"#, "not a process id"),
        (r#"{"token":"t"}"#, "pid"),
    ];
    for (record, why) in cases {
        let lock = plant(fx.dir(), &name, record, DAY);
        let err = fx
            .locks
            .repository_lock(fx.repo())
            .grace(Duration::ZERO)
            .acquire()
            .unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(why) && msg.contains("remove") && msg.contains("by hand"),
            "{msg}"
        );
        assert!(lock.join("owner.json").exists(), "malformed lock removed");
        std::fs::remove_dir_all(&lock).unwrap();
    }
    // An empty directory at the lock path: a plain rename would replace it; we must not.
    let empty = private_dir(&fx.dir().join(&name));
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    assert!(err.to_string().contains("has no owner.json"), "{err}");
    // Writable by others: not ours to trust either.
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o775)).unwrap();
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    assert!(err.to_string().contains("mode 775"), "{err}");
    assert!(fx.dir().join(&name).is_dir());
    // No candidate is left behind by any of these refusals.
    assert_eq!(fx.entries(), vec![name]);
}

#[test]
fn a_fresh_foreign_guard_is_respected_and_an_old_one_reused() {
    let fx = Fixture::new();
    let name = lock_name(&fx);
    plant(fx.dir(), &name, &reference_record(dead_pid()), OLD);
    // The reference implementation's guard: a bare directory, no flock, no marker.
    let guard = private_dir(&fx.dir().join(format!("{name}.reclaim")));
    let takeable = || {
        fx.locks
            .repository_lock(fx.repo())
            .status()
            .unwrap()
            .takeable()
    };
    assert!(!takeable(), "status says the lock can be taken");
    let err = fx.locks.repository_lock(fx.repo()).acquire().unwrap_err();
    match &err {
        Error::Guarded {
            guard: g,
            remaining,
            ..
        } => {
            assert_eq!(g, &guard);
            assert!(remaining.is_some());
        }
        other => panic!("expected Guarded, got {other:?}"),
    }
    // A wait is told, and its timeout says, that the holder has ended and whose marker holds
    // up the takeover (not that the lock is held).
    let (told, err) = wait_briefly(&fx, Duration::from_millis(300));
    let takeover = |b: Option<&Blocked>| matches!(b, Some(Blocked::Takeover { guard: g, remaining: Some(_) }) if *g == guard);
    assert!(takeover(told.as_ref()), "{told:?}");
    match &err {
        Error::Timeout { blocked, .. } => assert!(takeover(blocked.as_deref()), "{err:?}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let says = err.to_string();
    assert!(
        says.contains("which has ended; the marker") && !says.contains("is held by"),
        "{says}"
    );
    assert!(guard.is_dir(), "nobody removes another process's guard");
    set_age(&guard, OLD);
    assert!(takeable(), "status says the lock cannot be taken");
    let g = fx.locks.repository_lock(fx.repo()).acquire().unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, TOKEN);
    assert!(
        !guard.exists(),
        "a reused guard is cleaned up by its new user"
    );
}

#[test]
fn our_own_crashed_guard_is_reused_at_once() {
    let fx = Fixture::new();
    let name = lock_name(&fx);
    plant(fx.dir(), &name, &reference_record(dead_pid()), OLD);
    // What a reclaimer killed inside the guard leaves: the directory and our marker, no flock.
    let guard = private_dir(&fx.dir().join(format!("{name}.reclaim")));
    std::fs::write(guard.join("dirlock.guard"), "{\"pid\":1}").unwrap();
    let status = fx.locks.repository_lock(fx.repo()).status().unwrap();
    assert!(
        status.takeable(),
        "status says the lock cannot be taken: {status:?}"
    );
    let g = fx.locks.repository_lock(fx.repo()).acquire().unwrap();
    assert_eq!(g.reclaimed_from().unwrap().token, TOKEN);
    assert!(!guard.exists());
}
