//! The holder process of the portable tests (the library's and the command's): any command
//! that prints `held PATH` once it holds its lock. Nothing here is platform-specific, so the
//! same code serves on Linux and on Windows under Wine.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A holder process, killed (and reaped) when dropped, however the test ends.
pub struct Holder {
    child: Child,
}

impl Holder {
    /// Starts `cmd` and returns once it has printed its `held` line; fails the test if it has
    /// not within a minute (its output is read in a thread, so a holder that never takes the
    /// lock cannot hang the test; the thread ends with the killed holder's pipe).
    pub fn start(cmd: &mut Command) -> Holder {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut holder = Holder { child };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(line)) if line.starts_with("held ") => return holder,
                Ok(Ok(_)) => {}
                other => {
                    let _ = holder.child.kill();
                    let status = holder.child.wait();
                    panic!("the holder did not take the lock: {other:?}, {status:?}");
                }
            }
        }
    }

    /// Owns `child` the same way (killed when dropped), without waiting for any line.
    #[allow(dead_code, reason = "only the command's tests adopt a process")]
    pub fn adopt(child: Child) -> Holder {
        Holder { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it without a release, as SIGKILL or `TerminateProcess` (`taskkill /F`) would, and
    /// reaps it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
