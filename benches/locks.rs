//! `cargo bench` (in `benches/`). On Unix: dirlock side by side with the kernel lock (`flock`
//! through `std::fs::File::lock`), a floor baseline (the bare system calls of one stage, publish,
//! retire and reap, without identity reads or JSON), and the `dir-lock` crate, on tmpfs
//! (`/dev/shm`) and on the disk (`$BENCH_DISK`, default `/var/tmp`). Prints markdown tables.
//!
//! Environment: `BENCH_QUICK=1` for a short run; `BENCH_SCALE=0` to skip the 100,000-entry
//! scale runs.
//!
//! On Windows (run under Wine in `.ci/run`'s manner: see `windows.rs`), the uncontended cycle
//! and the handoff between two threads, beside `LockFileEx` as the kernel's floor: a sanity
//! ratio, not Windows performance.

#[cfg(unix)]
#[path = "unix.rs"]
mod platform;
#[cfg(windows)]
#[path = "windows.rs"]
mod platform;

fn main() {
    platform::main();
}
