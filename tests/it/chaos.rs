//! Layer 3: mutual exclusion under chaos, with real processes. Workers loop `dirlock run
//! --wait -- sh section.sh`; some run under strace, which SIGKILLs them at a named point of the
//! protocol (mid-stage, publish, retire, reap, the guard); a killer SIGKILLs random holders,
//! waiters and sections. Each critical section takes an exclusive occupancy marker (link(2)), does a
//! read-modify-write of a counter and logs `enter`/`exit` lines with O_APPEND, so the log's
//! order is the real order. Expect: no overlap, the counter equal to the completed sections
//! (give or take sections killed between their increment and their exit line), and a lock
//! that is free again, with nothing left to sweep, once the killing stops.

use crate::common::*;
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The critical section. `$1` is the work directory.
pub(crate) const SECTION: &str = r#"
cd "$1" || exit 99
echo "enter $$" >> log
# The occupancy marker appears with its content already in it: link(2) fails with EEXIST like
# O_CREAT|O_EXCL, so a marker is never seen empty.
echo $$ > "mine.$$"
if ! ln "mine.$$" occupied 2>/dev/null; then
  # A marker is there: fine only if its section is dead (killed inside). It may also vanish
  # under us: the last `rm` of a killed section, orphaned, ran on (holding the beacon it
  # inherited, so the lock stayed held until it ended).
  # A SIGKILLed section closes its files (the beacon) before it turns zombie: give a dying
  # process a moment; a live one stays alive.
  p=$(cat occupied 2>/dev/null)
  if [ -n "$p" ]; then
    i=0
    while s=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ] && [ $i -lt 100 ]; do
      sleep 0.01; i=$((i + 1))
    done
    if [ $i -ge 100 ]; then echo "overlap $$ $p" >> log; fi
  fi
  rm -f occupied
  ln "mine.$$" occupied 2>/dev/null || echo "overlap $$ marker" >> log
fi
rm -f "mine.$$"
n=$(cat counter 2>/dev/null || echo 0)
echo $((n + 1)) > counter.$$ && mv counter.$$ counter
echo "exit $$ $((n + 1))" >> log
rm -f occupied
"#;

/// strace fault points: SIGKILL `dirlock run` at the N-th call of a syscall.
const FAIL_POINTS: &[(&str, &str)] = &[
    ("mid-stage", "inject=mkdirat:signal=SIGKILL:when=2"),
    ("beacon", "inject=flock:signal=SIGKILL:when=1"),
    ("record-sync", "inject=fsync:signal=SIGKILL:when=1"),
    ("publish", "inject=renameat2:signal=SIGKILL:when=1"),
    ("retire", "inject=renameat2:signal=SIGKILL:when=2"),
    ("reap", "inject=unlinkat:signal=SIGKILL:when=1"),
    ("guard", "inject=mkdirat:signal=SIGKILL:when=3"),
];

/// A whole number from the environment (soak settings), or `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Outcome {
    sections: u64,
    kills: u64,
    fail_points: u64,
}

