//! What this process holds, and what its parent said it holds: the in-process registry that
//! refuses self-deadlocks and lock-order inversions, and the `DIRLOCK_HELD` variable that
//! names a parent's locks to the programs it runs.

use crate::error::Error;
use crate::sys::{FileId, PerProcess, Real, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

/// What blocks on a lock, and so what may not wait for one it holds: a thread (blocking
/// acquisitions), or a task (asynchronous ones, which move between threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who {
    Thread(ThreadId),
    #[cfg(feature = "tokio")]
    Task(tokio::task::Id),
    /// A simulated process's thread (task 0) or task, by slot and task.
    #[cfg(any(test, fuzzing))]
    Sim(usize, usize),
}

impl Who {
    /// The calling task, when it runs in a tokio task (with the `tokio` feature); else the
    /// calling thread. A blocking acquisition inside a task counts as the task's: the task is
    /// what would wait for itself.
    pub(crate) fn current() -> Who {
        #[cfg(feature = "tokio")]
        if let Some(id) = tokio::task::try_id() {
            return Who::Task(id);
        }
        Who::Thread(std::thread::current().id())
    }
}

/// The environment variable that names the locks a process runs under, set by
/// [`LockGuard::keep_alive_in`](crate::LockGuard::keep_alive_in) (and so by `dirlock run`): one line per lock,
/// `<holder pid> <dev>:<ino> <lock name> <token>`, where `<dev>:<ino>` identifies the lock
/// directory and `<token>` the acquisition (its owner record's token). Identities, not path
/// text or a pid alone: the same lock spelled differently (relative, through a symlink, under
/// a `TMPDIR` with a newline or a byte that is not UTF-8) is still recognised, and a stale
/// line (its holder gone, its pid reused: every container's main process is pid 1) names no
/// one's lock. (A line without the token, as versions before it wrote, is matched by pid.)
pub const HELD_VAR: &str = "DIRLOCK_HELD";

/// One `DIRLOCK_HELD` line.
pub(crate) fn held_line(pid: u32, dir: FileId, name: &str, token: &str) -> String {
    format!("{pid} {}:{} {name} {token}\n", dir.dev, dir.ino)
}

/// The acquisitions (token: `None` on a line that says none) that `DIRLOCK_HELD` names for
/// lock `name` in the directory `dir`, with their holders' pids (other than this process: its
/// own locks are its threads'). Names are compared without case: on a case-insensitive
/// filesystem (Windows', macOS's by default) `A.lock` is `a.lock`. So there may be several
/// (`A.lock` held by one ancestor, `a.lock` by another, on a case-sensitive one): the caller
/// looks for the lock's owner among them.
pub(crate) fn held_by_parent(dir: FileId, name: &str) -> Vec<(u32, Option<String>)> {
    let Some(text) = std::env::var_os(HELD_VAR).and_then(|v| v.into_string().ok()) else {
        return Vec::new();
    };
    let me = Real.pid();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let pid: u32 = fields.next()?.parse().ok()?;
            let (dev, ino) = fields.next()?.split_once(':')?;
            let id = FileId {
                dev: dev.parse().ok()?,
                ino: ino.parse().ok()?,
            };
            let named = fields.next()?.eq_ignore_ascii_case(name);
            let token = fields.next().map(str::to_owned);
            (id == dir && named && pid != me).then_some((pid, token))
        })
        .collect()
}

/// Which family a lock belongs to (for the lock-order rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    Repository,
    GlobalSetup,
    Named,
}

struct Registered {
    serial: u64,
    dir: FileId,
    name: String,
    /// The published lock directory itself.
    lock: FileId,
    who: Who,
    family: Family,
    path: PathBuf,
}

/// The locks this process holds (a forked child starts with none: its parent's are not its
/// own).
static HELD: PerProcess<Vec<Registered>> = PerProcess::new(Vec::new);
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Refuses what would deadlock `who` (this thread, or an asynchronous acquisition's task): the
/// same lock again, or the global setup lock while it holds a repository lock (the order is
/// setup first). Both rules are per thread or task: that is what blocks, and the process's
/// other threads and tasks contend like other processes do.
///
/// The same lock is the same name in the same lock directory, or, where names differ only in
/// case, whatever `found` (the identity of the directory now at `name`) says: on a
/// case-insensitive filesystem `A.lock` and `a.lock` are one directory, on a case-sensitive
/// one two.
pub(crate) fn check_order(
    dir: FileId,
    name: &str,
    found: impl Fn() -> Option<FileId>,
    family: Family,
    lock: &Path,
    resource: &str,
    me: Who,
) -> Result<(), Error> {
    let held = HELD.lock();
    for r in held.iter() {
        let same = r.dir == dir
            && (r.name == name || (r.name.eq_ignore_ascii_case(name) && found() == Some(r.lock)));
        if same && r.who == me {
            return Err(Error::AlreadyHeld {
                lock: lock.to_owned(),
                resource: resource.to_owned(),
            });
        }
        if family == Family::GlobalSetup && r.family == Family::Repository && r.who == me {
            return Err(Error::LockOrder {
                lock: lock.to_owned(),
                resource: resource.to_owned(),
                held: r.path.clone(),
            });
        }
    }
    Ok(())
}

pub(crate) fn register(
    dir: FileId,
    name: &str,
    lock: FileId,
    family: Family,
    path: &Path,
    who: Who,
) -> u64 {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    HELD.lock().push(Registered {
        serial,
        dir,
        name: name.to_owned(),
        lock,
        who,
        family,
        path: path.to_owned(),
    });
    serial
}

pub(crate) fn unregister(serial: u64) {
    HELD.lock().retain(|r| r.serial != serial);
}
