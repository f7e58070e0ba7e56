//! Shared (read) locks, on tmpfs, beside `flock(LOCK_SH)` on a kept file (`flock -s`) and
//! fd-lock's `RwLock`: the reader's acquire + release cycle (alone, and joining a lock another
//! reader holds) against today's exclusive cycle; N reader processes entering together (1, 8,
//! 64) against N exclusive holders one after another; and a writer's wait for the last reader.

use dirlock::{Locks, Wait};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::{median, pct, quick};

fn flock(f: &File, op: libc::c_int) {
    // SAFETY: `f` is an open file; flock takes a descriptor and an operation.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), op) }, 0);
}

use std::os::fd::AsRawFd;

/// The reader's cycle against the exclusive one (µs per cycle).
fn cycles(root: &Path) {
    let budget = Duration::from_millis(if quick() { 150 } else { 600 });
    let per = |f: &mut dyn FnMut()| super::per_cycle(budget, 50, f);
    println!("\n### Shared locks: acquire + release (µs per cycle, tmpfs, not durable)\n");
    println!("| lock | µs |\n| --- | ---: |");
    let kept = File::create(root.join("flock-file")).unwrap();
    let flock_sh = per(&mut || {
        flock(&kept, libc::LOCK_SH);
        flock(&kept, libc::LOCK_UN);
    });
    let rw = fd_lock::RwLock::new(File::create(root.join("fd-lock-file")).unwrap());
    let fd_read = per(&mut || drop(rw.read().unwrap()));
    let locks = Locks::in_dir(root.join("cycles")).unwrap();
    let req = |shared: bool| {
        let r = locks.named_lock("c.lock").durable(false);
        if shared {
            r.shared()
        } else {
            r
        }
    };
    let exclusive = per(&mut || req(false).acquire().unwrap().release().unwrap());
    let alone = per(&mut || req(true).acquire().unwrap().release().unwrap());
    // Joining: another thread reads throughout.
    let (hold, go) = (Barrier::new(2), Barrier::new(2));
    let joined = std::thread::scope(|s| {
        s.spawn(|| {
            let g = req(true).acquire().unwrap();
            hold.wait();
            go.wait();
            g.release().unwrap();
        });
        hold.wait();
        let t = per(&mut || req(true).acquire().unwrap().release().unwrap());
        go.wait();
        t
    });
    for (label, v) in [
        ("flock(LOCK_SH), kept file (`flock -s`)", flock_sh),
        ("fd-lock 4 `RwLock::read`", fd_read),
        ("**dirlock**, exclusive (today's cycle)", exclusive),
        ("**dirlock**, shared, alone (publish, retire)", alone),
        (
            "**dirlock**, shared, beside another reader (join, leave)",
            joined,
        ),
    ] {
        println!("| {label} | {v:.1} |");
    }
    println!(
        "\nshared / exclusive: {:.2}x alone, {:.2}x joining",
        alone / exclusive,
        joined / exclusive
    );
}

/// How long each exclusive holder of [`together`] holds the lock (readers hold theirs until
/// all are in).
const HOLD: Duration = Duration::from_millis(5);

/// A reader process for [`together`]: waits for a byte on stdin, takes the lock (`kind`:
/// `flock`, `shared`, or `exclusive`, which it holds for [`HOLD`]), says `held`, and
/// (readers) holds until stdin closes.
pub fn reader(kind: &str, dir: &Path) {
    let mut stdin = std::io::stdin().lock();
    let mut go = [0u8];
    stdin.read_exact(&mut go).unwrap();
    let mut out = std::io::stdout().lock();
    let held: Box<dyn std::any::Any> = match kind {
        "flock" => {
            let f = File::open(dir.join("f")).unwrap();
            flock(&f, libc::LOCK_SH);
            Box::new(f)
        }
        _ => {
            let locks = Locks::in_dir(dir.join("locks")).unwrap();
            let r = locks
                .named_lock("t.lock")
                .durable(false)
                .wait(Wait::Forever);
            if kind == "shared" {
                Box::new(r.shared().acquire().unwrap())
            } else {
                // Held as long as each reader at least holds its read.
                let g = r.acquire().unwrap();
                std::thread::sleep(HOLD);
                g.release().unwrap();
                Box::new(())
            }
        }
    };
    writeln!(out, "held").unwrap();
    out.flush().unwrap();
    let _ = stdin.read_to_end(&mut Vec::new());
    drop(held);
}

