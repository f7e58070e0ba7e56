//! Layer 7: the reference TypeScript implementation, run under Node.js with tsx and effect
//! from the npm registry, and dirlock on the same locks: the same paths, each excluded by the
//! other's holder, each reclaiming the other's dead locks by its own rules, and mutual
//! exclusion across both.
//!
//! Needs Node.js and npm (the first run does `npm install tsx effect` in the target
//! directory), and the reference named by `DIRLOCK_REFERENCE_TS`: its source
//! `operation-lock.ts`, or the diff that adds it (`.ci/run` points it at the seed). Without
//! them each test says so in one line and skips.

use crate::common::*;
use crate::BIN;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable naming the reference implementation.
const REFERENCE: &str = "DIRLOCK_REFERENCE_TS";

/// The reference's TypeScript source, from `DIRLOCK_REFERENCE_TS`: the file itself, or the
/// lines a diff adds.
fn reference_source() -> Result<String, String> {
    let path = std::env::var_os(REFERENCE).ok_or_else(|| format!("{REFERENCE} unset"))?;
    // Tests run in their package's directory, not where cargo was started: a relative path
    // would name another file than the user meant.
    if Path::new(&path).is_relative() {
        return Err(format!(
            "{REFERENCE}={} to be an absolute path",
            Path::new(&path).display()
        ));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{REFERENCE}={}: {e}", Path::new(&path).display()))?;
    if !text.lines().any(|l| l.starts_with("@@")) {
        return Ok(text);
    }
    Ok(text
        .lines()
        .skip_while(|l| !l.starts_with("@@"))
        .skip(1)
        .map(|l| format!("{}\n", l.strip_prefix('+').unwrap_or(l)))
        .collect())
}

/// The prepared Node project, or what is missing to prepare it.
fn prepare() -> Result<PathBuf, String> {
    let source = reference_source()?;
    for tool in ["node", "npm"] {
        if !have(tool) {
            return Err(format!("{tool} on PATH"));
        }
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop");
    let services = dir.join("extension/services");
    std::fs::create_dir_all(&services).map_err(|e| format!("{}: {e}", services.display()))?;
    if !dir.join("node_modules/.bin/tsx").exists() {
        std::fs::write(
            dir.join("package.json"),
            r#"{"name":"dirlock-interop","private":true,"type":"module"}"#,
        )
        .unwrap();
        // Bounded: a registry request that hangs must not hang the suite. The cache is used
        // when it has the packages; npm's own messages go to a file (no pipe to fill).
        let log = dir.join("npm.log");
        let mut npm = ChildGuard::spawn(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-update-notifier",
                    "--prefer-offline",
                    "--fetch-timeout=60000",
                    "--fetch-retries=2",
                    "--silent",
                    "tsx@4",
                    "effect@4",
                ])
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).map_err(|e| format!("npm.log: {e}"))?),
        );
        let failed = |why: String| {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            Err(format!(
                "tsx and effect from the npm registry (npm install {why}: {})",
                said.trim_end()
            ))
        };
        match npm.wait_for(Duration::from_secs(300)) {
            Some(status) if status.success() => {}
            Some(status) => return failed(format!("failed, {status}")),
            None => return failed("did not finish within 300 s".into()),
        }
    }
    std::fs::write(services.join("operation-lock.ts"), source).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    std::fs::copy(fixtures.join("errors.ts"), dir.join("extension/errors.ts")).unwrap();
    std::fs::copy(fixtures.join("driver.ts"), dir.join("driver.ts")).unwrap();
    Ok(dir)
}

/// The prepared Node project; `None` (after one line saying what is missing) to skip.
fn node_project(test: &str) -> Option<&'static PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(prepare) {
        Ok(dir) => Some(dir),
        Err(need) => {
            lacks(
                test,
                &format!("Node.js, npm and the reference implementation ({need})"),
                false,
            );
            None
        }
    }
}

/// A private TMPDIR shared by both implementations, and a repository root.
pub(crate) struct Shared {
    pub(crate) tmp: tempfile::TempDir,
    project: &'static PathBuf,
}

