//! Layer 4: faults. A full disk, no inodes left, a read-only remount, and EIO/EINTR injected
//! by strace at each system call in turn: a clean typed error naming the operation and the
//! path, never a panic, never a published lock without a complete record, nothing the next
//! acquisition or a sweep cannot handle, and a lock that works again once the fault is gone.

use crate::common::*;
use crate::{dirlock_in, BIN};
use dirlock::{Error, Locks};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A tmpfs mounted on a private directory, unmounted on drop.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "dirlock-test"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(
            ok,
            "mount -t tmpfs -o {options} failed (the suite runs as root)"
        );
        Tmpfs { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount {options} failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn io_kind(e: &Error) -> Option<ErrorKind> {
    match e {
        Error::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

#[test]
fn a_full_disk_is_a_clean_error_and_leaves_nothing() {
    if lacks(
        "faults::a_full_disk_is_a_clean_error_and_leaves_nothing",
        "root (to mount a small tmpfs)",
        is_root(),
    ) {
        return;
    }
    let fs = Tmpfs::mount("size=64k");
    let locks = Locks::in_dir(fs.path().join("locks")).unwrap();
    // Fill every page.
    let filler = fs.path().join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 1 << 20]);
    let err = locks.named_lock("f.lock").acquire().unwrap_err();
    assert_eq!(io_kind(&err), Some(ErrorKind::StorageFull), "{err:?}");
    assert!(
        err.to_string().contains("owner record") || err.to_string().contains("candidate"),
        "{err}"
    );
    assert_eq!(
        entries(locks.dir()),
        Vec::<String>::new(),
        "no candidate left behind"
    );
    std::fs::remove_file(&filler).unwrap();
    locks
        .named_lock("f.lock")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn no_inodes_left_is_a_clean_error_and_leaves_nothing() {
    if lacks(
        "faults::no_inodes_left_is_a_clean_error_and_leaves_nothing",
        "root (to mount a small tmpfs)",
        is_root(),
    ) {
        return;
    }
    let fs = Tmpfs::mount("nr_inodes=64,size=1m");
    let locks = Locks::in_dir(private_dir(&fs.path().join("locks"))).unwrap();
    let mut fillers: Vec<PathBuf> = Vec::new();
    for i in 0.. {
        let f = fs.path().join(format!("f{i}"));
        if std::fs::write(&f, "").is_err() {
            break;
        }
        fillers.push(f);
    }
    for keep_free in 0..2 {
        // 0 free inodes: the candidate cannot be made; 1: its record cannot.
        for f in fillers.iter().take(keep_free) {
            let _ = std::fs::remove_file(f);
        }
        let err = locks.named_lock("f.lock").acquire().unwrap_err();
        assert_eq!(
            io_kind(&err),
            Some(ErrorKind::StorageFull),
            "{keep_free} free: {err:?}"
        );
        assert_eq!(
            entries(locks.dir()),
            Vec::<String>::new(),
            "{keep_free} free: leftovers"
        );
    }
    for f in &fillers {
        let _ = std::fs::remove_file(f);
    }
    locks
        .named_lock("f.lock")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn a_read_only_remount_is_a_clean_error_and_the_lock_recovers() {
    if lacks(
        "faults::a_read_only_remount_is_a_clean_error_and_the_lock_recovers",
        "root (to mount and remount a tmpfs)",
        is_root(),
    ) {
        return;
    }
    let fs = Tmpfs::mount("size=1m");
    let locks = Locks::in_dir(fs.path().join("locks")).unwrap();
    let held = locks.named_lock("r.lock").acquire().unwrap();
    fs.remount("ro");
    // Acquiring fails cleanly; releasing fails cleanly (and drops the beacon).
    let err = std::thread::scope(|s| {
        s.spawn(|| locks.named_lock("other.lock").acquire().unwrap_err())
            .join()
            .unwrap()
    });
    assert_eq!(
        io_kind(&err),
        Some(ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
    let err = held.release().unwrap_err();
    assert_eq!(
        io_kind(&err),
        Some(ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
    assert!(err.to_string().contains("retire the lock"), "{err}");
    fs.remount("rw");
    // The lock whose release failed is proven dead (its beacon is closed) and reclaimed.
    let g = locks.named_lock("r.lock").acquire().unwrap();
    assert!(g.reclaimed_from().is_some());
    g.release().unwrap();
    assert_eq!(entries(locks.dir()), Vec::<String>::new());
}

#[test]
fn a_lock_owned_by_another_user_is_refused_by_an_unprivileged_user() {
    if lacks(
        "faults::a_lock_owned_by_another_user_is_refused_by_an_unprivileged_user",
        "root and setpriv(1) (a second uid)",
        is_root() && have("setpriv"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = tmp.path().join("locks");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
    // Root plants a lock in 4242's directory.
    let lock = plant(
        &dir,
        "x.lock",
        r#"{"pid":1,"token":"t"}"#,
        std::time::Duration::ZERO,
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            BIN,
            "run",
            "--dir",
        ])
        .arg(&dir)
        .args(["--lock", "x.lock", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("owned by uid 0") && err.contains(&lock.display().to_string()),
        "{err}"
    );
    assert!(lock.join("owner.json").exists());
}

/// Runs `dirlock run` with `errno` injected at the `when`-th call of `syscall`.
fn faulted(dir: &Path, syscall: &str, errno: &str, when: u32) -> std::process::Output {
    Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-o",
            &std::env::var("FAULTS_STRACE").unwrap_or("/dev/null".into()),
            "-e",
        ])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:error={errno}:when={when}"))
        .args([BIN, "run", "--dir"])
        .arg(dir)
        .args(["--lock", "f.lock", "--", "true"])
        // Cargo's library path makes the loader probe dozens of paths first: the counts
        // would never reach our own calls.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap()
}

#[test]
fn eio_and_eintr_at_each_system_call_in_turn() {
    if lacks(
        "faults::eio_and_eintr_at_each_system_call_in_turn",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let calls = [
        "mkdirat",
        "openat",
        "fchmod",
        "flock",
        "write",
        "fsync",
        "renameat2",
        "newfstatat",
        "unlinkat",
        "read",
        "getdents64",
        "fstat",
        "inotify_add_watch",
    ];
    let mut runs = 0;
    let mut failed = 0;
    let mut bit = std::collections::BTreeSet::new();
    let only = std::env::var("FAULTS_ONLY").ok();
    for syscall in calls
        .into_iter()
        .filter(|c| only.as_deref().is_none_or(|o| o == *c))
    {
        for errno in ["EIO", "EINTR"] {
            // The loader and the identity reads in /proc come first for these.
            let last = if matches!(syscall, "openat" | "newfstatat" | "read" | "fstat") {
                16
            } else {
                6
            };
            for when in 1..=last {
                let out = faulted(&dir, syscall, errno, when);
                let err = String::from_utf8_lossy(&out.stderr);
                if err.contains("error while loading shared libraries") {
                    continue; // the dynamic loader's call, before any of ours
                }
                runs += 1;
                let code = out.status.code();
                assert!(
                    matches!(code, Some(0) | Some(1) | Some(75)),
                    "{syscall}={errno}#{when}: exit {:?} (a panic is 101): {err}",
                    out.status
                );
                assert!(!err.contains("panicked"), "{syscall}={errno}#{when}: {err}");
                // No other process takes this lock: a fault is never judged to be one.
                assert!(
                    !err.contains("another owner"),
                    "{syscall}={errno}#{when}: an I/O error judged: {err}"
                );
                if code != Some(0) {
                    failed += 1;
                    bit.insert(format!("{syscall}={errno}"));
                    if std::env::var_os("FAULTS_VERBOSE").is_some() {
                        eprintln!("{syscall}={errno}#{when}: {}", err.trim_end());
                    }
                    assert!(
                        err.starts_with("dirlock: "),
                        "{syscall}={errno}#{when}: {err}"
                    );
                }
                // I2: a published lock always has a complete record.
                if let Ok(rec) = std::fs::read(dir.join("f.lock/owner.json")) {
                    assert!(
                        dirlock::Owner::parse(&rec).is_ok(),
                        "{syscall}={errno}#{when}: torn record"
                    );
                }
                // Once the fault is gone, the lock works (reclaiming what the fault left).
                let ok = Command::new(BIN)
                    .args(["run", "--dir"])
                    .arg(&dir)
                    .args(["--lock", "f.lock", "--", "true"])
                    .output()
                    .unwrap();
                assert!(
                    ok.status.success(),
                    "{syscall}={errno}#{when}: then {}",
                    String::from_utf8_lossy(&ok.stderr)
                );
            }
        }
    }
    // And a sweep clears whatever candidates and tombstones the faults left.
    let out = Command::new(BIN)
        .args(["sweep", "--grace", "0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let left: Vec<String> = entries(&dir)
        .into_iter()
        .filter(|n| n.contains(".candidate.") || n.contains(".tombstone."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    eprintln!("faults: {runs} faulted runs, {failed} ended in a clean error: {bit:?}");
    // EIO in each step the protocol cannot do without surfaces as an error (EINTR is retried,
    // and a failed reap is left to the sweep).
    for must in [
        "mkdirat=EIO",
        "openat=EIO",
        "flock=EIO",
        "write=EIO",
        "fsync=EIO",
        "renameat2=EIO",
        "newfstatat=EIO",
    ] {
        assert!(
            bit.contains(must),
            "{must} never surfaced as an error: {bit:?}"
        );
    }
}

/// A release whose check of the lock it retired fails (EIO, injected at each `newfstatat` in
/// turn of a holder that a waiter queued behind): handed over, the release stands (the
/// waiter wakes holding the lock; the holder's old lock is left retired, a sweep's), and
/// both runs succeed. It was a failure of the holder's run, naming the waiter's candidate.
#[test]
fn a_release_that_cannot_check_what_it_handed_over_still_succeeds() {
    if lacks(
        "faults::a_release_that_cannot_check_what_it_handed_over_still_succeeds",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("trace");
    let mut hit = None;
    for when in 1..=32 {
        // A directory of its own: what a fault left is not the next run's.
        let dir = tmp.path().join(format!("locks-{when}"));
        let (lock, queue) = (dir.join("f.lock"), dir.join("f.lock.queue"));
        let mut holder = ChildGuard::spawn(
            Command::new("strace")
                .args(["-qq", "-o"])
                .arg(&log)
                .args(["-e", "trace=newfstatat", "-e"])
                .arg(format!("inject=newfstatat:error=EIO:when={when}"))
                .args([BIN, "run", "--dir"])
                .arg(&dir)
                .args(["--lock", "f.lock", "--", "sleep", "0.5"])
                .env_remove("LD_LIBRARY_PATH")
                .stderr(std::process::Stdio::piped()),
        );
        let up = || lock.exists() || holder.0.try_wait().is_ok_and(|s| s.is_some());
        if !eventually(Duration::from_secs(10), up) || !lock.exists() {
            let _ = holder.output();
            continue; // the fault ended the holder's run before it took the lock
        }
        let mut waiter = ChildGuard::spawn(
            dirlock_in(&dir, &["run", "--lock", "f.lock", "--", "true"])
                .stderr(std::process::Stdio::piped()),
        );
        let queued = || {
            std::fs::read_dir(&queue).is_ok_and(|d| {
                d.flatten().any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(char::is_numeric)
                })
            })
        };
        assert!(
            eventually(Duration::from_secs(10), queued),
            "EIO#{when}: the waiter never queued"
        );
        let (held, waited) = (holder.output(), waiter.output());
        let trace = std::fs::read_to_string(&log).unwrap();
        let at_check = trace
            .lines()
            .any(|l| l.contains("(INJECTED)") && l.contains(".tombstone."));
        if at_check {
            hit = Some(dir);
            assert!(
                held.status.success() && waited.status.success(),
                "EIO#{when} at the check of the retired lock: holder {} ({}), waiter {} ({})",
                held.status,
                String::from_utf8_lossy(&held.stderr),
                waited.status,
                String::from_utf8_lossy(&waited.stderr),
            );
            break;
        }
    }
    let dir = hit.expect("no fault reached the check of the retired lock");
    // What the fault left is a sweep's.
    let out = dirlock_in(&dir, &["sweep", "--grace", "0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let left: Vec<String> = entries(&dir)
        .into_iter()
        .filter(|n| n.starts_with("f.lock."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
