//! The asynchronous acquisition's benchmarks (Unix, tmpfs): the uncontended cycle and the
//! handoff beside the blocking forms; a thousand tasks waiting on one thread beside a ticker
//! (its lateness, the thread count, the CPU while they wait, and the time until all have had
//! the lock, against a thousand blocking threads); and the herd: 1 to 200 waiting processes,
//! threads and tasks, the time per handoff until all have had the lock once.

use dirlock::{Locks, Wait};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::order::{now_ns, Turn};
use super::{median, pct, quick};

const LOCK: &str = "a.lock";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// CPU time of this process (user and system), in microseconds.
fn process_cpu_us() -> f64 {
    // SAFETY: `usage` is a valid out-pointer for getrusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// CPU time of the reaped children (user and system), in microseconds.
fn children_cpu_us() -> f64 {
    // SAFETY: `usage` is a valid out-pointer for getrusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// This process's thread count (Linux; 0 elsewhere).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim().parse().ok()))
        })
        .flatten()
        .unwrap_or(0)
}

/// Another process holding the lock until `release` (this bench binary with `--hold DIR`).
struct OtherHolder(Child);

impl OtherHolder {
    fn start(dir: &Path) -> OtherHolder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("--hold")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "held");
        OtherHolder(child)
    }

    /// Tells it to release; returns the instant it was told.
    fn release(mut self) -> Instant {
        let t = Instant::now();
        self.0.stdin.take().unwrap().write_all(b"\n").unwrap();
        self.0.wait().unwrap();
        t
    }
}

/// `--hold DIR`: takes the lock, says `held`, releases at a line on stdin.
pub fn hold(dir: &Path) {
    let guard = Locks::in_dir(dir)
        .unwrap()
        .named_lock(LOCK)
        .acquire()
        .unwrap();
    println!("held");
    std::io::stdout().flush().unwrap();
    std::io::stdin().read_line(&mut String::new()).unwrap();
    guard.release().unwrap();
}

/// `--once DIR [async]`: says `ready`, waits for the lock (blocking, or in a task), takes it
/// once, exits.
pub fn once(dir: &Path, asynchronous: bool) {
    let locks = Locks::in_dir(dir).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let req = locks.named_lock(LOCK).wait(Wait::Forever);
    let g = if asynchronous {
        runtime().block_on(req.acquire_async()).unwrap()
    } else {
        req.acquire().unwrap()
    };
    g.release().unwrap();
}

/// How long the contention section's two processes cycle.
pub(crate) fn contention_time() -> Duration {
    Duration::from_secs(if quick() { 1 } else { 10 })
}

/// `--contend DIR blocking|async|flock N`: says `ready`, and at a line on stdin, N threads (or
/// N tasks on one thread) take and release the lock (`flock`: the kernel's, on a file in
/// `DIR`, for comparison) for [`contention_time`]; prints how many acquisitions they made and
/// the longest wait, then (threads) each acquisition's [`Turn`], a line each, and an empty line.
pub fn contend(dir: &Path, kind: &str, n: usize) {
    let locks = Locks::in_dir(dir).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    std::io::stdin().read_line(&mut String::new()).unwrap();
    let end = Instant::now() + contention_time();
    let count = Arc::new(AtomicUsize::new(0));
    let longest = Arc::new(AtomicUsize::new(0));
    let turns = std::sync::Mutex::new(Vec::new());
    let left = move || end.saturating_duration_since(Instant::now());
    if kind == "async" {
        runtime().block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (locks, count, longest) = (locks.clone(), count.clone(), longest.clone());
                    tokio::spawn(async move {
                        while left() > Duration::ZERO {
                            let t0 = Instant::now();
                            let req = locks.named_lock(LOCK).wait(left());
                            if let Ok(g) = req.acquire_async().await {
                                longest.fetch_max(
                                    t0.elapsed().as_micros() as usize,
                                    Ordering::Relaxed,
                                );
                                g.release().unwrap();
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
    } else {
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    while left() > Duration::ZERO {
                        let (t0, since) = (Instant::now(), now_ns());
                        if kind == "flock" {
                            let f = std::fs::File::create(dir.join("flock")).unwrap();
                            f.lock().unwrap();
                            let taken = now_ns();
                            longest.fetch_max(t0.elapsed().as_micros() as usize, Ordering::Relaxed);
                            let letting_go = now_ns();
                            drop(f);
                            count.fetch_add(1, Ordering::Relaxed);
                            let turn = Turn {
                                who: 0,
                                since,
                                told: 0,
                                taken,
                                left: letting_go,
                            };
                            turns.lock().unwrap().push(turn);
                            continue;
                        }
                        // When it is told it waits (each telling probes the holder's lock
                        // once, as `dirlock run`'s "waiting for" line does).
                        let told = Arc::new(AtomicU64::new(0));
                        let tell = told.clone();
                        let req = locks.named_lock(LOCK).wait(left()).on_wait(move |_| {
                            let _ = tell.compare_exchange(0, now_ns(), SeqCst, SeqCst);
                        });
                        if let Ok(g) = req.acquire() {
                            let taken = now_ns();
                            longest.fetch_max(t0.elapsed().as_micros() as usize, Ordering::Relaxed);
                            let (told, letting_go) = (told.load(SeqCst), now_ns());
                            g.release().unwrap();
                            count.fetch_add(1, Ordering::Relaxed);
                            let turn = Turn {
                                who: 0,
                                since,
                                told,
                                taken,
                                left: letting_go,
                            };
                            turns.lock().unwrap().push(turn);
                        }
                    }
                });
            }
        });
    }
    println!(
        "{} {}",
        count.load(Ordering::Relaxed),
        longest.load(Ordering::Relaxed)
    );
    for t in turns.into_inner().unwrap() {
        println!("{} {} {} {}", t.since, t.told, t.taken, t.left);
    }
    println!();
}

