//! Where the command meets its environment (issue 18): who really holds a lock, signals the
//! caller set, and the command's environment near the kernel's limits. Each test here failed
//! on the code before its fix.

use crate::common::*;
use crate::BIN;
use std::path::Path;
use std::process::{Command, Output};

fn dirlock_in(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args.iter().take(1))
        .arg("--dir")
        .arg(dir)
        .args(&args[1..]);
    c
}

fn out(mut cmd: Command) -> Output {
    cmd.output().unwrap()
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

// ---- Who really holds it -------------------------------------------------------------------

/// A holder SIGKILLed after it started a child that keeps the lock (it inherited the beacon):
/// the lock rightly stays held, and `status`, `run -n` and `unlock` say that its recorded
/// owner has exited and another process keeps it. (They said "held by pid N, judged live",
/// with N dead.)
#[test]
fn a_lock_kept_by_a_dead_holders_child_says_who_keeps_it() {
    let fx = Fixture::new();
    let pidfile = fx.tmp.path().join("keeper");
    let script = format!(
        "sleep 300 & echo $! > {0}.tmp && mv {0}.tmp {0}; wait",
        pidfile.display()
    );
    let mut wrapper = ChildGuard::spawn(dirlock_in(
        fx.dir(),
        &["run", "--lock", "k.lock", "--", "sh", "-c", &script],
    ));
    let keeper = PidGuard(read_pid(&pidfile));
    let dead = wrapper.id();
    wrapper.0.kill().unwrap();
    wrapper.0.wait().unwrap();
    assert!(alive(keeper.0), "the background child keeps running");
    let expect =
        format!("its recorded owner, pid {dead}, has exited, but another process keeps the lock");
    for args in [
        &["status", "--lock", "k.lock"][..],
        &["run", "-n", "--lock", "k.lock", "--", "true"],
        &["unlock", "--lock", "k.lock"],
    ] {
        let o = out(dirlock_in(fx.dir(), args));
        assert_eq!(o.status.code(), Some(75), "{args:?}: {}", said(&o));
        assert!(said(&o).contains(&expect), "{args:?}: {}", said(&o));
    }
}
