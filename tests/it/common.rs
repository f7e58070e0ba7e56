//! Helpers: a private lock directory per test, planted records, child holders.
#![allow(dead_code)]

use dirlock::Locks;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

pub const BIN: &str = env!("CARGO_BIN_EXE_dirlock");

/// A test's own lock directory (and a repository root beside it).
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub locks: Locks,
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let locks = Locks::in_dir(tmp.path().join("locks")).unwrap();
        std::fs::create_dir(tmp.path().join("repo")).unwrap();
        Fixture { tmp, locks }
    }

    pub fn dir(&self) -> &Path {
        self.locks.dir()
    }

    pub fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }

    /// The entries of the lock directory, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }
}

/// Makes directory `path`, mode exactly 0700 (whatever the umask).
pub fn private_dir(path: &Path) -> PathBuf {
    std::fs::create_dir(path).unwrap();
    std::fs::set_permissions(path, PermissionsExt::from_mode(0o700)).unwrap();
    path.to_owned()
}

/// Plants a lock directory `name` holding `record`, private as a real one, with its mtime
/// `age` in the past.
pub fn plant(dir: &Path, name: &str, record: &str, age: Duration) -> PathBuf {
    let lock = private_dir(&dir.join(name));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(lock.join("owner.json"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, record.as_bytes()))
        .unwrap();
    set_age(&lock, age);
    lock
}

pub fn set_age(path: &Path, age: Duration) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

pub fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A pid that no process has (a child that has exited and been reaped).
pub fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// A `dirlock hold` child that has published its lock.
pub struct Holder {
    pub child: Child,
    pub path: PathBuf,
    pub until: PathBuf,
    _stdout: ChildStdout,
}

impl Holder {
    /// Starts `dirlock hold --dir DIR ARGS..` and waits (up to 20 s) for its `held` line.
    pub fn start(dir: &Path, args: &[&str]) -> Holder {
        Holder::try_start(dir, args).unwrap_or_else(|e| panic!("holder did not start: {e}"))
    }

    pub fn try_start(dir: &Path, args: &[&str]) -> Result<Holder, String> {
        Holder::try_start_under(&[], dir, args)
    }

    /// As [`Holder::try_start`], with the binary run under `wrapper` (e.g. strace with a fault
    /// injected).
    pub fn try_start_under(wrapper: &[&str], dir: &Path, args: &[&str]) -> Result<Holder, String> {
        let until = dir
            .parent()
            .unwrap()
            .join(format!("release-{}", uuid_like()));
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        let mut child = cmd
            .arg("hold")
            .arg("--dir")
            .arg(dir)
            .args(args)
            .arg("--until")
            .arg(&until)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            tx.send(line).unwrap();
            r.into_inner()
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("held ") => Ok(Holder {
                path: PathBuf::from(line["held ".len()..].trim_end()),
                child,
                until,
                _stdout: reader.join().unwrap(),
            }),
            other => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                Err(format!(
                    "{other:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks the holder to release and waits for it to exit successfully.
    pub fn release(mut self) {
        std::fs::write(&self.until, "").unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "holder exited with {status}");
    }

    /// SIGKILLs the holder and reaps it.
    pub fn kill(mut self) -> u32 {
        let pid = self.child.id();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        pid
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A child process in a process group of its own, killed with everything it started (and
/// reaped) when the guard is dropped, also when a test panics.
pub struct ChildGuard(pub Child);

/// SIGKILLs process group `pgid` (what a child started lives on in it).
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

impl ChildGuard {
    pub fn spawn(mut cmd: impl std::borrow::BorrowMut<Command>) -> ChildGuard {
        use std::os::unix::process::CommandExt;
        ChildGuard(cmd.borrow_mut().process_group(0).spawn().unwrap())
    }

    /// Waits up to `limit` for the child to exit; `None` if it is still running (it is killed
    /// when the guard drops).
    pub fn wait_for(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        kill_group(self.0.id());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process that is not our child (a grandchild): SIGKILLed when the guard is dropped.
pub struct PidGuard(pub u32);

impl Drop for PidGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether `pid` is a running process (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next();
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

/// Waits up to `limit` for `cond`; returns whether it came true.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads a pid written to `path` by a script (waits up to 20 s for it).
pub fn read_pid(path: &Path) -> u32 {
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(path)
            .is_ok_and(|s| s.ends_with('\n'))),
        "{} never appeared",
        path.display()
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// This kernel's boot id.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_owned()
}

/// Whether a test must skip because the machine lacks what it needs: prints one line naming
/// the test and the need, and returns `true`. With `DIRLOCK_TEST_REQUIRE_ALL=1` (CI) a missing
/// need fails the test instead.
pub fn lacks(test: &str, need: &str, have: bool) -> bool {
    if have {
        return false;
    }
    if std::env::var_os("DIRLOCK_TEST_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("{test}: needs {need} (DIRLOCK_TEST_REQUIRE_ALL=1 forbids skipping)");
    }
    eprintln!("skipped {test}: needs {need}");
    true
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether `program` can be run (it answers `--version`).
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A FUSE mount (`bindfs`) of a private directory, whose `renameat2` refuses
/// `RENAME_NOREPLACE` (the plain-rename fallback runs there); unmounted on drop.
pub struct Fuse {
    pub dir: tempfile::TempDir,
}

impl Fuse {
    /// `None` (after saying why) where bindfs or FUSE is missing.
    pub fn mount(test: &str) -> Option<Fuse> {
        let usable = is_root() && have("bindfs") && Path::new("/dev/fuse").exists();
        if lacks(test, "root, /dev/fuse and bindfs", usable) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        let ok = Command::new("bindfs")
            .arg(dir.path().join("src"))
            .arg(dir.path().join("mnt"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "bindfs failed");
        Some(Fuse { dir })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        for _ in 0..50 {
            let ok = Command::new("fusermount")
                .args(["-u", "-z"])
                .arg(self.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
                || Command::new("umount")
                    .arg("-l")
                    .arg(self.path())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
