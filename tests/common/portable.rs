//! The holder process of the portable tests (the library's and the command's): any command
//! that prints `held PATH` once it holds its lock. Nothing here is platform-specific, so the
//! same code serves on Linux and on Windows under Wine.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where a holder process that is this test binary again takes its lock, which lock, and the
/// file whose appearance tells it to release.
const HOLD_DIR: &str = "DIRLOCK_TEST_HOLD_DIR";
const HOLD_LOCK: &str = "DIRLOCK_TEST_HOLD_LOCK";
const HOLD_UNTIL: &str = "DIRLOCK_TEST_HOLD_UNTIL";
/// Set: the holder takes the lock shared.
const HOLD_SHARED: &str = "DIRLOCK_TEST_HOLD_SHARED";

/// Starts this test binary again, running its ignored test `test` (which calls [`hold`]): a
/// process that holds `lock` in `dir` until `until` exists. Returns once it holds the lock.
#[allow(dead_code, reason = "the command's tests hold with `dirlock hold`")]
pub fn start_self_holder(test: &str, dir: &Path, lock: &str, until: &Path) -> Holder {
    Holder::start(&mut self_holder(test, dir, lock, until))
}

/// [`start_self_holder`] of a shared (read) lock.
#[allow(dead_code, reason = "the command's tests hold with `dirlock hold`")]
pub fn start_self_reader(test: &str, dir: &Path, lock: &str, until: &Path) -> Holder {
    Holder::start(self_holder(test, dir, lock, until).env(HOLD_SHARED, "1"))
}

#[allow(dead_code, reason = "the command's tests hold with `dirlock hold`")]
fn self_holder(test: &str, dir: &Path, lock: &str, until: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        test,
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HOLD_DIR, dir)
    .env(HOLD_LOCK, lock)
    .env(HOLD_UNTIL, until);
    c
}

/// The body of the holder test [`start_self_holder`] runs: takes the lock, says `held PATH`,
/// releases once the file appears, and exits. Does nothing in an ordinary test run.
#[allow(dead_code, reason = "the command's tests hold with `dirlock hold`")]
pub fn hold() {
    let (Some(dir), Some(lock), Some(until)) = (
        std::env::var_os(HOLD_DIR),
        std::env::var(HOLD_LOCK).ok(),
        std::env::var_os(HOLD_UNTIL),
    ) else {
        return;
    };
    let mut req = dirlock::Locks::in_dir(&dir)
        .unwrap()
        .named_lock(&lock)
        .purpose("portable test");
    if std::env::var_os(HOLD_SHARED).is_some() {
        req = req.shared();
    }
    let guard = req.acquire().unwrap();
    // On a line of its own (the test harness has begun a line of its own).
    println!("\nheld {}", guard.path().display());
    let until = PathBuf::from(until);
    while !until.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    guard.release().unwrap();
    // Out at once: the harness must not report on a test it was only a vehicle for.
    std::process::exit(0);
}

/// The lines `out` says, as they come, read in a thread of their own, so that a process that
/// says nothing cannot hang the test (the channel closes when `out` does, or fails).
pub fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A holder process, killed (and reaped) when dropped, however the test ends.
pub struct Holder {
    child: Child,
}

impl Holder {
    /// Starts `cmd` and returns once it has printed its `held` line; fails the test if it has
    /// not within a minute (its output is read in a thread, so a holder that never takes the
    /// lock cannot hang the test; the thread ends with the killed holder's pipe).
    pub fn start(cmd: &mut Command) -> Holder {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        let mut holder = Holder { child };
        loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.starts_with("held ") => return holder,
                Ok(_) => {}
                other => {
                    let _ = holder.child.kill();
                    let status = holder.child.wait();
                    panic!("the holder did not take the lock: {other:?}, {status:?}");
                }
            }
        }
    }

    /// Owns `child` the same way (killed when dropped), without waiting for any line.
    #[allow(dead_code, reason = "only the command's tests adopt a process")]
    pub fn adopt(child: Child) -> Holder {
        Holder { child }
    }

    /// Waits for it to exit and returns what it wrote to its (piped) stdout, with its status.
    #[allow(dead_code, reason = "only some test crates read a worker's output")]
    pub fn output(mut self) -> std::process::Output {
        let mut stdout = Vec::new();
        if let Some(mut out) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
        }
        let status = self.child.wait().unwrap();
        std::process::Output {
            status,
            stdout,
            stderr: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (up to a minute) for it to exit by itself, successfully: a holder told to
    /// release.
    #[allow(dead_code, reason = "not every test crate lets its holders finish")]
    pub fn finish(mut self) {
        for _ in 0..6000 {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the holder exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the holder did not exit within a minute");
    }

    /// Kills it without a release, as SIGKILL or `TerminateProcess` (`taskkill /F`) would, and
    /// reaps it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The names in `dir` (a lock directory: locks, candidates, guards, tombstones), sorted; none
/// where it was never made.
#[allow(
    dead_code,
    reason = "the command's portable tests look through `dirlock status`"
)]
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        d => d
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
    };
    names.sort();
    names
}
