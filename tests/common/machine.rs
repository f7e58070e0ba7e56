//! What the machine running the tests has and does: the rule for a test that needs more than
//! the Rust toolchain, and how a thread spends its time. Portable (the async tests run under Wine).

use std::time::{Duration, Instant};

/// How this thread spends a stretch of time, for the checks that a wait sleeps rather than
/// spins: on a CPU, ready to run and waiting for one, or asleep
/// (`/proc/thread-self/schedstat`).
pub struct Watch {
    started: Instant,
    busy: Duration,
}

impl Watch {
    /// Starts watching this thread. `None` where the kernel keeps no such count: off Linux
    /// (Wine's processes included), or a kernel without schedstats (before 5.14 its file then
    /// reads all zeros).
    pub fn start() -> Option<Watch> {
        Some(Watch {
            busy: busy()?,
            started: Instant::now(),
        })
    }

    /// Whether the thread that started the watch slept through the time since: it was asleep
    /// (neither on a CPU nor waiting for one) for over a fifth of it. A loop that spins is
    /// not, however loaded the machine: alone on a CPU it runs, behind other processes it
    /// waits for one (the breaks measured were ready to run for 98.5 % to 100 % of their
    /// wait beside 20 spinning processes, and for 91.5 % at the least niced below 10). A
    /// waiter is ready only when something wakes it, until it sleeps again, however long each
    /// wake-up waits for a CPU (niced below ten spinning processes, three quarters of its wait
    /// at the most measured). `Err` says how it spent the time.
    pub fn slept(&self) -> Result<(), String> {
        let whole = self.started.elapsed();
        let busy = busy().expect("the count that `start` read") - self.busy;
        if busy < whole - whole / 5 {
            return Ok(());
        }
        Err(format!(
            "of {whole:?}, it was ready to run (on a CPU or waiting for one) {busy:?}"
        ))
    }
}

/// How long this thread has been ready to run so far: on a CPU, or waiting for one.
fn busy() -> Option<Duration> {
    let read = |path| -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string(path).ok()?;
        let mut ns = stat.split_whitespace().map(|n| n.parse::<u64>().ok());
        Some((ns.next()??, ns.next()??))
    };
    if !cfg!(target_os = "linux") {
        return None;
    }
    // The process's first thread has run by now: no time at all is a kernel that does not
    // count. (A thread just started may not have been charged yet.)
    read("/proc/self/schedstat").filter(|(ran, _)| *ran > 0)?;
    let (ran, queued) = read("/proc/thread-self/schedstat")?;
    Some(Duration::from_nanos(ran + queued))
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
