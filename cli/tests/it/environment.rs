//! Where the command meets its environment (issue 18): who really holds a lock, signals the
//! caller set, and the command's environment near the kernel's limits. Each test here failed
//! on the code before its fix.

use crate::common::*;
use crate::{dirlock_in, BIN};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// The owner record at `path`.
fn recorded(path: &Path) -> dirlock::Owner {
    dirlock::Owner::parse(&std::fs::read(path).unwrap()).unwrap()
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
        &["run", "-n", "--lock", "k.lock", "--", "sh", "-c", &script],
    ));
    let keeper = PidGuard(read_pid(&pidfile));
    let dead = wrapper.id();
    wrapper.0.kill().unwrap();
    wrapper.0.wait().unwrap();
    assert!(alive(keeper.0), "the background child keeps running");
    let expect = format!("held by a process that pid {dead} ");
    for args in [
        &["status", "--lock", "k.lock"][..],
        &["run", "-n", "--lock", "k.lock", "--", "true"],
        &["unlock", "--lock", "k.lock"],
    ] {
        let o = out(dirlock_in(fx.dir(), args));
        assert_eq!(o.status.code(), Some(75), "{args:?}: {}", said(&o));
        assert!(
            said(&o).contains(&expect)
                && said(&o).contains(&format!("pid {dead} itself has exited")),
            "{args:?}: {}",
            said(&o)
        );
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
        format!("{pid} {id} p.lock 0b1f5a52-0000-4000-8000-000000000000\n"), // another one's
        format!("{pid} {id} p.lock 0b1f5a52-0000-4000-8000-000000000000 more\n"),
    ] {
        let mut run = dirlock_in(fx.dir(), &["run", "-n", "--lock", "p.lock", "--", "true"]);
        run.env("DIRLOCK_HELD", &stale);
        let o = out(run);
        assert_eq!(o.status.code(), Some(75), "{stale:?}: {}", said(&o));
        assert!(!said(&o).contains("parent"), "{stale:?}: {}", said(&o));
        assert!(said(&o).contains(&format!("pid {pid}")), "{}", said(&o));
    }
    // The holder's own line (as it gives it to its command) is its parent's lock.
    let token = recorded(&holder.path.join("owner.json")).token;
    // So is a line without a token (written by a build before it): it says only its pid.
    for line in [
        format!("{pid} {id} p.lock {token}\n"),
        format!("{pid} {id} p.lock\n"),
    ] {
        let mut run = dirlock_in(
            fx.dir(),
            &["run", "--wait-forever", "--lock", "p.lock", "--", "true"],
        );
        run.env("DIRLOCK_HELD", line);
        let o = out(run);
        assert!(
            said(&o).contains("held by this process's parent"),
            "{}",
            said(&o)
        );
    }
}

/// An inherited `DIRLOCK_HELD` so long that this lock's line takes it past the kernel's limit
/// for one variable (128 KiB) is named in the error, with what to do, instead of "cannot run
/// true: Argument list too long", which blames the command.
#[test]
fn a_held_variable_past_the_kernels_limit_is_named() {
    let fx = Fixture::new();
    let line = "1 1:1 elsewhere.lock 0b1f5a52-0000-4000-8000-000000000000\n";
    // 131050 bytes: `dirlock` itself starts (with `DIRLOCK_HELD=` and a terminator, 131064 of
    // the 131072 allowed), and any line added takes it past.
    let mut long = line.repeat(131_050 / line.len());
    long.push_str(&"x".repeat(131_050 - long.len() - 1));
    long.push('\n');
    let mut run = dirlock_in(fx.dir(), &["run", "-n", "--lock", "v.lock", "--", "true"]);
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

// ---- Signals the caller set -----------------------------------------------------------------

/// The signals a process has ignored (`/proc/PID/status`'s `SigIgn` mask).
fn ignored_by(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap()
        .trim();
    u64::from_str_radix(mask, 16).unwrap()
}

/// Signals the caller made ignored stay ignored while `dirlock run` waits, and reach the
/// command ignored, as with flock(1): `nohup dirlock run --wait`, a subshell's `trap ''` and a
/// script's background job (whose SIGINT and SIGQUIT the shell ignores). (They abandoned the
/// wait, 129 or 130, and the job never ran.)
#[test]
fn signals_the_caller_ignored_stay_ignored_while_waiting() {
    for (how, sig) in [
        ("trap '' HUP; exec", libc::SIGHUP),
        ("trap '' INT; exec", libc::SIGINT),
        ("", libc::SIGINT), // a background job: `... &`
        ("", libc::SIGQUIT),
    ] {
        let fx = Fixture::new();
        let holder = Holder::start(fx.dir(), &["--lock", "i.lock"]);
        let ignored = fx.tmp.path().join("ignored");
        let run = format!(
            "{BIN} run --dir {} --lock i.lock --wait-forever -- sh -c 'grep SigIgn /proc/$$/status > {}'",
            fx.dir().display(),
            ignored.display()
        );
        let script = if how.is_empty() {
            format!(
                "{run} & echo $! > {0}.pid.tmp && mv {0}.pid.tmp {0}.pid; wait $!",
                ignored.display()
            )
        } else {
            format!(
                "echo $$ > {0}.pid.tmp && mv {0}.pid.tmp {0}.pid; {how} {run}",
                ignored.display()
            )
        };
        let mut shell = ChildGuard::spawn(Command::new("sh").arg("-c").arg(&script));
        let pid = read_pid(&fx.tmp.path().join("ignored.pid"));
        assert!(eventually(Duration::from_secs(20), || fx
            .entries()
            .iter()
            .any(|e| e.contains(".candidate."))));
        assert_ne!(
            ignored_by(pid) & (1 << (sig - 1)),
            0,
            "{how:?}: the caller ignores it"
        );
        assert!(signal(pid, sig));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            alive(pid),
            "{how:?}: SIG{sig}, ignored by the caller, ended the wait"
        );
        holder.release();
        let status = shell.wait_for(Duration::from_secs(20));
        assert_eq!(status.map(shell_status), Some(0), "{how:?}");
        let mask = std::fs::read_to_string(&ignored).unwrap();
        let mask = u64::from_str_radix(mask.trim_start_matches("SigIgn:").trim(), 16).unwrap();
        assert_ne!(
            mask & (1 << (sig - 1)),
            0,
            "{how:?}: the command got SIG{sig} ignored"
        );
    }
}

