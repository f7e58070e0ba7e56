//! Fairness between processes, and who is served when (Unix, tmpfs): eight processes of one
//! blocking thread each cycle for the contention time; each one's share, and an account of the
//! waits: whether a waiter was served after one that began to wait once it was queued, and
//! what the longest wait was made of.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::tasks::{contend_in_processes, contention_time};

/// Now, in ns since the epoch (one clock for every process of the machine).
pub fn now_ns() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_nanos()).unwrap()
}

/// One acquisition of a contending thread, in ns since the epoch.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    /// The process (its index among those started).
    pub who: usize,
    /// Before `acquire` was called.
    pub since: u64,
    /// When it was told it waits (after it took its place in the queue), 0 if it never was.
    pub told: u64,
    /// When `acquire` returned.
    pub taken: u64,
    /// Just before its release.
    pub left: u64,
}

impl Turn {
    /// A turn from its line, `since told taken left`.
    pub fn parse(who: usize, line: &str) -> Turn {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        Turn {
            who,
            since: f[0],
            told: f[1],
            taken: f[2],
            left: f[3],
        }
    }

    /// When it was surely in the queue: once told, or at the latest when it got the lock.
    fn queued_by(&self) -> u64 {
        if self.told > 0 {
            self.told
        } else {
            self.taken
        }
    }
}

/// The fairness section: dirlock's eight processes, then the kernel's `flock` in the same
/// way, for comparison (nothing tells when a `flock` waiter is queued: its waits are not
/// accounted for order).
pub fn fairness(dir: &Path) {
    let _ = dirlock::Locks::in_dir(dir).unwrap();
    println!(
        "\n### Fairness: 8 processes, one thread each, cycle for {} s",
        contention_time().as_secs()
    );
    for kind in ["blocking", "flock"] {
        let results = contend_in_processes(dir, &[(kind, 1); 8]);
        let counts: Vec<f64> = results.iter().map(|r| r.0).collect();
        let mean = counts.iter().sum::<f64>() / counts.len() as f64;
        let (lo, hi) = counts
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &c| (l.min(c), h.max(c)));
        let longest = results.iter().map(|r| r.1).fold(0f64, f64::max);
        let lock = if kind == "flock" { "flock" } else { "**dirlock**" };
        println!("\n{lock}:\n\n| acquisitions each | mean | lowest / highest share of the mean | longest single wait |\n| --- | ---: | ---: | ---: |");
        let each: Vec<String> = counts.iter().map(|c| format!("{c:.0}")).collect();
        println!(
            "| {} | {mean:.0} | {:.1} % / {:.1} % | {:.1} ms |",
            each.join(", "),
            100.0 * lo / mean,
            100.0 * hi / mean,
            longest / 1000.0
        );
        let mut turns: Vec<Turn> = results.into_iter().flat_map(|r| r.2).collect();
        turns.sort_by_key(|t| t.taken);
        explain(&turns, kind != "flock");
    }
}

/// Who was served during each wait, in taking order: the waits that a waiter which began to
/// wait only after this one was surely queued overtook (out of queue order, with no doubt left
/// by scheduling), and what the longest wait was made of.
fn explain(turns: &[Turn], queued: bool) {
    let (mut overtaken, mut most) = (0usize, 0usize);
    for (i, a) in turns.iter().enumerate() {
        let queued = a.queued_by();
        let passed = turns[..i]
            .iter()
            .rev()
            .take_while(|b| b.taken > queued)
            .filter(|b| b.who != a.who && b.since > queued)
            .count();
        overtaken += usize::from(passed > 0);
        most = most.max(passed);
    }
    // What each wait was made of: others served during it, their holds, and its longest
    // stretch without a holder.
    let made_of = |i: usize| {
        let a = &turns[i];
        let (mut held, mut gap, mut last, mut served) = (0u64, 0u64, a.since, 0usize);
        // (An exclusive lock: holds follow one another, so those within the wait are the
        // last ones before it ended.)
        let within = turns[..i].iter().rev().take_while(|b| b.left > a.since).count();
        for b in &turns[i - within..i] {
            served += usize::from(b.taken > a.since);
            let (from, to) = (b.taken.max(a.since), b.left.min(a.taken));
            held += to.saturating_sub(from);
            gap = gap.max(from.saturating_sub(last));
            last = last.max(to);
        }
        (served, held, gap.max(a.taken.saturating_sub(last)))
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    if queued {
        println!("\n| waits | served after a later one (out of queue order) | most passed in one wait |\n| ---: | ---: | ---: |");
        println!(
            "| {} | {overtaken} ({:.2} %) | {most} |",
            turns.len(),
            100.0 * overtaken as f64 / turns.len().max(1) as f64,
        );
    }
    // The longest wait, and the longest with no turn in it (a turn leaves the lock free for
    // 50 ms: a stretch of 25 ms or more without a holder is taken for one).
    let by_length = |i: &usize| turns[*i].taken - turns[*i].since;
    let longest = (0..turns.len()).max_by_key(by_length);
    let without = (0..turns.len())
        .filter(|&i| made_of(i).2 < 25_000_000)
        .max_by_key(by_length);
    println!("\n| wait | length | others served in it | their holds | longest stretch without a holder |\n| --- | ---: | ---: | ---: | ---: |");
    for (what, i) in [("longest", longest), ("longest with no turn in it", without)] {
        let Some(i) = i else { continue };
        let (served, held, gap) = made_of(i);
        let a = &turns[i];
        println!(
            "| {what} | {:.2} ms | {served} | {:.2} ms | {:.2} ms |",
            ms(a.taken - a.since),
            ms(held),
            ms(gap)
        );
    }
}
