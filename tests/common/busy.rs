//! How busy a thread was, for the checks that a wait sleeps rather than spins.

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
