//! Signals: any that would end `dirlock run` abandons a wait and runs nothing; one that comes
//! while the command starts is not lost; once it runs, they reach it, after a wait too.

use crate::cli::{dirlock, text};
use crate::common::*;
use crate::{dirlock_in, BIN};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Any signal that ends a process by default abandons a wait: nothing is left behind (no
/// candidate until a sweep), nothing runs, and `dirlock run` dies of the signal, as flock(1)
/// does (SIGQUIT and SIGUSR1 once killed it with its candidate left; SIGPIPE was ignored).
#[test]
fn signals_abandon_a_wait_and_run_nothing() {
    for (sig, code, how) in [
        (libc::SIGTERM, 143, "--wait-forever"),
        (libc::SIGINT, 130, "--wait-forever"),
        (libc::SIGHUP, 129, "--timeout=30"),
        (libc::SIGTERM, 143, "global"),
        (libc::SIGQUIT, 131, "--wait-forever"),
        (libc::SIGUSR1, 138, "--wait-forever"),
        (libc::SIGUSR2, 140, "--timeout=30"),
        (libc::SIGALRM, 142, "--wait-forever"),
        (libc::SIGPIPE, 141, "--wait-forever"),
    ] {
        let fx = Fixture::new();
        let target: Vec<String> = if how == "global" {
            vec!["--global-setup".into(), fx.repo().display().to_string()]
        } else {
            vec!["--lock".into(), "w.lock".into(), how.into()]
        };
        let holder_args: Vec<&str> = target
            .iter()
            .filter(|a| !a.starts_with("--wait-forever") && !a.starts_with("--timeout"))
            .map(String::as_str)
            .collect();
        let _holder = Holder::start(fx.dir(), &holder_args);
        let ran = fx.tmp.path().join("ran");
        let mut args: Vec<&str> = vec!["run"];
        args.extend(target.iter().map(String::as_str));
        args.extend(["--", "touch", ran.to_str().unwrap()]);
        let mut waiter = ChildGuard::spawn(dirlock_in(fx.dir(), &args).stderr(Stdio::piped()));
        // Waiting: its candidate is staged beside the holder's lock.
        assert!(eventually(Duration::from_secs(20), || fx
            .entries()
            .iter()
            .any(|e| e.contains(".candidate."))));
        std::thread::sleep(Duration::from_millis(50));
        assert!(signal(waiter.0.id(), sig));
        let status = waiter.wait_for(Duration::from_secs(10));
        assert_eq!(
            status.map(shell_status),
            Some(code),
            "SIG{sig} while waiting ({how}) must end the wait"
        );
        assert!(!ran.exists(), "SIG{sig}: the command ran");
        assert!(
            fx.entries().iter().all(|e| !e.contains(".candidate.")),
            "SIG{sig}: left {:?}",
            fx.entries()
        );
    }
}

/// Runs shell command `inner` on a terminal of its own (script(1)), its output to `stdout`.
fn in_a_terminal(inner: &str, stdout: Stdio) -> ChildGuard {
    ChildGuard::spawn(
        Command::new("script")
            .args(["-qec", inner, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::null()),
    )
}

/// Types Ctrl-C on the terminal of `script` (see [`in_a_terminal`]), which stays open.
fn press_ctrl_c(script: &mut ChildGuard) {
    let stdin = script.0.stdin.as_mut().unwrap();
    std::io::Write::write_all(stdin, b"\x03").unwrap();
}

/// Ctrl-C on a terminal reaches a waiting `dirlock run` (the kernel sends SIGINT to the
/// foreground process group).
#[test]
fn ctrl_c_on_a_terminal_abandons_a_wait() {
    if lacks(
        "signals::ctrl_c_on_a_terminal_abandons_a_wait",
        "script(1) from util-linux (a terminal)",
        have("script"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    let ran = fx.tmp.path().join("ran");
    let inner = format!(
        "exec {BIN} run --dir {} --lock w.lock --wait-forever -- touch {}",
        fx.dir().display(),
        ran.display()
    );
    let mut script = in_a_terminal(&inner, Stdio::piped());
    let mut stdout = script.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut seen = Vec::new();
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(11).any(|w| w == b"waiting for") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the run never said it waits");
    press_ctrl_c(&mut script);
    let status = script.wait_for(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(130), "Ctrl-C ignored");
    assert!(!ran.exists());
    assert_eq!(fx.entries(), vec!["w.lock".to_owned()]);
}

/// A Ctrl-C that comes after the lock is taken but before the command exists is not lost: the
/// command (started meanwhile) gets it. strace slows the start down to make the window wide.
#[test]
fn ctrl_c_while_the_command_starts_is_not_lost() {
    if lacks(
        "signals::ctrl_c_while_the_command_starts_is_not_lost",
        "script(1) and strace",
        have("script") && have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let out_file = fx.tmp.path().join("out");
    let inner = format!(
        "strace -o /dev/null -f -e trace=clone,clone3 -e inject=clone:delay_enter=2000000 {BIN} run --dir {} --lock a.lock -- sh -c 'echo started > {1}; sleep 3; echo finished >> {1}'",
        fx.dir().display(),
        out_file.display()
    );
    let mut script = in_a_terminal(&inner, Stdio::null());
    // The lock is taken at once (nothing holds it), then the start is delayed 2 s.
    std::thread::sleep(Duration::from_millis(1000));
    press_ctrl_c(&mut script);
    let status = script.wait_for(Duration::from_secs(20));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "the Ctrl-C was lost"
    );
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(
        !out.contains("finished"),
        "the command ran to its end: {out:?}"
    );
}

/// A signal that comes as `dirlock run` ends on a failed acquisition ends it by that signal, as
/// one during the wait does (it exited with the failure's status, 75, and a loop that retries
/// on failure went on). strace holds `run` at its exit for the signal to come there.
#[test]
#[cfg(target_os = "linux")] // strace, /proc
fn a_signal_as_a_failed_run_ends_ends_it() {
    if lacks(
        "signals::a_signal_as_a_failed_run_ends_ends_it",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "f.lock"]);
    let dir = fx.dir().display().to_string();
    let mut traced = ChildGuard::spawn(
        Command::new("strace")
            .args(["-o", "/dev/null", "-f", "-e", "trace=exit_group"])
            .args(["-e", "inject=exit_group:delay_enter=3000000"])
            .args([
                BIN, "run", "--dir", &dir, "--lock", "f.lock", "-n", "-q", "--", "true",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    // `run`, the tracer's child, at the entry of its exit_group (the number first in
    // /proc/PID/syscall).
    let tracer = traced.0.id();
    let children = format!("/proc/{tracer}/task/{tracer}/children");
    let run = || {
        std::fs::read_to_string(&children)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    };
    let exiting = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| s.split(' ').next() == Some(&libc::SYS_exit_group.to_string()))
    };
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            pid = run();
            pid.is_some_and(exiting)
        }),
        "run did not come to its exit"
    );
    assert!(signal(pid.unwrap(), libc::SIGTERM));
    let status = traced.wait_for(Duration::from_secs(20));
    assert_eq!(status.map(shell_status), Some(143), "the signal was lost");
}

/// A Ctrl-C that `dirlock run` received before the command existed is not lost when the thread
/// that receives signals is slow to act on it: strace slows the start down, so that Ctrl-C
/// comes before it, and holds that thread back well past it. (The command ran to its end: the
/// thread took the signal, then found the command running and took it for one the command had
/// got from the terminal itself.)
#[test]
#[cfg(target_os = "linux")] // strace
fn ctrl_c_before_the_command_exists_is_not_lost_by_a_slow_signal_thread() {
    let test = "signals::ctrl_c_before_the_command_exists_is_not_lost_by_a_slow_signal_thread";
    if lacks(
        test,
        "script(1) and strace",
        have("script") && have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let out_file = fx.tmp.path().join("out");
    let inner = format!(
        "strace -o /dev/null -f -e 'trace=/^(clone|poll|ppoll|rt_sigtimedwait)$' -e inject=clone:delay_enter=3000000 -e 'inject=/^(poll|ppoll|rt_sigtimedwait)$:delay_exit=4000000' {BIN} run --dir {} --lock a.lock -- sh -c 'echo started > {1}; sleep 6; echo finished >> {1}'",
        fx.dir().display(),
        out_file.display()
    );
    let mut script = in_a_terminal(&inner, Stdio::null());
    // Once the lock is taken (nothing holds it; the runtime's first look at its descriptors,
    // a poll, is held back too), the start is delayed 3 s.
    assert!(eventually(Duration::from_secs(20), || fx
        .entries()
        .contains(&"a.lock".to_owned())));
    std::thread::sleep(Duration::from_millis(300));
    press_ctrl_c(&mut script);
    let status = script.wait_for(Duration::from_secs(30));
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(!out.contains("finished"), "the Ctrl-C was lost: {out:?}");
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{out:?}");
}

/// Once the command runs, a signal another process sends `dirlock run` reaches it after a wait
/// too; the lock is released after the command exits.
#[test]
fn a_signal_reaches_the_command_after_a_wait() {
    let fx = Fixture::new();
    let (ready, got) = (fx.tmp.path().join("ready"), fx.tmp.path().join("got"));
    let holder = Holder::start(fx.dir(), &["--lock", "s.lock"]);
    let script = format!(
        "trap 'echo term > {}; exit 5' TERM; echo > {}; while :; do sleep 0.02; done",
        got.display(),
        ready.display()
    );
    let mut run = ChildGuard::spawn(
        dirlock_in(
            fx.dir(),
            &["run", "--lock", "s.lock", "--", "sh", "-c", &script],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null()),
    );
    assert!(eventually(Duration::from_secs(20), || fx
        .entries()
        .iter()
        .any(|e| e.contains(".candidate."))));
    holder.release();
    assert!(eventually(Duration::from_secs(20), || ready.exists()));
    assert!(signal(run.0.id(), libc::SIGTERM));
    let status = run.wait_for(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(5), "the command's trap");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "term\n");
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "released after the command exited"
    );
}

