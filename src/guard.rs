//! The held lock: an RAII guard with an explicit, fallible [`LockGuard::release`].

use crate::acquire::queue::Place;
use crate::acquire::{keeper, Acquired, Acquisition};
use crate::error::Error;
use crate::held::{held_line, register, unregister, HELD_VAR};
use crate::lockdir::LockDir;
use crate::owner::Owner;
use crate::protocol::{self, Held};
use crate::sys::{FileId, Real, RealDir};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A held lock. Release it with [`LockGuard::release`] to learn whether the release worked;
/// dropping the guard releases it too, ignoring errors.
///
/// A forked child that inherits a guard does nothing when it drops or releases it: the lock is
/// the parent's. The beacon descriptor is close-on-exec, so an `exec`'d program does not keep
/// the lock alive.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard {
    held: Option<Held<Real>>,
    /// The lock directory it was taken in, and the handle of it used.
    lock_dir: Arc<LockDir>,
    dir: Arc<RealDir>,
    dir_id: FileId,
    path: PathBuf,
    resource: String,
    acquirer: u32,
    serial: u64,
    /// An asynchronous acquisition's place at the head of its runtime's queue of tasks for
    /// the lock: let go (to the next task) once the lock is released, when the guard goes.
    turn: Option<Place>,
    /// A shared lock's: its place in this process's keeper.
    kept: Option<u64>,
}

impl LockGuard {
    /// The guard of what `acquisition` won, registered as its acquirer's.
    pub(crate) fn new(acquisition: Acquisition<Real, Arc<LockDir>>, won: Acquired<Real>) -> Self {
        let (lock_dir, t, held) = (acquisition.site, acquisition.target, won.held);
        let path = lock_dir.path.join(&held.name);
        let serial = register(
            won.dir_id,
            &held.name,
            held.id,
            t.family,
            &path,
            acquisition.who,
        );
        let kept = held.shared.then(|| {
            keeper::keep(
                lock_dir.clone(),
                won.dir.clone(),
                &held.name,
                held.id,
                &held.owner,
            )
        });
        LockGuard {
            kept,
            acquirer: held.owner.pid,
            held: Some(held),
            lock_dir,
            dir: won.dir,
            dir_id: won.dir_id,
            path,
            resource: t.resource,
            serial,
            turn: won.turn,
        }
    }

    fn held(&self) -> &Held<Real> {
        self.held
            .as_ref()
            .expect("a guard holds its lock until release or drop")
    }

    /// The lock directory's path (`<lock dir>/<name>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Our own owner record, as written in the lock.
    pub fn owner(&self) -> &Owner {
        &self.held().owner
    }

    /// Whether the lock is held shared (a read lock, taken with [`LockRequest::shared`]), with
    /// other readers perhaps; `false` for an exclusive one. A shared request on a filesystem
    /// without `flock` (some network and FUSE mounts) takes the lock exclusively.
    ///
    /// [`LockRequest::shared`]: crate::LockRequest::shared
    pub fn is_shared(&self) -> bool {
        self.held().shared
    }

    /// When this acquisition reclaimed a dead owner's lock, that owner's record: the work it
    /// was doing was interrupted and may need repair.
    pub fn reclaimed_from(&self) -> Option<&Owner> {
        self.held().reclaimed_from.as_ref()
    }

    /// Lets the child that `cmd` spawns keep this lock alive: it inherits the beacon
    /// descriptor across `exec`, so if this process dies (even by `SIGKILL`) while the child
    /// runs, contenders that judge by the beacon (this crate) stay out until the child exits
    /// too; then the kernel proves the owner gone and the next contender reclaims it at once.
    /// The child also finds the lock named in `DIRLOCK_HELD`, so that a nested acquisition of
    /// the same lock is refused ([`Error::HeldByParent`]) instead of waiting for its own
    /// parent.
    ///
    /// The record still names this process: a contender that judges by pid alone (the
    /// reference implementation) finds the owner dead once this process is, and reclaims the
    /// lock after its grace period even if the child still runs. A child that must never
    /// outlive the holder should also be tied to it (`dirlock run` has the kernel kill its
    /// command when it dies). The guard stays this process's: release it after the child has
    /// exited.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::name_in`] (`cmd` is then left as it was).
    pub fn keep_alive_in(&self, cmd: &mut std::process::Command) -> Result<(), Error> {
        self.name_in(cmd)?;
        let held = self.held();
        crate::sys::keep_open_in_child(cmd, &held.beacon);
        if let Some(entry) = &held.entry {
            crate::sys::keep_open_in_child(cmd, &entry.dir);
        }
        Ok(())
    }

