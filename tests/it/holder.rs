//! A holder process for the library's tests, standing in for `dirlock hold`: this test
//! binary re-executed to run [`hold`], which takes the lock that its arguments select, prints
//! `held PATH` (and `reclaimed-from PID TOKEN`), and releases once the `--until` file exists.

use dirlock::Locks;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::Duration;

/// The environment variable that carries the arguments.
pub const ARGS: &str = "DIRLOCK_TEST_HOLD";

/// The arguments, one per line (test paths hold no newline).
pub fn join(args: &[OsString]) -> OsString {
    let mut out = Vec::new();
    for a in args {
        out.extend_from_slice(a.as_bytes());
        out.push(b'\n');
    }
    OsString::from_vec(out)
}

/// Takes the lock `DIRLOCK_TEST_HOLD` selects and holds it; does nothing as an ordinary test.
#[test]
#[ignore = "a holder process for the other tests, started by them"]
fn hold() {
    let Some(raw) = std::env::var_os(ARGS) else {
        return;
    };
    let args: Vec<String> = raw
        .as_bytes()
        .split(|&b| b == b'\n')
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    let locks = match (value("--dir"), value("--app")) {
        (Some(dir), _) => Locks::in_dir(dir),
        (None, Some(app)) => Locks::new(&app),
        (None, None) => Locks::new("dirlock"),
    }
    .unwrap();
    let mut req = if let Some(root) = value("--repository") {
        locks.repository_lock(root)
    } else if let Some(home) = value("--global-setup") {
        locks.global_setup_lock(home)
    } else {
        locks.named_lock(&value("--lock").expect("a lock to hold"))
    };
    if let Some(p) = value("--purpose") {
        req = req.purpose(p);
    }
    if args.iter().any(|a| a == "--shared") {
        req = req.shared();
    }
    if args.iter().any(|a| a == "--wait") {
        req = req.wait(dirlock::Wait::Forever);
    }
    let guard = match req.acquire() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("dirlock: {e}");
            std::process::exit(if e.is_contended() { 75 } else { 1 });
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "held {}", guard.path().display()).unwrap();
    if let Some(prev) = guard.reclaimed_from() {
        writeln!(out, "reclaimed-from {} {}", prev.pid, prev.token).unwrap();
    }
    out.flush().unwrap();
    drop(out);
    let until = PathBuf::from(value("--until").expect("--until FILE"));
    while !until.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    guard.release().unwrap();
    // Out at once: the harness must not report on a test it was only a vehicle for.
    std::process::exit(0);
}
