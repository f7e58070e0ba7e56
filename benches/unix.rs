//! The Unix benchmarks (see `locks.rs`).

use dirlock::{Locks, Wait};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::quick;

/// [`super::per_cycle`] in batches of 50.
fn per_cycle(budget: Duration, cycle: impl FnMut()) -> f64 {
    super::per_cycle(budget, 50, cycle)
}

/// The floor: the bare system calls of one dirlock cycle, no identity, no JSON, no checks
/// beyond what the calls themselves do. mkdir, open, flock, create, write, [fsync, fsync],
/// close, rename (publish); stat, rename (retire), stat, unlink, close, rmdir.
fn floor_cycle(dir: &Path, durable: bool) {
    let cand = dir.join("f.lock.candidate.x");
    fs::DirBuilder::new().mode(0o700).create(&cand).unwrap();
    let beacon = File::open(&cand).unwrap();
    beacon.lock().unwrap();
    let mut rec = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(cand.join("owner.json"))
        .unwrap();
    rec.write_all(br#"{"pid":1,"token":"00000000-0000-4000-8000-000000000000"}"#)
        .unwrap();
    if durable {
        rec.sync_all().unwrap();
        beacon.sync_all().unwrap();
    }
    drop(rec);
    let lock = dir.join("f.lock");
    #[expect(
        clippy::disallowed_methods,
        reason = "the bare-syscall baseline renames and removes by hand"
    )]
    fs::rename(&cand, &lock).unwrap();
    let _ = fs::symlink_metadata(&lock).unwrap();
    let tomb = dir.join("f.lock.tombstone.x");
    #[expect(
        clippy::disallowed_methods,
        reason = "the bare-syscall baseline renames and removes by hand"
    )]
    fs::rename(&lock, &tomb).unwrap();
    let _ = fs::symlink_metadata(&tomb).unwrap();
    fs::remove_file(tomb.join("owner.json")).unwrap();
    drop(beacon);
    #[expect(
        clippy::disallowed_methods,
        reason = "the bare-syscall baseline renames and removes by hand"
    )]
    fs::remove_dir(&tomb).unwrap();
}

pub(crate) struct Place {
    pub(crate) name: &'static str,
    pub(crate) root: tempfile::TempDir,
}

fn places() -> Vec<Place> {
    let disk = std::env::var("BENCH_DISK").unwrap_or_else(|_| "/var/tmp".into());
    vec![
        Place {
            name: "tmpfs",
            root: tempfile::tempdir_in("/dev/shm").unwrap(),
        },
        Place {
            name: "disk",
            root: tempfile::tempdir_in(disk).unwrap(),
        },
    ]
}

pub(crate) fn fresh(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    fs::create_dir_all(&p).unwrap();
    fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    p
}

fn uncontended(places: &[Place]) {
    let budget = Duration::from_millis(if quick() { 150 } else { 600 });
    println!("\n### Uncontended acquire + release (µs per cycle, median of 50-cycle batches)\n");
    println!("| lock | tmpfs | disk |\n| --- | ---: | ---: |");
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&Path) -> f64| {
        let v = places.iter().map(|p| f(p.root.path())).collect();
        rows.push((label.to_owned(), v));
    };
    row("flock, kept file (kernel floor)", &|d| {
        let f = File::create(fresh(d, "k").join("f")).unwrap();
        per_cycle(budget, || {
            f.lock().unwrap();
            f.unlock().unwrap();
        })
    });
    row("flock, freshly opened file", &|d| {
        let p = fresh(d, "o").join("f");
        File::create(&p).unwrap();
        per_cycle(budget, || {
            let f = File::open(&p).unwrap();
            f.lock().unwrap();
            f.unlock().unwrap();
        })
    });
    for durable in [false, true] {
        let tag = if durable { "durable" } else { "not durable" };
        row(&format!("floor: bare syscalls, {tag}"), &|d| {
            let dir = fresh(d, &format!("floor-{durable}"));
            per_cycle(budget, || floor_cycle(&dir, durable))
        });
        row(&format!("**dirlock**, {tag}"), &|d| {
            let locks = Locks::in_dir(d.join(format!("dirlock-{durable}"))).unwrap();
            per_cycle(budget, || {
                locks
                    .named_lock("b.lock")
                    .durable(durable)
                    .acquire()
                    .unwrap()
                    .release()
                    .unwrap();
            })
        });
    }
    row("dir-lock 0.5", &|d| {
        let p = fresh(d, "dl").join("x.lock");
        per_cycle(budget, || drop(dir_lock::DirLock::new_sync(&p).unwrap()))
    });
    for (label, v) in &rows {
        println!("| {label} | {:.1} | {:.1} |", v[0], v[1]);
    }
    // Ratios in the same run: dirlock against the floor at the same durability.
    let find = |l: &str| rows.iter().find(|r| r.0 == l).map(|r| r.1.clone()).unwrap();
    for durable in ["not durable", "durable"] {
        let (d, f) = (
            find(&format!("**dirlock**, {durable}")),
            find(&format!("floor: bare syscalls, {durable}")),
        );
        println!(
            "\ndirlock / floor, {durable}: {:.2}x on tmpfs, {:.2}x on disk",
            d[0] / f[0],
            d[1] / f[1]
        );
    }
}

