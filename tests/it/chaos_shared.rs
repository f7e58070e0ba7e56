//! Layer 3 for shared locks: readers and writers in real processes, SIGKILLed at random (the
//! reader the record names among them) and respawned. A writer's section holds an exclusive
//! marker and finds no live reader's; a reader's section holds a marker of its own and finds no
//! live writer's. Expect: no overlap, readers reading together, writers getting turns, and no
//! wedge (the log keeps growing).

use crate::common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether process `pid` still runs, giving a SIGKILLed one (which closes its files, so
/// releasing its locks, before it turns zombie) a moment to die.
fn lives(pid: &str) -> bool {
    (0..100).all(|_| {
        let a = lives_now(pid);
        if a {
            std::thread::sleep(Duration::from_millis(10));
        }
        a
    })
}

/// Live holders of the markers in `dir` other than `me`.
fn others(dir: &Path, me: u32) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| *n != me.to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A worker (this test binary, re-executed): a reader or a writer, taking the lock and running
/// its section until the stop file appears.
#[test]
#[ignore = "a worker of shared_chaos, started by it"]
fn shared_chaos_worker() {
    let Some(work) = std::env::var_os("SHARED_CHAOS_DIR").map(PathBuf::from) else {
        return;
    };
    let reader = std::env::var_os("SHARED_CHAOS_READER").is_some();
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
    let (readers, writers) = (work.join("readers"), work.join("writers"));
    while !work.join("stop").exists() {
        let mut req = locks
            .named_lock("rw.lock")
            .wait(dirlock::Wait::Forever)
            .durable(false);
        if reader {
            req = req.shared();
        }
        let g = req.acquire().unwrap();
        let (mine, theirs) = if reader {
            (&readers, &writers)
        } else {
            (&writers, &readers)
        };
        std::fs::write(mine.join(me.to_string()), "").unwrap();
        let kind = if reader { "read" } else { "write" };
        let mut seen = Vec::new();
        for p in others(theirs, me) {
            if lives(&p) {
                log(format!("overlap {kind} {me} {p}\n"));
            }
            let _ = std::fs::remove_file(theirs.join(&p));
        }
        if !reader {
            for p in others(&writers, me) {
                if lives(&p) {
                    log(format!("overlap writers {me} {p}\n"));
                }
                let _ = std::fs::remove_file(writers.join(&p));
            }
        } else {
            // Readers beside us (live ones): reading together.
            seen.extend(others(&readers, me).into_iter().filter(|p| lives_now(p)));
        }
        log(format!("{kind} {me} {}\n", seen.len()));
        std::thread::sleep(Duration::from_millis(2));
        let _ = std::fs::remove_file(mine.join(me.to_string()));
        g.release().unwrap();
    }
}

/// Whether process `pid` runs now (no waiting).
fn lives_now(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(str::to_owned))
        .is_some_and(|r| !r.trim_start().starts_with('Z'))
}

#[test]
fn readers_and_writers_under_sigkill() {
    let base = tempfile::tempdir_in("/dev/shm").unwrap();
    let work = base.path().join("work");
    for d in ["readers", "writers"] {
        std::fs::create_dir_all(work.join(d)).unwrap();
    }
    let spawn = |reader: bool| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "--exact",
            "chaos_shared::shared_chaos_worker",
            "--ignored",
            "--quiet",
            "--nocapture",
        ])
        .env("SHARED_CHAOS_DIR", &work)
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(work.join("stderr"))
                .unwrap(),
        );
        if reader {
            c.env("SHARED_CHAOS_READER", "1");
        }
        (ChildGuard::spawn(c), reader)
    };
    let mut children: Vec<(ChildGuard, bool)> = (0..8).map(|i| spawn(i % 4 != 0)).collect();
    let log_len = || std::fs::metadata(work.join("log")).map_or(0, |m| m.len());
    let (mut last_len, mut last_growth, mut stall) = (0, Instant::now(), Duration::ZERO);
    let (mut kills, mut named_kills, mut failed) = (0, 0, Vec::new());
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    // Four seconds, and on (a loaded machine starts workers slowly) until enough happened
    // to prove anything, at most half a minute more.
    let end = Instant::now() + Duration::from_secs(4);
    let enough = |kills: usize| kills > 20 && log_len() >= 2000;
    while Instant::now() < end || !enough(kills) && Instant::now() < end + Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20 + rng % 40));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = log_len();
        if len != last_len {
            (last_len, last_growth) = (len, Instant::now());
        }
        stall = stall.max(last_growth.elapsed());
        // Half the time the process the lock's record names (a reader, or a writer), else any.
        let named = (rng % 2 == 0)
            .then(|| {
                let r = std::fs::read(work.join("locks/rw.lock/owner.json")).ok()?;
                let o = dirlock::Owner::parse(&r).ok()?;
                children.iter().position(|c| c.0 .0.id() == o.pid)
            })
            .flatten();
        let i = named.unwrap_or((rng as usize / 2) % children.len());
        let reader = children[i].1;
        let _ = children[i].0 .0.kill(); // (it may have failed and exited: seen below)
        let status = children[i].0 .0.wait().unwrap();
        if status.code().is_some() {
            failed.push(status);
        }
        kills += 1;
        named_kills += usize::from(named.is_some());
        children[i] = spawn(reader);
    }
    std::fs::write(work.join("stop"), "").unwrap();
    for (mut c, _) in children {
        let status = c.0.wait().unwrap();
        if !status.success() {
            failed.push(status);
        }
    }
    assert!(
        failed.is_empty(),
        "workers failed ({failed:?}): {}",
        std::fs::read_to_string(work.join("stderr")).unwrap_or_default()
    );
    let log = std::fs::read_to_string(work.join("log")).unwrap();
    assert!(
        !log.contains("overlap"),
        "readers and writers overlapped:\n{log}"
    );
    let reads: Vec<usize> = log
        .lines()
        .filter_map(|l| l.strip_prefix("read "))
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    let writes = log.lines().filter(|l| l.starts_with("write ")).count();
    let together = reads.iter().filter(|n| **n > 0).count();
    eprintln!(
        "shared chaos: {} reads ({together} beside other readers), {writes} writes, {kills} kills ({named_kills} of the named holder), longest stall {stall:?}",
        reads.len()
    );
    assert!(stall < Duration::from_secs(10), "I7: a wedge of {stall:?}");
    assert!(
        writes > 5 && reads.len() > 20,
        "too little happened to prove anything"
    );
    assert!(together > 0, "readers never read together");
    assert!(kills > 20);
}
