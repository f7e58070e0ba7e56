//! The command's own cost (Unix): `dirlock run --lock X -- true` against `flock F true`, both
//! started the same way and in turn, run by run, on tmpfs and on the disk; and the start of
//! the binary alone, `dirlock --version` against `true`. Medians of the wall time, and the
//! median of the pairs' ratios (a pair's two runs see the same machine).
//!
//! The command is the workspace's release build (`cargo build --release -p dirlock-cli` at the
//! top, in `CARGO_TARGET_DIR` if set), or the binary `DIRLOCK_BIN` names; and, on Linux, the
//! static build beside it when there is one (`cargo build --release -p dirlock-cli --target
//! x86_64-unknown-linux-musl`). `flock` is util-linux's. Both `flock` and `true` are found on `PATH` once, and every run starts them by
//! absolute path, as it does `dirlock`: no side pays for a search of `PATH` at each start.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

use super::{median, quick};

/// The workspace's target directory.
fn target_dir() -> PathBuf {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => top.join(target),
        None => top.join("target"),
    }
}

/// The `dirlock` binary to time, if it is there.
fn binary() -> Option<PathBuf> {
    let bin = match std::env::var_os("DIRLOCK_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => target_dir().join("release/dirlock"),
    };
    bin.is_file().then_some(bin)
}

/// Whether there is a static (musl) build to time: Linux on x86-64.
const STATIC: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// The static build, if it is there.
fn static_binary() -> Option<PathBuf> {
    let bin = target_dir().join("x86_64-unknown-linux-musl/release/dirlock");
    (STATIC && bin.is_file()).then_some(bin)
}

/// The newest modification time of the files under `dir` (the sources a build is from).
fn newest(dir: &Path) -> SystemTime {
    let mut latest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let t = match meta.is_dir() {
            true => newest(&entry.path()),
            false => meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        };
        latest = latest.max(t);
    }
    latest
}

/// `program`'s absolute path, from `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// One run's wall time, in µs (the command must succeed).
fn time(argv: &[&OsStr]) -> f64 {
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
fn paired(a: &[&OsStr], b: &[&OsStr], runs: usize) -> (f64, f64, f64) {
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
    let (Some(flock), Some(t)) = (on_path("flock"), on_path("true")) else {
        println!("skipped: no `flock` (util-linux) or no `true` on PATH");
        return;
    };
    let mut builds = vec![("", bin)];
    match static_binary() {
        Some(s) => builds.push((" (static build)", s)),
        None if STATIC => println!(
            "(`cargo build --release -p dirlock-cli --target x86_64-unknown-linux-musl` at the top adds the static build)\n"
        ),
        None => {}
    }
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = newest(&top.join("src")).max(newest(&top.join("cli/src")));
    for (_, bin) in &builds {
        let built = std::fs::metadata(bin).and_then(|m| m.modified());
        if built.is_ok_and(|b| b < sources) {
            println!(
                "({} is older than the sources: rebuild it to time what they say)\n",
                bin.display()
            );
        }
    }
    let runs = if quick() { 30 } else { 300 };
    let t = t.as_os_str();
    println!(
        "| | dirlock (µs) | the other (µs) | ratio of the pairs |\n| --- | ---: | ---: | ---: |"
    );
    for (build, bin) in &builds {
        let bin = bin.as_os_str();
        let (a, b, r) = paired(&[bin, "--version".as_ref()], &[t], runs);
        println!("| `dirlock --version`{build} against `true` | {a:.0} | {b:.0} | {r:.2} |");
        for (name, dir) in places {
            let (lock, file) = (dir.join("cmd"), dir.join("cmd.flock"));
            let run: [&OsStr; 6] = [
                bin,
                "run".as_ref(),
                "--lock".as_ref(),
                lock.as_os_str(),
                "--".as_ref(),
                t,
            ];
            let (a, b, r) = paired(&run, &[flock.as_os_str(), file.as_os_str(), t], runs);
            println!("| `dirlock run --lock X -- true`{build} against `flock F true`, {name} | {a:.0} | {b:.0} | {r:.2} |");
        }
    }
}
