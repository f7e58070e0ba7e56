//! The Windows benchmarks: the uncontended cycle and the handoff between two threads, for
//! dirlock and for `LockFileEx` (one byte, exclusive), in the temporary directory. Under
//! Wine these are Wine's figures (its server makes every file call a round trip): read the
//! ratio to the kernel lock of the same run, not the microseconds, and never as Windows
//! performance. Run: `cargo bench --target x86_64-pc-windows-gnu` with the Wine runner.

#![allow(unsafe_code)]

use dirlock::{Locks, Wait};
use std::fs::File;
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::quick;

/// [`super::per_cycle`] in batches of 20 (Wine is slow).
fn per_cycle(budget: Duration, cycle: impl FnMut()) -> f64 {
    super::per_cycle(budget, 20, cycle)
}

/// `LockFileEx` of the file's first byte, exclusive and blocking (std's `File::lock` locks the
/// whole range, which Wine 8 refuses to unlock with `ERROR_LOCK_VIOLATION`).
fn lock(file: &File) {
    // SAFETY: OVERLAPPED is plain data; all-zero is offset 0 and no event.
    let mut ov: windows_sys::Win32::System::IO::OVERLAPPED = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is open; `ov` lives across the (synchronous) call.
    let ok = unsafe {
        windows_sys::Win32::Storage::FileSystem::LockFileEx(
            file.as_raw_handle(),
            windows_sys::Win32::Storage::FileSystem::LOCKFILE_EXCLUSIVE_LOCK,
            0,
            1,
            0,
            &mut ov,
        )
    };
    assert_ne!(ok, 0, "LockFileEx: {}", std::io::Error::last_os_error());
}

/// Unlocks what [`lock`] locked.
fn unlock(file: &File) {
    // SAFETY: the handle is open; the range is the one locked.
    let ok = unsafe {
        windows_sys::Win32::Storage::FileSystem::UnlockFile(file.as_raw_handle(), 0, 0, 1, 0)
    };
    assert_ne!(ok, 0, "UnlockFile: {}", std::io::Error::last_os_error());
}

/// Two threads each take the lock `rounds` times (`take` returns a guard released on drop);
/// µs per handoff while both contend.
fn two_threads<G>(rounds: usize, take: impl Fn(usize) -> G + Send + Sync + 'static) -> f64 {
    let take = Arc::new(take);
    let start = Arc::new(Barrier::new(3));
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (take, start, inside) = (take.clone(), start.clone(), inside.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..rounds {
                    let guard = take(t);
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(guard);
                }
            })
        })
        .collect();
    start.wait();
    let t = Instant::now();
    for th in threads {
        th.join().unwrap();
    }
    t.elapsed().as_secs_f64() * 1e6 / (2 * rounds) as f64
}

fn fresh(root: &Path, name: &str) -> std::path::PathBuf {
    let p = root.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

pub fn main() {
    if !super::measuring() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let budget = Duration::from_millis(if quick() { 200 } else { 1000 });
    println!("## dirlock benchmarks on Windows (under Wine: Wine's figures, not Windows')");
    println!("\n### Uncontended acquire + release (µs per cycle)\n");
    println!("| lock | µs | × LockFileEx |\n| --- | ---: | ---: |");
    let file = File::create(fresh(root.path(), "k").join("f")).unwrap();
    let floor = per_cycle(budget, || {
        lock(&file);
        unlock(&file);
    });
    println!("| LockFileEx, kept file | {floor:.1} | 1.0 |");
    for durable in [false, true] {
        let locks = Locks::in_dir(root.path().join(format!("d-{durable}"))).unwrap();
        let us = per_cycle(budget, || {
            locks
                .named_lock("b.lock")
                .durable(durable)
                .acquire()
                .unwrap()
                .release()
                .unwrap();
        });
        let tag = if durable { "durable" } else { "not durable" };
        println!("| **dirlock**, {tag} | {us:.1} | {:.1} |", us / floor);
    }

    let rounds = if quick() { 50 } else { 300 };
    println!("\n### Handoff between two threads that both want the lock (µs per handoff)\n");
    println!("| lock | µs | × LockFileEx |\n| --- | ---: | ---: |");
    let path = fresh(root.path(), "h").join("f");
    File::create(&path).unwrap();
    let files: Arc<Vec<File>> = Arc::new((0..2).map(|_| File::open(&path).unwrap()).collect());
    let floor = two_threads(rounds, move |t| {
        let files = files.clone();
        lock(&files[t]);
        FileGuard(files, t)
    });
    println!("| LockFileEx, blocking | {floor:.1} | 1.0 |");
    let dir = root.path().join("handoff");
    Locks::in_dir(&dir).unwrap();
    let us = two_threads(rounds, move |_| {
        Locks::in_dir(&dir)
            .unwrap()
            .named_lock("h.lock")
            .wait(Wait::Forever)
            .acquire()
            .unwrap()
    });
    println!(
        "| **dirlock**, Wait::Forever | {us:.1} | {:.1} |",
        us / floor
    );
}

/// A held `File::lock` on one of the shared handles, unlocked when dropped.
struct FileGuard(Arc<Vec<File>>, usize);

impl Drop for FileGuard {
    fn drop(&mut self) {
        unlock(&self.0[self.1]);
    }
}