/// `procs` processes each take the lock `each` times around a tiny critical section.
fn throughput(places: &[Place]) {
    let each = if quick() { 100 } else { 500 };
    println!("\n### Throughput: N processes × {each} acquisitions each, waiting (acquisitions per second; failures)\n");
    println!("| lock | place | 2 procs | 4 procs | 8 procs |\n| --- | --- | ---: | ---: | ---: |");
    let me = std::env::current_exe().unwrap();
    for p in places {
        for kind in ["flock", "dirlock"] {
            let dir = fresh(p.root.path(), &format!("tp-{kind}"));
            let mut cells = Vec::new();
            for procs in [2, 4, 8] {
                let t = Instant::now();
                let children: Vec<_> = (0..procs)
                    .map(|_| {
                        Command::new(&me)
                            .args(["--worker", kind])
                            .arg(&dir)
                            .arg(each.to_string())
                            .spawn()
                            .unwrap()
                    })
                    .collect();
                let failures = children
                    .into_iter()
                    .filter(|_| true)
                    .map(|mut c| !c.wait().unwrap().success())
                    .filter(|f| *f)
                    .count();
                let rate = (procs * each) as f64 / t.elapsed().as_secs_f64();
                cells.push(format!("{rate:.0}/s ({failures} failed)"));
            }
            let label = if kind == "dirlock" {
                "**dirlock**"
            } else {
                kind
            };
            println!("| {label} | {} | {} |", p.name, cells.join(" | "));
        }
    }
}

fn worker(kind: &str, dir: &Path, each: usize) {
    let counter = dir.join("counter");
    let section = || {
        let n: u64 = fs::read_to_string(&counter)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        fs::write(&counter, (n + 1).to_string()).unwrap();
    };
    match kind {
        "flock" => {
            for _ in 0..each {
                let f = File::create(dir.join("f")).unwrap();
                f.lock().unwrap();
                section();
                drop(f);
            }
        }
        _ => {
            let locks = Locks::in_dir(dir.join("locks")).unwrap();
            for _ in 0..each {
                let g = locks
                    .named_lock("t.lock")
                    .durable(false)
                    .wait(Wait::Forever)
                    .acquire()
                    .unwrap();
                section();
                g.release().unwrap();
            }
        }
    }
}

/// A lock-like directory (0700) holding an empty record (0600), as a neighbour or leftover.
fn plant_entry(e: &Path) {
    fs::DirBuilder::new().mode(0o700).create(e).unwrap();
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(e.join("owner.json"))
        .unwrap();
}

