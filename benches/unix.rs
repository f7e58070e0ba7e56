//! The Unix benchmarks (see `locks.rs`).

use dirlock::{Locks, Wait};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::{median, pct, quick};

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

struct Place {
    name: &'static str,
    root: tempfile::TempDir,
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

fn fresh(dir: &Path, name: &str) -> PathBuf {
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

/// CPU time of the calling thread, in microseconds.
fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

/// Where the handoff's two threads run: where the scheduler puts them (it wakes the waiter on
/// the releasing thread's CPU), or pinned to CPUs 0 (holder) and 1 (waiter).
static APART: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pins the calling thread to `cpu`, or lets it run anywhere (`None`).
fn pin(cpu: Option<usize>) {
    // SAFETY: `set` is a plain bitmask, filled by the libc helpers and passed by pointer with
    // its size; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        // All online CPUs (not `available_parallelism`, which a pinned thread sees as 1).
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        for c in 0..n {
            if cpu.is_none_or(|p| p == c) {
                libc::CPU_SET(c, &mut set);
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Opens directory `name` in `at`.
fn at_open(at: &File, name: &std::ffi::CStr) -> File {
    // SAFETY: `at` is an open directory and `name` NUL-terminated; the new descriptor is ours.
    let fd = unsafe {
        libc::openat(
            at.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    assert!(fd >= 0, "openat: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened and is owned by nobody else.
    unsafe { File::from_raw_fd(fd) }
}

/// Makes directory `name` in `at` (mode 0700) and opens it.
fn at_mkdir_open(at: &File, name: &std::ffi::CStr) -> File {
    // SAFETY: `at` is an open directory and `name` NUL-terminated.
    assert_eq!(
        unsafe { libc::mkdirat(at.as_raw_fd(), name.as_ptr(), 0o700) },
        0
    );
    at_open(at, name)
}

/// `renameat2(RENAME_NOREPLACE)` within `at`.
fn at_rename(at: &File, from: &std::ffi::CStr, to: &std::ffi::CStr) {
    // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            at.as_raw_fd(),
            from.as_ptr(),
            at.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(r, 0, "renameat2: {}", std::io::Error::last_os_error());
}

/// A waiter thread blocks on the lock; the holder releases; the time from the start of the
/// release to the waiter holding it. Returns (median µs, p99 µs, waiter CPU µs per wait).
fn handoff<H, W>(
    rounds: usize,
    hold: impl Fn() -> H + Sync,
    release: impl Fn(H) + Sync,
    wait: impl Fn() -> W + Sync,
    done: impl Fn(W) + Sync,
) -> (f64, f64, f64)
where
    H: Send,
    W: Send,
{
    let mut lat = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..rounds {
        let h = hold();
        let ready = Barrier::new(2);
        let (t_acquired, cpu_used) = std::thread::scope(|s| {
            let apart = APART.load(std::sync::atomic::Ordering::Relaxed);
            if apart {
                pin(Some(0));
            }
            let (wait, done, ready) = (&wait, &done, &ready);
            let waiter = s.spawn(move || {
                if apart {
                    pin(Some(1));
                }
                ready.wait();
                let c0 = thread_cpu_us();
                let w = wait();
                let t = Instant::now();
                let used = thread_cpu_us() - c0;
                done(w);
                (t, used)
            });
            ready.wait();
            // Let the waiter block in the kernel.
            std::thread::sleep(Duration::from_millis(20));
            let t0 = Instant::now();
            release(h);
            let (t, used) = waiter.join().unwrap();
            if apart {
                pin(None);
            }
            (t.duration_since(t0), used)
        });
        lat.push(t_acquired.as_secs_f64() * 1e6);
        cpu.push(cpu_used);
    }
    (median(&mut lat), pct(&mut lat, 0.99), median(&mut cpu))
}

fn handoffs(places: &[Place]) {
    let rounds = if quick() { 30 } else { 200 };
    println!("\n### Handoff: a blocked waiter gets the lock (µs from the start of release; waiter CPU while blocked ~20 ms)\n");
    println!(
        "| lock | place | threads | median | p99 | waiter CPU per wait |\n| --- | --- | --- | ---: | ---: | ---: |"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for p in places {
        let d = p.root.path();
        for apart in [false, true] {
            if apart && cpus < 2 {
                continue;
            }
            APART.store(apart, std::sync::atomic::Ordering::Relaxed);
            let threads = if apart {
                "pinned apart"
            } else {
                "as scheduled"
            };
            let row = |lock: &str, (m, p99, c): (f64, f64, f64)| {
                println!(
                    "| {lock} | {} | {threads} | {m:.0} | {p99:.0} | {c:.0} µs |",
                    p.name
                );
            };
            let file = fresh(d, "hf").join("f");
            File::create(&file).unwrap();
            let flock = || {
                let f = File::open(&file).unwrap();
                f.lock().unwrap();
                f
            };
            row("flock", handoff(rounds, flock, drop, flock, drop));
            // The protocol's own floor: the holder renames the lock away and unlocks its
            // beacon; the waiter, its candidate staged and locked, sleeps in flock on the
            // holder's directory and renames its candidate in. No checks, no records.
            let fd = fresh(d, "hfloor");
            // Directory-relative calls, as dirlock makes them.
            let at = File::open(&fd).unwrap();
            let serial = std::sync::atomic::AtomicU64::new(0);
            let take = |wait: bool| {
                let n = serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let cand = std::ffi::CString::new(format!("x.lock.candidate.{n}")).unwrap();
                let beacon = at_mkdir_open(&at, &cand);
                beacon.lock().unwrap();
                // The waiter keeps the old directory open past its rename (its final close,
                // an inode eviction on disk, stays off the critical path, as in dirlock).
                let seen = wait.then(|| {
                    let old = at_open(&at, c"x.lock");
                    old.lock_shared().unwrap();
                    old
                });
                at_rename(&at, &cand, c"x.lock");
                (beacon, n, seen)
            };
            let give = |(beacon, n, _seen): (File, u64, Option<File>)| {
                let tomb = std::ffi::CString::new(format!("x.lock.tombstone.{n}")).unwrap();
                at_rename(&at, c"x.lock", &tomb);
                beacon.unlock().unwrap();
                drop(beacon);
                // SAFETY: `at` is an open directory and `tomb` a NUL-terminated name in it.
                unsafe { libc::unlinkat(at.as_raw_fd(), tomb.as_ptr(), libc::AT_REMOVEDIR) };
            };
            row(
                "floor: rename away, unlock; rename in",
                handoff(rounds, || take(false), give, || take(true), give),
            );
            let locks = Locks::in_dir(fresh(d, "handoff")).unwrap();
            for (lock, deadline) in [
                ("**dirlock** (no deadline: flock)", None),
                (
                    "**dirlock** (with a deadline: inotify)",
                    Some(Duration::from_secs(60)),
                ),
            ] {
                let wait = || {
                    let req = locks.named_lock("h.lock").durable(false);
                    match deadline {
                        Some(t) => req.wait(t),
                        None => req.wait(Wait::Forever),
                    }
                    .acquire()
                    .unwrap()
                };
                let hold = || locks.named_lock("h.lock").durable(false).acquire().unwrap();
                let release = |g: dirlock::LockGuard| g.release().unwrap();
                row(lock, handoff(rounds, hold, release, wait, release));
            }
            if !apart {
                let dl = fresh(d, "hdl").join("x.lock");
                let dl_rounds = if quick() { 3 } else { 10 };
                let take = || dir_lock::DirLock::new_sync(&dl).unwrap();
                row("dir-lock 0.5", handoff(dl_rounds, take, drop, take, drop));
            }
        }
    }
    APART.store(false, std::sync::atomic::Ordering::Relaxed);
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
        handoffs(&places);
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