fn chaos(base: &Path, workers: usize, run_for: Duration) -> Outcome {
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let locks = base.join("locks");
    let script = base.join("section.sh");
    std::fs::write(&script, SECTION).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let running: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let fail_points = Arc::new(AtomicU64::new(0));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let strace = Command::new("strace").arg("-V").output().is_ok();
    let deadline = Instant::now() + run_for;
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (stop, running, fail_points, failures) = (
                stop.clone(),
                running.clone(),
                fail_points.clone(),
                failures.clone(),
            );
            let (locks, work, script) = (locks.clone(), work.clone(), script.clone());
            std::thread::spawn(move || {
                let mut round = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    round += 1;
                    // Every fourth run of every other worker dies at a named point.
                    let point = (strace && w % 2 == 1 && round % 4 == 0)
                        .then(|| FAIL_POINTS[(w + round) % FAIL_POINTS.len()]);
                    let mut cmd = match point {
                        Some((_, inject)) => {
                            let mut c = Command::new("strace");
                            c.args([
                                "-qq",
                                "-o",
                                "/dev/null",
                                "-e",
                                "trace=none",
                                "-e",
                                inject,
                                BIN,
                            ]);
                            c
                        }
                        None => Command::new(BIN),
                    };
                    cmd.args(["run", "-q", "--wait", "--dir"])
                        .arg(&locks)
                        .args(["--lock", "chaos.lock", "--", "sh"])
                        .arg(&script)
                        .arg(&work)
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped());
                    // A group of its own: whatever outlives the wrapper (a stopped strace
                    // child the killer orphaned, say) is killed with the group once it ends.
                    let Ok(mut child) =
                        std::os::unix::process::CommandExt::process_group(&mut cmd, 0).spawn()
                    else {
                        continue;
                    };
                    let id = child.id();
                    running.lock().unwrap().insert(id);
                    let status = child.wait().unwrap();
                    running.lock().unwrap().remove(&id);
                    kill_group(id);
                    let mut stderr = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
                    }
                    if point.is_some() && status.code().is_none() {
                        fail_points.fetch_add(1, Ordering::SeqCst);
                    }
                    // Success, a section killed (137) or signalled (130, 143), or the wrapper
                    // itself killed: anything else is an acquisition that failed.
                    if !matches!(status.code(), None | Some(0 | 130 | 137 | 143)) {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{status}: {}", stderr.trim_end()));
                    }
                }
            })
        })
        .collect();
    // The killer: SIGKILL a random `dirlock run` (holder or waiter) or the section in progress.
    let mut kills = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(15 + rng % 40));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let victim = if rng % 3 == 0 {
            std::fs::read_to_string(work.join("occupied"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok())
        } else {
            let r = running.lock().unwrap();
            r.iter().nth((rng as usize / 3) % r.len().max(1)).copied()
        };
        // Mostly SIGKILL; one time in four a wrapper gets SIGINT or SIGTERM instead (a waiting
        // one abandons its wait, a running one passes it to its section).
        let signal = if rng % 3 != 0 && rng % 4 == 1 {
            if rng % 8 == 1 {
                "-INT"
            } else {
                "-TERM"
            }
        } else {
            "-KILL"
        };
        if let Some(pid) = victim {
            if Command::new("kill")
                .args([signal, &pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
            {
                kills += 1;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} runs failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    // Sections of killed wrappers may still be running: they hold the lock until they end.
    let out = Command::new(BIN)
        .args(["run", "-q", "--timeout", "30", "--dir"])
        .arg(&locks)
        .args(["--lock", "chaos.lock", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the lock is wedged: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (entered, exits) = check_log(&work);
    let counter: u64 = std::fs::read_to_string(work.join("counter"))
        .map(|c| c.trim().parse().unwrap())
        .unwrap_or(0);
    let killed_sections = entered - exits;
    assert!(counter >= exits && counter <= exits + killed_sections, "counter {counter}, {exits} completed sections, {killed_sections} killed: a lost update means two were inside");
    // Nothing is left that a sweep cannot remove once every process is gone.
    let out = Command::new(BIN)
        .args(["sweep", "--grace", "0", "--dir"])
        .arg(&locks)
        .output()
        .unwrap();
    assert!(out.status.success());
    let left: Vec<String> = std::fs::read_dir(&locks)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".candidate.") || n.contains(".tombstone."))
        .collect();
    assert!(
        left.is_empty(),
        "left after sweep: {left:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    Outcome {
        sections: exits,
        kills,
        fail_points: fail_points.load(Ordering::SeqCst),
    }
}

/// Checks a sections log (I1): no section saw another inside, and between an `enter` and the
/// next `enter` only the first section's `exit` appears (a section killed inside has none).
/// Returns (sections entered, sections completed).
pub(crate) fn check_log(work: &Path) -> (u64, u64) {
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

fn report(place: &str, o: &Outcome) {
    eprintln!(
        "chaos on {place}: {} sections completed, {} processes SIGKILLed, {} killed at fail points",
        o.sections, o.kills, o.fail_points
    );
}

#[test]
fn chaos_on_tmpfs() {
    let base = tempfile::tempdir_in("/dev/shm").unwrap();
    let o = chaos(base.path(), 8, Duration::from_secs(3));
    report("tmpfs", &o);
    assert!(
        o.sections > 20 && o.kills > 5,
        "too little happened to prove anything"
    );
}

#[test]
fn chaos_on_disk() {
    let base = tempfile::tempdir().unwrap();
    let o = chaos(base.path(), 8, Duration::from_secs(3));
    report("disk", &o);
    assert!(
        o.sections > 20 && o.kills > 5,
        "too little happened to prove anything"
    );
}

/// On a FUSE mount without `RENAME_NOREPLACE` (bindfs): the plain-rename fallback, verified by
/// inode, under the same chaos; a lock vanishing under contention is ordinary contention there
/// too (no `run` fails).
#[test]
fn chaos_on_fuse() {
    let Some(fuse) = Fuse::mount("chaos::chaos_on_fuse") else {
        return;
    };
    let o = chaos(&fuse.path(), 8, Duration::from_secs(3));
    report("FUSE (bindfs)", &o);
    assert!(
        o.sections > 20 && o.kills > 5,
        "too little happened to prove anything"
    );
    let o = library_chaos(&fuse.path(), 6, Duration::from_secs(2));
    eprintln!(
        "library chaos on FUSE: {} acquisitions, {} workers SIGKILLed",
        o.sections, o.kills
    );
}

#[test]
#[ignore = "soak: CHAOS_SECS=600 cargo test --release --test it chaos_soak -- --ignored --nocapture"]
fn chaos_soak() {
    let secs = env_u64("CHAOS_SECS", 300);
    for (place, base) in [
        ("tmpfs", tempfile::tempdir_in("/dev/shm").unwrap()),
        ("disk", tempfile::tempdir().unwrap()),
    ] {
        let o = chaos(base.path(), 16, Duration::from_secs(secs / 2));
        report(place, &o);
    }
}

/// A million acquisitions and more: `CHAOS_SECS=900 CHAOS_KILL_MS=1 cargo test --release --test
/// it library_chaos_soak -- --ignored --nocapture` (half the time on tmpfs, half on disk).
#[test]
#[ignore = "soak: CHAOS_SECS=900 CHAOS_KILL_MS=1 cargo test --release --test it library_chaos_soak -- --ignored --nocapture"]
fn library_chaos_soak() {
    let secs = env_u64("CHAOS_SECS", 300);
    let (mut total, mut holders) = (0, 0);
    for (place, base) in [
        ("tmpfs", tempfile::tempdir_in("/dev/shm").unwrap()),
        ("disk", tempfile::tempdir().unwrap()),
    ] {
        let o = library_chaos(base.path(), 16, Duration::from_secs(secs / 2));
        eprintln!(
            "library chaos on {place}: {} acquisitions, {} workers SIGKILLed, {} of them holders ({:.2}% of acquisitions)",
            o.sections,
            o.kills,
            o.fail_points,
            o.fail_points as f64 * 100.0 / o.sections.max(1) as f64
        );
        total += o.sections;
        holders += o.fail_points;
    }
    eprintln!("library chaos soak: {total} acquisitions, {holders} holders killed");
}

#[test]
fn library_chaos_short() {
    let base = tempfile::tempdir_in("/dev/shm").unwrap();
    let o = library_chaos(base.path(), 8, Duration::from_secs(2));
    eprintln!(
        "library chaos: {} acquisitions, {} workers SIGKILLed, {} of them holders",
        o.sections, o.kills, o.fail_points
    );
    assert!(
        o.sections > 100 && o.kills > 5,
        "too little happened to prove anything"
    );
}

/// A worker process (this test binary, re-executed): acquire, critical section, release, until
/// the stop file appears. Does nothing when run as an ordinary test.
#[test]
#[ignore = "a worker of library_chaos, started by it"]
fn chaos_worker() {
    let Some(work) = std::env::var_os("CHAOS_WORKER_DIR").map(std::path::PathBuf::from) else {
        return;
    };
    use std::io::Write;
    let locks = dirlock::Locks::in_dir(work.join("locks")).unwrap();
    let me = std::process::id();
    let log = |line: String| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(work.join("log"))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    };
    while !work.join("stop").exists() {
        let g = locks
            .named_lock("soak.lock")
            .wait(dirlock::Wait::Forever)
            .durable(false)
            .acquire()
            .unwrap();
        log(format!("enter {me}\n"));
        let marker = work.join("occupied");
        let mine = work.join(format!("mine.{me}"));
        std::fs::write(&mine, me.to_string()).unwrap();
        if std::fs::hard_link(&mine, &marker).is_err() {
            // Fine only if the marker's section is dead (killed inside).
            if let Ok(p) = std::fs::read_to_string(&marker) {
                // A SIGKILLed holder closes its files (releasing its beacon, so the lock is
                // rightly ours at once) before it turns zombie: give a dying process a moment;
                // a live one (a real overlap) stays alive.
                let alive = || {
                    let state = std::fs::read_to_string(format!("/proc/{p}/stat")).ok();
                    state
                        .as_deref()
                        .and_then(|s| s.rsplit(')').next())
                        .is_some_and(|r| !r.trim_start().starts_with('Z'))
                };
                let settled = (0..100).any(|_| {
                    let dead = !alive();
                    if !dead {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    dead
                });
                if !settled {
                    log(format!("overlap {me} {p}\n"));
                }
            }
            let _ = std::fs::remove_file(&marker);
            if std::fs::hard_link(&mine, &marker).is_err() {
                log(format!("overlap {me} marker\n"));
            }
        }
        let _ = std::fs::remove_file(&mine);
        let n: u64 = std::fs::read_to_string(work.join("counter"))
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0);
        let tmp = work.join(format!("counter.{me}"));
        std::fs::write(&tmp, (n + 1).to_string()).unwrap();
        #[allow(clippy::disallowed_methods)]
        std::fs::rename(&tmp, work.join("counter")).unwrap();
        log(format!("exit {me} {}\n", n + 1));
        let _ = std::fs::remove_file(&marker);
        g.release().unwrap();
    }
}

/// Library workers in real processes, SIGKILLed at random and respawned.
fn library_chaos(base: &Path, workers: usize, run_for: Duration) -> Outcome {
    let work = base.join("lib-work");
    std::fs::create_dir_all(&work).unwrap();
    let spawn = || {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "chaos::chaos_worker", "--ignored", "--quiet"])
            .env("CHAOS_WORKER_DIR", &work)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut children: Vec<std::process::Child> = (0..workers).map(|_| spawn()).collect();
    let deadline = Instant::now() + run_for;
    // Kill every `ms` (random in [ms, 4 ms)): three times in four the holder (the pid in the
    // lock's record, looked for a few times: the lock is often between holders), otherwise any
    // worker (most are waiting).
    let ms = env_u64("CHAOS_KILL_MS", 10);
    let (mut kills, mut holder_kills) = (0u64, 0u64);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    // No wedges: the log must keep growing. A crashed holder or reclaimer is proven dead by
    // the kernel, so a stall of seconds (the grace period is a minute) means one.
    let log_len = || std::fs::metadata(work.join("log")).map_or(0, |m| m.len());
    let (mut last_len, mut last_growth, mut longest_stall) = (0, Instant::now(), Duration::ZERO);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(ms + rng % (3 * ms)));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = log_len();
        if len != last_len {
            (last_len, last_growth) = (len, Instant::now());
        }
        longest_stall = longest_stall.max(last_growth.elapsed());
        let holder = (rng % 4 != 0)
            .then(|| {
                (0..20).find_map(|_| {
                    let found = std::fs::read(work.join("locks/soak.lock/owner.json"))
                        .ok()
                        .and_then(|r| dirlock::Owner::parse(&r).ok())
                        .and_then(|o| children.iter().position(|c| c.id() == o.pid));
                    if found.is_none() {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    found
                })
            })
            .flatten();
        let i = holder.unwrap_or((rng as usize / 2) % children.len());
        children[i].kill().unwrap();
        children[i].wait().unwrap();
        kills += 1;
        holder_kills += u64::from(holder.is_some());
        children[i] = spawn();
    }
    assert!(
        longest_stall < Duration::from_secs(10),
        "I7: no acquisition for {longest_stall:?} (a wedge)"
    );
    std::fs::write(work.join("stop"), "").unwrap();
    for mut c in children {
        let status = c.wait().unwrap();
        assert!(status.success(), "a worker failed: {status}");
    }
    let (entered, exits) = check_log(&work);
    let counter: u64 = std::fs::read_to_string(work.join("counter"))
        .map(|c| c.trim().parse().unwrap())
        .unwrap_or(0);
    assert!(
        counter >= exits && counter <= entered,
        "counter {counter}, {exits} completed, {entered} entered"
    );
    Outcome {
        sections: exits,
        kills,
        fail_points: holder_kills,
    }
}
