// The README is the crate's front page. Its links are relative, for GitHub; the definitions
// below come first, and the first definition of a link wins, so on docs.rs they lead to the
// repository (tests/repository.rs checks every README link has one here).
//! [ARCHITECTURE.md]: https://github.com/dirlock/dirlock/blob/main/ARCHITECTURE.md
//! [CHANGELOG.md]: https://github.com/dirlock/dirlock/blob/main/CHANGELOG.md
//! [docs/async.md]: https://github.com/dirlock/dirlock/blob/main/docs/async.md
//! [docs/command.md]: https://github.com/dirlock/dirlock/blob/main/docs/command.md
//! [docs/design.md]: https://github.com/dirlock/dirlock/blob/main/docs/design.md
//! [docs/evidence.md]: https://github.com/dirlock/dirlock/blob/main/docs/evidence.md
//! [docs/internals.md]: https://github.com/dirlock/dirlock/blob/main/docs/internals.md
//! [docs/limits.md]: https://github.com/dirlock/dirlock/blob/main/docs/limits.md
//! [docs/performance.md]: https://github.com/dirlock/dirlock/blob/main/docs/performance.md
//! [docs/platforms.md]: https://github.com/dirlock/dirlock/blob/main/docs/platforms.md
#![doc = include_str!("../README.md")]
//!
//! ## Locks, requests and guards
//!
//! Locks live in a lock directory ([`Locks`]): [`Locks::new`] for an application's per-user
//! namespace under the temporary directory (`Locks::new("apnea")` shares the locks of the
//! TypeScript tool this protocol comes from), [`Locks::in_dir`] for a directory of your own
//! that only you can write, or one a group shares (mode 2770, setgid: its members take over
//! each other's dead locks). A lock is for a repository ([`Locks::repository_lock`]), an
//! account's setup ([`Locks::global_setup_lock`]), a file or directory
//! ([`Locks::path_lock`]) or a name ([`Locks::named_lock`]). The closure helpers
//! ([`Locks::with_repository_lock`], [`Locks::with_global_setup_lock`],
//! [`Locks::with_setup_locks`]) release also when the work panics; a [`LockRequest`] says how
//! to take a lock ([`Wait`], [`LockRequest::purpose`], [`LockRequest::durable`]) and gives a
//! [`LockGuard`], whose [`LockGuard::reclaimed_from`] names a holder that died holding it and
//! whose [`LockGuard::check`] tells, before a step that must not overlap another's, that the
//! lock is still yours.
//!
//! ### When it is held
//!
//! Contention ([`Error::Locked`], [`Error::Stale`], [`Error::Guarded`], [`Error::Timeout`],
//! [`Error::HeldByParent`]; [`Error::is_contended`] tells them from failures) names the lock
//! and its holder, in words for the end users of your application:
//!
//! ```
//! # let tmp = tempfile::tempdir()?;
//! let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
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
//! tells you once whom it waits for, and a [`Cancel`] ends the wait from another thread. With
//! the `tokio` feature, `LockRequest::acquire_async` and the `_async` forms of the closure
//! helpers wait the same way without holding a thread ([docs/async.md]).
//!
//! ### Looking at locks
//!
//! [`LockRequest::status`] and [`Locks::statuses`] say who holds a lock and how it was judged,
//! [`LockRequest::unlock`] removes a dead holder's lock for an operator, [`Locks::sweep`]
//! removes leftovers, and [`diagnose`] tells whether a directory can host locks and which
//! guarantees its filesystem keeps. None of them makes anything.
//!
//! ### Within one process
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
//! How it works inside: [`internals`].
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(rustdoc::broken_intra_doc_links)]

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
pub use inspect::{GuardState, Leftover, Party, Role, State, Status};
pub use liveness::{Judgement, Liveness};
pub use locks::Locks;
pub use options::{Blocked, Cancel, Wait, Waiting, DEFAULT_GRACE};
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
