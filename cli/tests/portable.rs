//! The `dirlock` command with nothing platform-specific, so that the same tests run on Linux
//! with the rest of the suite and on Windows under Wine in CI (`.ci/run`): a live holder makes
//! `run` exit 75, a holder killed without releasing (`Child::kill`: `SIGKILL`, or
//! `TerminateProcess` as `taskkill /F` does) is reclaimed at once by the next `run`, the
//! command's exit status is passed through, `status --json` parses, and the command of a
//! killed `dirlock run` dies with it (Linux: the parent-death signal; Windows: the job object).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_dirlock");

#[path = "../../tests/common/portable.rs"]
mod portable;
use portable::Holder;

/// A `dirlock hold` of `a.lock` in `dir` until `until` exists, once it holds the lock.
fn start_holder(dir: &Path, until: &Path) -> Holder {
    Holder::start(
        Command::new(EXE)
            .args(["hold", "--lock", "a.lock", "--dir"])
            .arg(dir)
            .arg("--until")
            .arg(until),
    )
}

/// `dirlock ARGS`, with a minute to finish.
fn dirlock(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(EXE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..6000 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("dirlock {args:?} did not finish in a minute");
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// A command that exits with `code`: this test binary running [`exit_with`].
fn exiting_with(code: i32) -> Vec<std::ffi::OsString> {
    let me = std::env::current_exe().unwrap();
    let code = code.to_string();
    [
        me.as_os_str(),
        os("--ignored"),
        os("--exact"),
        os("exit_with"),
        os("--"),
        os(&code),
    ]
    .map(ToOwned::to_owned)
    .to_vec()
}

/// `dirlock ARGS -- COMMAND`, the arguments and the command as `OsStr`s.
fn dirlock_then(args: &[&std::ffi::OsStr], command: &[std::ffi::OsString]) -> Output {
    let mut all: Vec<&std::ffi::OsStr> = args.to_vec();
    all.push(os("--"));
    all.extend(command.iter().map(|a| a.as_os_str()));
    dirlock(&all)
}

/// `dirlock run -n --dir DIR --lock a.lock -- <this binary> exit-with CODE`.
fn run_exiting_with(dir: &Path, code: i32) -> Output {
    dirlock_then(
        &[
            os("run"),
            os("-n"),
            os("--dir"),
            dir.as_os_str(),
            os("--lock"),
            os("a.lock"),
        ],
        &exiting_with(code),
    )
}

/// Exits with the code given after `--`; does nothing as an ordinary test.
#[test]
#[ignore = "a command for the other tests, run by `dirlock run`"]
fn exit_with() {
    if let Some(code) = std::env::args().skip_while(|a| a != "--").nth(1) {
        std::process::exit(code.parse().unwrap());
    }
}

/// Takes `b.lock` in the directory given after `--` and holds it for up to a minute (then
/// exits on its own, so that a test that fails leaves nothing running for long); does nothing
/// as an ordinary test.
#[test]
#[ignore = "a command for the other tests, run by `dirlock run`"]
fn hold_b() {
    if let Some(dir) = std::env::args().skip_while(|a| a != "--").nth(1) {
        let _guard = dirlock::Locks::in_dir(dir)
            .unwrap()
            .named_lock("b.lock")
            .acquire()
            .unwrap();
        std::thread::sleep(Duration::from_secs(60));
        std::process::exit(0);
    }
}

/// `status --all --json` of `dir`.
fn status_all(dir: &Path) -> serde_json::Value {
    let out = dirlock(&[
        os("status"),
        os("--all"),
        os("--json"),
        os("--dir"),
        dir.as_os_str(),
    ]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The state of lock `name` in `dir`, as `status --json` says it.
fn state(dir: &Path, name: &str) -> String {
    let out = dirlock(&[
        os("status"),
        os("--json"),
        os("--dir"),
        dir.as_os_str(),
        os("--lock"),
        os(name),
    ]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    status["state"].as_str().unwrap_or("?").to_owned()
}

/// Waits up to `secs` for lock `name` in `dir` to be in `want`; the last state seen.
fn await_state(dir: &Path, name: &str, want: &str, secs: u64) -> String {
    let mut seen = String::new();
    for _ in 0..secs * 20 {
        seen = state(dir, name);
        if seen == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    seen
}

#[test]
fn the_command_of_a_killed_run_dies_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let me = std::env::current_exe().unwrap();
    let run = Command::new(EXE)
        .args(["run", "--lock", "a.lock", "--dir"])
        .arg(&dir)
        .arg("--")
        .arg(&me)
        .args(["--ignored", "--exact", "hold_b", "--"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let run = Holder::adopt(run);
    assert_eq!(await_state(&dir, "b.lock", "held", 60), "held");
    run.kill();
    // The command's lock is dead by proof once the command is gone.
    assert_eq!(
        await_state(&dir, "b.lock", "dead-by-proof", 20),
        "dead-by-proof",
        "the command outlived its killed `dirlock run`"
    );
}

#[test]
fn run_passes_the_exit_status_and_a_live_holder_makes_it_exit_75() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let until = tmp.path().join("release-now");
    let out = run_exiting_with(&dir, 3);
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    let holder = start_holder(&dir, &until);
    let out = run_exiting_with(&dir, 0);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&holder.pid().to_string()), "{said}");

    let status = status_all(&dir);
    assert_eq!(status["locks"][0]["state"], "held", "{status}");
    assert_eq!(status["locks"][0]["owner"]["pid"], holder.pid(), "{status}");
}

#[test]
fn a_killed_holder_is_reclaimed_at_once_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let until = tmp.path().join("never");
    start_holder(&dir, &until).kill();

    let status = status_all(&dir);
    assert_eq!(status["locks"][0]["state"], "dead-by-proof", "{status}");

    // At once: `run` does not wait by default, and a dead-by-evidence owner would make it
    // exit 75 for the grace period (60 s).
    let out = run_exiting_with(&dir, 0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let status = status_all(&dir);
    assert_eq!(
        status["locks"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
}

/// A command run under `Nest.lock` that asks for `nest.lock`: where the filesystem folds case
/// (Windows, macOS by default) that is its parent's lock, refused at once (exit 75) rather than
/// waited for; where it does not (Linux), another lock, taken.
#[test]
fn a_nested_run_of_its_parents_lock_in_another_case_is_refused_where_names_fold() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let out = dirlock_then(
        &[
            os("run"),
            os("--dir"),
            dir.as_os_str(),
            os("--lock"),
            os("Nest.lock"),
            os("--"),
            os(EXE),
            os("run"),
            os("--dir"),
            dir.as_os_str(),
            os("--lock"),
            os("nest.lock"),
        ],
        &exiting_with(0),
    );
    if dir.with_file_name("LOCKS").exists() {
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("held by this process's parent"), "{said}");
    } else {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        // Both held by ancestors (`Nest.lock` by one, `nest.lock` by the next): a third level
        // asking for `nest.lock`, even ready to wait, is refused as its parent's, not left
        // waiting for it.
        let level = |lock: &str| {
            [
                os(EXE),
                os("run"),
                os("--dir"),
                dir.as_os_str(),
                os("--lock"),
                os(lock),
            ]
            .map(ToOwned::to_owned)
        };
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        args.extend(level("Nest.lock"));
        args.push("--".into());
        args.extend(level("nest.lock"));
        args.push("--".into());
        args.extend(level("nest.lock"));
        args.push("--wait-forever".into());
        let args: Vec<&std::ffi::OsStr> = args[1..].iter().map(|a| a.as_os_str()).collect();
        let out = dirlock_then(&args, &exiting_with(0));
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("held by this process's parent"), "{said}");
    }
}

/// `run -c` hands its script to the shell as written (`sh -c`; on Windows `cmd /S /C`, where
/// an ordinary argument's quotes would reach `cmd` escaped as `\"`), and passes on its status.
#[test]
fn run_c_passes_the_script_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locks");
    let out = dirlock(&[
        os("run"),
        os("--dir"),
        dir.as_os_str(),
        os("--lock"),
        os("c.lock"),
        os("-c"),
        os(r#"echo "hi there" && exit 3"#),
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("hi there") && !said.contains('\\'), "{said}");
}
