//! Cross-process locks that survive crashes without ever letting two processes in at once.
//!
//! A lock is a directory. To take it, a process *stages* a private candidate directory holding
//! an `owner.json` record, then *publishes* it by renaming it into place with no-replace
//! semantics: the rename is atomic, so exactly one contender wins and the lock always has a
//! complete record. To release, the holder checks the lock is still its own and *retires* it
//! by renaming it to a tombstone, which anyone may delete. While it holds the lock, the holder
//! keeps an exclusive `flock` on the lock directory (the *beacon*): when the holder dies,
//! however it dies, the kernel drops that `flock`, and the next contender has proof that the
//! owner is gone and *reclaims* the lock at once, under a guard that lets only one reclaimer
//! act. Locks whose owners can only be judged by pid (records written by the reference
//! TypeScript implementation, or on filesystems without `flock`) are reclaimed only after a
//! grace period, and only when the evidence says the owner is dead.
//!
//! ```
//! use dirlock::{Locks, Wait};
//! # let tmp = tempfile::tempdir()?;
//! # let root = tmp.path();
//! # let home = tmp.path();
//! # fn sync(_: &std::path::Path) -> Result<(), dirlock::Error> { Ok(()) }
//! # fn install() -> Result<(), dirlock::Error> { Ok(()) }
//! let locks = Locks::in_dir(tmp.path().join("locks"))?; // or Locks::new("myapp")
//! locks.with_repository_lock(root, || sync(root))?;     // fails fast if held elsewhere
//! locks.with_global_setup_lock(home, || install())?;    // waits while setup runs elsewhere
//! locks.with_setup_locks(home, root, || sync(root))?;   // setup outermost, repository inner
//!
//! let guard = locks.repository_lock(root).purpose("sync").acquire()?;
//! guard.release()?; // explicit and fallible; dropping the guard releases too
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - **Mutual exclusion**: two live processes never both hold a lock. A lock is only ever
//!   moved away by the holder of its token, or by the single holder of its reclaim guard once
//!   its owner is judged dead.
//! - **No wedge**: a holder killed at any point (SIGKILL included) leaves a lock that becomes
//!   acquirable again by itself: at once when the kernel proves the owner gone (its beacon
//!   `flock` is free), otherwise after the grace period ([`DEFAULT_GRACE`], 60 s) when the pid
//!   evidence says it is dead. Live owners, and owners that cannot be judged from here
//!   (another host, another pid namespace), are never reclaimed, however old the lock.
//! - **Loud loss**: [`LockGuard::release`] reports a lock that was taken away or replaced, and
//!   never touches another owner's lock.
//! - **Private**: everything is created mode 0700/0600 whatever the umask; symlinks, foreign
//!   owners and open modes are refused with an error naming the path and the fix.
//! - **Waiting in the kernel**: a waiting acquisition sleeps until the holder releases or dies
//!   (a blocking `flock` on the holder's beacon when it waits without a deadline; inotify on the
//!   holder's lock directory and a pidfd for pid-judged holders otherwise); it can be cancelled
//!   ([`Cancel`]) and leaves nothing behind when it times out. A notification may be lost (an
//!   inotify queue that overflowed while the process was stopped): an overflow wakes every
//!   waiter, and no sleep on a notification lasts more than a second before the waiter looks
//!   at the lock again.
//! - **Durability**: the record and candidate are fsynced before publishing (turn off with
//!   [`LockRequest::durable`]), so a power loss never leaves a lock without a complete record.
//!
//! # Within one process
//!
//! Taking a lock the *same thread* already holds fails at once with [`Error::AlreadyHeld`]
//! (waiting would never end). Taking the global setup lock on a thread that holds a repository
//! lock fails with [`Error::LockOrder`]: the order is setup first. Other threads contend like
//! other processes do. These rules follow the thread that acquired the guard: a [`LockGuard`]
//! is `Send`, and a move to another thread cannot be seen, so a moved guard keeps them with
//! the acquiring thread (the closure helpers, whose guard never moves, are exact). A forked
//! child that drops an inherited guard does nothing, and a child forked at any moment, beside
//! threads and tasks that take locks, never waits for a lock of the library's a thread of its
//! parent held at the fork: the library's state is made anew in the child. The beacon is
//! close-on-exec, so an `exec`'d program does not keep the lock alive, unless it was spawned
//! through [`LockGuard::keep_alive_in`] (as `dirlock run` spawns its command).
//!
//! # Asynchronous acquisition
//!
//! With the `tokio` feature, `LockRequest::acquire_async`, `LockRequest::run_async` and the
//! `_async` forms of the closure helpers (`Locks::with_repository_lock_async` and its
//! siblings) wait without holding a thread: they run the blocking acquisition's contest (one
//! candidate staged for the whole wait), and between its rounds the task waits in the
//! runtime's reactor on the kernel wake-ups a blocking waiter uses. The tasks of one runtime
//! that want the same lock are served in the order they asked: only the first contends with
//! other processes (and threads and runtimes), so a release costs the same whatever the number of tasks waiting. The
//! refusals above are per task there (a blocking acquisition inside a task counts as the
//! task's; futures joined in one task are that task). Dropping the future at any point leaves
//! nothing behind. The runtime needs time and I/O enabled.
//!
//! # On disk
//!
//! In the lock directory `D` (`<temp dir>/<app>-<uid>/operation-locks` for [`Locks::new`]):
//!
//! | entry | what it is |
//! | --- | --- |
//! | `NAME` | the lock: a directory holding `owner.json` (see [`Owner`]) |
//! | `NAME.candidate.<token>` | a lock (or a reclaim guard) being staged by the process holding `<token>` |
//! | `NAME.tombstone.<uuid>` | a retired lock, deleted by anyone |
//! | `NAME.reclaim` | the reclaim guard (`flock` + marker, renamed into place whole; where renames cannot refuse to replace, a file made in place and locked) |
//!
//! Repository and global setup lock names are those of the reference TypeScript
//! implementation (`repository-` + hex(sha256(`"repository\0"` + real path)) + `.lock`), and
//! its `{pid, token}` records are read and judged by pid; a lock taken by either is respected
//! by the other.
//!
//! # Judging an owner
//!
//! The first rule that applies decides: another operating system's program (the record says
//! which: a Windows program under Wine or beside WSL sees nothing of a Linux one's beacon or
//! pid, nor the other way round): unknown; another host on another kernel (its boot id is not
//! ours): unknown; another boot id: dead by evidence if the lock was taken before this kernel
//! booted (a previous boot), else unknown (another kernel runs now under our host name); a
//! record of ours whose boot id only one side knows: unknown; beacon recorded: dead by proof if
//! its `flock` is free, else live; another pid namespace: unknown; our own pid with a token
//! this process never wrote: dead by evidence (the writer died and we got its pid); no such
//! pid: dead by evidence; pid start time differs: dead by evidence (pid reused); otherwise
//! live. A fact that cannot be read judges the owner live. A record or lock directory that
//! others may write is never trusted; one they may only read (as Wine makes them) is. The grace period counts from the lock directory's
//! modification time, or, if that is in the future (a clock set back), from when a waiting
//! acquisition first saw the lock unchanged.
//!
//! Everything read from disk is data: a token becomes part of a tombstone's name only when it
//! is a safe name, an I/O error reading a record is an I/O error (never a "malformed" verdict),
//! and text from a record is escaped in every message ([`text::escape`]).
//!
//! # Cost
//!
//! An uncontended, durable acquire + release is 19 system calls (`strace -c`; the bare
//! sequence of the same steps, without any checks, is 15). Each one:
//!
//! | step | calls | why |
//! | --- | --- | --- |
//! | lock directory | `fstat` | it still exists (a temp cleaner may remove an empty directory; a lock in a removed directory would exclude no one) |
//! | stage | `getrandom` | the token (a UUID v4, as the reference writes) |
//! | | `mkdirat`, `openat`, `fstat` | the candidate, its handle, its inode identity and mode (`fchmod` only if the umask stripped owner bits) |
//! | | `flock` | the beacon, held for the lock's life |
//! | | `openat`, `write`, `fsync`, `close`, `fsync` | the record, complete and durable before it can be seen (no `fsync`s with `durable(false)`) |
//! | publish | `renameat2(RENAME_NOREPLACE)` | atomic, never over anything; its success is the proof |
//! | release | `fstatat` | the lock is still ours (the very inode our beacon holds) |
//! | | `renameat2`, `fstatat` | retire to a tombstone named by our token, and check it is what we retired |
//! | reap | `unlinkat` | the record |
//! | | `flock(LOCK_UN)`, `close` | the beacon: unlocked for every copy a fork made of it, then closed (this wakes waiters) |
//! | | `unlinkat` | the tombstone |
//!
//! A waiter stages its candidate before it sleeps, so taking over a released lock costs one
//! rename after the wake-up. A waiter with no deadline and no [`Cancel`] sleeps in a blocking
//! `flock(LOCK_SH)` on the holder's beacon, the kernel's own handoff; one with a deadline or
//! a `Cancel` sleeps in `poll`, woken by inotify (the holder's rename or final close), a pidfd
//! or the cancel's eventfd. The pid is cached (and reset in forked children); identity facts
//! are read once per process.
//!
//! # Platforms
//!
//! The protocol is the same everywhere; what each platform's `sys` module does for its steps:
//!
//! - **Linux** (first-class, tested most deeply): publish with `renameat2(RENAME_NOREPLACE)`
//!   (a plain rename checked by inode where a filesystem refuses the flag); the beacon is an
//!   `flock` on the lock directory; start time from `/proc/<pid>/stat`, boot id, pid
//!   namespace; waiters are woken by inotify (the beacon's last close, the lock's rename) and
//!   a pidfd.
//! - **macOS**: publish with `renameatx_np(RENAME_EXCL)`; the beacon is an `flock`; start time
//!   from `proc_pidinfo`, boot identity `kern.bootsessionuuid`; waiters sleep on a kqueue of
//!   their own (the lock directory's rename, removal and attribute events, and `NOTE_EXIT` of
//!   the holder's pid, since kqueue reports no close on macOS). Built and linted in CI, not run.
//! - **FreeBSD**: plain renames checked by inode (no `renameat2` before FreeBSD 15); `flock`;
//!   start time from `KERN_PROC_PID` less `kern.boottime` (reported start times move with the
//!   clock there); no boot identity (`kern.boottime` moves when the clock is set); a kqueue
//!   with `NOTE_CLOSE`. Built and linted in CI, not run.
//! - **Windows** (tested under Wine): the reference's `%TEMP%\<app>-user\operation-locks`;
//!   publish through `FileRenameInfo` without replacing (fails when the target exists, empty
//!   or not), retried for up to 2 s while Windows refuses to rename a directory with a file
//!   inside open; the beacon is a *sharing mode*: the holder keeps its lock directory open for
//!   writing while denying write sharing, and a probe that asks for write access fails
//!   exactly while that handle is open, so the kernel's closing of a dead holder's handles is
//!   the proof; liveness without a beacon by `OpenProcess` and the creation time; waiters
//!   sleep in `WaitForMultipleObjects` on a change notification on the lock's directory, the
//!   holder's process and the cancel event; privacy is a protected DACL that lets no one else
//!   write. A child cannot inherit the beacon ([`LockGuard::keep_alive_in`] only names the
//!   lock there); `dirlock run` puts its command in a kill-on-close job instead. A repository
//!   or home is named by its path made absolute, with symbolic links and junctions followed
//!   and every other name spelled as the disk spells it (the drive letter in upper case):
//!   the reference's `fs.realpathSync` text for a path given as the disk spells it, and one
//!   lock for spellings that differ in case. Lock names that differ only in case are one lock
//!   where the filesystem folds case (Windows, macOS by default): a thread holding `A.lock`
//!   is refused `a.lock` as already held, and a command run under one as its parent's.
//!
//! # Architecture
//!
//! Dependencies run one way, from the platform up; no module of the crate imports one that
//! imports it (inside `sys` and `sim`, submodules share their parent's helpers):
//!
//! ```text
//! sys (the System seam: Real = libc, SimSys = the simulation)
//!  └ space (primitives of a lock directory: observe, read and judge a record, make a candidate,
//!     │      judge a candidate's creator, remove a tree)          liveness, owner, paths, options
//!     ├ reclaim (a dead owner's lock retired under NAME.reclaim; the operator's unlock)
//!     │  └ protocol (acquire = stage → contend → publish; release)
//!     │     ├ protocol::stage (candidate, record, refresh, publish)
//!     │     └ protocol::contend (judge the holder, then wait, reclaim or give up)
//!     ├ sweep (tombstones and dead creators' candidates)
//!     └ inspect (status, without changing anything)
//! lockdir (the private lock directory, re-created if removed) · held (the in-process registry,
//!   DIRLOCK_HELD) · guard (LockGuard) · request (LockRequest) · locks (Locks, closure helpers)
//! ```
//!
//! One acquisition: `LockRequest::acquire` (request) resolves the name, checks the registry
//! (held), and runs `protocol::acquire` in the current lock directory (lockdir); that stages a
//! candidate (stage, through space), then `contend` publishes it; on losing, it observes and
//! judges the holder (space, liveness) and waits for it, reclaims from it (reclaim) or gives
//! up at the deadline; the won lock becomes a `LockGuard` (guard), whose release runs
//! `protocol::release`.
//!
//! Every change to lock state goes through the `System` trait (module `sys`), relative to the
//! lock directory's handle; nothing else touches the filesystem's mutating calls (a lint
//! refuses them). The same protocol code runs over `sys::Real` and over the simulation
//! (`sim`, tests and the `sim` feature), whose model filesystem and scheduler interleave
//! processes at every system call. The evidence (README, *Evidence*): unit tests and the
//! simulation in `src/` (`cargo test --lib`), integration tests of the library in `tests/it/`
//! (real processes, crashes, faults, chaos) and of the command in `cli/tests/it/`
//! (interoperability with the reference implementation included), fuzz targets in `fuzz/`,
//! benchmarks in `benches/`, and deliberate breaks in `.ci/mutants.py`.
//!
//! # Limits
//!
//! - The temporary directory, and every directory above it (or above a lock directory of your
//!   own), must be writable only by this user or root, or be sticky: others could rename the
//!   lock namespace away under a held lock ([`Error::Unsafe`] says which directory and why). A
//!   relative `TMPDIR` is refused.
//! - A repository lock is named by the repository's real path: a bind mount of it is another
//!   lock.
//! - Linux is the first-class platform. Other Unixes compile with fallbacks (plain rename
//!   verified by inode, backoff instead of kernel wake-ups) and are not yet tested.
//! - On network filesystems, `flock` may be unavailable or local to one client; owners there
//!   are judged by pid, and records from another host are never reclaimed automatically.
//! - A lock whose `owner.json` is malformed is never removed automatically: an operator
//!   decides and removes it by hand.
//! - A process that is SIGKILLed can leave a candidate or tombstone behind; they are harmless
//!   and a sweep removes them.

#[cfg(feature = "tokio")]
mod asynchronous;
mod error;
mod guard;
mod held;
mod inspect;
mod liveness;
mod lockdir;
mod locks;
mod options;
mod owner;
pub mod paths;
mod protocol;
#[cfg(feature = "tokio")]
mod queue;
mod reclaim;
mod request;
#[cfg(any(test, feature = "sim"))]
mod sim;
mod space;
mod sweep;
mod sys;
pub mod text;

pub use error::Error;
pub use guard::LockGuard;
pub use held::HELD_VAR;
pub use inspect::{GuardState, Leftover, State, Status};
pub use liveness::{Judgement, Liveness};
pub use locks::Locks;
pub use options::{Cancel, Wait, Waiting, DEFAULT_GRACE};
pub use owner::Owner;
pub use reclaim::Unlocked;
pub use request::LockRequest;
pub use sweep::Sweep;

/// The deterministic simulation, for the fuzz crate (feature `sim`). Not a stable API.
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod __sim {
    pub use crate::paths::check_names;
    pub use crate::sim::fuzz;
}