impl Shared {
    /// `None` when the machine lacks what the interoperability tests need (said in a line).
    pub(crate) fn new(test: &str) -> Option<Shared> {
        let project = node_project(test)?;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("t")).unwrap();
        std::fs::create_dir(tmp.path().join("repo")).unwrap();
        Some(Shared { tmp, project })
    }
    pub(crate) fn tmpdir(&self) -> PathBuf {
        self.tmp.path().join("t")
    }
    pub(crate) fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }
    pub(crate) fn node(&self, args: &[&str]) -> Command {
        let dir = self.project;
        // node itself, with tsx as an import hook: the `tsx` launcher would put node in a child
        // process that outlives a SIGKILL of the launcher.
        let mut c = Command::new("node");
        c.args(["--import", "tsx"])
            .arg(dir.join("driver.ts"))
            .args(args)
            .current_dir(dir)
            .env("TMPDIR", self.tmpdir());
        c
    }
    pub(crate) fn node_out(&self, args: &[&str]) -> String {
        let out = self.node(args).output().unwrap();
        assert!(
            out.status.success(),
            "node {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
    }
    pub(crate) fn dirlock(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .env("TMPDIR", self.tmpdir())
            .output()
            .unwrap()
    }
    /// The reference holds the repository lock until the returned guard is dropped.
    pub(crate) fn node_holder(&self) -> (ChildGuard, u32) {
        let ready = self.tmp.path().join("ready");
        let release = self.tmp.path().join("release");
        let child = ChildGuard::spawn(
            self.node(&[
                "hold",
                self.repo().to_str().unwrap(),
                ready.to_str().unwrap(),
                release.to_str().unwrap(),
            ])
            .stdout(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() || std::fs::read_to_string(&ready).unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the reference never took the lock"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
        (child, pid)
    }
}

pub(crate) fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn lock_paths_are_the_references() {
    let Some(s) = Shared::new("interop::lock_paths_are_the_references") else {
        return;
    };
    let repo = s.repo();
    let r = repo.to_str().unwrap();
    let ours = s.dirlock(&["path", "--app", "apnea", "--repository", r]);
    assert_eq!(
        s.node_out(&["path", r]),
        String::from_utf8_lossy(&ours.stdout).trim_end()
    );
    let ours = s.dirlock(&["path", "--app", "apnea", "--global-setup", r]);
    assert_eq!(
        s.node_out(&["setup-path", r]),
        String::from_utf8_lossy(&ours.stdout).trim_end()
    );
}

#[test]
fn the_references_holder_excludes_dirlock_which_reclaims_it_after_the_grace_period() {
    let Some(s) = Shared::new(
        "interop::the_references_holder_excludes_dirlock_which_reclaims_it_after_the_grace_period",
    ) else {
        return;
    };
    let r = s.repo();
    let r = r.to_str().unwrap();
    let (mut node, pid) = s.node_holder();
    let out = s.dirlock(&["run", "--app", "apnea", "--repository", r, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(text(&out).contains(&format!("pid {pid}")), "{}", text(&out));
    let status = s.dirlock(&["status", "-v", "--app", "apnea", "--repository", r]);
    assert!(
        text(&status).contains("reference-format record"),
        "{}",
        text(&status)
    );
    // Killed holding it: dead by evidence only (no beacon), so the grace period applies.
    node.kill().unwrap();
    node.wait().unwrap();
    let out = s.dirlock(&["run", "--app", "apnea", "--repository", r, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(
        text(&out).contains("can be taken over in"),
        "{}",
        text(&out)
    );
    let lock = PathBuf::from(
        String::from_utf8(
            s.dirlock(&["path", "--app", "apnea", "--repository", r])
                .stdout,
        )
        .unwrap()
        .trim_end(),
    );
    set_age(&lock, Duration::from_secs(61));
    let out = s.dirlock(&["run", "--app", "apnea", "--repository", r, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn dirlocks_holder_excludes_the_reference_which_reclaims_it_by_its_own_rules() {
    let Some(s) = Shared::new(
        "interop::dirlocks_holder_excludes_the_reference_which_reclaims_it_by_its_own_rules",
    ) else {
        return;
    };
    let r = s.repo();
    let r = r.to_str().unwrap();
    let until = s.tmp.path().join("until");
    let mut holder = ChildGuard::spawn(
        Command::new(BIN)
            .args(["hold", "--app", "apnea", "--repository", r, "--until"])
            .arg(&until)
            .env("TMPDIR", s.tmpdir())
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("held "), "{line}");
    // The reference reads our record (pid and token among our fields) and finds it live.
    assert!(
        s.node_out(&["try", r]).starts_with("error live"),
        "the reference must see a live holder"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Its own rules: a dead pid inside its 60 s grace is stale, and is reclaimed past it.
    assert!(s.node_out(&["try", r]).starts_with("error stale"));
    let lock = PathBuf::from(line["held ".len()..].trim_end());
    set_age(&lock, Duration::from_secs(61));
    assert_eq!(s.node_out(&["try", r]), "ran");
    assert!(!lock.exists());
}

const SECTION: &str = r#"
cd "$1" || exit 99
echo "enter $$" >> log
(set -C; echo $$ > occupied) 2>/dev/null || echo "overlap $$" >> log
n=$(cat counter 2>/dev/null || echo 0)
echo $((n + 1)) > counter.$$ && mv counter.$$ counter
echo "exit $$ $((n + 1))" >> log
rm -f occupied
"#;

#[test]
fn exclusion_holds_across_both_implementations() {
    let Some(s) = Shared::new("interop::exclusion_holds_across_both_implementations") else {
        return;
    };
    let home = s.repo();
    let work = s.tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = s.tmp.path().join("section.sh");
    std::fs::write(&script, SECTION).unwrap();
    let (home_s, work_s) = (
        home.to_str().unwrap().to_owned(),
        work.to_str().unwrap().to_owned(),
    );
    let nodes: Vec<ChildGuard> = (0..3)
        .map(|_| {
            ChildGuard::spawn(
                s.node(&["sections", &home_s, &work_s, "12"])
                    .stdout(Stdio::piped()),
            )
        })
        .collect();
    let ours: Vec<_> = (0..3)
        .map(|_| {
            let (home, script, work, tmpdir) =
                (home_s.clone(), script.clone(), work_s.clone(), s.tmpdir());
            std::thread::spawn(move || {
                for _ in 0..12 {
                    let out = Command::new(BIN)
                        .args([
                            "run",
                            "-q",
                            "--app",
                            "apnea",
                            "--global-setup",
                            &home,
                            "--",
                            "sh",
                        ])
                        .arg(&script)
                        .arg(&work)
                        .env("TMPDIR", &tmpdir)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    for t in ours {
        t.join().unwrap();
    }
    let mut reference_errors = Vec::new();
    for mut n in nodes {
        let out = n.output();
        reference_errors.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    let log = std::fs::read_to_string(work.join("log")).unwrap();
    assert!(!log.contains("overlap"), "two sections at once:\n{log}");
    let mut inside: Option<String> = None;
    let mut exits = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "enter" => {
                assert!(inside.is_none(), "{line} while {inside:?} is inside");
                inside = Some(f[1].to_owned());
            }
            "exit" => {
                assert_eq!(inside.as_deref(), Some(f[1]));
                inside = None;
                exits += 1;
            }
            _ => {}
        }
    }
    let counter: u32 = std::fs::read_to_string(work.join("counter"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(counter, exits, "a lost update");
    // dirlock's 36 sections all ran; the reference fails a section now and then: a record it
    // cannot read because the holder is releasing it (the lock is gone a moment later) it
    // reports as malformed, where it should publish again.
    assert!(
        exits >= 36,
        "{exits} sections; reference errors: {reference_errors:?}"
    );
    eprintln!("interop: {exits} sections across both, reference errors: {reference_errors:?}");
}

/// Item 1 of the hardening: the reference judges a `dirlock run` lock by the wrapper's pid. A
/// SIGKILLed wrapper must take its command with it, so that when the reference finds the
/// wrapper dead (and reclaims after its grace period) nothing runs under the lock any more.
#[test]
fn the_reference_never_runs_beside_the_command_of_a_killed_wrapper() {
    let Some(s) =
        Shared::new("interop::the_reference_never_runs_beside_the_command_of_a_killed_wrapper")
    else {
        return;
    };
    let r = s.repo();
    let r = r.to_str().unwrap();
    let pidfile = s.tmp.path().join("pid");
    let script = format!(
        "echo $$ > {}.tmp && mv {0}.tmp {0}; exec sleep 300",
        pidfile.display()
    );
    let mut wrapper = ChildGuard::spawn(
        Command::new(BIN)
            .args([
                "run",
                "--app",
                "apnea",
                "--repository",
                r,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("TMPDIR", s.tmpdir()),
    );
    let command = read_pid(&pidfile);
    let _command = PidGuard(command);
    let lock = PathBuf::from(
        String::from_utf8(
            s.dirlock(&["path", "--app", "apnea", "--repository", r])
                .stdout,
        )
        .unwrap()
        .trim_end(),
    );
    wrapper.0.kill().unwrap();
    wrapper.0.wait().unwrap();
    // Past the reference's grace period as far as the lock's age goes.
    set_age(&lock, Duration::from_secs(61));
    let ran = eventually(Duration::from_secs(30), || {
        if s.node_out(&["try", r]) == "ran" {
            assert!(
                !alive(command),
                "the reference ran while the command (pid {command}) still runs"
            );
            true
        } else {
            set_age(&lock, Duration::from_secs(61));
            false
        }
    });
    assert!(ran, "the reference never reclaimed the dead wrapper's lock");
}

/// The chaos layer with both implementations: `dirlock run` wrappers and the reference's
/// sections take turns on one repository lock while a killer SIGKILLs dirlock wrappers (holding or
/// waiting) and an ager keeps the lock looking older than the reference's grace period, so the
/// reference reclaims a dead wrapper's lock at once. Their commands die with them, so the
/// reference never runs beside one.
#[test]
fn exclusion_holds_across_both_with_killed_wrappers() {
    let Some(s) = Shared::new("interop::exclusion_holds_across_both_with_killed_wrappers") else {
        return;
    };
    let home = s.repo();
    let work = s.tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = s.tmp.path().join("section.sh");
    // The chaos section, a little slower: a command that outlived its wrapper would still be
    // inside when the reference came in.
    std::fs::write(
        &script,
        crate::chaos::SECTION.replace("rm -f \"mine.$$\"", "rm -f \"mine.$$\"; sleep 0.1"),
    )
    .unwrap();
    let (home_s, work_s) = (
        home.to_str().unwrap().to_owned(),
        work.to_str().unwrap().to_owned(),
    );
    let lock = PathBuf::from(
        String::from_utf8(
            s.dirlock(&["path", "--app", "apnea", "--repository", &home_s])
                .stdout,
        )
        .unwrap()
        .trim_end(),
    );
    let mut nodes: Vec<ChildGuard> = (0..2)
        .map(|_| {
            ChildGuard::spawn(
                s.node(&["repo-sections", &home_s, &work_s, "15"])
                    .stdout(Stdio::piped()),
            )
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let running = std::sync::Mutex::new(Vec::<u32>::new());
    let kills = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|sc| {
        for _ in 0..3 {
            sc.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let mut child = ChildGuard::spawn(
                        Command::new(BIN)
                            .args([
                                "run",
                                "-q",
                                "--wait-forever",
                                "--app",
                                "apnea",
                                "--repository",
                            ])
                            .arg(&home_s)
                            .args(["--", "sh"])
                            .arg(&script)
                            .arg(&work_s)
                            .env("TMPDIR", s.tmpdir())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null()),
                    );
                    running.lock().unwrap().push(child.0.id());
                    let _ = child.0.wait();
                    running.lock().unwrap().retain(|p| *p != child.0.id());
                }
            });
        }
        // The killer and the ager, until both reference workers are done.
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let deadline = Instant::now() + Duration::from_secs(90);
        while nodes.iter_mut().any(|n| n.0.try_wait().unwrap().is_none()) {
            assert!(
                Instant::now() < deadline,
                "the reference workers never finished"
            );
            std::thread::sleep(Duration::from_millis(40));
            if lock.exists() {
                let _ = std::fs::File::open(&lock).and_then(|f| {
                    let t = std::time::SystemTime::now() - Duration::from_secs(61);
                    f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t))
                });
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % 3 == 0 {
                let victim = {
                    let r = running.lock().unwrap();
                    r.get(rng as usize / 3 % r.len().max(1)).copied()
                };
                if let Some(pid) = victim {
                    if signal(pid, libc::SIGKILL) {
                        kills.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let mut reference_errors = String::new();
    for n in &mut nodes {
        if let Some(mut out) = n.0.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut out, &mut reference_errors);
        }
    }
    let (entered, exits) = check_log(&work);
    let kills = kills.into_inner();
    eprintln!("reference errors: {reference_errors}");
    eprintln!("interop chaos: {entered} sections entered, {exits} completed, {kills} dirlock wrappers SIGKILLed");
    assert!(
        kills > 3 && exits > 20,
        "too little happened to prove anything"
    );
}
