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
