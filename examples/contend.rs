//! Two processes contend for one repository lock; the holder is SIGKILLed and the lock is
//! reclaimed at once, with the dead holder's record handed to the new owner.
//!
//! Run: `cargo run --example contend`

use dirlock::{Error, Locks, Wait};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("hold") {
        // The child: take the lock, say so, and hold it until killed.
        let dir = args.next().ok_or("hold needs a directory")?;
        let locks = Locks::in_dir(format!("{dir}/locks"))?;
        let _guard = locks.repository_lock(&dir).purpose("demo sync").acquire()?;
        println!("held");
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }

    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_str().ok_or("non-UTF-8 temp dir")?;
    let locks = Locks::in_dir(tmp.path().join("locks"))?;
    println!("repository: {dir}");
    println!(
        "lock:       {}",
        locks.repository_lock(dir).path()?.display()
    );

    let mut holder = Command::new(std::env::current_exe()?)
        .args(["hold", dir])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(holder.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    println!("\n[1] process {} holds the lock", holder.id());

    match locks.repository_lock(dir).acquire() {
        Err(e @ Error::Locked { .. }) => println!("[2] this process fails fast:\n    {e}"),
        other => return Err(format!("expected the lock to be held, got {other:?}").into()),
    }

    holder.kill()?; // SIGKILL: no destructor, no cleanup
    holder.wait()?;
    println!("\n[3] process {} was killed with SIGKILL", holder.id());

    let start = Instant::now();
    let guard = locks
        .repository_lock(dir)
        .wait(Wait::Timeout(Duration::from_secs(5)))
        .acquire()?;
    let prev = guard.reclaimed_from().ok_or("expected a reclaimed lock")?;
    println!(
        "[4] taken over in {:?}, no grace period: the kernel proved pid {} gone (purpose: {})",
        start.elapsed(),
        prev.pid,
        prev.purpose.as_deref().unwrap_or("-")
    );
    guard.release()?;
    println!(
        "[5] released; the lock directory holds no leftovers: {:?}",
        std::fs::read_dir(locks.dir())?.count() == 0
    );
    Ok(())
}