/// A stop signal that comes after the lock is taken but before the command starts means it
/// never starts (it is never executed): `dirlock run` releases the lock and dies of the
/// signal. (The signal was forwarded to a command started anyway: one that ignores SIGTERM
/// ran to its end.) Needs strace, to hold the command between its fork and its exec.
#[test]
fn a_stop_signal_before_the_command_starts_means_it_never_starts() {
    if lacks(
        "environment::a_stop_signal_before_the_command_starts_means_it_never_starts",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let ran = fx.tmp.path().join("ran");
    let trace = fx.tmp.path().join("trace");
    // The child's prctl (its death signal, set between fork and exec) takes two seconds.
    let mut run = ChildGuard::spawn(
        Command::new("strace")
            .args(["-f", "-e", "trace=prctl,execve", "-o"])
            .arg(&trace)
            .args(["-e", "inject=prctl:delay_enter=2s"])
            .arg(BIN)
            .args(["run", "--dir"])
            .arg(fx.dir())
            .args(["--lock", "g.lock", "--", "sh", "-c"])
            .arg(format!("trap '' TERM; touch {}; sleep 3", ran.display())),
    );
    let record = fx.dir().join("g.lock").join("owner.json");
    assert!(eventually(Duration::from_secs(20), || record.exists()));
    let pid = recorded(&record).pid;
    sys::child_held_in(pid, 157); // prctl, inside the delay
    assert!(signal(pid, libc::SIGTERM));
    let status = run.wait_for(Duration::from_secs(20));
    assert!(status.is_some(), "dirlock run did not end");
    std::thread::sleep(Duration::from_millis(300));
    let trace = std::fs::read_to_string(&trace).unwrap();
    let execs = trace.lines().filter(|l| l.contains("execve(")).count();
    assert_eq!(
        execs, 1,
        "the command was executed after the stop signal:\n{trace}"
    );
    assert!(!ran.exists(), "the command ran");
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "the lock was not released"
    );
}

