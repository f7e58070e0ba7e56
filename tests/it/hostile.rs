//! Layer 5: a hostile filesystem. Symlinks, FIFOs (with a writer attached), sockets,
//! directories and huge files where the lock, its record or its guard should be; a record
//! owned by another user. Expect a refusal naming the path, no blocking read, and nothing
//! outside the lock directory touched (canary files).

use crate::common::*;
use dirlock::Error;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// A file outside the lock directory that must survive whatever happens.
fn canary(fx: &Fixture) -> std::path::PathBuf {
    let c = fx.tmp.path().join("canary");
    std::fs::write(&c, "precious").unwrap();
    c
}

fn check_canary(c: &Path) {
    assert_eq!(
        std::fs::read_to_string(c).unwrap(),
        "precious",
        "the canary was touched"
    );
}

/// The lock directory `x.lock`, private, without a record yet.
fn lock_dir(fx: &Fixture) -> std::path::PathBuf {
    private_dir(&fx.dir().join("x.lock"))
}

/// `x.lock` whose record is a FIFO (mode 0600, no writer yet).
fn fifo_record(fx: &Fixture) -> std::path::PathBuf {
    let fifo = lock_dir(fx).join("owner.json");
    assert!(std::process::Command::new("mkfifo")
        .arg("-m")
        .arg("600")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    fifo
}

/// Acquires `x.lock` (fail fast, grace 0) and expects a malformed-lock refusal.
fn refused(fx: &Fixture, why: &str) {
    let start = Instant::now();
    let err = fx
        .locks
        .named_lock("x.lock")
        .grace(Duration::ZERO)
        .acquire()
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "it blocked");
    assert!(matches!(err, Error::Malformed { .. }), "{why}: {err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(why) && msg.contains(&fx.dir().join("x.lock").display().to_string()),
        "{msg}"
    );
    // Refused, and the refusal leaves no candidate behind.
    assert!(
        fx.entries().iter().all(|e| !e.contains(".candidate.")),
        "{:?}",
        fx.entries()
    );
}

#[test]
fn a_symlink_at_the_lock_path_is_never_followed() {
    let fx = Fixture::new();
    let c = canary(&fx);
    let target = fx.tmp.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(
        target.join("owner.json"),
        format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
    )
    .unwrap();
    symlink(&target, fx.dir().join("x.lock")).unwrap();
    refused(&fx, "symbolic link");
    assert!(
        target.join("owner.json").exists(),
        "nothing removed through the link"
    );
    check_canary(&c);
}

/// A forced unlock leaves a symbolic link at the lock path to whoever made it: flock(1) locks
/// what a link points at, which dirlock never follows, so it cannot tell whether a process
/// holds it. (It removed the link, and a second flock(1) of the path then got in.)
#[test]
fn a_forced_unlock_leaves_a_symlink_at_the_lock_path() {
    let fx = Fixture::new();
    let target = fx.tmp.path().join("real");
    std::fs::write(&target, "").unwrap();
    symlink(&target, fx.dir().join("x.lock")).unwrap();
    let err = fx.locks.named_lock("x.lock").unlock(true).unwrap_err();
    assert!(
        matches!(&err, Error::Unsafe { problem, .. } if problem.contains("symbolic link")),
        "{err}"
    );
    assert!(fx.dir().join("x.lock").symlink_metadata().is_ok() && target.exists());
}

