//! The library's integration tests: one binary, one module per concern. Holders in other
//! processes are this binary again (`holder::hold`), so these tests need no command; the
//! `dirlock` command's own tests are in `cli/tests`.
#![cfg(unix)] // Unix processes, signals and filesystems (the portable tests are in tests/portable.rs)
#![expect(
    clippy::disallowed_methods,
    reason = "tests build and tear down fixtures with std::fs"
)]

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod chaos_shared;
mod contention;
mod crash;
mod guards;
mod hardening;
mod holder;
mod hostile;
mod names;
mod queue;
mod reclaim;
mod release;
mod safety;
mod shared;
mod turns;
mod waiting;

use std::ffi::OsString;
use std::process::Command;

/// A holder process, under `wrapper` if given: this test binary, running [`holder::hold`] with
/// `args` (those `dirlock hold` takes).
pub fn hold_command(wrapper: &[&str], args: &[OsString]) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args([
        "--exact",
        "holder::hold",
        "--ignored",
        "--nocapture",
        "--quiet",
    ])
    .env(holder::ARGS, holder::join(args));
    cmd
}