/// A signal that comes once the command is past the gate, while it is being executed, is not
/// lost: the command gets it as soon as it runs. (strace holds the command's exec.)
#[test]
fn a_signal_while_the_command_is_being_executed_reaches_it() {
    if lacks(
        "environment::a_signal_while_the_command_is_being_executed_reaches_it",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let out_file = fx.tmp.path().join("out");
    // The second execve (the first is `dirlock run`'s own) takes two seconds.
    let mut run = ChildGuard::spawn(
        Command::new("strace")
            .args(["-f", "-e", "trace=execve", "-o", "/dev/null"])
            .args(["-e", "inject=execve:delay_enter=2s:when=2"])
            .arg(BIN)
            .args(["run", "--dir"])
            .arg(fx.dir())
            .args(["--lock", "e.lock", "--", "sh", "-c"])
            .arg(format!(
                "echo started > {0}; sleep 3; echo finished >> {0}",
                out_file.display()
            )),
    );
    let record = fx.dir().join("e.lock").join("owner.json");
    assert!(eventually(Duration::from_secs(20), || record.exists()));
    let pid = recorded(&record).pid;
    sys::child_held_in(pid, 59); // execve, inside the delay
    assert!(signal(pid, libc::SIGINT));
    let status = run.wait_for(Duration::from_secs(20));
    assert_eq!(status.map(shell_status), Some(130), "the SIGINT was lost");
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(
        !out.contains("finished"),
        "the command ran to its end: {out:?}"
    );
}

// ---- -o and a command that changes its user -------------------------------------------------

/// A command that changes its user clears the kernel's parent-death signal: it outlives a
/// SIGKILLed `dirlock run`. Without -o it keeps the lock held (through the beacon it
/// inherited); with -o nothing holds the lock while it runs on, and the help says exactly that
/// (it said the command dies with its wrapper). Needs root (to change user) and setpriv.
#[test]
fn a_command_that_changes_its_user_outlives_its_wrapper_as_the_help_says() {
    let help = out({
        let mut c = Command::new(BIN);
        c.args(["run", "--help"]);
        c
    });
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("with -o nothing holds the lock while it does"),
        "the -o help does not say what holds: {help}"
    );
    if lacks(
        "environment::a_command_that_changes_its_user_outlives_its_wrapper_as_the_help_says",
        "root and setpriv",
        is_root() && have("setpriv"),
    ) {
        return;
    }
    for no_inherit in [false, true] {
        let fx = Fixture::new();
        // Where the command, as uid 65534, writes its pid: a directory open to all, in one
        // others may enter but not write (so the lock directory beside it stays safe).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(fx.tmp.path(), PermissionsExt::from_mode(0o711)).unwrap();
        let open = fx.tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, PermissionsExt::from_mode(0o1777)).unwrap();
        let pidfile = open.join("pid");
        let mut args = vec!["run", "-n", "--lock", "u.lock"];
        if no_inherit {
            args.push("-o");
        }
        let script = format!(
            "echo $$ > {0}.tmp && mv {0}.tmp {0}; exec sleep 300",
            pidfile.display()
        );
        args.push("--");
        args.extend(crate::advice::NOBODY);
        args.extend(["sh", "-c", &script]);
        let mut wrapper = ChildGuard::spawn(dirlock_in(fx.dir(), &args));
        let command = PidGuard(read_pid(&pidfile));
        wrapper.0.kill().unwrap();
        wrapper.0.wait().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            alive(command.0),
            "-o {no_inherit}: the command died with its wrapper"
        );
        let o = out(dirlock_in(
            fx.dir(),
            &["run", "-n", "--lock", "u.lock", "--", "true"],
        ));
        if no_inherit {
            assert_eq!(
                o.status.code(),
                Some(0),
                "-o: nothing holds the lock: {}",
                said(&o)
            );
        } else {
            assert_eq!(
                o.status.code(),
                Some(75),
                "the beacon holds it: {}",
                said(&o)
            );
        }
    }
}

// ---- Holders on another operating system ----------------------------------------------------

/// The Windows build of `dirlock`, run under Wine beside this Linux one, on one lock
/// directory: each holder is another operating system's to the other, whose hold and process
/// it cannot see. The Wine server is stopped when the test ends.
struct Windows {
    exe: std::path::PathBuf,
    runner: std::path::PathBuf,
    prefix: std::path::PathBuf,
}