/// An alarm the caller set before it ran `dirlock run` (exec keeps it; the command, a child,
/// does not inherit it) reaches the command when it fires, as another process's signal does:
/// the kernel sends it to `dirlock run` alone. (It was taken for a terminal's signal, which
/// the command gets itself, and never passed on.)
#[test]
fn an_inherited_alarm_reaches_the_command() {
    let fx = Fixture::new();
    let (ready, got) = (fx.tmp.path().join("ready"), fx.tmp.path().join("got"));
    let script = format!(
        "trap 'echo alarm > {}; exit 6' ALRM; echo > {}; while :; do sleep 0.02; done",
        got.display(),
        ready.display()
    );
    let mut cmd = dirlock_in(
        fx.dir(),
        &["run", "--lock", "a.lock", "--", "sh", "-c", &script],
    );
    let mut run = ChildGuard::spawn(
        crate::common::sys::with_alarm(&mut cmd, 2)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let status = run.wait_for(Duration::from_secs(20));
    assert!(
        ready.exists(),
        "the command did not start within the alarm's 2 s"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(6), "the command's trap");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "alarm\n");
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "released after the command"
    );
}

/// A signal pending when `dirlock run` starts, sent by the process itself before it became
/// `dirlock run` (a wrapper that blocked it, sent it and exec'd), ends it before the command
/// runs, as any signal during the wait does. (Those that named this process as their sender
/// were passed over, to skip the SIGPIPE of a write to a broken stderr.)
#[test]
#[cfg(any(target_os = "linux", target_os = "freebsd"))] // (macOS leaves a blocked one blocked)
fn a_signal_pending_from_before_the_exec_ends_run() {
    let fx = Fixture::new();
    let ran = fx.tmp.path().join("ran");
    let args = [
        "run",
        "--lock",
        "p.lock",
        "--",
        "touch",
        ran.to_str().unwrap(),
    ];
    let mut cmd = dirlock_in(fx.dir(), &args);
    let mut run = ChildGuard::spawn(
        crate::common::sys::with_pending(&mut cmd, libc::SIGTERM)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let status = run.wait_for(Duration::from_secs(20));
    assert_eq!(status.map(shell_status), Some(143), "the signal was lost");
    assert!(!ran.exists(), "the command ran");
}

/// A SIGPIPE that `dirlock run` causes itself, writing to a stderr no one reads (`2>&1 | head
/// -1` once head is gone), is no signal to stop: the command runs, whether the lock was free
/// (`-v` says so once it is held) or waited for (it says whom it waits for).
#[test]
fn a_broken_stderr_stops_nothing() {
    for waited in [false, true] {
        let fx = Fixture::new();
        let ran = fx.tmp.path().join("ran");
        let holder = waited.then(|| Holder::start(fx.dir(), &["--lock", "p.lock"]));
        let mut cmd = dirlock_in(
            fx.dir(),
            &[
                "run",
                "-v",
                "--lock",
                "p.lock",
                "--",
                "touch",
                ran.to_str().unwrap(),
            ],
        );
        let mut run = ChildGuard::spawn(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::from(crate::common::sys::broken_pipe())),
        );
        if let Some(holder) = holder {
            assert!(eventually(Duration::from_secs(20), || fx
                .entries()
                .iter()
                .any(|e| e.contains(".candidate."))));
            std::thread::sleep(Duration::from_millis(100)); // it said whom it waits for
            holder.release();
        }
        let status = run.wait_for(Duration::from_secs(20));
        assert_eq!(status.map(shell_status), Some(0), "waited: {waited}");
        assert!(ran.exists(), "waited: {waited}: the command did not run");
    }
}

/// A waiter killed while it waits is listed as one that ended waiting, never as one that held
/// the lock (it said "ended without releasing it").
#[test]
fn a_waiter_killed_while_it_waits_is_said_to_have_ended_waiting() {
    let fx = Fixture::new();
    let _holder = Holder::start(fx.dir(), &["--lock", "w.lock"]);
    let args = [
        "run",
        "--lock",
        "w.lock",
        "--purpose",
        "nightly",
        "--",
        "true",
    ];
    let mut waiter = ChildGuard::spawn(dirlock_in(fx.dir(), &args).stderr(Stdio::null()));
    let status = || text(&dirlock(fx.dir(), &["status", "--lock", "w.lock"]).stdout);
    assert!(eventually(Duration::from_secs(20), || status()
        .contains("  waiting: pid")));
    assert!(signal(waiter.0.id(), libc::SIGKILL));
    waiter.wait_for(Duration::from_secs(10)).unwrap();
    let says = status();
    let pid = waiter.0.id();
    assert!(
        says.contains(&format!("  ended while waiting: pid {pid} ")),
        "{says}"
    );
    assert!(!says.contains("without releasing"), "{says}");
}
