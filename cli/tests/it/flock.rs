//! The command line a flock(1) user expects: its flags, `-o`, `status`'s exit status, and
//! the help, completions and manual made from one definition.

use crate::cli::{dirlock, text};
use crate::common::*;
use crate::BIN;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn flock_style_flags() {
    let fx = Fixture::new();
    // -c: through sh -c; the exit status passes through.
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "-n",
            "--lock",
            "f.lock",
            "-c",
            "echo $((6 * 7)); exit 4",
        ],
    );
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "42\n");
    let _h = Holder::start(fx.dir(), &["--lock", "f.lock"]);
    // -n fails at once even where the default is to wait; -E picks the conflict status.
    let home = fx.repo();
    let _g = Holder::start(fx.dir(), &["--global-setup", home.to_str().unwrap()]);
    let start = Instant::now();
    let out = dirlock(
        fx.dir(),
        &[
            "run",
            "-n",
            "--global-setup",
            home.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(10));
    let out = dirlock(
        fx.dir(),
        &["run", "-n", "-E", "0", "--lock", "f.lock", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "-E 0: the status when held");
    assert!(text(&out.stderr).contains("or wait for it (--wait-forever"));
    let out = dirlock(
        fx.dir(),
        &[
            "run", "-q", "-n", "-E", "0", "--lock", "f.lock", "--", "true",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr), "", "-q -n -E 0: skip without a word");
    let out = dirlock(
        fx.dir(),
        &["run", "-n", "-E", "9", "--lock", "f.lock", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(9));
    // -w: a fractional timeout, then the conflict status.
    let start = Instant::now();
    let out = dirlock(
        fx.dir(),
        &["run", "-w", "0.3", "--lock", "f.lock", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(75));
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(
        text(&out.stderr).contains("gave up on named lock f.lock"),
        "{}",
        text(&out.stderr)
    );
    // Usage errors.
    for bad in [
        &[
            "run",
            "-n",
            "--wait-forever",
            "--lock",
            "x.lock",
            "--",
            "true",
        ][..],
        &["run", "--lock", "x.lock", "-c", "true", "--", "true"],
        &["run", "-n", "--lock", "x.lock"],
    ] {
        let out = dirlock(fx.dir(), bad);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{bad:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn no_inherit_keeps_the_beacon_from_the_command() {
    let fx = Fixture::new();
    // What the command's shell has open, and what DIRLOCK_HELD names.
    let open = |extra: &[&str]| {
        let mut args = vec!["run", "-n", "--lock", "o.lock"];
        args.extend_from_slice(extra);
        args.extend([
            "--",
            "sh",
            "-c",
            "for f in /proc/$$/fd/*; do readlink $f; done; echo \"held: $DIRLOCK_HELD\"",
        ]);
        let out = dirlock(fx.dir(), &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let lock = fx.dir().join("o.lock").display().to_string();
    let beacons = |s: &str| s.lines().filter(|l| *l == lock).count();
    let inherited = open(&[]);
    assert_eq!(
        beacons(&inherited),
        1,
        "the beacon is inherited: {inherited}"
    );
    let not = open(&["-o"]);
    assert_eq!(beacons(&not), 0, "-o: no beacon: {not}");
    assert!(
        not.contains(" o.lock"),
        "-o still names the lock for nested runs: {not}"
    );
}

#[test]
fn status_exit_status_says_whether_the_lock_can_be_taken() {
    let fx = Fixture::new();
    let status = |lock: &str| {
        let out = dirlock(fx.dir(), &["status", "-q", "--lock", lock]);
        assert_eq!(text(&out.stdout), "", "-q prints nothing");
        out.status.code()
    };
    assert_eq!(status("s.lock"), Some(0), "free");
    let h = Holder::start(fx.dir(), &["--lock", "s.lock"]);
    assert_eq!(status("s.lock"), Some(75), "held");
    h.kill();
    assert_eq!(
        status("s.lock"),
        Some(0),
        "dead by proof: the next acquisition takes it"
    );
    let rec = format!(r#"{{"pid":{},"token":"t"}}"#, dead_pid());
    plant(fx.dir(), "e.lock", &rec, Duration::ZERO);
    assert_eq!(
        status("e.lock"),
        Some(75),
        "dead by evidence, inside the grace period"
    );
    plant(fx.dir(), "m.lock", "garbage", Duration::ZERO);
    assert_eq!(status("m.lock"), Some(75), "malformed");
    let out = dirlock(fx.dir(), &["status", "--all"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--all lists, whatever the states"
    );
}

#[test]
fn hold_is_hidden_and_completions_and_the_manual_come_from_the_same_definitions() {
    let help = text(&Command::new(BIN).arg("--help").output().unwrap().stdout);
    assert!(
        !help.lines().any(|l| l.trim_start().starts_with("hold ")),
        "{help}"
    );
    assert!(
        help.contains("completions") && help.contains("man"),
        "{help}"
    );
    let out = Command::new(BIN).args(["hold", "--help"]).output().unwrap();
    assert!(out.status.success(), "hold still works");
    let bash = text(
        &Command::new(BIN)
            .args(["completions", "bash"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        bash.contains("--conflict-exit-code") && bash.contains("--nonblock"),
        "{bash}"
    );
    let zsh = Command::new(BIN)
        .args(["completions", "zsh"])
        .output()
        .unwrap();
    assert!(zsh.status.success() && text(&zsh.stdout).contains("#compdef dirlock"));
    // The hidden test helper is not offered for completion either.
    for shell in ["bash", "zsh", "fish"] {
        let out = text(
            &Command::new(BIN)
                .args(["completions", shell])
                .output()
                .unwrap()
                .stdout,
        );
        let words: Vec<&str> = out
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .collect();
        // (`hold` as a word of its own: the option help says who "holds" a lock.)
        assert!(
            words.contains(&"unlock") && !words.contains(&"hold"),
            "{shell}: {}",
            out.lines()
                .filter(|l| l
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .any(|w| w == "hold"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let man = text(&Command::new(BIN).arg("man").output().unwrap().stdout);
    assert!(
        man.contains(".TH dirlock 1") && man.contains("dirlock\\-run(1)"),
        "{man}"
    );
    let man = text(
        &Command::new(BIN)
            .args(["man", "run"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        man.contains(".TH dirlock-run 1") && man.contains("conflict\\-exit\\-code"),
        "{man}"
    );
}
