//! The `dirlock` command's integration tests, run for real (through `CARGO_BIN_EXE_dirlock`):
//! its subcommands and exit statuses, chaos across processes, faults injected by strace,
//! interoperability with the reference implementation.
#![cfg(unix)]
// Unix processes, signals, strace and the reference under Node.js (the portable tests are in tests/portable.rs)
#![expect(
    clippy::disallowed_methods,
    reason = "tests build and tear down fixtures with std::fs"
)]

#[path = "../../../tests/common/mod.rs"]
mod common;

mod advice;
mod chaos;
mod cli;
mod doctor;
mod environment;
mod faults;
mod flock;
mod habits;
mod hardening;
mod interop;
mod interop_queue;
mod interop_shared;
mod names;
mod safety;
mod shared;
mod signals;
mod stale;

use std::ffi::OsString;
use std::process::Command;

/// The command under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_dirlock");

/// `dirlock SUBCOMMAND --dir DIR ARGS...`: `args` is the subcommand and its arguments.
pub fn dirlock_in(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args.iter().take(1))
        .arg("--dir")
        .arg(dir)
        .args(&args[1..]);
    c
}

/// A `dirlock hold` process, under `wrapper` if given, with `args`.
pub fn hold_command(wrapper: &[&str], args: &[OsString]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    cmd.arg("hold").args(args);
    cmd
}