/// Two processes contend for one lock, each with blocking threads or tasks: how many
/// acquisitions each makes (a waiter that publishes late would starve). A process's tasks
/// contend as one waiter (only the head of its queue publishes), so the baseline for 20 tasks
/// is one blocking thread.
fn contention(root: &Path) {
    let dir = fresh(root, "contention");
    let _ = Locks::in_dir(&dir).unwrap();
    println!(
        "\n### Contention: two processes cycle for {} s (acquisitions; the second's share)\n",
        contention_time().as_secs()
    );
    println!("| first | second | first's | second's | second's share |\n| --- | --- | ---: | ---: | ---: |");
    let pairs = [
        [("blocking", 20), ("blocking", 20)],
        [("async", 20), ("async", 20)],
        [("blocking", 1), ("async", 20)],
        [("blocking", 20), ("blocking", 1)],
        [("blocking", 20), ("async", 20)],
    ];
    for pair in pairs {
        let counts: Vec<f64> = contend_in_processes(&dir, &pair)
            .into_iter()
            .map(|r| r.0)
            .collect();
        let name = |(kind, n): (&str, usize)| match kind {
            "async" => format!("{n} tasks"),
            _ if n == 1 => "1 blocking thread".to_owned(),
            _ => format!("{n} blocking threads"),
        };
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} % |",
            name(pair[0]),
            name(pair[1]),
            counts[0],
            counts[1],
            100.0 * counts[1] / (counts[0] + counts[1]).max(1.0)
        );
    }
}

