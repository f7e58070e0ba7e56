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

// ---- DIRLOCK_HELD ---------------------------------------------------------------------------

/// The `<dev>:<ino>` of a lock directory, as `DIRLOCK_HELD` writes it.
fn dev_ino(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

/// A stale `DIRLOCK_HELD` line whose pid is now the holder's (pids are reused: every
/// container's main process is pid 1) does not make an unrelated run refuse the lock as its
/// parent's: a line names an acquisition, and only that acquisition is the parent's. (A line's
/// pid alone once did.)
#[test]
fn a_stale_held_line_with_a_reused_pid_names_no_one() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "p.lock"]);
    let id = dev_ino(fx.dir());
    let pid = holder.pid();
    for stale in [
        format!("{pid} {id} p.lock\n"), // without an acquisition
        format!("{pid} {id} 0b1f5a52-0000-4000-8000-000000000000 p.lock\n"), // another one's
    ] {
        let mut run = dirlock_in(fx.dir(), &["run", "-n", "--lock", "p.lock", "--", "true"]);
        run.env("DIRLOCK_HELD", &stale);
        let o = out(run);
        assert_eq!(o.status.code(), Some(75), "{stale:?}: {}", said(&o));
        assert!(!said(&o).contains("parent"), "{stale:?}: {}", said(&o));
        assert!(said(&o).contains(&format!("pid {pid}")), "{}", said(&o));
    }
    // The holder's own line (as it gives it to its command) is its parent's lock.
    let token = String::from_utf8(std::fs::read(holder.path.join("owner.json")).unwrap())
        .unwrap()
        .split("\"token\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let mut run = dirlock_in(
        fx.dir(),
        &["run", "--wait", "--lock", "p.lock", "--", "true"],
    );
    run.env("DIRLOCK_HELD", format!("{pid} {id} {token} p.lock\n"));
    let o = out(run);
    assert!(
        said(&o).contains("held by this process's parent"),
        "{}",
        said(&o)
    );
}

/// An inherited `DIRLOCK_HELD` so long that this lock's line takes it past the kernel's limit
/// for one variable (128 KiB) is named in the error, with what to do, instead of "cannot run
/// true: Argument list too long", which blames the command.
#[test]
fn a_held_variable_past_the_kernels_limit_is_named() {
    let fx = Fixture::new();
    let line = "1 1:1 0b1f5a52-0000-4000-8000-000000000000 elsewhere.lock\n";
    // 131050 bytes: `dirlock` itself starts (with `DIRLOCK_HELD=` and a terminator, 131064 of
    // the 131072 allowed), and any line added takes it past.
    let mut long = line.repeat(131_050 / line.len());
    long.push_str(&"x".repeat(131_050 - long.len() - 1));
    long.push('\n');
    let mut run = dirlock_in(fx.dir(), &["run", "--lock", "v.lock", "--", "true"]);
    run.env("DIRLOCK_HELD", &long);
    let o = out(run);
    assert_eq!(o.status.code(), Some(126), "{}", said(&o));
    assert!(
        said(&o).contains("DIRLOCK_HELD") && said(&o).contains("env -u DIRLOCK_HELD"),
        "{}",
        said(&o)
    );
    assert!(!said(&o).contains("Argument list too long"), "{}", said(&o));
    assert_eq!(fx.entries(), Vec::<String>::new(), "nothing left behind");
}