/// Acquire + release with many other entries in the directory, and a sweep of 100,000.
fn scale(places: &[Place]) {
    let big = if std::env::var("BENCH_SCALE").as_deref() == Ok("0") || quick() {
        10_000
    } else {
        100_000
    };
    let budget = Duration::from_millis(if quick() { 150 } else { 500 });
    println!("\n### Scale: acquire + release (not durable) with N other entries in the lock directory (µs per cycle)\n");
    println!("| place | 1 | 1,000 | {big} | ratio |\n| --- | ---: | ---: | ---: | ---: |");
    for p in places {
        let mut cells = Vec::new();
        for n in [1usize, 1000, big] {
            let dir = fresh(p.root.path(), &format!("scale-{n}"));
            // Half other locks, half leftover tombstones.
            for i in 0..n {
                let name = if i % 2 == 0 {
                    format!("n{i}.lock")
                } else {
                    format!("n{i}.lock.tombstone.x")
                };
                plant_entry(&dir.join(name));
            }
            let locks = Locks::in_dir(&dir).unwrap();
            cells.push(per_cycle(budget, || {
                locks
                    .named_lock("s.lock")
                    .durable(false)
                    .acquire()
                    .unwrap()
                    .release()
                    .unwrap();
            }));
        }
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.2}x |",
            p.name,
            cells[0],
            cells[1],
            cells[2],
            cells[2] / cells[0]
        );
    }
    println!("\n### Sweep of {big} leftover tombstones\n");
    println!("| place | seconds | µs per tombstone |\n| --- | ---: | ---: |");
    for p in places {
        let dir = fresh(p.root.path(), "sweep");
        for i in 0..big {
            plant_entry(&dir.join(format!("n.lock.tombstone.{i}")));
        }
        let locks = Locks::in_dir(&dir).unwrap();
        let t = Instant::now();
        let report = locks.sweep(Duration::ZERO).unwrap();
        let s = t.elapsed().as_secs_f64();
        assert_eq!(report.removed.len(), big);
        println!("| {} | {s:.2} | {:.1} |", p.name, s * 1e6 / big as f64);
    }
}

pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = || Path::new(&args[2]);
    match args.get(1).map(String::as_str) {
        Some("--worker") => return worker(&args[2], Path::new(&args[3]), args[4].parse().unwrap()),
        Some("--reader") => return super::shared::reader(&args[2], Path::new(&args[3])),
        Some("--turn-worker") => return super::turns::worker(&args[2..]),
        Some("--hold") => return super::tasks::hold(dir()),
        Some("--once") => {
            return super::tasks::once(dir(), args.get(3).is_some_and(|a| a == "async"))
        }
        Some("--contend") => {
            return super::tasks::contend(dir(), &args[3], args[4].parse().unwrap())
        }
        _ => {}
    }
    if args.get(1).map(String::as_str) == Some("--cycles") {
        // For `strace -c`: N uncontended cycles and nothing else.
        let locks = Locks::in_dir(&args[2]).unwrap();
        let durable = args[4] == "durable";
        for _ in 0..args[3].parse::<u32>().unwrap() {
            let req = locks.named_lock("c.lock").durable(durable);
            let shared = args.get(5).is_some_and(|a| a == "shared");
            if shared { req.shared() } else { req }
                .acquire()
                .unwrap()
                .release()
                .unwrap();
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("--handoffs") {
        // For two builds in turn: ROUNDS handoffs between two threads in DIR, the waiter with
        // a deadline (it sleeps in poll) or none (in flock), and the median.
        let locks = Locks::in_dir(&args[2]).unwrap();
        let wait = match args.get(4).map(String::as_str) {
            Some("deadline") => Wait::Timeout(Duration::from_secs(60)),
            _ => Wait::Forever,
        };
        let take = |w: Wait| {
            locks
                .named_lock("h.lock")
                .durable(false)
                .wait(w)
                .acquire()
                .unwrap()
        };
        let release = |g: dirlock::LockGuard| g.release().unwrap();
        let rounds = args[3].parse().unwrap();
        let (median, p99, _) = super::handoff::handoff(
            rounds,
            || take(Wait::Immediately),
            release,
            || take(wait),
            release,
        );
        println!("handoff median {median:.0} µs, p99 {p99:.0} µs");
        return;
    }
    if !super::measuring() {
        return;
    }
    let places = places();
    println!(
        "## dirlock benchmarks ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // `cargo bench -- handoff scale` runs only the sections named.
    let only: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let want = |section: &str| only.is_empty() || only.iter().any(|o| section.contains(o.as_str()));
    if want("uncontended") {
        uncontended(&places);
    }
    if want("handoff") {
        super::handoff::handoffs(&places);
    }
    if want("throughput") {
        throughput(&places);
    }
    if want("scale") {
        scale(&places);
    }
    if want("command") {
        super::command::run(
            &places
                .iter()
                .map(|p| (p.name, p.root.path()))
                .collect::<Vec<_>>(),
        );
    }
    super::tasks::run(&want);
    super::shared::run(&want);
    super::turns::run(&want);
}
