//! Shared (read) locks from the command: `dirlock run -s` runs beside other readers, a plain
//! `run` waits for them (or fails fast), and `dirlock status` lists the readers and a waiting
//! writer, and stops listing a reader killed with SIGKILL.

use crate::cli::{dirlock, text, wait_for};
use crate::common::*;
use crate::dirlock_in;
use serde_json::Value;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

/// Words of the protocol that `status`'s default text never uses.
const PROTOCOL_WORDS: [&str; 8] = [
    "beacon",
    "candidate",
    "tombstone",
    "guard",
    "entry",
    "token",
    "judged",
    "reclaim",
];

/// A shell script for `run -c` that marks `mine`, then waits (at most 10 s, else exits 3) for
/// `theirs` to be marked: both end well only if both ran at once.
fn meet(mine: &Path, theirs: &Path) -> String {
    format!(
        "touch '{}'; i=0; while [ ! -e '{}' ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.01; done; exit 0",
        mine.display(),
        theirs.display()
    )
}

/// `dirlock status --json` of lock `name`, parsed.
fn status_json(dir: &Path, name: &str) -> Value {
    let out = dirlock(dir, &["status", "--lock", name, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// The pids of a status's `readers`, `writers` or `departed`, sorted: `None` while one of
/// them has made its entry but not yet written its record (its pid is `null` until then).
fn pids(st: &Value, field: &str) -> Option<Vec<u64>> {
    let v: Option<Vec<u64>> = st[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {st}"))
        .iter()
        .map(|p| p["pid"].as_u64())
        .collect();
    v.map(sorted)
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort();
    v
}

/// `dirlock run ARGS` in the background, owned by a guard, its output piped.
fn spawn_run(dir: &Path, args: &[&str]) -> ChildGuard {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let mut cmd = dirlock_in(dir, &all);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    ChildGuard::spawn(cmd)
}

/// The output of a background run, which must end within 20 s.
fn finished(mut run: ChildGuard) -> Output {
    assert!(
        run.wait_for(Duration::from_secs(20)).is_some(),
        "the run did not end"
    );
    run.output()
}

#[test]
fn two_shared_runs_run_at_once() {
    let fx = Fixture::new();
    let (a, b) = (fx.tmp.path().join("a"), fx.tmp.path().join("b"));
    let first = spawn_run(fx.dir(), &["-s", "--lock", "x", "-c", &meet(&a, &b)]);
    let second = spawn_run(fx.dir(), &["--shared", "--lock", "x", "-c", &meet(&b, &a)]);
    for run in [first, second] {
        let out = finished(run);
        assert_eq!(
            out.status.code(),
            Some(0),
            "each saw the other run under the lock: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "the last one out retired it"
    );
}

#[test]
fn a_plain_run_waits_for_the_readers_or_fails_fast() {
    let fx = Fixture::new();
    let reader = Holder::start(fx.dir(), &["--lock", "x", "-s", "--purpose", "index"]);
    // Fails at once, naming the reader.
    let out = dirlock(fx.dir(), &["run", "-n", "--lock", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let named = format!("read by pid {} ", reader.pid());
    assert!(
        err.contains(&named) && err.contains("(purpose: index)"),
        "{err}"
    );
    // Another reader does not wait.
    let out = dirlock(fx.dir(), &["run", "-s", "-n", "--lock", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A plain run waits, saying for whom, until the reader is done.
    let done = fx.tmp.path().join("written");
    let writer = spawn_run(
        fx.dir(),
        &["--lock", "x", "--", "touch", done.to_str().unwrap()],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!done.exists(), "the writer ran while a reader read");
    reader.release();
    let out = finished(writer);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(done.exists());
    let err = text(&out.stderr);
    assert!(
        err.starts_with("dirlock: waiting for named lock x: read by pid "),
        "{err}"
    );
}

#[test]
fn status_lists_the_readers_and_a_waiting_writer() {
    let fx = Fixture::new();
    let a = Holder::start(fx.dir(), &["--lock", "x", "-s", "--purpose", "index A"]);
    let b = Holder::start(
        fx.dir(),
        &["--lock", "x", "--shared", "--purpose", "index B"],
    );
    let writer = spawn_run(
        fx.dir(),
        &["--lock", "x", "--purpose", "reindex", "--", "true"],
    );
    let wpid = u64::from(writer.id());
    assert!(
        eventually(Duration::from_secs(10), || pids(
            &status_json(fx.dir(), "x"),
            "writers"
        ) == Some(vec![wpid])),
        "the writer never showed waiting: {}",
        status_json(fx.dir(), "x")
    );
    let readers = sorted(vec![u64::from(a.pid()), u64::from(b.pid())]);
    // For people: how many read it, each reader and the writer, in plain words.
    let out = dirlock(fx.dir(), &["status", "--lock", "x"]);
    assert_eq!(out.status.code(), Some(75), "readers hold it: held");
    let says = text(&out.stdout);
    let first = says.lines().next().unwrap();
    assert_eq!(
        first,
        "named lock x is read by 2 processes; a process waits to write it, and new readers wait for it"
    );
    for (pid, purpose) in [(a.pid(), "index A"), (b.pid(), "index B")] {
        let line = format!("  reader: pid {pid} on host ");
        let line = says
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_else(|| panic!("{says}"));
        assert!(
            line.contains(&format!("(purpose: {purpose}) since ")),
            "{line}"
        );
    }
    // The writer, once (it was also listed again as "waiting:", for its place in the queue).
    let line = format!("  waiting to write: pid {wpid} on host ");
    let named: Vec<&str> = says
        .lines()
        .filter(|l| l.contains(&format!("pid {wpid} ")))
        .collect();
    assert!(
        named.len() == 1
            && named[0].starts_with(&line)
            && named[0].contains("(purpose: reindex) since "),
        "{says}"
    );
    let words: String = says
        .lines()
        .filter(|l| !l.starts_with("  path: "))
        .collect();
    for word in PROTOCOL_WORDS {
        assert!(!words.contains(word), "{word:?} in {says}");
    }
    // For programs.
    let st = status_json(fx.dir(), "x");
    assert_eq!(st["shared"], true);
    assert_eq!(st["state"], "held");
    assert_eq!(pids(&st, "readers"), Some(readers.clone()), "{st}");
    let mut purposes: Vec<&str> = st["readers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["purpose"].as_str().unwrap())
        .collect();
    purposes.sort();
    assert_eq!(purposes, ["index A", "index B"]);
    for r in st["readers"].as_array().unwrap() {
        assert_eq!(r["state"], "live");
        assert_eq!(r["role"], "reader");
        assert!(
            r["since_unix_ms"].as_u64().is_some() && r["entry"].is_string(),
            "{r}"
        );
    }
    assert_eq!(st["writers"][0]["purpose"], "reindex");
    assert_eq!(st["writers"][0]["role"], "writer");
    assert_eq!(st["departed"], serde_json::json!([]));
    // Every lock, too.
    let all = dirlock(fx.dir(), &["status", "--all", "--json"]);
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(pids(&all["locks"][0], "readers"), Some(readers));
    let all = text(&dirlock(fx.dir(), &["status", "--all"]).stdout);
    assert!(
        all.starts_with("named lock x is read by 2 processes"),
        "{all}"
    );
    // The writer goes in once they are done.
    a.release();
    b.release();
    let out = finished(writer);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let st = status_json(fx.dir(), "x");
    assert_eq!(
        (&st["state"], &st["shared"]),
        (&"free".into(), &false.into())
    );
}

#[test]
fn a_killed_shared_run_is_out_at_once() {
    let fx = Fixture::new();
    let (ma, mb) = (fx.tmp.path().join("a"), fx.tmp.path().join("b"));
    let script = |m: &Path| format!("touch '{}'; exec sleep 60", m.display());
    let mut a = spawn_run(fx.dir(), &["-s", "--lock", "x", "-c", &script(&ma)]);
    let mut b = spawn_run(fx.dir(), &["-s", "--lock", "x", "-c", &script(&mb)]);
    wait_for(&ma);
    wait_for(&mb);
    let (apid, bpid) = (u64::from(a.id()), u64::from(b.id()));
    let st = status_json(fx.dir(), "x");
    assert_eq!(pids(&st, "readers"), Some(sorted(vec![apid, bpid])));
    // The one that joined (the other's record is the lock's) is killed first: it has an
    // entry of its own, proven gone by the kernel.
    if st["owner"]["pid"].as_u64() != Some(bpid) {
        std::mem::swap(&mut a, &mut b);
    }
    let (apid, bpid) = (u64::from(a.id()), u64::from(b.id()));
    a.kill().unwrap();
    a.wait().unwrap();
    // Its command dies with it (the kernel kills it), and with both the reader's hold.
    assert!(
        eventually(Duration::from_secs(2), || pids(
            &status_json(fx.dir(), "x"),
            "readers"
        ) == Some(vec![bpid])),
        "the killed reader is still listed: {}",
        status_json(fx.dir(), "x")
    );
    let st = status_json(fx.dir(), "x");
    assert_eq!(pids(&st, "departed"), Some(vec![apid]), "{st}");
    assert_eq!(st["departed"][0]["state"], "dead-by-proof");
    let says = text(&dirlock(fx.dir(), &["status", "--lock", "x"]).stdout);
    assert!(
        says.starts_with("named lock x is read by 1 process\n"),
        "{says}"
    );
    assert!(
        says.contains(&format!("  ended without releasing it: pid {apid} ")),
        "{says}"
    );
    // One reader is left: a writer is refused; killed too, none is: the writer gets in at once.
    let out = dirlock(fx.dir(), &["run", "-n", "--lock", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    b.kill().unwrap();
    b.wait().unwrap();
    assert!(eventually(Duration::from_secs(2), || {
        dirlock(fx.dir(), &["status", "-q", "--lock", "x"])
            .status
            .code()
            == Some(0)
    }));
    let says = text(&dirlock(fx.dir(), &["status", "--lock", "x"]).stdout);
    assert!(
        says.starts_with("named lock x was read by processes that all ended"),
        "{says}"
    );
    let out = dirlock(fx.dir(), &["run", "-n", "--lock", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("took over named lock x"),
        "{}",
        text(&out.stderr)
    );
}

/// A `run -s` inside a `run -s` of the same lock is refused as its parent's, whether the outer
/// run took the lock first (the record is its own) or joined another reader: waiting behind a
/// writer that waits for the parent would wait forever.
#[test]
fn a_nested_shared_run_of_its_parents_lock_is_refused() {
    let fx = Fixture::new();
    let dir = fx.dir().to_str().unwrap();
    let nested = [
        "-s",
        "--lock",
        "n",
        "--",
        crate::BIN,
        "run",
        "-s",
        "--wait-forever",
        "--dir",
        dir,
        "--lock",
        "n",
        "--",
        "true",
    ];
    for first in [true, false] {
        let other = (!first).then(|| Holder::start(fx.dir(), &["-s", "--lock", "n"]));
        let out = finished(spawn_run(fx.dir(), &nested));
        assert!(
            text(&out.stderr).contains("held by this process's parent"),
            "first: {first}: {}",
            text(&out.stderr)
        );
        drop(other);
    }
}

/// A reader's or a writer's entry in a shared lock that no run can open (mode 000) counts for
/// nothing, as it does for the readers and writers themselves (a lock's readers are told by
/// its own `flock`): `status` says the lock is read by its one reader, and that no writer
/// waits (it said it was read by two, and that new readers waited for a writer). Run as uid
/// 65534 when root, whom no mode keeps out.
#[test]
fn entries_no_run_can_open_are_neither_readers_nor_writers() {
    use crate::advice::{give_to_nobody, NOBODY};
    use std::os::unix::fs::PermissionsExt;
    let test = "shared::entries_no_run_can_open_are_neither_readers_nor_writers";
    let Some((tmp, dir)) = crate::advice::normal_users_dir(test) else {
        return;
    };
    give_to_nobody(&dir);
    let wrapper: &[&str] = if is_root() { &NOBODY } else { &[] };
    let reader = Holder::try_start_under(wrapper, &dir, &["--lock", "x", "-s"]).unwrap();
    let planted = ["reader.planted", "writer.planted"].map(|n| dir.join("x.lock").join(n));
    for p in &planted {
        std::fs::create_dir(p).unwrap();
        give_to_nobody(p);
        std::fs::set_permissions(p, PermissionsExt::from_mode(0o000)).unwrap();
    }
    let args = ["status", "--lock", "x", "--dir", dir.to_str().unwrap()];
    let out = crate::advice::as_a_normal_user(&args, tmp.path(), &[]);
    for p in &planted {
        std::fs::set_permissions(p, PermissionsExt::from_mode(0o700)).unwrap();
    }
    reader.release();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        said.starts_with("named lock x is read by 1 process\n") && !said.contains("write"),
        "{said}"
    );
}
