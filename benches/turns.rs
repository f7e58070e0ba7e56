//! The turn left to those that do not queue (Unix, tmpfs): three processes cycle on one lock,
//! each holding it 2 ms, while a try that does not wait polls every 10 ms, as the reference
//! implementation does every 25 ms. How long the try goes without finding the lock free is
//! the turn's real period: two seconds by the rule while waiters stay queued; longer where
//! the holders pause between turns about as long as the others hold it, since a queue that
//! empties starts the clock again.

use dirlock::{Locks, Wait};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::quick;

const LOCK: &str = "t.lock";

/// `--turn-worker DIR SECONDS`: cycles on the lock in `DIR` for that long, holding it `hold` µs
/// each time and pausing `pause` µs between.
pub fn worker(args: &[String]) {
    let locks = Locks::in_dir(&args[0]).unwrap();
    let end = Instant::now() + Duration::from_secs(args[1].parse().unwrap());
    let hold = Duration::from_micros(args[2].parse().unwrap());
    let pause = Duration::from_micros(args[3].parse().unwrap());
    while Instant::now() < end {
        let g = locks
            .named_lock(LOCK)
            .wait(Wait::Forever)
            .durable(false)
            .acquire()
            .unwrap();
        std::thread::sleep(hold);
        g.release().unwrap();
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

/// One run: `n` workers holding `hold` and pausing `pause` (µs); returns the try's successes
/// and its gaps between them (s).
fn gaps(root: &Path, n: usize, hold: u64, pause: u64, secs: u64) -> (usize, Vec<f64>) {
    let dir = root.join(format!("turns-{n}-{hold}-{pause}"));
    let locks = Locks::in_dir(&dir).unwrap();
    let me = std::env::current_exe().unwrap();
    let mut workers: Vec<Child> = (0..n)
        .map(|_| {
            Command::new(&me)
                .arg("--turn-worker")
                .arg(&dir)
                .args([secs.to_string(), hold.to_string(), pause.to_string()])
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let mut last = start;
    let mut found = 0;
    let mut gaps = Vec::new();
    while start.elapsed() < Duration::from_secs(secs - 1) {
        if let Ok(g) = locks.named_lock(LOCK).durable(false).acquire() {
            g.release().unwrap();
            found += 1;
            gaps.push(last.elapsed().as_secs_f64());
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    gaps.push(last.elapsed().as_secs_f64());
    for w in &mut workers {
        assert!(w.wait().unwrap().success());
    }
    (found, gaps)
}

pub fn run(want: &dyn Fn(&str) -> bool) {
    if !want("turns") {
        return;
    }
    let root = tempfile::tempdir_in("/dev/shm").unwrap();
    let secs = if quick() { 6 } else { 31 };
    println!("\n### The turn: a try every 10 ms beside processes that cycle ({secs} s each)\n");
    println!("| processes | hold, pause (ms) | times the try found it free | longest gap (s) | gaps over 2.5 s |\n| ---: | ---: | ---: | ---: | ---: |");
    for (n, hold, pause) in [(3, 2000, 0), (8, 500, 0), (8, 0, 0), (3, 2000, 4000), (2, 2000, 2000)] {
        let (found, gaps) = gaps(root.path(), n, hold, pause, secs);
        let longest = gaps.iter().copied().fold(0f64, f64::max);
        let over = gaps.iter().filter(|g| **g > 2.5).count();
        println!(
            "| {n} | {}, {} | {found} | {longest:.2} | {over} |",
            hold as f64 / 1000.0,
            pause as f64 / 1000.0
        );
    }
}
