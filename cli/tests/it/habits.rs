//! The command as a flock(1) user meets it: flock's forms and spellings, a lock in the project
//! directory, durations as people write them, nothing made by a command that only looks, one
//! lock directory whatever `TMPDIR` says; and what it says, read as that user reads it.

use crate::common::{private_dir, ChildGuard, Holder};
use crate::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Words of the protocol that default output never uses.
const PROTOCOL_WORDS: [&str; 7] = [
    "beacon",
    "judged",
    "candidate",
    "tombstone",
    "guard",
    "reclaim",
    "0 s ago",
];

fn no_protocol_words(what: &str, said: &str) {
    for word in PROTOCOL_WORDS {
        assert!(!said.contains(word), "{what} says {word:?}: {said}");
    }
}

/// A project directory as users have them: mode 755, theirs.
fn project(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("project");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    dir
}

/// The common forms of flock(1), run by a shell script against `dirlock run`, with the
/// documented differences only: the conflict status is 75 (flock's is 1), the lock is a
/// directory (named NAME.lock where NAME has no such ending).
#[test]
fn a_script_of_flock_habits_runs_under_dirlock_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = project(tmp.path());
    let script = r#"
D="$1"
held() { "$D" status -q --lock ./build.lock; test $? = 75; }
held_named() { "$D" status -q --lock named; test $? = 75; }
"$D" run build.lock echo plain > out
"$D" run ./build.lock -- echo dashdash >> out
"$D" run -w 5 build.lock echo w >> out
"$D" run --wait 5 build.lock echo wait >> out
"$D" run --timeout 0.5 build.lock echo timeout >> out
"$D" run build.lock -c 'echo shell >> out'
"$D" run -c 'echo shell-first >> out' build.lock
"$D" run -o build.lock echo o >> out
"$D" run --close build.lock echo close >> out
"$D" run build.lock ls -d . >> out
"$D" run build.lock sh -c 'exit 7'; echo "status=$?" >> out
"$D" run build.lock -c 2>/dev/null; echo "c-alone=$?" >> out
"$D" run build.lock -c 'echo no' extra 2>/dev/null; echo "c-extra=$?" >> out
"$D" run -x build.lock echo x >> out
"$D" run --lock named echo named >> out
# Held: -n fails at once, -E chooses the status, -w gives up, and the default waits (for
# a lock path and for a lock of your lock directory alike: the holder goes on once both wait).
"$D" run build.lock "$D" run --lock named sh -c 'until [ -e go ]; do sleep 0.05; done' & holder=$!
i=0; until held && held_named; do i=$((i+1)); [ $i -gt 400 ] && { touch go; exit 99; }; sleep 0.05; done
"$D" run -n build.lock echo not-run >> out 2>/dev/null; echo "n=$?" >> out
"$D" run --nb -E 3 build.lock echo not-run >> out 2>/dev/null; echo "E=$?" >> out
"$D" run -w 0.2 build.lock echo not-run >> out 2>/dev/null; echo "w=$?" >> out
"$D" run --lock named echo named-after-the-holder > named.out 2>/dev/null & a=$!
"$D" run build.lock echo after-the-holder > path.out 2>/dev/null & b=$!
waits() { "$D" status --lock "$1" | grep -q '^  waiting:'; }
i=0; until waits named && waits ./build.lock; do i=$((i+1)); [ $i -gt 400 ] && { touch go; exit 98; }; sleep 0.05; done
touch go
wait $a; wait $b; cat named.out path.out >> out; rm named.out path.out go
wait $holder; echo "holder=$?" >> out
"#;
    let mut c = ChildGuard::spawn(
        Command::new("sh")
            .args(["-c", script, "sh", BIN])
            .current_dir(&dir)
            .env("DIRLOCK_DIR", tmp.path().join("locks"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let status = c.wait_for(Duration::from_secs(60));
    let o = c.output();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        text(&o.stderr)
    );
    let out = std::fs::read_to_string(dir.join("out")).unwrap();
    assert_eq!(
        out,
        "plain\ndashdash\nw\nwait\ntimeout\nshell\nshell-first\no\nclose\n.\nstatus=7\nc-alone=64\nc-extra=64\nx\nnamed\n\
         n=75\nE=3\nw=75\nnamed-after-the-holder\nafter-the-holder\nholder=0\n"
    );
    // Nothing is left beside the work once every run has released.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["out"]);
}

fn dirlock(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("DIRLOCK_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Durations as people write them; a wrong one is refused with what to write.
#[test]
fn durations_read_as_people_write_them() {
    let tmp = tempfile::tempdir().unwrap();
    let locks = tmp.path().join("locks");
    for d in ["90", "2.5", "500ms", "5m", "1h30m", "2d"] {
        let o = dirlock(
            &["run", "--lock", "d", "-w", d, "--grace", d, "true"],
            &[("DIRLOCK_DIR", &locks)],
        );
        assert!(o.status.success(), "{d}: {}", text(&o.stderr));
    }
    for d in ["", "5x", "m", "-1", "1h-5m", "inf", "1e20"] {
        let o = dirlock(
            &["run", "--lock", "d", "-w", d, "true"],
            &[("DIRLOCK_DIR", &locks)],
        );
        assert_eq!(o.status.code(), Some(64), "{d:?}");
        let err = text(&o.stderr);
        // (`-1` reads as an option, refused as such.)
        assert!(
            err.starts_with("dirlock: ") && (err.contains("1h30m") || d == "-1"),
            "{d:?}: {err}"
        );
    }
}

/// `status`, `path`, `sweep` and `unlock` only look: a mistyped `--dir` or `--app` makes
/// nothing; and `run --lock DIR/NAME` makes no DIR, as flock makes no directory for its file.
#[test]
fn commands_that_only_look_make_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("typo");
    let t = typo.to_str().unwrap();
    for args in [
        &["status", "--dir", t, "--lock", "x"][..],
        &["status", "--dir", t, "--all"],
        &["path", "--dir", t, "--lock", "x"],
        &["sweep", "--dir", t],
        &["unlock", "--dir", t, "--lock", "x"],
    ] {
        let o = dirlock(args, &[]);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(!typo.exists(), "{args:?} made {t}");
    }
    let o = dirlock(&["status", "--dir", t, "--lock", "x"], &[]);
    assert!(text(&o.stdout).contains("is free"), "{}", text(&o.stdout));
    for args in [
        &["status", "--app", "typo-app", "--lock", "x"][..],
        &["path", "--app", "typo-app", "--lock", "x"],
        &["sweep", "--app", "typo-app"],
    ] {
        let o = dirlock(args, &[("TMPDIR", tmp.path())]);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let made: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(made.is_empty(), "{args:?} made {made:?}");
    }
    let missing = format!("{t}/x.lock");
    let o = dirlock(&["run", "--lock", &missing, "true"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("dirlock: cannot use ") && err.contains(t) && err.contains("must exist"),
        "{err}"
    );
    assert!(!typo.exists(), "run made {t}");
}

/// One user's cron job, login shell and service (each with a `TMPDIR` of its own) name the
/// same lock; `DIRLOCK_DIR` pins another directory; `--app` keeps the reference's rule.
#[test]
fn the_lock_directory_does_not_move_with_tmpdir() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    private_dir(&a);
    private_dir(&b);
    let path = |env: &[(&str, &Path)], extra: &[&str]| {
        let mut args = vec!["path", "--lock", "cron"];
        args.extend_from_slice(extra);
        let o = dirlock(&args, env);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let uid = unsafe_free_uid();
    let expected = format!("/tmp/dirlock-{uid}/operation-locks/cron.lock\n");
    assert_eq!(path(&[("TMPDIR", &a)], &[]), expected);
    assert_eq!(path(&[("TMPDIR", &b)], &[]), expected);
    let pinned = tmp.path().join("pinned");
    assert_eq!(
        path(&[("TMPDIR", &a), ("DIRLOCK_DIR", &pinned)], &[]),
        format!("{}/cron.lock\n", pinned.display())
    );
    // A relative DIRLOCK_DIR would name another directory in each working directory.
    let o = dirlock(
        &["path", "--lock", "cron"],
        &[("DIRLOCK_DIR", Path::new("rel"))],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("dirlock: DIRLOCK_DIR is a relative path") && err.contains("absolute"),
        "{err}"
    );
    assert_eq!(
        path(&[("TMPDIR", &a)], &["--app", "apnea"]),
        format!("{}/apnea-{uid}/operation-locks/cron.lock\n", a.display())
    );
}

/// This process's uid, from the owner of a file it makes (no libc call in a test).
fn unsafe_free_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().metadata().unwrap().uid()
}

/// Waiting, holding, a holder that died: said in the user's words, naming what they asked
/// for, with times as clocks show them; the details only under --verbose.
#[test]
fn what_the_command_says_is_in_the_users_words() {
    let tmp = tempfile::tempdir().unwrap();
    let locks = private_dir(&tmp.path().join("locks"));
    let env = [("DIRLOCK_DIR", locks.as_path())];
    let h = Holder::start(&locks, &["--lock", "deploy", "--purpose", "release 1.2"]);
    // Status: who holds it, since when.
    let o = dirlock(&["status", "--lock", "deploy"], &env);
    assert_eq!(o.status.code(), Some(75));
    let said = text(&o.stdout);
    assert!(
        said.starts_with(&format!(
            "named lock deploy is held by pid {} on host ",
            h.pid()
        )) && said.contains("(purpose: release 1.2) since ")
            && (said.contains("(just now)") || said.contains(" s ago)")),
        "{said}"
    );
    no_protocol_words("status", &said);
    let verbose = text(&dirlock(&["status", "-v", "--lock", "deploy"], &env).stdout);
    assert!(
        verbose.contains("beacon") && verbose.contains("tombstones:"),
        "{verbose}"
    );
    // Failing at once, and giving up a wait: the lock named, the holder, what to do.
    let o = dirlock(&["run", "-n", "--lock", "deploy", "true"], &env);
    assert_eq!(o.status.code(), Some(75));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("dirlock: named lock deploy is held by pid ")
            && err.contains("--wait-forever"),
        "{err}"
    );
    no_protocol_words("a refusal", &err);
    let o = dirlock(&["run", "-w", "0.3", "--lock", "deploy", "true"], &env);
    assert_eq!(o.status.code(), Some(75));
    let err = text(&o.stderr);
    let mut lines = err.lines();
    let waiting = lines.next().unwrap();
    assert!(
        waiting.starts_with("dirlock: waiting for named lock deploy: held by pid ")
            && waiting.contains("since "),
        "{err}"
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("dirlock: gave up on named lock deploy"),
        "{err}"
    );
    no_protocol_words("a wait", &err);
    // The holder dies: status says so, and the next run says it took over, and gives the
    // command the dead holder's record.
    let dead = h.kill();
    let said = text(&dirlock(&["status", "--lock", "deploy"], &env).stdout);
    assert!(
        said.starts_with(&format!("named lock deploy was held by pid {dead} "))
            && said.contains("ended without releasing it"),
        "{said}"
    );
    no_protocol_words("status of a dead holder", &said);
    let o = dirlock(
        &[
            "run",
            "--lock",
            "deploy",
            "sh",
            "-c",
            "printf %s \"$DIRLOCK_RECLAIMED_FROM\"",
        ],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let record = dirlock::Owner::parse(&o.stdout).unwrap();
    assert_eq!(record.pid, dead);
    assert_eq!(record.purpose.as_deref(), Some("release 1.2"));
    let err = text(&o.stderr);
    assert!(
        err.starts_with(&format!(
            "dirlock: took over named lock deploy from pid {dead} "
        )) && err.contains("(purpose: release 1.2)")
            && err.contains("half done")
            && err.contains("DIRLOCK_RECLAIMED_FROM"),
        "{err}"
    );
    no_protocol_words("a takeover", &err);
    // A run that took over nothing gives its command no record, not even its parent's.
    let o = Command::new(BIN)
        .args([
            "run",
            "--lock",
            "deploy",
            "sh",
            "-c",
            "printf %s \"${DIRLOCK_RECLAIMED_FROM-unset}\"",
        ])
        .env("DIRLOCK_DIR", &locks)
        .env("DIRLOCK_RECLAIMED_FROM", "stale")
        .output()
        .unwrap();
    assert_eq!(text(&o.stdout), "unset");
    // --verbose: how long it waited, and the command's end.
    let o = dirlock(&["run", "-v", "--lock", "deploy", "true"], &env);
    let err = text(&o.stderr);
    assert!(
        err.contains("dirlock: took named lock deploy (")
            && err
                .contains("dirlock: the command exited with status 0; released named lock deploy"),
        "{err}"
    );
    assert!(o.status.success());
}

/// Every error, a usage error too, starts with the one prefix; help works as people ask for
/// it; the usage line says a lock and a command are needed.
#[test]
fn errors_share_one_prefix_and_help_is_where_people_look() {
    for args in [
        &["run"][..],
        &["run", "--lock", "x"],
        &["run", "--bogus"],
        &["run", "-n", "-w", "3", "--lock", "x", "true"],
        &["status"],
        &["frobnicate"],
    ] {
        let o = dirlock(args, &[]);
        assert_eq!(o.status.code(), Some(64), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.starts_with("dirlock: "), "{args:?}: {err}");
        assert!(!err.contains("error:"), "{args:?}: {err}");
    }
    let help = dirlock(&["help", "run"], &[]);
    assert!(help.status.success(), "{}", text(&help.stderr));
    let help = text(&help.stdout);
    assert!(
        help.contains("dirlock run [OPTIONS] --lock [DIR/]NAME|--repository ROOT")
            && help.contains("CMD [ARG]...")
            && help.contains("Waiting:")
            && help.contains("--wait-forever"),
        "{help}"
    );
    for page in ["run", "status", "unlock", "sweep", "path", "doctor"] {
        let o = dirlock(&["help", page], &[]);
        no_protocol_words(&format!("{page}'s help"), &text(&o.stdout));
    }
    assert!(dirlock(&["-V"], &[]).status.success());
    assert_eq!(dirlock(&["run", "-V"], &[]).status.code(), Some(64));
}

/// Every manual page has the sections a manual reader looks for, with flock(1) among its
/// related pages, and renders without a warning (where groff is installed).
#[test]
fn manual_pages_have_the_sections_people_look_for() {
    for page in ["", "run", "status", "unlock", "sweep", "path", "doctor"] {
        let mut args = vec!["man"];
        if !page.is_empty() {
            args.push(page);
        }
        let o = dirlock(&args, &[]);
        assert!(o.status.success(), "{page}: {}", text(&o.stderr));
        let roff = text(&o.stdout);
        for section in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "SEE ALSO",
        ] {
            assert!(
                roff.contains(&format!(".SH {section}\n"))
                    || roff.contains(&format!(".SH \"{section}\"\n")),
                "{page}: no {section}: {roff}"
            );
        }
        assert!(
            roff.contains("flock") && roff.contains("DIRLOCK_DIR"),
            "{page}"
        );
        assert!(roff.contains(".SH EXAMPLES\n"), "{page}");
        if !page.is_empty() {
            assert!(!roff.contains("\\-V"), "{page}: -V is the top level's only");
        }
        if !crate::common::lacks(
            "habits::manual_pages_have_the_sections_people_look_for (groff's check)",
            "groff",
            crate::common::have("groff"),
        ) {
            let mut g = Command::new("groff")
                .args(["-man", "-ww", "-z"])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write as _;
            g.stdin.take().unwrap().write_all(roff.as_bytes()).unwrap();
            let out = g.wait_with_output().unwrap();
            assert_eq!(text(&out.stderr), "", "{page}: groff warns");
        }
    }
    let run = text(&dirlock(&["man", "run"], &[]).stdout);
    assert!(
        run.contains("dirlock run [OPTIONS] \\-\\-lock") && run.contains("LOCKPATH"),
        "the synopsis says a lock and a command are needed: {run}"
    );
}
