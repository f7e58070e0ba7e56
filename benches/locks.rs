//! `cargo bench` (in `benches/`). On Unix: dirlock side by side with the kernel lock (`flock`
//! through `std::fs::File::lock`), a floor baseline (the bare system calls of one stage, publish,
//! retire and reap, without identity reads or JSON), and the `dir-lock` crate, on tmpfs
//! (`/dev/shm`) and on the disk (`$BENCH_DISK`, default `/var/tmp`). Prints markdown tables.
//!
//! Environment: `BENCH_QUICK=1` for a short run; `BENCH_SCALE=0` to skip the 100,000-entry
//! scale runs. On Unix the command's own cost against flock(1) follows (`command`: see
//! `command.rs`), then the asynchronous acquisition's sections (`async`, `herd`, `contention`),
//! on tmpfs (see `tasks.rs`), fairness between processes and the order of service (`fairness`:
//! see `order.rs`), shared locks' (`shared`: see `shared.rs`), and the turn left to those that
//! do not queue (`turns`: see `turns.rs`).
//!
//! On Windows (run under Wine in `.ci/run`'s manner: see `windows.rs`), the uncontended cycle
//! and the handoff between two threads, beside `LockFileEx` as the kernel's floor: a sanity
//! ratio, not Windows performance.

#[cfg(unix)]
mod command;
#[cfg(unix)]
mod handoff;
#[cfg(unix)]
mod order;
#[cfg(unix)]
#[path = "unix.rs"]
mod platform;
#[cfg(windows)]
#[path = "windows.rs"]
mod platform;
#[cfg(unix)]
mod shared;
#[cfg(unix)]
mod tasks;
#[cfg(unix)]
mod turns;

use std::time::{Duration, Instant};

fn main() {
    platform::main();
}

/// Whether to measure: `cargo bench` passes `--bench`; `cargo test --benches` (which builds
/// and starts every target) does not, and `cargo bench -- --list` asks for a list of tests.
fn measuring() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--list")
}

/// `BENCH_QUICK` is set: a short run.
fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some()
}

/// Runs `cycle` for about `budget` (after a warm-up batch), in batches of `batch` cycles, at
/// least three; returns the median of the batches' means, in microseconds per cycle.
fn per_cycle(budget: Duration, batch: u32, mut cycle: impl FnMut()) -> f64 {
    for _ in 0..batch {
        cycle();
    }
    let mut batches = Vec::new();
    let end = Instant::now() + budget;
    while Instant::now() < end || batches.len() < 3 {
        let t = Instant::now();
        for _ in 0..batch {
            cycle();
        }
        batches.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(batch));
    }
    median(&mut batches)
}

fn median(v: &mut [f64]) -> f64 {
    pct(v, 0.5)
}

/// The `p` quantile of `v` (sorted in place), the nearest rank.
fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}