    /// Names this lock in `DIRLOCK_HELD` for the child that `cmd` spawns, so that a nested
    /// acquisition of the same lock there is refused ([`Error::HeldByParent`]) instead of
    /// waiting for its own parent; the child does not keep the lock alive (see
    /// [`LockGuard::keep_alive_in`] for that).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the variable, with this lock's line added to what this
    /// process inherited, would be longer than the system lets one variable be (Linux: 32
    /// pages, 128 KiB with 4 KiB pages; Windows: 32767 characters): the child could not be started (Linux says "Argument
    /// list too long"). `cmd` is then left as it was.
    pub fn name_in(&self, cmd: &mut std::process::Command) -> Result<(), Error> {
        let mut held = std::env::var(HELD_VAR).unwrap_or_default();
        let inherited = held.lines().count();
        if !held.is_empty() && !held.ends_with('\n') {
            held.push('\n');
        }
        let h = self.held();
        held.push_str(&held_line(
            self.acquirer,
            self.dir_id,
            &h.name,
            &h.owner.token,
        ));
        let size = HELD_VAR.len() + 1 + held.len() + 1; // NAME=value and its terminator
        if let Some(max) = crate::sys::max_variable().filter(|max| size > *max) {
            return Err(Error::InvalidInput {
                what: format!("the {HELD_VAR} environment variable"),
                problem: format!(
                    "with this lock's line added to what this process inherited ({inherited} line(s)), it would be {size} bytes, more than the {max} the system allows one variable, and the command could not be started: if those lines were not meant for it, remove the variable from the environment (`env -u {HELD_VAR}`)"
                ),
            });
        }
        cmd.env(HELD_VAR, held);
        Ok(())
    }

    /// Releases the lock: checks that it is still ours, retires it to a tombstone, wakes
    /// waiters, and removes the tombstone.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock was taken away or replaced (nothing of the new owner's is
    /// touched); [`Error::Io`] when retiring it failed. Either way the guard is gone and this
    /// process's beacon is dropped, so that if the lock is still ours, the next contender
    /// proves us gone and reclaims it at once.
    pub fn release(mut self) -> Result<(), Error> {
        self.release_inner()
    }

    /// Whether the lock is still this guard's, as its release would find it: one `fstatat`
    /// of the lock, compared with the directory this guard published. A long job can ask
    /// before each step that must not overlap another process's work, and stop after a loss
    /// (an operator's `unlock --force` of a lock judged damaged, a lock directory removed by
    /// hand), rather than learn of it only at the release.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock was taken away or replaced (as [`LockGuard::release`]
    /// would report); [`Error::Io`] when it cannot be looked at.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// let guard = locks.named_lock("job").acquire()?;
    /// for step in 0..3 {
    ///     guard.check()?; // stop before writing, had the lock been lost
    ///     let _ = step;
    /// }
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        let Some(held) = &self.held else {
            return Ok(());
        };
        let sp = self.lock_dir.space(&self.dir);
        protocol::check_held(&sp, held, &self.resource)
    }

    fn release_inner(&mut self) -> Result<(), Error> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        unregister(self.serial);
        if let Some(serial) = self.kept.take() {
            keeper::forget(serial);
        }
        let sp = self.lock_dir.space(&self.dir);
        let released = protocol::release(&sp, held, &self.resource, self.acquirer);
        drop(self.turn.take()); // the next task's turn, once the lock is free
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("path", &self.path)
            .field("resource", &self.resource)
            .field("held", &self.held.is_some())
            .finish()
    }
}
