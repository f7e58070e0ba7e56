//! Helpers shared by the library's and the command's integration tests: a private lock
//! directory per test, planted records, holder processes, guards that leave no process
//! behind, and the skip rule for tests that need more than the Rust toolchain.
#![allow(dead_code)]

pub mod machine;
pub mod sys;
use dirlock::Locks;
pub use machine::lacks;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
pub use sys::{kill_group, owned, signal};

/// A test's own lock directory (and a repository root beside it).
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub locks: Locks,
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        // Made here, since the library makes it only at the first acquisition, and tests plant
        // entries in it before any.
        let locks = Locks::in_dir(private_dir(&tmp.path().join("locks"))).unwrap();
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
    // Both times: bindfs ignores a change of the modification time alone.
    let t = SystemTime::now() - age;
    f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t))
        .unwrap();
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

/// A holder process (`dirlock hold`, or the library tests' own stand-in for it: see each test
/// crate's `hold_command`) that has published its lock. It runs in a process group of its own,
/// killed on drop.
pub struct Holder {
    pub child: Child,
    pub path: PathBuf,
    pub until: PathBuf,
    _stdout: BufReader<ChildStdout>,
}

impl Holder {
    /// Starts a holder of the lock `ARGS` select in `dir` (`dirlock hold` arguments) and waits
    /// (up to 20 s) for its `held` line.
    pub fn start(dir: &Path, args: &[&str]) -> Holder {
        Holder::try_start(dir, args).unwrap_or_else(|e| panic!("holder did not start: {e}"))
    }

    pub fn try_start(dir: &Path, args: &[&str]) -> Result<Holder, String> {
        Holder::try_start_under(&[], dir, args)
    }

    /// As [`Holder::try_start`], with the holder run under `wrapper` (e.g. strace with a fault
    /// injected).
    pub fn try_start_under(wrapper: &[&str], dir: &Path, args: &[&str]) -> Result<Holder, String> {
        let until = dir
            .parent()
            .unwrap()
            .join(format!("release-{}", uuid_like()));
        let mut all: Vec<std::ffi::OsString> = vec!["--dir".into(), dir.into()];
        all.extend(args.iter().map(Into::into));
        all.extend(["--until".into(), until.clone().into()]);
        let mut child = owned(
            crate::hold_command(wrapper, &all)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .spawn()
        .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            // The stand-in is a test binary: skip what the harness prints first.
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line.starts_with("held ") {
                    break;
                }
            }
            let _ = tx.send(line);
            r
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("held ") => Ok(Holder {
                path: PathBuf::from(line["held ".len()..].trim_end()),
                child,
                until,
                _stdout: reader.join().unwrap(),
            }),
            other => {
                kill_group(child.id());
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
        kill_group(self.child.id());
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

impl ChildGuard {
    pub fn spawn(mut cmd: impl std::borrow::BorrowMut<Command>) -> ChildGuard {
        ChildGuard(owned(cmd.borrow_mut()).spawn().unwrap())
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

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl ChildGuard {
    /// Waits for the child and reads what it wrote to its piped stdout and stderr.
    pub fn output(&mut self) -> std::process::Output {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        if let Some(mut o) = self.0.stdout.take() {
            let _ = std::io::Read::read_to_end(&mut o, &mut stdout);
        }
        if let Some(mut e) = self.0.stderr.take() {
            let _ = std::io::Read::read_to_end(&mut e, &mut stderr);
        }
        let status = self.0.wait().unwrap();
        std::process::Output {
            status,
            stdout,
            stderr,
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
        signal(self.0, libc::SIGKILL);
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

/// An exit status as a shell reports it: the code, or 128 + the signal that ended it.
pub fn shell_status(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or(status.signal().map(|n| 128 + n))
        .unwrap_or(-1)
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

/// A wrapper that runs a program under strace (and whatever it forks), logging the calls that
/// `trace` (`trace=...`) names to `log` and failing them as `inject` (`inject=...`) says.
#[allow(dead_code, reason = "not every test crate injects with it")]
pub fn strace_injecting<'a>(log: &'a str, trace: &'a str, inject: &'a str) -> [&'a str; 8] {
    ["strace", "-f", "-o", log, "-e", trace, "-e", inject]
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

/// A whole number from the environment (soak settings), or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub struct Outcome {
    pub sections: u64,
    pub kills: u64,
    pub fail_points: u64,
}

/// Checks a sections log (I1): no section saw another inside, and between an `enter` and the
/// next `enter` only the first section's `exit` appears (a section killed inside has none).
/// Returns (sections entered, sections completed).
/// How long a chaos run goes on: for `run_for`, and then on until the log in `work` shows
/// `min_sections` completed sections (a loaded machine starts its workers slowly), at most ten
/// times as long. A run that cannot reach the minimum fails its "too little happened" check.
pub struct ChaosClock {
    deadline: Instant,
    last_chance: Instant,
    min_sections: u64,
    log: PathBuf,
}

impl ChaosClock {
    pub fn new(work: &Path, run_for: Duration, min_sections: u64) -> Self {
        let deadline = Instant::now() + run_for;
        ChaosClock {
            deadline,
            last_chance: deadline + run_for * 10,
            min_sections,
            log: work.join("log"),
        }
    }

    /// Whether to go on killing.
    pub fn go_on(&self) -> bool {
        let now = Instant::now();
        now < self.deadline
            || (now < self.last_chance
                && std::fs::read_to_string(&self.log)
                    .map_or(0, |l| l.matches("exit ").count() as u64)
                    < self.min_sections)
    }
}

pub fn check_log(work: &Path) -> (u64, u64) {
    let log = std::fs::read_to_string(work.join("log")).unwrap_or_default();
    let overlaps: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("overlap"))
        .take(5)
        .collect();
    assert!(overlaps.is_empty(), "I1 violated: {overlaps:?}");
    let (mut entered, mut exits) = (0u64, 0u64);
    let mut inside: Option<&str> = None;
    for line in log.lines() {
        // A writer SIGKILLed inside write(2) can leave a torn line (the kernel stops copying at
        // a fatal signal), which the next append continues: keep the last whole record.
        let line = ["enter ", "exit "]
            .iter()
            .filter_map(|t| line.rfind(t))
            .max()
            .map_or(line, |i| &line[i..]);
        let mut f = line.split(' ');
        match (f.next(), f.next()) {
            (Some("enter"), Some(pid)) => {
                entered += 1;
                inside = Some(pid);
            }
            (Some("exit"), Some(pid)) => {
                assert_eq!(
                    inside,
                    Some(pid),
                    "an exit by a section that is not inside: {line}"
                );
                exits += 1;
                inside = None;
            }
            _ => {}
        }
    }
    (entered, exits)
}
