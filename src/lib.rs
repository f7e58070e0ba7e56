//! Cross-process locks that survive crashes without ever letting two processes in at once.
//!
//! Tools that work on a git checkout or a user's account (formatters, agents, installers,
//! build helpers) take a lock so that two runs never mutate the same repository, or run the
//! same setup, at the same time. A run killed by Ctrl-C, `SIGKILL` or a reboot never leaves a
//! lock someone has to delete by hand: the next process takes it over, at once where the
//! kernel proves the holder gone. (How: [`internals`].)
//!
//! # Taking a lock
//!
//! The closure helpers take a lock, run the work, and release it, also when the work panics:
//!
//! ```
//! # let tmp = tempfile::tempdir()?;
//! # let (root, home) = (tmp.path(), tmp.path());
//! use dirlock::Locks;
//!
//! let locks = Locks::in_dir(tmp.path().join("locks"))?; // or Locks::new("myapp")
//! locks.with_repository_lock(root, || Ok::<_, dirlock::Error>(()))?; // fails at once if held
//! locks.with_global_setup_lock(home, || Ok::<_, dirlock::Error>(()))?; // waits while held
//! locks.with_setup_locks(home, root, || Ok::<_, dirlock::Error>(()))?; // setup, then repository
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`LockRequest`] says how to take it, and gives a [`LockGuard`]:
//!
//! ```
//! # let tmp = tempfile::tempdir()?;
//! # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
//! use dirlock::Wait;
//! use std::time::Duration;
//!
//! let guard = locks
//!     .named_lock("deploy")                       // or repository_lock, path_lock, ...
//!     .wait(Wait::Timeout(Duration::from_secs(5))) // or Wait::Forever, Wait::Immediately
//!     .purpose("deploy 1.2")                       // shown to those who wait
//!     .acquire()?;
//! if let Some(dead) = guard.reclaimed_from() {
//!     // A holder died holding it: its work may be half done.
//!     eprintln!("taking over from pid {}", dead.pid);
//! }
//! guard.check()?; // still ours? (before a step that must not overlap another's)
//! guard.release()?; // explicit and fallible; dropping the guard releases too
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Locks live in a lock directory ([`Locks`]): [`Locks::new`] for an application's per-user
//! namespace under the temporary directory (`Locks::new("apnea")` shares the locks of the
//! TypeScript tool this protocol comes from), [`Locks::in_dir`] for a directory of your own
//! that only you can write, or one a group shares (mode 2770, setgid: its members take over
//! each other's dead locks). A lock is for a repository ([`Locks::repository_lock`]), an
//! account's setup ([`Locks::global_setup_lock`]), a file or directory
//! ([`Locks::path_lock`]) or a name ([`Locks::named_lock`]).
//!
//! # When it is held
//!
//! Contention ([`Error::Locked`], [`Error::Stale`], [`Error::Guarded`], [`Error::Timeout`],
//! [`Error::HeldByParent`]; [`Error::is_contended`] tells them from failures) names the lock
//! and its holder, in words for the end users of your application:
//!
//! ```
//! # let tmp = tempfile::tempdir()?;
//! # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
//! let held = locks.named_lock("deploy").acquire()?;
//! std::thread::scope(|s| {
//!     s.spawn(|| match locks.named_lock("deploy").acquire() {
//!         Err(e) if e.is_contended() => println!("busy: {e}"), // "named lock deploy (lock ...) is held by pid ..."
//!         Err(e) => panic!("{e}"),
//!         Ok(_) => unreachable!(),
//!     });
//! });
//! held.release()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A waiting acquisition sleeps until the holder releases or dies; [`LockRequest::on_wait`]
//! tells you once whom it waits for, and a [`Cancel`] ends the wait from another thread.
//!
//! # Looking at locks
//!
//! [`LockRequest::status`] and [`Locks::statuses`] say who holds a lock and how it was judged,
//! [`LockRequest::unlock`] removes a dead holder's lock for an operator, [`Locks::sweep`]
//! removes leftovers, and [`diagnose`] tells whether a directory can host locks and which
//! guarantees its filesystem keeps. None of them makes anything.
//!
//! # Asynchronous acquisition
//!
//! With the `tokio` feature, `LockRequest::acquire_async`, `LockRequest::run_async` and the
//! `_async` forms of the closure helpers wait without holding a thread, parked in the
//! runtime's reactor on the kernel's wake-ups; their options, defaults, errors and refusals
//! are the blocking forms'. The tasks of one runtime that want the same lock are served in
//! the order they asked. Dropping the future at any point leaves nothing behind. The runtime
//! needs time and I/O enabled.
//!
//! # Guarantees
//!
//! - **Mutual exclusion**: two live processes never both hold a lock.
//! - **No wedge**: a holder killed at any point leaves a lock that becomes acquirable again
//!   by itself: at once when the kernel proves the holder gone, otherwise after the grace
//!   period ([`DEFAULT_GRACE`], 60 s) when its pid says it is gone. A holder that runs, or
//!   that cannot be judged from here (another host, pid namespace or operating system), is
//!   never taken over.
//! - **Loud loss**: [`LockGuard::release`] (and [`LockGuard::check`]) report a lock that was
//!   taken away, and never touch another holder's lock.
//! - **Private**: everything is made mode 0700/0600 whatever the umask; symlinks, another
//!   user's directories and directories others can write are refused, naming the path.
//! - **Durable**: the record is fsynced before the lock is published (turn off with
//!   [`LockRequest::durable`]).
//!
//! # Within one process
//!
//! Taking a lock the *same thread* already holds fails at once with [`Error::AlreadyHeld`]
//! (waiting would never end). Taking the global setup lock on a thread that holds a repository
//! lock fails with [`Error::LockOrder`]: the order is setup first. Other threads contend like
//! other processes do. These rules follow the thread that acquired the guard: a [`LockGuard`]
//! is `Send`, and a move to another thread cannot be seen, so a moved guard keeps them with
//! the acquiring thread (the closure helpers, whose guard never moves, are exact). A forked
//! child that drops an inherited guard does nothing, and a child forked at any moment never
//! waits for the library's internal state a thread of its parent held. A program `exec`'d by
//! the holder does not keep the lock alive, unless it was spawned through
//! [`LockGuard::keep_alive_in`] (as `dirlock run` spawns its command). Tasks count as threads
//! for these rules, with the `tokio` feature.
//!
//! The limits, the platforms and the evidence are in the repository's `docs/` directory.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod doctor;
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
mod reclaim;
mod request;
#[cfg(any(test, fuzzing))]
mod sim;
mod space;
mod sweep;
mod sys;
pub mod text;

#[doc = include_str!("../docs/internals.md")]
pub mod internals {}

pub use doctor::{diagnose, Diagnosis, Finding};
pub use error::Error;
pub use guard::LockGuard;
pub use held::HELD_VAR;
pub use inspect::{GuardState, Leftover, State, Status};
pub use liveness::{Judgement, Liveness};
pub use locks::Locks;
pub use options::{Cancel, Wait, Waiting, DEFAULT_GRACE};
pub use owner::{Owner, RecordError};
pub use reclaim::Unlocked;
pub use request::LockRequest;
pub use sweep::Sweep;

/// The deterministic simulation, for the fuzz crate (`cfg(fuzzing)`, which cargo-fuzz sets).
/// Not an API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod __sim {
    pub use crate::paths::check_names;
    pub use crate::sim::fuzz;
}