/// A directory of one's own at the lock path (`--force` at `photos.lock` by mistake) is left
/// whole: it holds what no lock holds, by its name or its kind (a file named as a reader's
/// entry, a record that is a directory of files, a name that is not UTF-8). (It was removed
/// with all it held.) A damaged lock that holds only what a lock does (its record, one being
/// written, a reader's entry holding its own) is removed.
#[test]
fn a_forced_unlock_leaves_a_directory_that_is_no_lock() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    const UUID: &str = "8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10";
    let reader = format!("reader.{UUID}");
    let stranger = |name: &str| fx.locks.named_lock(name).status().unwrap().stranger;
    let nameless = std::ffi::OsStr::from_bytes(b"\xff.jpg");
    let cases: [(&str, &[&Path], &str); 7] = [
        ("photos", &[Path::new("2024/a.jpg")], "2024"),
        ("book", &[Path::new("reader.md")], "reader.md"),
        ("notes", &[Path::new("writer.txt")], "writer.txt"),
        ("backup", &[Path::new("owner.json.bak")], "owner.json.bak"),
        ("thesis", &[&Path::new(&reader).join("thesis.tex")], &reader),
        ("data", &[Path::new("owner.json/data.txt")], "owner.json"),
        ("odd", &[Path::new(nameless)], "a name that is not UTF-8"),
    ];
    for (name, files, first) in cases {
        let mine = private_dir(&fx.dir().join(format!("{name}.lock")));
        for f in files {
            let f = mine.join(f);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, "precious").unwrap();
        }
        let err = fx.locks.named_lock(name).unlock(true).unwrap_err();
        let says = format!("holds {first}, which a lock never holds");
        assert!(
            matches!(&err, Error::Unsafe { problem, .. } if problem.contains(&says)),
            "{name}: {err}"
        );
        assert_eq!(stranger(name).as_deref(), Some(first), "{name}");
        for f in files {
            assert_eq!(std::fs::read(mine.join(f)).unwrap(), b"precious", "{name}");
        }
    }
    let damaged = private_dir(&fx.dir().join("d.lock"));
    std::fs::write(damaged.join(format!("owner.json.{UUID}")), "").unwrap();
    private_dir(&damaged.join(&reader));
    std::fs::write(damaged.join(&reader).join("owner.json"), "{}").unwrap();
    assert_eq!(stranger("d"), None);
    fx.locks.named_lock("d").unlock(true).unwrap();
    assert!(!damaged.exists());
}

#[test]
fn a_file_at_the_lock_path_is_refused() {
    let fx = Fixture::new();
    std::fs::write(fx.dir().join("x.lock"), "not a lock").unwrap();
    refused(&fx, "regular file");
}