/// N processes, started and waiting, are told to go at once: the time until the last one
/// holds the lock (readers hold until all have it; exclusive holders release at once).
fn together(root: &Path) {
    let me = std::env::current_exe().unwrap();
    let rounds = if quick() { 3 } else { 9 };
    println!("\n### N processes entering together (ms from the go to the last one in; median of {rounds}; an exclusive holder holds 5 ms, a reader until all are in)\n");
    println!("| lock | 1 | 8 | 64 |\n| --- | ---: | ---: | ---: |");
    let mut by_kind = Vec::new();
    for kind in ["flock", "shared", "exclusive"] {
        let dir = root.join(format!("together-{kind}"));
        std::fs::create_dir_all(&dir).unwrap();
        File::create(dir.join("f")).unwrap();
        let mut cells = Vec::new();
        for n in [1usize, 8, 64] {
            let mut times = Vec::new();
            for _ in 0..rounds {
                let mut kids: Vec<_> = (0..n)
                    .map(|_| {
                        Command::new(&me)
                            .args(["--reader", kind])
                            .arg(&dir)
                            .stdin(Stdio::piped())
                            .stdout(Stdio::piped())
                            .spawn()
                            .unwrap()
                    })
                    .collect();
                // Let them all start and block on stdin.
                std::thread::sleep(Duration::from_millis(100 + 5 * n as u64));
                let t = Instant::now();
                for k in &mut kids {
                    k.stdin.as_mut().unwrap().write_all(b"g").unwrap();
                }
                for k in &mut kids {
                    let mut line = String::new();
                    BufReader::new(k.stdout.as_mut().unwrap())
                        .read_line(&mut line)
                        .unwrap();
                    assert_eq!(line, "held\n");
                }
                times.push(t.elapsed().as_secs_f64() * 1e3);
                for mut k in kids {
                    drop(k.stdin.take());
                    assert!(k.wait().unwrap().success());
                }
            }
            cells.push(median(&mut times));
        }
        by_kind.push(cells.clone());
        let label = match kind {
            "flock" => "flock(LOCK_SH), each its own descriptor",
            "shared" => "**dirlock**, shared",
            _ => "**dirlock**, exclusive, one after another (5 ms each)",
        };
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} |",
            cells[0], cells[1], cells[2]
        );
    }
    println!(
        "\n64 readers together / 64 exclusive in a row: {:.2}x",
        by_kind[1][2] / by_kind[2][2]
    );
}

/// A writer blocked on the lock's last reader: the time from the start of the reader's
/// release to the writer holding it (median, p99 µs).
fn writer_wait(root: &Path) {
    let rounds = if quick() { 30 } else { 200 };
    println!(
        "\n### A writer's wait for the last reader (µs from the start of the reader's release)\n"
    );
    println!("| lock | median | p99 |\n| --- | ---: | ---: |");
    let measure = |read: &(dyn Fn() -> Box<dyn FnOnce() + Send> + Sync),
                   write: &(dyn Fn() + Sync)| {
        let mut lat = Vec::new();
        for _ in 0..rounds {
            let release = read();
            let ready = Barrier::new(2);
            let t = std::thread::scope(|s| {
                let w = s.spawn(|| {
                    ready.wait();
                    write();
                    Instant::now()
                });
                ready.wait();
                std::thread::sleep(Duration::from_millis(20));
                let t0 = Instant::now();
                release();
                w.join().unwrap().duration_since(t0)
            });
            lat.push(t.as_secs_f64() * 1e6);
        }
        (median(&mut lat), pct(&mut lat, 0.99))
    };
    let path = root.join("ww-flock");
    File::create(&path).unwrap();
    let flock_t = measure(
        &|| {
            let f = File::open(&path).unwrap();
            flock(&f, libc::LOCK_SH);
            Box::new(move || drop(f))
        },
        &|| {
            let f = File::open(&path).unwrap();
            flock(&f, libc::LOCK_EX);
        },
    );
    let locks = Locks::in_dir(root.join("ww-dirlock")).unwrap();
    let req = || locks.named_lock("w.lock").durable(false);
    let (dirlock_forever, dirlock_deadline) =
        [Wait::Forever, Wait::Timeout(Duration::from_secs(60))]
            .map(|wait| {
                measure(
                    &|| {
                        let g = req().shared().acquire().unwrap();
                        Box::new(move || g.release().unwrap())
                    },
                    &|| req().wait(wait).acquire().unwrap().release().unwrap(),
                )
            })
            .into();
    for (label, (m, p)) in [
        ("flock: LOCK_EX waits for LOCK_SH", flock_t),
        ("**dirlock**, writer with no deadline", dirlock_forever),
        ("**dirlock**, writer with a deadline", dirlock_deadline),
    ] {
        println!("| {label} | {m:.0} | {p:.0} |");
    }
}

/// Readers in a stream (4 threads, each holding 5 ms and coming back at once, so that the lock
/// is never free of readers): a writer's wait (ms), which writer preference bounds by the
/// holds of the readers already in, however long the stream goes on.
fn writer_among_readers(root: &Path) {
    let rounds = if quick() { 5 } else { 20 };
    let hold = Duration::from_millis(5);
    let locks = Locks::in_dir(root.join("stream")).unwrap();
    let req = || {
        locks
            .named_lock("s.lock")
            .durable(false)
            .wait(Wait::Forever)
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut waits = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let g = req().shared().acquire().unwrap();
                    std::thread::sleep(hold);
                    g.release().unwrap();
                }
            });
        }
        for _ in 0..rounds {
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            let g = req().acquire().unwrap();
            waits.push(t.elapsed().as_secs_f64() * 1e3);
            g.release().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let (med, max) = (median(&mut waits), pct(&mut waits, 1.0));
    println!("\n### A writer among a stream of readers (4 threads, each holding 5 ms and back at once)\n");
    println!("| writer's wait | ms |\n| --- | ---: |");
    println!("| median | {med:.1} |\n| longest of {rounds} | {max:.1} |");
    println!("\nlongest wait / one reader's hold: {:.1}x", max / 5.0);
}

pub fn run(want: &dyn Fn(&str) -> bool) {
    if !want("shared") {
        return;
    }
    let root = tempfile::tempdir_in("/dev/shm").unwrap();
    cycles(root.path());
    together(root.path());
    writer_wait(root.path());
    writer_among_readers(root.path());
}
