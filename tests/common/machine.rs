//! What the machine running the tests has and does: the rule for a test that needs more than
//! the Rust toolchain, and how busy a thread was. Portable (the async tests run under Wine).

use std::time::Duration;

/// How long this thread has been busy: on a CPU, or ready to run and waiting for one
/// (`/proc/thread-self/schedstat`). A loop that spins is busy all the time it spins however
/// loaded the machine is (two spinners on one core: each runs half the time and waits the
/// other half), so a check against it needs no margin for the load, as a count of CPU time
/// would; a thread asleep is not busy at all. Where the kernel keeps no such count, CPU time
/// (`/proc/thread-self/stat`, in ticks of 10 ms). `None` off Linux (Wine's processes
/// included: their count is the emulation's).
pub fn thread_busy() -> Option<Duration> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/thread-self/schedstat") {
        let mut ns = stat.split_whitespace().map(|n| n.parse::<u64>().ok());
        return Some(Duration::from_nanos(ns.next()?? + ns.next()??));
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Whether a test must skip because the machine lacks what it needs: prints one line naming
/// the test and the need, and returns `true`. With `DIRLOCK_TEST_REQUIRE_ALL=1` (CI) a missing
/// need fails the test instead.
pub fn lacks(test: &str, need: &str, have: bool) -> bool {
    if have {
        return false;
    }
    if std::env::var_os("DIRLOCK_TEST_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("{test}: needs {need} (DIRLOCK_TEST_REQUIRE_ALL=1 forbids skipping)");
    }
    // Straight to the stream, past the harness's capture: a skip is news even when the test
    // passes.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("skipped {test}: needs {need}\n").as_bytes(),
    );
    true
}