impl Windows {
    /// `None` (the test skips, saying so) without Wine and the Windows build, named by
    /// `DIRLOCK_TEST_WINDOWS_EXE` (CI builds it: `cargo build --target x86_64-pc-windows-gnu
    /// -p dirlock-cli`).
    fn find(test: &str) -> Option<Windows> {
        let exe = std::env::var_os("DIRLOCK_TEST_WINDOWS_EXE").map(std::path::PathBuf::from);
        let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/wine-run");
        let have = exe.as_ref().is_some_and(|e| e.is_file())
            && Path::new("/usr/lib/wine/wine64").exists()
            && have("x86_64-w64-mingw32-gcc");
        if lacks(
            test,
            "Wine, MinGW and the Windows build of dirlock (DIRLOCK_TEST_WINDOWS_EXE)",
            have,
        ) {
            return None;
        }
        // The caller's prefix, else this user's as `.ci/wine-run` names it.
        let prefix = std::env::var_os("WINEPREFIX").map_or_else(
            || {
                let tmp = std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into());
                let uid = Command::new("id").arg("-u").output().unwrap().stdout;
                let uid = String::from_utf8(uid).unwrap();
                Path::new(&tmp).join(format!("wine-prefix-for-dirlock-{}", uid.trim()))
            },
            std::path::PathBuf::from,
        );
        Some(Windows {
            exe: exe.unwrap(),
            runner,
            prefix,
        })
    }

    /// The Windows `dirlock` with `args`, where a `Z:` path names a Linux one. Its output goes
    /// to files in `dir`, not pipes: the services Wine starts keep a pipe open long after.
    fn dirlock(&self, dir: &Path, args: &[&str]) -> Command {
        let file = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let mut c = Command::new(&self.runner);
        c.arg(&self.exe)
            .args(args)
            .env("WINEPREFIX", &self.prefix)
            .stdout(file("wine.out"))
            .stderr(file("wine.err"));
        c
    }

    /// Runs [`Windows::dirlock`] to its end (a minute at most) and returns what it said.
    fn run(&self, dir: &Path, args: &[&str]) -> Output {
        let mut child = ChildGuard::spawn(self.dirlock(dir, args));
        let status = child
            .wait_for(Duration::from_secs(60))
            .expect("the Windows dirlock hung");
        Output {
            status,
            stdout: std::fs::read(dir.join("wine.out")).unwrap(),
            stderr: std::fs::read(dir.join("wine.err")).unwrap(),
        }
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        let _ = Command::new("/usr/lib/wine/wineserver")
            .arg("-k")
            .env("WINEPREFIX", &self.prefix)
            .status();
    }
}

/// `path` as Wine names it (its drive `Z:` is `/`).
fn wine_path(path: &Path) -> String {
    format!("Z:{}", path.display())
}

/// A Linux holder and a Windows contender (under Wine) on one directory: the Windows side
/// cannot see the Linux beacon (an `flock`, where it looks for a sharing mode) nor its pid,
/// and judges the lock unknown, never dead; and the other way round, the Linux side judges a
/// Windows holder's lock unknown, not malformed for the modes Wine gives it, and neither
/// `unlock` nor `unlock --force` removes it. (The Windows side judged the live Linux holder
/// dead by proof and ran beside it; Linux called the Windows lock malformed, and `--force`
/// removed it.)
#[test]
fn holders_on_another_operating_system_are_unknown_both_ways() {
    let Some(win) =
        Windows::find("environment::holders_on_another_operating_system_are_unknown_both_ways")
    else {
        return;
    };
    let fx = Fixture::new();
    let dir = wine_path(fx.dir());
    // A Linux holder; Windows contends.
    let holder = Holder::start(fx.dir(), &["--lock", "l.lock"]);
    let ran = wine_path(&fx.tmp.path().join("ran"));
    let o = win.run(
        fx.tmp.path(),
        &[
            "run", "-n", "--dir", &dir, "--lock", "l.lock", "--", "cmd", "/c", "echo", ">", &ran,
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(75),
        "Windows beside a Linux holder: {}",
        said(&o)
    );
    assert!(
        said(&o).contains("another operating system"),
        "{}",
        said(&o)
    );
    assert!(
        !fx.tmp.path().join("ran").exists(),
        "the Windows run ran beside the Linux holder"
    );
    holder.release(); // not lost
                      // A Windows holder; Linux looks, contends and unlocks.
    let until = fx.tmp.path().join("until");
    let mut hold = ChildGuard::spawn(win.dirlock(
        fx.tmp.path(),
        &[
            "hold",
            "--dir",
            &dir,
            "--lock",
            "w.lock",
            "--until",
            &wine_path(&until),
        ],
    ));
    let record = fx.dir().join("w.lock").join("owner.json");
    assert!(
        eventually(Duration::from_secs(60), || record.exists()),
        "the Windows holder"
    );
    let status = out(dirlock_in(fx.dir(), &["status", "--lock", "w.lock"]));
    assert_eq!(status.status.code(), Some(75), "{}", said(&status));
    assert!(
        said(&status).contains("which cannot be checked from here"),
        "{}",
        said(&status)
    );
    for args in [
        &["run", "-n", "--lock", "w.lock", "--", "true"][..],
        &["unlock", "--lock", "w.lock"],
        &["unlock", "--force", "--lock", "w.lock"],
    ] {
        let o = out(dirlock_in(fx.dir(), args));
        assert_eq!(o.status.code(), Some(75), "{args:?}: {}", said(&o));
        assert!(
            record.exists(),
            "{args:?} removed the Windows holder's lock"
        );
    }
    std::fs::write(&until, "").unwrap();
    let released = hold.wait_for(Duration::from_secs(60));
    assert_eq!(
        released.map(shell_status),
        Some(0),
        "the Windows holder's release"
    );
}
