//! Layer 3: mutual exclusion under chaos, with real processes. Workers loop `dirlock run
//! --wait -- sh section.sh`; some run under strace, which SIGKILLs them at a named point of the
//! protocol (mid-stage, publish, retire, reap, the guard); a killer SIGKILLs random holders,
//! waiters and sections. Each critical section takes an exclusive occupancy marker (link(2)), does a
//! read-modify-write of a counter and logs `enter`/`exit` lines with O_APPEND, so the log's
//! order is the real order. Expect: no overlap, the counter equal to the completed sections
//! (give or take sections killed between their increment and their exit line), and a lock
//! that is free again, with nothing left to sweep, once the killing stops.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
        let o = library_chaos(base.path(), 16, Duration::from_secs(secs / 2), 0);
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
    let o = library_chaos(base.path(), 8, Duration::from_secs(2), 101);
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
        std::fs::rename(&tmp, work.join("counter")).unwrap();
        log(format!("exit {me} {}\n", n + 1));
        let _ = std::fs::remove_file(&marker);
        g.release().unwrap();
    }
}

/// Library workers in real processes, SIGKILLed at random and respawned, for `run_for` and then
/// on until `min_sections` sections have completed (a loaded machine starts workers slowly), at
/// most ten times as long.
fn library_chaos(base: &Path, workers: usize, run_for: Duration, min_sections: u64) -> Outcome {
    let work = base.join("lib-work");
    std::fs::create_dir_all(&work).unwrap();
    let spawn = || {
        ChildGuard::spawn(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "chaos::chaos_worker", "--ignored", "--quiet"])
                .env("CHAOS_WORKER_DIR", &work)
                .stdout(Stdio::null())
                .stderr(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(work.join("stderr"))
                        .unwrap(),
                ),
        )
    };
    let mut children: Vec<ChildGuard> = (0..workers).map(|_| spawn()).collect();
    let clock = ChaosClock::new(&work, run_for, min_sections);
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
    let mut stall_seen = String::new();
    while clock.go_on() {
        std::thread::sleep(Duration::from_millis(ms + rng % (3 * ms)));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = log_len();
        if len != last_len {
            (last_len, last_growth) = (len, Instant::now());
        }
        if last_growth.elapsed() >= Duration::from_secs(10)
            && longest_stall < Duration::from_secs(10)
        {
            // What the lock directory looked like during the stall, for the failure message.
            stall_seen = dirlock::Locks::in_dir(work.join("locks"))
                .and_then(|l| l.statuses())
                .map(|s| format!("{s:#?}"))
                .unwrap_or_else(|e| e.to_string());
        }
        longest_stall = longest_stall.max(last_growth.elapsed());
        let holder = (rng % 4 != 0)
            .then(|| {
                (0..20).find_map(|_| {
                    let found = std::fs::read(work.join("locks/soak.lock/owner.json"))
                        .ok()
                        .and_then(|r| dirlock::Owner::parse(&r).ok())
                        .and_then(|o| children.iter().position(|c| c.0.id() == o.pid));
                    if found.is_none() {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    found
                })
            })
            .flatten();
        let i = holder.unwrap_or((rng as usize / 2) % children.len());
        children[i].0.kill().unwrap();
        children[i].0.wait().unwrap();
        kills += 1;
        holder_kills += u64::from(holder.is_some());
        children[i] = spawn();
    }
    assert!(
        longest_stall < Duration::from_secs(10),
        "I7: no acquisition for {longest_stall:?} (a wedge); the locks then: {stall_seen}"
    );
    std::fs::write(work.join("stop"), "").unwrap();
    for mut c in children {
        let status = c.0.wait().unwrap();
        assert!(
            status.success(),
            "a worker failed: {status}; what the workers said: {}",
            std::fs::read_to_string(work.join("stderr")).unwrap_or_default()
        );
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

/// The library chaos on a FUSE mount without `RENAME_NOREPLACE` (bindfs): no worker fails.
#[test]
fn library_chaos_on_fuse() {
    let Some(fuse) = Fuse::mount("chaos::library_chaos_on_fuse") else {
        return;
    };
    let o = library_chaos(&fuse.path(), 6, Duration::from_secs(2), 51);
    eprintln!(
        "library chaos on FUSE: {} acquisitions, {} workers SIGKILLed",
        o.sections, o.kills
    );
    assert!(
        o.sections > 50 && o.kills > 5,
        "too little happened to prove anything"
    );
}