/// Starts one `--contend` process per `(kind, n)`, lets them go together, and returns what each
/// printed: its acquisitions, its longest single wait (µs), and its threads' turns.
pub(crate) fn contend_in_processes(
    dir: &Path,
    who: &[(&str, usize)],
) -> Vec<(f64, f64, Vec<Turn>)> {
    let me = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = who
        .iter()
        .map(|(kind, n)| {
            Command::new(&me)
                .args(["--contend".as_ref(), dir.as_os_str(), kind.as_ref()])
                .arg(n.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outs: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let mut out = BufReader::new(c.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            out
        })
        .collect();
    for c in &mut children {
        c.stdin.take().unwrap().write_all(b"\n").unwrap();
    }
    let results = outs
        .iter_mut()
        .enumerate()
        .map(|(who, o)| {
            let mut lines = (&mut *o).lines().map(Result::unwrap);
            let line = lines.next().unwrap();
            let mut f = line.split_whitespace().map(|x| x.parse::<f64>().unwrap());
            let (count, longest) = (f.next().unwrap(), f.next().unwrap());
            let turns = lines
                .take_while(|l| !l.is_empty())
                .map(|l| Turn::parse(who, &l))
                .collect();
            (count, longest, turns)
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    results
}

/// A lock directory's path under `root` (`Locks::in_dir` makes it, private).
fn fresh(root: &Path, name: &str) -> std::path::PathBuf {
    root.join(name)
}

/// The uncontended cycle and the handoff, `acquire_async` beside `acquire`.
fn cycle_and_handoff(root: &Path) {
    let rt = runtime();
    let locks = Locks::in_dir(fresh(root, "cycle")).unwrap();
    let budget = Duration::from_millis(if quick() { 150 } else { 600 });
    let blocking = super::per_cycle(budget, 50, || {
        locks.named_lock(LOCK).acquire().unwrap().release().unwrap();
    });
    let asynchronous = super::per_cycle(budget, 50, || {
        rt.block_on(locks.named_lock(LOCK).acquire_async())
            .unwrap()
            .release()
            .unwrap();
    });
    println!("\n### Asynchronous acquisition (tmpfs)\n");
    println!("| measure | `acquire` | `acquire_async` | ratio |\n| --- | ---: | ---: | ---: |");
    println!(
        "| uncontended cycle (µs) | {blocking:.1} | {asynchronous:.1} | {:.2} |",
        asynchronous / blocking
    );
    // Handoff: another process releases; a thread (or a task) waiting for it takes the lock.
    let rounds = if quick() { 20 } else { 100 };
    let dir = fresh(root, "handoff");
    let locks = Locks::in_dir(&dir).unwrap();
    let by = |asynchronous: bool| {
        let mut lat = Vec::new();
        for _ in 0..rounds {
            let holder = OtherHolder::start(&dir);
            let waiter = std::thread::spawn({
                let locks = locks.clone();
                move || {
                    let req = locks.named_lock(LOCK).wait(Wait::Forever);
                    let g = if asynchronous {
                        runtime().block_on(req.acquire_async()).unwrap()
                    } else {
                        req.acquire().unwrap()
                    };
                    let t = Instant::now();
                    g.release().unwrap();
                    t
                }
            });
            std::thread::sleep(Duration::from_millis(20));
            let t0 = holder.release();
            let t = waiter.join().unwrap();
            lat.push(t.duration_since(t0).as_secs_f64() * 1e6);
        }
        (median(&mut lat), pct(&mut lat, 0.99))
    };
    let (bm, bp) = by(false);
    let (am, ap) = by(true);
    println!(
        "| handoff from another process, median (µs) | {bm:.0} | {am:.0} | {:.2} |",
        am / bm
    );
    println!(
        "| handoff from another process, p99 (µs) | {bp:.0} | {ap:.0} | {:.2} |",
        ap / bp
    );
}

/// A ticker task sleeping 1 ms in a loop for `for_`: the p99 of its lateness, in µs.
async fn ticker(for_: Duration) -> f64 {
    let end = Instant::now() + for_;
    let mut late = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        late.push((t.elapsed().as_secs_f64() - 0.001).max(0.0) * 1e6);
    }
    pct(&mut late, 0.99)
}

/// A thousand tasks wait on one thread for a lock another process holds, beside a ticker.
fn thousand_tasks(root: &Path) {
    let n = if quick() { 200 } else { 1000 };
    let dir = fresh(root, "thousand");
    let locks = Locks::in_dir(&dir).unwrap();
    let rt = runtime();
    let tick = Duration::from_millis(if quick() { 300 } else { 1000 });
    let (alone, threads_alone) = rt.block_on(async { (ticker(tick).await, threads()) });
    let holder = OtherHolder::start(&dir);
    let inside = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let (beside, threads_waiting, cpu_waiting, all_served) = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (locks, inside, served) = (locks.clone(), inside.clone(), served.clone());
                tokio::spawn(async move {
                    let g = locks
                        .named_lock(LOCK)
                        .wait(Wait::Forever)
                        .acquire_async()
                        .await
                        .unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two tasks inside");
                    served.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    g.release().unwrap();
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let cpu0 = process_cpu_us();
        let beside = ticker(tick).await;
        let cpu = process_cpu_us() - cpu0;
        let threads_waiting = threads();
        let t0 = holder.release();
        for t in tasks {
            t.await.unwrap();
        }
        (beside, threads_waiting, cpu, t0.elapsed())
    });
    assert_eq!(served.load(Ordering::SeqCst), n);
    // The same acquisitions by blocking waiters, a thread each.
    let holder = OtherHolder::start(&dir);
    let served = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let (locks, served) = (locks.clone(), served.clone());
            std::thread::spawn(move || {
                let g = locks
                    .named_lock(LOCK)
                    .wait(Wait::Forever)
                    .acquire()
                    .unwrap();
                served.fetch_add(1, Ordering::SeqCst);
                g.release().unwrap();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let threads_blocking = threads();
    let t0 = holder.release();
    for w in waiters {
        w.join().unwrap();
    }
    let blocking = t0.elapsed();
    assert_eq!(served.load(Ordering::SeqCst), n);
    println!(
        "\n### {n} tasks waiting on one thread (current_thread runtime) for a lock another process holds\n"
    );
    println!("| measure | value |\n| --- | ---: |");
    println!("| ticker lateness p99, no waiters (µs) | {alone:.0} |");
    println!("| ticker lateness p99, {n} tasks waiting (µs) | {beside:.0} |");
    println!("| threads, no waiters / {n} tasks waiting | {threads_alone} / {threads_waiting} |");
    println!(
        "| process CPU while they wait, ticker included (% of {} s) | {:.1} |",
        tick.as_secs_f64(),
        cpu_waiting / tick.as_secs_f64() / 1e4
    );
    println!(
        "| all {n} served after the release: tasks / blocking threads ({threads_blocking} threads) (ms) | {:.0} / {:.0} |",
        all_served.as_secs_f64() * 1e3,
        blocking.as_secs_f64() * 1e3
    );
}

/// 1 to 200 waiters of each kind; the time per handoff until all have had the lock once.
fn herd(root: &Path) {
    let sizes: &[usize] = if quick() {
        &[1, 10, 50]
    } else {
        &[1, 10, 50, 200]
    };
    println!("\n### Herd: N waiters, each takes the lock once after another process releases it (µs per handoff; CPU per waiter)\n");
    println!(
        "| waiters | processes | processes (async) | threads | tasks (one thread) |\n| ---: | ---: | ---: | ---: | ---: |"
    );
    let me = std::env::current_exe().unwrap();
    for &n in sizes {
        let dir = fresh(root, &format!("herd-{n}"));
        let locks = Locks::in_dir(&dir).unwrap();
        let cell = |total: Duration, cpu_us: f64| {
            format!(
                "{:.0} µs; {:.0} µs",
                total.as_secs_f64() * 1e6 / n as f64,
                cpu_us / n as f64
            )
        };
        // Processes, blocking and asynchronous.
        let in_processes = |kind: &str| {
            let holder = OtherHolder::start(&dir);
            let mut children: Vec<Child> = (0..n)
                .map(|_| {
                    Command::new(&me)
                        .arg("--once")
                        .arg(&dir)
                        .arg(kind)
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            for c in &mut children {
                let mut line = String::new();
                BufReader::new(c.stdout.as_mut().unwrap())
                    .read_line(&mut line)
                    .unwrap();
            }
            std::thread::sleep(Duration::from_millis(300)); // all asleep on the lock
            let cpu0 = children_cpu_us();
            let t0 = holder.release();
            for mut c in children {
                assert!(c.wait().unwrap().success());
            }
            cell(t0.elapsed(), children_cpu_us() - cpu0)
        };
        let processes = in_processes("blocking");
        let async_processes = in_processes("async");
        // Threads.
        let holder = OtherHolder::start(&dir);
        let waiters: Vec<_> = (0..n)
            .map(|_| {
                let locks = locks.clone();
                std::thread::spawn(move || {
                    let g = locks
                        .named_lock(LOCK)
                        .wait(Wait::Forever)
                        .acquire()
                        .unwrap();
                    g.release().unwrap();
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let cpu0 = process_cpu_us();
        let t0 = holder.release();
        for w in waiters {
            w.join().unwrap();
        }
        let threads = cell(t0.elapsed(), process_cpu_us() - cpu0);
        // Tasks.
        let holder = OtherHolder::start(&dir);
        let rt = runtime();
        let tasks = rt.block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let locks = locks.clone();
                    tokio::spawn(async move {
                        let g = locks
                            .named_lock(LOCK)
                            .wait(Wait::Forever)
                            .acquire_async()
                            .await
                            .unwrap();
                        g.release().unwrap();
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let cpu0 = process_cpu_us();
            let t0 = holder.release();
            for t in tasks {
                t.await.unwrap();
            }
            cell(t0.elapsed(), process_cpu_us() - cpu0)
        });
        println!("| {n} | {processes} | {async_processes} | {threads} | {tasks} |");
    }
}

/// The asynchronous sections, on tmpfs.
pub fn run(want: &dyn Fn(&str) -> bool) {
    let root = tempfile::tempdir_in("/dev/shm").unwrap();
    if want("async") {
        cycle_and_handoff(root.path());
        thousand_tasks(root.path());
    }
    if want("herd") {
        herd(root.path());
    }
    if want("contention") {
        contention(root.path());
    }
    if want("fairness") {
        super::order::fairness(&fresh(root.path(), "fairness"));
    }
}
