//! The command's own cost (Unix): `dirlock run --lock X -- true` against `flock F true`, both
//! started the same way and in turn, run by run, on tmpfs and on the disk; and the start of
//! the binary alone, `dirlock --version` against `true`. Medians of the wall time, and the
//! median of the pairs' ratios (a pair's two runs see the same machine).
//!
//! The command is the workspace's release build (`cargo build --release -p dirlock-cli` at the
//! top), or the binary `DIRLOCK_BIN` names; `flock` is util-linux's, from `PATH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{median, quick};

/// The `dirlock` binary to time, if it is there.
fn binary() -> Option<PathBuf> {
    let bin = std::env::var_os("DIRLOCK_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/dirlock"),
        PathBuf::from,
    );
    bin.is_file().then_some(bin)
}

/// One run's wall time, in µs (the command must succeed).
fn time(argv: &[&std::ffi::OsStr]) -> f64 {
    let t = Instant::now();
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let us = t.elapsed().as_secs_f64() * 1e6;
    assert!(status.success(), "{argv:?}: {status}");
    us
}

/// `runs` pairs, `a` and `b` in turn after a warm-up: the medians of each, and of `a / b`.
fn paired(a: &[&std::ffi::OsStr], b: &[&std::ffi::OsStr], runs: usize) -> (f64, f64, f64) {
    for _ in 0..5 {
        time(a);
        time(b);
    }
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, y) = (time(a), time(b));
        ta.push(x);
        tb.push(y);
        ratio.push(x / y);
    }
    (median(&mut ta), median(&mut tb), median(&mut ratio))
}

pub fn run(places: &[(&str, &Path)]) {
    println!("\n### The command's own cost, paired run by run\n");
    let Some(bin) = binary() else {
        println!("skipped: build the command first (`cargo build --release -p dirlock-cli` at the top), or name it in DIRLOCK_BIN");
        return;
    };
    if Command::new("flock").arg("-V").output().is_err() {
        println!("skipped: no `flock` (util-linux) on PATH");
        return;
    }
    let runs = if quick() { 30 } else { 300 };
    let (bin, t) = (bin.as_os_str(), "true".as_ref());
    println!(
        "| | dirlock (µs) | the other (µs) | ratio of the pairs |\n| --- | ---: | ---: | ---: |"
    );
    let (a, b, r) = paired(&[bin, "--version".as_ref()], &[t], runs);
    println!("| `dirlock --version` against `true` | {a:.0} | {b:.0} | {r:.2} |");
    for (name, dir) in places {
        let (lock, file) = (dir.join("cmd"), dir.join("cmd.flock"));
        let run: [&std::ffi::OsStr; 6] = [
            bin,
            "run".as_ref(),
            "--lock".as_ref(),
            lock.as_os_str(),
            "--".as_ref(),
            t,
        ];
        let (a, b, r) = paired(&run, &["flock".as_ref(), file.as_os_str(), t], runs);
        println!("| `dirlock run --lock X -- true` against `flock F true`, {name} | {a:.0} | {b:.0} | {r:.2} |");
    }
}
