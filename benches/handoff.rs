//! The handoff between two threads (`cargo bench -- handoff`): a waiter blocked on the lock,
//! the holder releases, and the time until the waiter holds it; beside the kernel's `flock`
//! and the protocol's two floors, the renames alone and the exchange alone.

use dirlock::{Locks, Wait};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::platform::{fresh, Place};
use super::{median, pct, quick};

/// CPU time of the calling thread, in microseconds.
fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

/// Where the handoff's two threads run: where the scheduler puts them (it wakes the waiter on
/// the releasing thread's CPU), or pinned to CPUs 0 (holder) and 1 (waiter).
static APART: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pins the calling thread to `cpu`, or lets it run anywhere (`None`).
fn pin(cpu: Option<usize>) {
    // SAFETY: `set` is a plain bitmask, filled by the libc helpers and passed by pointer with
    // its size; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        // All online CPUs (not `available_parallelism`, which a pinned thread sees as 1).
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        for c in 0..n {
            if cpu.is_none_or(|p| p == c) {
                libc::CPU_SET(c, &mut set);
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Opens directory `name` in `at`.
fn at_open(at: &File, name: &std::ffi::CStr) -> File {
    // SAFETY: `at` is an open directory and `name` NUL-terminated; the new descriptor is ours.
    let fd = unsafe {
        libc::openat(
            at.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    assert!(fd >= 0, "openat: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened and is owned by nobody else.
    unsafe { File::from_raw_fd(fd) }
}

/// Makes directory `name` in `at` (mode 0700) and opens it.
fn at_mkdir_open(at: &File, name: &std::ffi::CStr) -> File {
    // SAFETY: `at` is an open directory and `name` NUL-terminated.
    assert_eq!(
        unsafe { libc::mkdirat(at.as_raw_fd(), name.as_ptr(), 0o700) },
        0
    );
    at_open(at, name)
}

/// Removes the empty directory `name` in `at` (at worst it is not there).
fn at_rmdir(at: &File, name: &std::ffi::CStr) {
    // SAFETY: `at` is an open directory and `name` NUL-terminated.
    unsafe { libc::unlinkat(at.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
}

/// Stages the next candidate in `at`, numbered from `serial`, and locks its beacon: the beacon,
/// its number and its name.
fn stage(at: &File, serial: &std::sync::atomic::AtomicU64) -> (File, u64, std::ffi::CString) {
    let n = serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cand = std::ffi::CString::new(format!("x.lock.candidate.{n}")).unwrap();
    let beacon = at_mkdir_open(at, &cand);
    beacon.lock().unwrap();
    (beacon, n, cand)
}

/// `renameat2(RENAME_NOREPLACE)` within `at`.
fn at_rename(at: &File, from: &std::ffi::CStr, to: &std::ffi::CStr) {
    let r = renameat2(at, from, to, libc::RENAME_NOREPLACE);
    assert!(r.is_ok(), "renameat2: {r:?}");
}

/// `renameat2` within `at`, with `flags`.
fn renameat2(
    at: &File,
    from: &std::ffi::CStr,
    to: &std::ffi::CStr,
    flags: libc::c_uint,
) -> std::io::Result<()> {
    // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            at.as_raw_fd(),
            from.as_ptr(),
            at.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// A waiter thread blocks on the lock; the holder releases; the time from the start of the
/// release to the waiter holding it. Returns (median µs, p99 µs, waiter CPU µs per wait).
pub(crate) fn handoff<H, W>(
    rounds: usize,
    hold: impl Fn() -> H + Sync,
    release: impl Fn(H) + Sync,
    wait: impl Fn() -> W + Sync,
    done: impl Fn(W) + Sync,
) -> (f64, f64, f64)
where
    H: Send,
    W: Send,
{
    let mut lat = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..rounds {
        let h = hold();
        let ready = Barrier::new(2);
        let (t_acquired, cpu_used) = std::thread::scope(|s| {
            let apart = APART.load(std::sync::atomic::Ordering::Relaxed);
            if apart {
                pin(Some(0));
            }
            let (wait, done, ready) = (&wait, &done, &ready);
            let waiter = s.spawn(move || {
                if apart {
                    pin(Some(1));
                }
                ready.wait();
                let c0 = thread_cpu_us();
                let w = wait();
                let t = Instant::now();
                let used = thread_cpu_us() - c0;
                done(w);
                (t, used)
            });
            ready.wait();
            // Let the waiter block in the kernel.
            std::thread::sleep(Duration::from_millis(20));
            let t0 = Instant::now();
            release(h);
            let (t, used) = waiter.join().unwrap();
            if apart {
                pin(None);
            }
            (t.duration_since(t0), used)
        });
        lat.push(t_acquired.as_secs_f64() * 1e6);
        cpu.push(cpu_used);
    }
    (median(&mut lat), pct(&mut lat, 0.99), median(&mut cpu))
}

/// Hands `x.lock` in `at` (its beacon held) to the candidate staged at `next` by an exchange,
/// unlocks, yields (as dirlock does, so that the waiter runs first), closes what the checks
/// `opened`, and retires the old lock to `tomb`; with no candidate there, retires the lock
/// and unlocks.
fn hand_on(
    at: &File,
    beacon: File,
    next: &std::ffi::CStr,
    tomb: &std::ffi::CStr,
    opened: Vec<File>,
) {
    if renameat2(at, c"x.lock", next, libc::RENAME_EXCHANGE).is_ok() {
        beacon.unlock().unwrap();
        // SAFETY: sched_yield takes nothing and cannot fail.
        unsafe { libc::sched_yield() };
        drop(opened);
        at_rename(at, next, tomb);
    } else {
        at_rename(at, c"x.lock", tomb);
        beacon.unlock().unwrap();
    }
    drop(beacon);
    at_rmdir(at, tomb);
}

/// `fstatat` of `name` in `at` (`c""`: `at` itself), for its cost only.
fn stat_at(at: &File, name: &std::ffi::CStr) {
    let flags = match name.is_empty() {
        true => libc::AT_EMPTY_PATH,
        false => libc::AT_SYMLINK_NOFOLLOW,
    };
    // SAFETY: `st` is a valid out-pointer, `name` NUL-terminated, `at` an open directory.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstatat(at.as_raw_fd(), name.as_ptr(), &mut st, flags);
    }
}

/// Opens `name` in `at`, and checks that its beacon is held: a `flock` probe that must fail.
/// `None` when it is not there.
fn probed(at: &File, name: &std::ffi::CStr) -> Option<File> {
    // SAFETY: `at` is an open directory and `name` NUL-terminated; the new descriptor is ours.
    let fd = unsafe {
        libc::openat(
            at.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let dir = unsafe { File::from_raw_fd(fd) };
    // SAFETY: `dir` is an open descriptor.
    let free = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    assert!(!free, "the waiter's beacon is not held");
    Some(dir)
}

/// The first writer's entry (`<number>.w`) of the open queue `dir`, listed through it.
fn first_entry(dir: &File) -> Option<std::ffi::CString> {
    let mut names = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length; `dir` is an open directory.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n <= 0 {
            break;
        }
        let mut at = 0;
        while at < n as usize {
            // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
            let len = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = std::ffi::CStr::from_bytes_until_nul(&buf[at + 19..at + len]).unwrap();
            if name.to_bytes().ends_with(b".w") {
                names.push(name.to_owned());
            }
            at += len;
        }
    }
    names.into_iter().min()
}

/// The exchange floor after the bare system calls of the checks a release makes before it
/// hands the lock on (no records, no parsing), as two rows: today's eight (the lock still
/// ours, the lock directory's link count, the queue opened and listed, the first entry opened
/// and probed, the turn looked at), and the five a first waiter's candidate kept at one fixed
/// name would need (`NAME.next`, not built: that candidate opened and probed in place of the
/// listing, the turn looked at by path). The waiter takes a number in the queue, as dirlock's.
fn checked_exchanges(d: &std::path::Path, rounds: usize, row: impl Fn(&str, (f64, f64, f64))) {
    let dir = fresh(d, "hchecked");
    let at = File::open(&dir).unwrap();
    let _ = std::fs::create_dir(dir.join("x.lock.queue"));
    let queue = at_open(&at, c"x.lock.queue");
    std::fs::write(dir.join("x.lock.queue/turn"), "queued\n").unwrap();
    let serial = std::sync::atomic::AtomicU64::new(0);
    // A waiter's old lock, seen, and its entry in the queue with its name, kept until its
    // own release.
    type Waited = Option<(File, File, std::ffi::CString)>;
    let take = |wait: bool| -> (File, u64, Waited) {
        let (beacon, n, cand) = stage(&at, &serial);
        if !wait {
            at_rename(&at, &cand, c"x.lock");
            return (beacon, n, None);
        }
        let name = std::ffi::CString::new(format!("{n:020}.w")).unwrap();
        let entry = at_mkdir_open(&queue, &name);
        entry.lock().unwrap();
        let old = at_open(&at, c"x.lock");
        old.lock_shared().unwrap();
        (beacon, n, Some((old, entry, name)))
    };
    for fixed in [false, true] {
        let give = |(beacon, n, waited): (File, u64, Waited)| {
            if let Some((_old, entry, name)) = waited {
                drop(entry);
                at_rmdir(&queue, &name);
            }
            let next = std::ffi::CString::new(format!("x.lock.candidate.{}", n + 1)).unwrap();
            let tomb = std::ffi::CString::new(format!("x.lock.tombstone.{n}")).unwrap();
            stat_at(&at, c"x.lock");
            stat_at(&at, c"");
            let mut opened = Vec::new();
            if fixed {
                opened.extend(probed(&at, &next));
                stat_at(&at, c"x.lock.queue/turn");
            } else {
                let listed = at_open(&at, c"x.lock.queue");
                opened.extend(first_entry(&listed).and_then(|e| probed(&listed, &e)));
                stat_at(&listed, c"turn");
                opened.push(listed);
            }
            hand_on(&at, beacon, &next, &tomb, opened);
        };
        let label = match fixed {
            false => "exchange after today's checks' 8 calls",
            true => "exchange after the 5 of a candidate at a fixed name (not built)",
        };
        row(
            label,
            handoff(rounds, || take(false), give, || take(true), give),
        );
    }
}

pub(crate) fn handoffs(places: &[Place]) {
    let rounds = if quick() { 30 } else { 200 };
    println!("\n### Handoff: a blocked waiter gets the lock (µs from the start of release; waiter CPU while blocked ~20 ms)\n");
    println!(
        "| lock | place | threads | median | p99 | waiter CPU per wait |\n| --- | --- | --- | ---: | ---: | ---: |"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for p in places {
        let d = p.root.path();
        for apart in [false, true] {
            if apart && cpus < 2 {
                continue;
            }
            APART.store(apart, std::sync::atomic::Ordering::Relaxed);
            let threads = if apart {
                "pinned apart"
            } else {
                "as scheduled"
            };
            let row = |lock: &str, (m, p99, c): (f64, f64, f64)| {
                println!(
                    "| {lock} | {} | {threads} | {m:.0} | {p99:.0} | {c:.0} µs |",
                    p.name
                );
            };
            let file = fresh(d, "hf").join("f");
            File::create(&file).unwrap();
            let flock = || {
                let f = File::open(&file).unwrap();
                f.lock().unwrap();
                f
            };
            row("flock", handoff(rounds, flock, drop, flock, drop));
            // The protocol's own floor: the holder renames the lock away and unlocks its
            // beacon; the waiter, its candidate staged and locked, sleeps in flock on the
            // holder's directory and renames its candidate in. No checks, no records.
            let fd = fresh(d, "hfloor");
            // Directory-relative calls, as dirlock makes them.
            let at = File::open(&fd).unwrap();
            let serial = std::sync::atomic::AtomicU64::new(0);
            let take = |wait: bool| {
                let (beacon, n, cand) = stage(&at, &serial);
                // The waiter keeps the old directory open past its rename (its final close,
                // an inode eviction on disk, stays off the critical path, as in dirlock).
                let seen = wait.then(|| {
                    let old = at_open(&at, c"x.lock");
                    old.lock_shared().unwrap();
                    old
                });
                at_rename(&at, &cand, c"x.lock");
                (beacon, n, seen)
            };
            let give = |(beacon, n, _seen): (File, u64, Option<File>)| {
                let tomb = std::ffi::CString::new(format!("x.lock.tombstone.{n}")).unwrap();
                at_rename(&at, c"x.lock", &tomb);
                beacon.unlock().unwrap();
                drop(beacon);
                at_rmdir(&at, &tomb);
            };
            row(
                "floor: rename away, unlock; rename in",
                handoff(rounds, || take(false), give, || take(true), give),
            );
            // The exchange's own floor, where the filesystem has it: the waiter, its candidate
            // staged and locked, sleeps in flock on the holder's directory; the holder
            // exchanges the two, unlocks, yields (as dirlock does, so that the waiter runs
            // first) and retires its old lock. No checks, no records, no queue: what no
            // handoff by exchange can go below.
            let xd = fresh(d, "hexchange");
            let xat = File::open(&xd).unwrap();
            let probe = (c"x.probe.a", c"x.probe.b");
            for n in [probe.0, probe.1] {
                drop(at_mkdir_open(&xat, n));
            }
            let exchanges = renameat2(&xat, probe.0, probe.1, libc::RENAME_EXCHANGE).is_ok();
            for n in [probe.0, probe.1] {
                at_rmdir(&xat, n);
            }
            let xserial = std::sync::atomic::AtomicU64::new(0);
            let xtake = |wait: bool| {
                let (beacon, n, cand) = stage(&xat, &xserial);
                let seen = if wait {
                    let old = at_open(&xat, c"x.lock");
                    old.lock_shared().unwrap();
                    Some(old)
                } else {
                    at_rename(&xat, &cand, c"x.lock");
                    None
                };
                (beacon, n, seen)
            };
            // Hands the lock to the waiter that took the next number, or (none staged)
            // retires it.
            let xgive = |(beacon, n, _seen): (File, u64, Option<File>)| {
                let next = std::ffi::CString::new(format!("x.lock.candidate.{}", n + 1)).unwrap();
                let tomb = std::ffi::CString::new(format!("x.lock.tombstone.{n}")).unwrap();
                hand_on(&xat, beacon, &next, &tomb, Vec::new());
            };
            if exchanges {
                row(
                    "exchange floor: exchange, unlock",
                    handoff(rounds, || xtake(false), xgive, || xtake(true), xgive),
                );
                checked_exchanges(d, rounds, row);
            }
            let locks = Locks::in_dir(fresh(d, "handoff")).unwrap();
            for (lock, deadline) in [
                ("**dirlock** (no deadline: flock)", None),
                (
                    "**dirlock** (with a deadline: inotify)",
                    Some(Duration::from_secs(60)),
                ),
            ] {
                let wait = || {
                    let req = locks.named_lock("h.lock").durable(false);
                    match deadline {
                        Some(t) => req.wait(t),
                        None => req.wait(Wait::Forever),
                    }
                    .acquire()
                    .unwrap()
                };
                let hold = || locks.named_lock("h.lock").durable(false).acquire().unwrap();
                let release = |g: dirlock::LockGuard| g.release().unwrap();
                row(lock, handoff(rounds, hold, release, wait, release));
            }
            if !apart {
                let dl = fresh(d, "hdl").join("x.lock");
                let dl_rounds = if quick() { 3 } else { 10 };
                let take = || dir_lock::DirLock::new_sync(&dl).unwrap();
                row("dir-lock 0.5", handoff(dl_rounds, take, drop, take, drop));
            }
        }
    }
    APART.store(false, std::sync::atomic::Ordering::Relaxed);
}
