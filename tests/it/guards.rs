//! The tests' own hygiene: a test that fails leaves no process behind and no pipe open (a
//! leaked child holding the harness's stdout would make `cargo test | cat` hang forever).

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where the panicking child test writes the pids it started.
const DIR: &str = "DIRLOCK_TEST_PANIC_DIR";

/// Starts a holder and a shell with a background grandchild (both inheriting nothing but
/// this test's pipes), writes their pids, and panics. Does nothing as an ordinary test.
#[test]
#[ignore = "run by a_failing_test_leaves_no_process_and_no_open_pipe"]
fn panics_holding_children() {
    let Some(dir) = std::env::var_os(DIR).map(std::path::PathBuf::from) else {
        return;
    };
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "p.lock"]);
    std::fs::write(dir.join("holder"), format!("{}\n", holder.pid())).unwrap();
    let _shell = ChildGuard::spawn(Command::new("sh").arg("-c").arg(format!(
        "sleep 60 & echo $! > {0}.tmp && mv {0}.tmp {0}; wait",
        dir.join("grandchild").display()
    )));
    read_pid(&dir.join("grandchild"));
    panic!("on purpose, holding a holder and a shell with a background child");
}

#[test]
fn a_failing_test_leaves_no_process_and_no_open_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = ChildGuard::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "guards::panics_holding_children",
                "--ignored",
                "--nocapture",
            ])
            .env(DIR, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    // Its pipes reach end of file only once nothing holds them: read them on the side, with a
    // deadline, so that a leak fails this test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    std::thread::spawn(move || {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let _ = std::io::Read::read_to_end(&mut out, &mut a);
        let _ = std::io::Read::read_to_end(&mut err, &mut b);
        let _ = tx.send((a, b));
    });
    let (_, stderr) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the failed test's pipes stayed open: something it started outlived it");
    let status = child.wait().unwrap();
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(
        !status.success() && stderr.contains("on purpose"),
        "the child test did not fail as planned: {status}: {stderr}"
    );
    for name in ["holder", "grandchild"] {
        let pid = read_pid(&tmp.path().join(name));
        assert!(
            eventually(Duration::from_secs(10), || !alive(pid)),
            "the {name} (pid {pid}) outlived the failed test"
        );
    }
    assert!(Path::new(tmp.path()).exists());
}

/// Starts a holder and a plain child, writes their pids, and waits to be killed. Does nothing
/// as an ordinary test.
#[test]
#[ignore = "run by a_killed_test_binary_leaves_no_process"]
fn killed_holding_children() {
    let Some(dir) = std::env::var_os(DIR).map(std::path::PathBuf::from) else {
        return;
    };
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "k.lock"]);
    let sleeper = ChildGuard::spawn(Command::new("sleep").arg("60"));
    for (name, pid) in [("holder", holder.pid()), ("sleeper", sleeper.id())] {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, format!("{pid}\n")).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    std::thread::sleep(Duration::from_secs(60));
}

/// Ctrl-C on `cargo test`, or a CI timeout, kills the test binary without running a
/// destructor (and its children are in process groups of their own, out of the terminal's
/// reach): the kernel still kills every child a test owns.
#[test]
fn a_killed_test_binary_leaves_no_process() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = ChildGuard::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "guards::killed_holding_children",
                "--ignored",
                "--nocapture",
            ])
            .env(DIR, tmp.path())
            // Its fixture inside ours: killed, it cannot remove it, and we do.
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let pids: Vec<u32> = ["holder", "sleeper"]
        .iter()
        .map(|name| read_pid(&tmp.path().join(name)))
        .collect();
    assert!(signal(child.id(), libc::SIGINT));
    child.wait().unwrap();
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(10), || !alive(pid)),
            "pid {pid} outlived the killed test binary"
        );
    }
}
