//! Many tasks of one process and another process contend for one lock, on one thread: the
//! tasks wait in the runtime's reactor (no thread each), are served in the order they asked,
//! and one gives up at a timeout while another is cancelled by dropping its future.
//!
//! Run: `cargo run --example async --features tokio`

use dirlock::{Error, Locks, Wait};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("hold") {
        let dir = args.next().ok_or("hold needs a directory")?;
        return hold(&dir);
    }

    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("locks");
    let locks = Locks::in_dir(&dir)?;
    let mut other = Command::new(std::env::current_exe()?)
        .arg("hold")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    BufReader::new(other.stdout.take().ok_or("no stdout")?).read_line(&mut String::new())?;
    println!("[1] process {} holds shared.lock", other.id());

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        give_up_and_drop(&locks).await;
        a_thousand_tasks(&locks, &mut other).await
    })?;
    other.wait()?;
    Ok(())
}

/// The other process: take the lock, say so, and hold it until told to let go (a line on
/// stdin, or its end).
fn hold(dir: &str) -> Result<(), Box<dyn std::error::Error>> {
    let guard = Locks::in_dir(dir)?
        .named_lock("shared.lock")
        .purpose("the other process")
        .acquire()?;
    println!("held");
    std::io::stdin().read_line(&mut String::new())?;
    guard.release()?;
    Ok(())
}

/// A task gives up at a timeout, another's wait is dropped.
async fn give_up_and_drop(locks: &Locks) {
    // A timeout: the error names who held the lock.
    let err = locks
        .named_lock("shared.lock")
        .wait(Duration::from_millis(200))
        .acquire_async()
        .await
        .expect_err("the lock is held");
    println!("[2] a task gave up after 200 ms:\n    {err}");

    // A cancellation by drop: nothing is left behind.
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        locks
            .named_lock("shared.lock")
            .wait(Wait::Forever)
            .acquire_async(),
    )
    .await;
    assert!(dropped.is_err());
    println!("[3] a task's wait was dropped after 100 ms; it left nothing behind");
}

/// A thousand tasks wait on this one thread; each takes the lock once, in turn, after the
/// `other` process lets go.
async fn a_thousand_tasks(
    locks: &Locks,
    other: &mut std::process::Child,
) -> Result<(), Box<dyn std::error::Error>> {
    let served = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (locks, served) = (locks.clone(), served.clone());
            tokio::spawn(async move {
                locks
                    .named_lock("shared.lock")
                    .wait(Wait::Forever)
                    .run_async(|| async {
                        served.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Error>(())
                    })
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!(
        "[4] 1000 tasks wait on one thread; {} served while the other process holds the lock",
        served.load(Ordering::SeqCst)
    );
    drop(other.stdin.take()); // the other process lets go
    for t in tasks {
        t.await??;
    }
    println!(
        "[5] the other process released; all {} tasks had the lock once, in {:?}",
        served.load(Ordering::SeqCst),
        started.elapsed()
    );
    Ok(())
}