/// A plain file at the lock path may be another tool's lock file, in use (flock(1) locks its
/// file): a forced unlock refuses it while any process holds a `flock` on it, and removes it
/// once none does. (It once removed it, held, and said that no process held it.)
#[test]
fn a_forced_unlock_leaves_a_file_that_a_process_flocks() {
    if lacks(
        "hostile::a_forced_unlock_leaves_a_file_that_a_process_flocks",
        "flock(1)",
        have("flock"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let file = fx.dir().join("x.lock");
    std::fs::write(&file, "in use").unwrap();
    // Free: no holder at all, shared or not (a shared try would let a shared holder pass).
    let free = || {
        std::process::Command::new("flock")
            .args(["-n", "-x"])
            .arg(&file)
            .arg("true")
            .status()
            .unwrap()
            .success()
    };
    for shared in [false, true] {
        let mut flock = std::process::Command::new("flock");
        flock.arg(if shared { "-s" } else { "-x" }).arg(&file);
        let holder = ChildGuard::spawn(flock.args(["sleep", "60"]));
        // A shared holder lets another shared one in: held once an exclusive try fails.
        assert!(
            eventually(Duration::from_secs(10), || !free()),
            "flock took it"
        );
        let err = fx.locks.named_lock("x.lock").unlock(true).unwrap_err();
        assert!(
            matches!(err, Error::Malformed { .. })
                && err.to_string().contains("holds a lock on it"),
            "shared: {shared}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "in use");
        drop(holder);
        assert!(
            eventually(Duration::from_secs(10), free),
            "its holder let go"
        );
    }
    let removed = fx.locks.named_lock("x.lock").unlock(true).unwrap();
    assert!(
        matches!(removed, dirlock::Unlocked::Removed { owner: None }),
        "{removed:?}"
    );
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn a_symlinked_record_is_refused_and_its_target_untouched() {
    let fx = Fixture::new();
    let c = canary(&fx);
    let l = lock_dir(&fx);
    symlink(&c, l.join("owner.json")).unwrap();
    refused(&fx, "symbolic link");
    check_canary(&c);
}

#[test]
fn a_fifo_record_with_a_writer_attached_does_not_block() {
    let fx = Fixture::new();
    let fifo = fifo_record(&fx);
    // A writer holds the FIFO open: a blocking read would wait for it forever.
    let _writer = ChildGuard::spawn(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec 3>'{}'; sleep 30", fifo.display())),
    );
    refused(&fx, "FIFO");
}

#[test]
fn a_socket_record_is_refused() {
    let fx = Fixture::new();
    let l = lock_dir(&fx);
    let _sock = std::os::unix::net::UnixListener::bind(l.join("owner.json")).unwrap();
    refused(&fx, "FIFO, socket or device");
}

#[test]
fn a_directory_record_is_refused() {
    let fx = Fixture::new();
    let l = lock_dir(&fx);
    std::fs::create_dir(l.join("owner.json")).unwrap();
    refused(&fx, "directory");
}

#[test]
fn a_huge_record_is_refused_without_reading_it_all() {
    let fx = Fixture::new();
    let l = lock_dir(&fx);
    let f = std::fs::File::create(l.join("owner.json")).unwrap();
    f.set_len(1 << 40).unwrap(); // a sparse terabyte
    std::fs::set_permissions(l.join("owner.json"), PermissionsExt::from_mode(0o600)).unwrap();
    refused(&fx, "larger than 4096 bytes");
}

#[test]
fn a_record_owned_by_another_user_is_refused() {
    if lacks(
        "hostile::a_record_owned_by_another_user_is_refused",
        "root (to make a file another user owns)",
        is_root(),
    ) {
        return;
    }
    let fx = Fixture::new();
    let l = lock_dir(&fx);
    let rec = l.join("owner.json");
    std::fs::write(&rec, format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid())).unwrap();
    std::fs::set_permissions(&rec, PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&rec, Some(65534), Some(65534)).unwrap();
    refused(&fx, "owned by uid 65534");
    assert!(rec.exists(), "a foreign record is never removed");
}

#[test]
fn a_record_open_to_others_is_refused() {
    let fx = Fixture::new();
    let l = lock_dir(&fx);
    let rec = l.join("owner.json");
    std::fs::write(&rec, format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid())).unwrap();
    std::fs::set_permissions(&rec, PermissionsExt::from_mode(0o646)).unwrap();
    refused(&fx, "mode 646");
}

#[test]
fn a_symlinked_guard_is_refused_and_its_target_untouched() {
    let fx = Fixture::new();
    let c = canary(&fx);
    plant(
        fx.dir(),
        "x.lock",
        &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
        Duration::from_secs(120),
    );
    let target = fx.tmp.path().join("guard-target");
    std::fs::create_dir(&target).unwrap();
    symlink(&target, fx.dir().join("x.lock.reclaim")).unwrap();
    let err = fx.locks.named_lock("x.lock").acquire().unwrap_err();
    match &err {
        Error::Unsafe { path, .. } => assert_eq!(path, &fx.dir().join("x.lock.reclaim")),
        other => panic!("expected Unsafe, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing made through the link"
    );
    assert!(
        fx.dir().join("x.lock/owner.json").exists(),
        "the lock is left alone"
    );
    check_canary(&c);
}

#[test]
fn a_guard_owned_by_another_user_is_refused() {
    if lacks(
        "hostile::a_guard_owned_by_another_user_is_refused",
        "root (to make a directory another user owns)",
        is_root(),
    ) {
        return;
    }
    let fx = Fixture::new();
    plant(
        fx.dir(),
        "x.lock",
        &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
        Duration::from_secs(120),
    );
    let g = private_dir(&fx.dir().join("x.lock.reclaim"));
    std::os::unix::fs::chown(&g, Some(65534), Some(65534)).unwrap();
    let err = fx.locks.named_lock("x.lock").acquire().unwrap_err();
    assert!(err.to_string().contains("owned by uid 65534"), "{err}");
    assert!(g.exists());
}

/// A reclaim guard others can write (another program's, made under umask 002) is refused by
/// an acquisition and shown so by `status`: the lock cannot be taken, though its owner is gone.
#[test]
fn a_writable_guard_is_refused_and_status_says_the_lock_cannot_be_taken() {
    let fx = Fixture::new();
    plant(
        fx.dir(),
        "x.lock",
        &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
        Duration::from_secs(120),
    );
    let g = private_dir(&fx.dir().join("x.lock.reclaim"));
    std::fs::set_permissions(&g, std::os::unix::fs::PermissionsExt::from_mode(0o775)).unwrap();
    let status = fx.locks.named_lock("x.lock").status().unwrap();
    match &status.guard {
        dirlock::GuardState::Unsafe { path, problem } => {
            assert_eq!(path, &g);
            assert!(problem.contains("mode 775"), "{problem}");
        }
        other => panic!("expected an unsafe guard, got {other:?}"),
    }
    assert!(!status.takeable(), "{status:?}");
    let err = fx.locks.named_lock("x.lock").acquire().unwrap_err();
    assert!(matches!(err, Error::Unsafe { .. }), "{err}");
    assert!(g.exists());
}

/// A symlink, FIFO or socket where a takeover's guard goes is reported by status as what keeps
/// a dead holder's lock from being taken over, and is no matter for a free lock; status does
/// not fail over it. (It failed: "refusing ...", and for a socket "cannot open".)
#[test]
fn a_guard_that_is_no_directory_is_reported_not_an_error() {
    let fx = Fixture::new();
    let g = fx.dir().join("x.lock.reclaim");
    for odd in ["symlink", "fifo", "socket"] {
        // (A socket is open while it is bound: it cannot be opened, ENXIO.)
        let _bound = match odd {
            "symlink" => {
                symlink(fx.tmp.path(), &g).unwrap();
                None
            }
            "fifo" => {
                assert!(std::process::Command::new("mkfifo")
                    .arg(&g)
                    .status()
                    .unwrap()
                    .success());
                None
            }
            _ => Some(std::os::unix::net::UnixListener::bind(&g).unwrap()),
        };
        let status = fx.locks.named_lock("x.lock").status().unwrap();
        assert!(status.takeable(), "{odd}: a free lock: {status:?}");
        plant(
            fx.dir(),
            "x.lock",
            &format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid()),
            Duration::from_secs(120),
        );
        let status = fx.locks.named_lock("x.lock").status().unwrap();
        assert!(
            matches!(&status.guard, dirlock::GuardState::Unsafe { path, .. } if *path == g),
            "{odd}: {status:?}"
        );
        assert!(!status.takeable(), "{odd}: {status:?}");
        std::fs::remove_file(&g).unwrap();
        std::fs::remove_dir_all(fx.dir().join("x.lock")).unwrap();
    }
}

#[test]
fn sweep_never_follows_a_symlinked_tombstone() {
    let fx = Fixture::new();
    let c = canary(&fx);
    let target = fx.tmp.path().join("precious-dir");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    symlink(&target, fx.dir().join("x.lock.tombstone.evil")).unwrap();
    let report = fx.locks.sweep(Duration::ZERO).unwrap();
    assert!(
        report.removed.contains(&"x.lock.tombstone.evil".to_owned()),
        "{report:?}"
    );
    assert!(
        target.join("keep").exists(),
        "the sweep went through the link"
    );
    check_canary(&c);
}

#[test]
fn a_fifo_record_without_a_writer_does_not_block_the_open() {
    let fx = Fixture::new();
    fifo_record(&fx);
    // Opening a FIFO for reading blocks until a writer comes, unless O_NONBLOCK.
    refused(&fx, "FIFO");
}

/// A file, or a link, where a lock's queue belongs turns the queue off (a sweep removes it):
/// `status` of that lock, and of every lock, still reports the holder.
#[test]
fn a_file_where_the_queue_belongs_fails_no_status() {
    let fx = Fixture::new();
    for planted in ["file", "link"] {
        let queue = fx.dir().join("q.lock.queue");
        match planted {
            "file" => std::fs::write(&queue, "").unwrap(),
            _ => symlink(fx.tmp.path(), &queue).unwrap(),
        }
        let held = fx.locks.named_lock("q.lock").acquire().unwrap();
        let st = fx.locks.named_lock("q.lock").status().unwrap();
        assert!(
            st.owner.is_some() && st.queue.is_empty(),
            "{planted}: {st:?}"
        );
        assert_eq!(fx.locks.statuses().unwrap().len(), 1, "{planted}");
        held.release().unwrap();
        std::fs::remove_file(&queue).unwrap();
    }
}

/// An entry in a lock's queue that no one may open was shut by hand (a careless `chmod -R
/// go-rwx` of a shared lock directory, say): dirlock opens every entry to all who share the
/// lock. Waiters pass it over: a release hands the lock past it to the waiter queued behind it, where
/// it stopped there once (and every waiter deferred to it). `status` lists it and `sweep` keeps
/// it, each naming its path. As root (whom no mode keeps out), it runs as uid 65534.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
fn a_queue_entry_no_one_may_open_is_passed_over_and_named() {
    let test = "hostile::a_queue_entry_no_one_may_open_is_passed_over_and_named";
    if is_root() {
        if !lacks(test, "setpriv(1), to run as uid 65534", have("setpriv")) {
            as_nobody(test);
        }
        return;
    }
    let fx = Fixture::new();
    if crate::common::sys::lacks_exchange(test, fx.tmp.path()) {
        return;
    }
    let queue = private_dir(&fx.dir().join(format!("{}.queue", crate::queue::LOCK)));
    let barred = queue.join("00000000000000000000.w.barred");
    std::fs::create_dir(&barred).unwrap();
    std::fs::set_permissions(&barred, PermissionsExt::from_mode(0o000)).unwrap();
    // Opened again at the end, even when the test fails, for its directory to go.
    struct Open<'p>(&'p Path);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            let _ = std::fs::set_permissions(self.0, PermissionsExt::from_mode(0o700));
        }
    }
    let _open = Open(&barred);
    // Listed with no record ("" for its purpose), ahead of the stopped waiter.
    crate::queue::hand_to_a_stopped_waiter(&fx, &[""]);
    let named = |why: &str| why.contains(&*barred.to_string_lossy());
    let st = fx.locks.named_lock(crate::queue::LOCK).status().unwrap();
    let listed: Vec<_> = st
        .queue
        .iter()
        .map(|p| (p.liveness, named(&p.reason)))
        .collect();
    assert_eq!(
        listed,
        [(dirlock::Liveness::Unknown, true)],
        "{:?}",
        st.queue
    );
    let swept = fx.locks.sweep(Duration::ZERO).unwrap();
    let kept: Vec<_> = swept
        .kept
        .iter()
        .map(|(n, why)| (n.as_str(), named(why)))
        .collect();
    assert_eq!(kept, [("q.lock.queue", true)], "{swept:?}");
}

/// Runs test `test` of this binary as uid 65534, in a temporary directory of its own, and
/// fails if it fails.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn as_nobody(test: &str) {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(tmp.path(), Some(65534), Some(65534)).unwrap();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--quiet", "--test-threads=1"])
        .env("TMPDIR", tmp.path());
    let mut child = ChildGuard::spawn(cmd);
    let status = child.wait_for(Duration::from_secs(120)).expect("wedged");
    assert!(status.success(), "{test}, as uid 65534: {status}");
}
