//! `dirlock`: take, hold and locate directory locks from the shell.
//!
//! This first cut has `hold` (take a lock and keep it until killed or until a file appears)
//! and `path` (print a lock's path); `run`, `status`, `unlock` and `sweep` follow.

use dirlock::{Error, LockRequest, Locks, Wait};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "\
usage: dirlock hold [SELECTOR] [--purpose TEXT] [--wait | --timeout SECS] [--grace SECS] [--until FILE]
       dirlock path [SELECTOR]

SELECTOR: [--app NAME | --dir DIR] (--repository ROOT | --global-setup HOME | --lock NAME)
  --app NAME    lock namespace <temp dir>/<NAME>-<uid>/operation-locks (default: dirlock)
  --dir DIR     a lock directory of your own

hold prints `held PATH` once the lock is published (and `reclaimed-from PID TOKEN` when it
took over a dead owner's lock), then holds it until killed or until FILE exists.

exit status: 0 success, 75 the lock is held by another process, 64 usage error, 1 other error";

const EX_USAGE: u8 = 64;
const EX_TEMPFAIL: u8 = 75;

#[derive(Default)]
struct Args {
    command: String,
    app: Option<String>,
    dir: Option<PathBuf>,
    repository: Option<PathBuf>,
    global_setup: Option<PathBuf>,
    lock: Option<String>,
    purpose: Option<String>,
    wait: Option<Wait>,
    grace: Option<Duration>,
    until: Option<PathBuf>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        command: argv.next().ok_or("missing command")?,
        ..Args::default()
    };
    let secs = |v: String| -> Result<Duration, String> {
        v.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{v:?} is not a number of seconds"))
    };
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--app" => a.app = Some(value()?),
            "--dir" => a.dir = Some(value()?.into()),
            "--repository" => a.repository = Some(value()?.into()),
            "--global-setup" => a.global_setup = Some(value()?.into()),
            "--lock" => a.lock = Some(value()?),
            "--purpose" => a.purpose = Some(value()?),
            "--wait" => a.wait = Some(Wait::Forever),
            "--timeout" => a.wait = Some(Wait::Timeout(secs(value()?)?)),
            "--grace" => a.grace = Some(secs(value()?)?),
            "--until" => a.until = Some(value()?.into()),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn request<'l>(a: &Args, locks: &'l Locks) -> Result<LockRequest<'l>, String> {
    let mut req = match (&a.repository, &a.global_setup, &a.lock) {
        (Some(r), None, None) => locks.repository_lock(r),
        (None, Some(h), None) => locks.global_setup_lock(h),
        (None, None, Some(n)) => locks.named_lock(n),
        _ => return Err("give exactly one of --repository, --global-setup, --lock".into()),
    };
    if let Some(w) = a.wait {
        req = req.wait(w);
    }
    if let Some(g) = a.grace {
        req = req.grace(g);
    }
    if let Some(p) = &a.purpose {
        req = req.purpose(p.clone());
    }
    Ok(req)
}

fn report(e: &Error) -> ExitCode {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    eprintln!("dirlock: {msg}");
    ExitCode::from(if e.is_contended() { EX_TEMPFAIL } else { 1 })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(problem) => {
            if !problem.is_empty() {
                eprintln!("dirlock: {problem}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if problem.is_empty() { 0 } else { EX_USAGE });
        }
    };
    let locks = match (&args.app, &args.dir) {
        (_, Some(d)) => Locks::in_dir(d),
        (a, None) => Locks::new(a.as_deref().unwrap_or("dirlock")),
    };
    let locks = match locks {
        Ok(l) => l,
        Err(e) => return report(&e),
    };
    let req = match request(&args, &locks) {
        Ok(r) => r,
        Err(problem) => {
            eprintln!("dirlock: {problem}\n{USAGE}");
            return ExitCode::from(EX_USAGE);
        }
    };
    match args.command.as_str() {
        "path" => match req.path() {
            Ok(p) => {
                println!("{}", p.display());
                ExitCode::SUCCESS
            }
            Err(e) => report(&e),
        },
        "hold" => {
            let guard = match req.acquire() {
                Ok(g) => g,
                Err(e) => return report(&e),
            };
            println!("held {}", guard.path().display());
            if let Some(prev) = guard.reclaimed_from() {
                println!("reclaimed-from {} {}", prev.pid, prev.token);
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
            loop {
                if args.until.as_ref().is_some_and(|f| f.exists()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            match guard.release() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => report(&e),
            }
        }
        other => {
            eprintln!("dirlock: unknown command {other:?}\n{USAGE}");
            ExitCode::from(EX_USAGE)
        }
    }
}
