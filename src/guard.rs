//! The held lock: an RAII guard with an explicit, fallible [`LockGuard::release`], and the
//! in-process registry that refuses self-deadlocks and lock-order inversions.

use crate::error::Error;
use crate::owner::Owner;
use crate::protocol::{self, Held, Space};
use crate::sys::{FileId, Real, System};
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

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
    thread: ThreadId,
    family: Family,
    pid: u32,
    path: PathBuf,
}

/// The locks this process holds. Entries of another pid are a forked parent's: ignored.
static HELD: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
static SERIAL: AtomicU64 = AtomicU64::new(1);

fn registry() -> std::sync::MutexGuard<'static, Vec<Registered>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Refuses what would deadlock this thread: the same lock again, or the global setup lock while
/// it holds a repository lock (the order is setup first). Both rules are per thread: the thread
/// is what blocks, and other threads of the process contend like other processes do.
pub(crate) fn check_order(
    dir: FileId,
    name: &str,
    family: Family,
    lock: &Path,
    resource: &str,
) -> Result<(), Error> {
    let pid = Real.pid();
    let me = std::thread::current().id();
    let held = registry();
    for r in held.iter().filter(|r| r.pid == pid) {
        if r.dir == dir && r.name == name && r.thread == me {
            return Err(Error::AlreadyHeld {
                lock: lock.to_owned(),
                resource: resource.to_owned(),
            });
        }
        if family == Family::GlobalSetup && r.family == Family::Repository && r.thread == me {
            return Err(Error::LockOrder {
                lock: lock.to_owned(),
                resource: resource.to_owned(),
                held: r.path.clone(),
            });
        }
    }
    Ok(())
}

fn register(dir: FileId, name: &str, family: Family, path: &Path) -> u64 {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    registry().push(Registered {
        serial,
        dir,
        name: name.to_owned(),
        thread: std::thread::current().id(),
        family,
        pid: Real.pid(),
        path: path.to_owned(),
    });
    serial
}

fn unregister(serial: u64) {
    registry().retain(|r| r.serial != serial);
}

/// A held lock. Release it with [`LockGuard::release`] to learn whether the release worked;
/// dropping the guard releases it too, ignoring errors.
///
/// A forked child that inherits a guard does nothing when it drops or releases it: the lock is
/// the parent's. The beacon descriptor is close-on-exec, so an `exec`'d program does not keep
/// the lock alive.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard {
    held: Option<Held<Real>>,
    dir: Arc<OwnedFd>,
    dir_id: FileId,
    dir_path: PathBuf,
    path: PathBuf,
    uid: u32,
    resource: String,
    acquirer: u32,
    serial: u64,
}

impl LockGuard {
    pub(crate) fn new(
        held: Held<Real>,
        dir: Arc<OwnedFd>,
        dir_id: FileId,
        dir_path: &Path,
        uid: u32,
        resource: String,
        family: Family,
    ) -> LockGuard {
        let path = dir_path.join(&held.name);
        let serial = register(dir_id, &held.name, family, &path);
        LockGuard {
            acquirer: held.owner.pid,
            held: Some(held),
            dir,
            dir_id,
            dir_path: dir_path.to_owned(),
            path,
            uid,
            resource,
            serial,
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
    pub fn keep_alive_in(&self, cmd: &mut std::process::Command) {
        use std::os::fd::AsRawFd;
        crate::sys::keep_open_in_child(cmd, self.held().beacon.as_raw_fd());
        self.name_in(cmd);
    }

    /// Names this lock in `DIRLOCK_HELD` for the child that `cmd` spawns, so that a nested
    /// acquisition of the same lock there is refused ([`Error::HeldByParent`]) instead of
    /// waiting for its own parent; the child does not keep the lock alive (see
    /// [`LockGuard::keep_alive_in`] for that).
    pub fn name_in(&self, cmd: &mut std::process::Command) {
        let mut held = std::env::var(crate::locks::HELD_VAR).unwrap_or_default();
        if !held.is_empty() && !held.ends_with('\n') {
            held.push('\n');
        }
        held.push_str(&crate::locks::held_line(
            self.acquirer,
            self.dir_id,
            &self.held().name,
        ));
        cmd.env(crate::locks::HELD_VAR, held);
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

    fn release_inner(&mut self) -> Result<(), Error> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        unregister(self.serial);
        let sp = Space {
            sys: &Real,
            dir: &*self.dir,
            path: &self.dir_path,
            uid: self.uid,
        };
        protocol::release(&sp, held, &self.resource, self.acquirer)
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
