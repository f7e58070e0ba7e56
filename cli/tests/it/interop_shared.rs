//! Shared locks and the reference implementation, which knows only exclusive locks: while any
//! dirlock reader reads, it sees the lock held by a live process (the record's reader, handed
//! on as readers leave and die, and kept younger than its grace period); its own holder keeps
//! every dirlock reader and writer out; and readers, dirlock writers and its writers never
//! overlap. Needs what `interop.rs` needs (Node.js, npm, the reference): skipped with a line
//! without them.

use crate::common::*;
use crate::interop::{text, Shared};
use crate::BIN;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A `dirlock hold -s` of the repository lock, and the lock's path once it reads.
fn reader(s: &Shared, until: &Path) -> (ChildGuard, PathBuf) {
    let mut h = ChildGuard::spawn(
        Command::new(BIN)
            .args(["hold", "-s", "--app", "apnea", "--repository"])
            .arg(s.repo())
            .arg("--until")
            .arg(until)
            .env("TMPDIR", s.tmpdir())
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    std::io::BufReader::new(h.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("held "), "{line}");
    (h, PathBuf::from(line["held ".len()..].trim_end()))
}

fn named(lock: &Path) -> u32 {
    dirlock::Owner::parse(&std::fs::read(lock.join("owner.json")).unwrap())
        .unwrap()
        .pid
}

fn age(lock: &Path) -> Duration {
    std::fs::metadata(lock)
        .and_then(|m| m.modified())
        .map(|t| t.elapsed().unwrap_or_default())
        .unwrap_or_default()
}

#[test]
fn the_reference_sees_dirlock_readers_as_a_live_holder_as_they_come_leave_and_die() {
    let Some(s) = Shared::new(
        "interop_shared::the_reference_sees_dirlock_readers_as_a_live_holder_as_they_come_leave_and_die",
    ) else {
        return;
    };
    let r = s.repo();
    let r = r.to_str().unwrap();
    let until: Vec<PathBuf> = (0..3).map(|i| s.tmp.path().join(format!("u{i}"))).collect();
    let (mut a, lock) = reader(&s, &until[0]);
    let mut others = vec![reader(&s, &until[1]).0, reader(&s, &until[2]).0];
    let live = |why: &str| {
        let said = s.node_out(&["try", r]);
        assert!(
            said.starts_with("error live") && said.contains(&format!("pid {}", named(&lock))),
            "{why}: the reference said {said}"
        );
    };
    live("three readers");
    // The named (first) reader leaves: it hands the record to another.
    std::fs::write(&until[0], "").unwrap();
    a.0.wait().unwrap();
    assert!(others.iter().any(|o| o.0.id() == named(&lock)));
    live("the first reader left");
    // Older than the reference's grace period: the readers' keepers make it young again.
    set_age(&lock, Duration::from_secs(3600));
    assert!(eventually(Duration::from_secs(10), || age(&lock)
        < Duration::from_secs(60)));
    // The named reader is killed: the reference finds its pid dead but the lock young (it does
    // not take it), and a second or two later the record names the reader left.
    let i = others
        .iter()
        .position(|o| o.0.id() == named(&lock))
        .unwrap();
    let mut killed = others.remove(i);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    assert_ne!(
        s.node_out(&["try", r]),
        "ran",
        "the reference took the readers' lock"
    );
    assert!(eventually(Duration::from_secs(10), || named(&lock) == others[0].0.id()));
    live("the named reader was killed");
    // The last reader is killed: dirlock proves it gone at once; the reference runs after.
    others[0].0.kill().unwrap();
    others[0].0.wait().unwrap();
    let out = s.dirlock(&["run", "--app", "apnea", "--repository", r, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.node_out(&["try", r]), "ran");
}

#[test]
fn a_reference_holder_keeps_dirlock_readers_out() {
    let Some(s) = Shared::new("interop_shared::a_reference_holder_keeps_dirlock_readers_out")
    else {
        return;
    };
    let r = s.repo();
    let r = r.to_str().unwrap();
    let (mut node, pid) = s.node_holder();
    let read = |wait: &[&str]| {
        let mut args = vec!["run", "-s", "--app", "apnea", "--repository", r];
        args.extend(wait);
        args.extend(["--", "true"]);
        s.dirlock(&args)
    };
    let out = read(&[]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(text(&out).contains(&format!("pid {pid}")), "{}", text(&out));
    // Killed holding it: dead by evidence only (it keeps no flock): the grace period applies.
    node.0.kill().unwrap();
    node.0.wait().unwrap();
    let out = read(&[]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let lock = PathBuf::from(
        String::from_utf8(
            s.dirlock(&["path", "--app", "apnea", "--repository", r])
                .stdout,
        )
        .unwrap()
        .trim_end(),
    );
    set_age(&lock, Duration::from_secs(61));
    let out = read(&[]);
    assert!(out.status.success(), "{}", text(&out));
}

const READ: &str = r#"
cd "$1" || exit 99
mkdir -p r w
live() { s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; }
# A SIGKILLed section may take a moment to die; a live one stays alive.
gone() { i=0; while live "$1" && [ $i -lt 100 ]; do sleep 0.01; i=$((i + 1)); done; [ $i -lt 100 ]; }
echo $$ > "r/$$"
for f in w/*; do
  [ -e "$f" ] || continue
  if gone "${f#w/}"; then rm -f "$f"; else echo "overlap read $$ $f" >> log; fi
done
n=0
for f in r/*; do p=${f#r/}; [ "$p" != $$ ] && live "$p" && n=$((n + 1)); done
echo "read $$ $n" >> log
sleep 0.02
rm -f "r/$$"
"#;

const WRITE: &str = r#"
cd "$1" || exit 99
mkdir -p r w
live() { s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; }
gone() { i=0; while live "$1" && [ $i -lt 100 ]; do sleep 0.01; i=$((i + 1)); done; [ $i -lt 100 ]; }
echo $$ > "w/$$"
for f in w/* r/*; do
  [ -e "$f" ] || continue
  p=${f#?/}
  [ "$p" = $$ ] && continue
  if gone "$p"; then rm -f "$f"; else echo "overlap write $$ $f" >> log; fi
done
echo "write dirlock $$" >> log
sleep 0.01
rm -f "w/$$"
"#;

/// dirlock readers (`run -s`), dirlock writers (`run`) and the reference's writers take turns
/// on one repository lock, while dirlock wrappers (reading, writing or waiting) are SIGKILLed.
#[test]
fn readers_and_writers_of_both_implementations_never_overlap() {
    let Some(s) =
        Shared::new("interop_shared::readers_and_writers_of_both_implementations_never_overlap")
    else {
        return;
    };
    let home = s.repo().to_str().unwrap().to_owned();
    let work = s.tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let work_s = work.to_str().unwrap().to_owned();
    let scripts = [("read.sh", READ), ("write.sh", WRITE)].map(|(n, body)| {
        let p = s.tmp.path().join(n);
        std::fs::write(&p, body).unwrap();
        p
    });
    let mut nodes: Vec<ChildGuard> = (0..2)
        .map(|_| {
            ChildGuard::spawn(
                s.node(&["rw-sections", &home, &work_s, "10"])
                    .stdout(Stdio::null()),
            )
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let running = std::sync::Mutex::new(Vec::<u32>::new());
    let mut kills = 0;
    std::thread::scope(|sc| {
        for i in 0..4 {
            let (stop, running, home, work_s, s) = (&stop, &running, &home, &work_s, &s);
            let script = &scripts[usize::from(i == 3)];
            sc.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let mut run = Command::new(BIN);
                    run.args(["run", "-q", "--wait-forever", "--app", "apnea"]);
                    if i != 3 {
                        run.arg("-s");
                    }
                    let mut child = ChildGuard::spawn(
                        run.args(["--repository", home, "--", "sh"])
                            .arg(script)
                            .arg(work_s)
                            .env("TMPDIR", s.tmpdir())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null()),
                    );
                    running.lock().unwrap().push(child.0.id());
                    let _ = child.0.wait();
                    running.lock().unwrap().retain(|p| *p != child.0.id());
                }
            });
        }
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let deadline = Instant::now() + Duration::from_secs(120);
        while nodes.iter_mut().any(|n| n.0.try_wait().unwrap().is_none()) {
            assert!(
                Instant::now() < deadline,
                "the reference's writers never finished"
            );
            std::thread::sleep(Duration::from_millis(50));
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % 3 == 0 {
                let victim = {
                    let r = running.lock().unwrap();
                    r.get(rng as usize / 3 % r.len().max(1)).copied()
                };
                if victim.is_some_and(|pid| signal(pid, libc::SIGKILL)) {
                    kills += 1;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let log = std::fs::read_to_string(work.join("log")).unwrap_or_default();
    let overlaps: Vec<&str> = log.lines().filter(|l| l.contains("overlap")).collect();
    assert!(
        overlaps.is_empty(),
        "readers and writers overlapped: {overlaps:?}"
    );
    let count = |p: &str| log.lines().filter(|l| l.starts_with(p)).count();
    let together = log
        .lines()
        .filter(|l| l.starts_with("read ") && !l.ends_with(" 0"))
        .count();
    let (reads, ours, theirs) = (
        count("read "),
        count("write dirlock"),
        count("write reference"),
    );
    eprintln!(
        "interop with readers: {reads} reads ({together} beside other readers), {ours} dirlock writes, {theirs} reference writes, {kills} dirlock wrappers SIGKILLed"
    );
    assert_eq!(theirs, 20, "every reference section ran");
    assert!(reads > 20 && together > 0 && ours > 0 && kills > 3);
}
