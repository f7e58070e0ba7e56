//! The queue and the reference implementation, which does not queue: dirlock processes that
//! hand a lock on to each other without end leave it free for a moment every two seconds, and
//! the reference, polling every 25 ms, finds it free then. Needs what `interop.rs` needs
//! (Node.js, npm, the reference): skipped with a line without them.

use crate::common::*;
use crate::interop::{text, Shared};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[test]
fn the_reference_gets_a_turn_beside_dirlocks_that_hand_the_lock_on() {
    let name = "interop_queue::the_reference_gets_a_turn_beside_dirlocks_that_hand_the_lock_on";
    let Some(s) = Shared::new(name) else {
        return;
    };
    let home = s.repo();
    let home = home.to_str().unwrap();
    let path = s.dirlock(&["path", "--app", "apnea", "--global-setup", home]);
    let queue = PathBuf::from(format!("{}.queue", text(&path).trim_end()));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Six loops of `dirlock run`, each holding the lock 20 ms: the others wait meanwhile,
        // and each release hands the lock on.
        let loops: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    let start = Instant::now();
                    while !stop.load(Ordering::Relaxed) && start.elapsed().as_secs() < 90 {
                        let out = s.dirlock(&[
                            "run",
                            "-q",
                            "--app",
                            "apnea",
                            "--global-setup",
                            home,
                            "--",
                            "sleep",
                            "0.02",
                        ]);
                        assert!(out.status.success(), "{}", text(&out));
                    }
                })
            })
            .collect();
        let contended = eventually(Duration::from_secs(30), || queue.exists());
        let mut node = ChildGuard::spawn(s.node(&["setup-turn", home]).stdout(Stdio::piped()));
        let turn = node.wait_for(Duration::from_secs(60));
        stop.store(true, Ordering::Relaxed);
        for l in loops {
            l.join().unwrap();
        }
        assert!(contended, "the dirlock loops never queued");
        let status = turn.expect("the reference never found the lock free in 60 s");
        let out = node.output();
        assert!(status.success(), "{}", text(&out));
        eprintln!(
            "interop: the reference waited {} ms beside dirlocks handing the lock on",
            String::from_utf8_lossy(&out.stdout).trim()
        );
    });
}
