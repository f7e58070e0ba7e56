//! [`LockRequest`], the builder of one acquisition (or status, or unlock) of one lock.

use crate::acquire::{self, Acquisition, Blocking, Resolved};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::held::{Family, Who};
use crate::inspect::{self, Status};
use crate::lockdir::LockDir;
use crate::options::{Cancel, Options, Wait, Waiting};
use crate::paths;
use crate::reclaim::{self, Unlocked};
use crate::sys::{Real, System};
#[cfg(feature = "tokio")]
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What a request is for.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Repository(PathBuf),
    GlobalSetup(PathBuf),
    Named(String),
    /// A file or directory (which may not exist yet: its parent must).
    Path(PathBuf),
}

/// One acquisition being set up: choose how to wait and what to record, then
/// [`acquire`](LockRequest::acquire).
///
/// ```
/// use dirlock::{Locks, Wait};
/// use std::time::Duration;
/// # let tmp = tempfile::tempdir()?;
/// # let locks = Locks::in_dir(tmp.path().join("locks"))?;
/// # let root = tmp.path();
/// let guard = locks
///     .repository_lock(root)
///     .wait(Wait::Timeout(Duration::from_secs(5)))
///     .purpose("sync")
///     .acquire()?;
/// assert_eq!(guard.owner().purpose.as_deref(), Some("sync"));
/// guard.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A request owns a shared handle of its lock directory: it can be built in one place and
/// kept, returned or moved into another thread, without the [`Locks`](crate::Locks) it came
/// from.
///
/// ```
/// # let tmp = tempfile::tempdir()?;
/// let request = {
///     let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
///     locks.named_lock("deploy.lock").purpose("deploy")
/// }; // `locks` is gone; the request keeps the directory
/// let worker = std::thread::spawn(move || request.run(|| Ok::<_, dirlock::Error>(42)));
/// assert_eq!(worker.join().unwrap()?, 42);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a request does nothing until acquire() or run()"]
pub struct LockRequest {
    pub(crate) dir: Arc<LockDir>,
    target: Target,
    pub(crate) options: Options,
}

impl LockRequest {
    pub(crate) fn new(dir: Arc<LockDir>, target: Target, wait: Wait) -> LockRequest {
        LockRequest {
            dir,
            target,
            options: Options::new(wait),
        }
    }

    /// How to wait while another process holds the lock.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.options.wait = wait.into();
        self
    }

    /// A shared (read) lock instead of an exclusive one: any number of readers hold it
    /// together, while an exclusive request of the same lock (a writer) holds it alone. A
    /// writer that waits keeps new readers out until it has had its turn; it waits only for
    /// the readers already in. A reader killed however it dies is out at once (the kernel
    /// proves it). In one thread (or task), a lock it holds, shared or not, is refused again
    /// at once ([`Error::AlreadyHeld`]), shared or not: a read inside a read could wait behind
    /// a writer that waits for the outer read. Where the filesystem has no `flock` (some
    /// network and FUSE mounts), a shared request takes the lock exclusively
    /// ([`LockGuard::is_shared`] says which). How it is kept on disk, and how programs that
    /// know only exclusive locks see it: [`internals`](crate::internals#shared-locks).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// let a = locks.named_lock("index").shared().acquire()?;
    /// // Another reader (in another thread: this one holds the lock already) comes in too.
    /// let b = std::thread::scope(|s| s.spawn(|| locks.named_lock("index").shared().acquire()).join())
    ///     .unwrap()?;
    /// assert!(a.is_shared() && b.is_shared());
    /// // A writer fails fast while they read.
    /// assert!(std::thread::scope(|s| s.spawn(|| locks.named_lock("index").acquire()).join()).unwrap().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared(mut self) -> Self {
        self.options.shared = true;
        self
    }

    /// A purpose recorded in the owner record and shown to contenders (e.g. `"sync"`).
    pub fn purpose(mut self, purpose: impl Into<String>) -> Self {
        self.options.purpose = Some(purpose.into());
        self
    }

    /// How long a lock whose owner is dead *by evidence* must sit untouched before it is
    /// reclaimed (default [`crate::DEFAULT_GRACE`], 60 s). Owners proven dead by the kernel
    /// are reclaimed at once whatever this says.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.options.grace = grace;
        self
    }

    /// Whether to fsync the owner record and candidate directory before publishing (default
    /// `true`: a power loss never leaves a lock without a complete record).
    pub fn durable(mut self, durable: bool) -> Self {
        self.options.durable = durable;
        self
    }

    /// Calls `f` if the acquisition has to wait, with who holds the lock (for a message such
    /// as "waiting for pid 42 (sync) since ..."): once, and again only when what keeps it out
    /// changes kind ([`Waiting::blocked`]: a holder ends, its lock is taken over), never for
    /// each new holder of a lock that changes hands while it waits. A task queued behind
    /// other tasks of its runtime is told once as it queues, and again only once it is at
    /// the head of that queue.
    pub fn on_wait(mut self, f: impl Fn(&Waiting) + Send + Sync + 'static) -> Self {
        self.options.on_wait = Some(Arc::new(f));
        self
    }

    /// A handle that cancels the wait from another thread.
    pub fn cancel(mut self, cancel: &Cancel) -> Self {
        self.options.cancel = Some(cancel.clone());
        self
    }

    /// What the request is for, resolved: the lock's name and path, a description of what it
    /// protects, and its family.
    pub(crate) fn resolve(&self) -> Result<Resolved, Error> {
        let canonical = |p: &Path, what: &'static str| {
            let real = crate::paths::real_path(p).map_err(|e| Error::io(what, p, e))?;
            if !real.is_dir() {
                return Err(Error::InvalidInput {
                    what: format!("{} {}", &what["resolve the ".len()..], crate::text::path(p)),
                    problem: "it is not a directory".into(),
                });
            }
            Ok(real)
        };
        let (name, resource, family) = match &self.target {
            Target::Repository(root) => {
                let root = canonical(root, "resolve the repository root")?;
                let what = format!("repository {}", root.display());
                (paths::repository_lock_name(&root), what, Family::Repository)
            }
            Target::GlobalSetup(home) => {
                let home = canonical(home, "resolve the account home")?;
                let what = format!("global setup of {}", home.display());
                (
                    paths::global_setup_lock_name(&home),
                    what,
                    Family::GlobalSetup,
                )
            }
            Target::Path(path) => {
                let real = paths::file_identity(path)
                    .map_err(|e| Error::io("resolve the path", path, e))?;
                let what = format!("path {}", real.display());
                (paths::path_lock_name(&real), what, Family::Named)
            }
            Target::Named(name) => {
                let on_disk = paths::named_lock_name(name).map_err(|p| Error::InvalidInput {
                    what: format!("lock name {name:?}"),
                    problem: p.into(),
                })?;
                (on_disk, format!("named lock {name}"), Family::Named)
            }
        };
        Ok(Resolved {
            path: self.dir.path.join(&name),
            name,
            resource,
            family,
        })
    }

    /// What the lock is for, in words for people (`repository /home/me/src`, `global setup
    /// of /home/me`, `named lock deploy`), the real path resolved.
    ///
    /// # Errors
    ///
    /// When the repository root or home cannot be resolved, or the lock name is invalid.
    pub fn resource(&self) -> Result<String, Error> {
        Ok(self.resolve()?.resource)
    }

    /// The path of the lock this request is for.
    ///
    /// # Errors
    ///
    /// When the repository root or home cannot be resolved, or the lock name is invalid.
    pub fn path(&self) -> Result<PathBuf, Error> {
        Ok(self.resolve()?.path)
    }

    /// Takes the lock.
    ///
    /// # Errors
    ///
    /// Contention: [`Error::Locked`] (a live or unknown holder), [`Error::Stale`] (a dead
    /// holder inside the grace period), [`Error::Guarded`] (someone else is reclaiming),
    /// [`Error::Timeout`] (the wait ran out). Misuse: [`Error::AlreadyHeld`] (this thread holds
    /// it), [`Error::LockOrder`] (global setup after repository). Also [`Error::Malformed`],
    /// [`Error::Cancelled`], [`Error::Unsafe`], [`Error::InvalidInput`] and [`Error::Io`].
    pub fn acquire(self) -> Result<LockGuard, Error> {
        let acquisition = self.acquisition(Who::current())?;
        let acquired = acquire::now(acquisition.run(&Blocking))?;
        Ok(LockGuard::new(acquisition, acquired))
    }

    /// The acquisition of this request by `who` (this thread, or an asynchronous
    /// acquisition's task), its clock started.
    fn acquisition(self, who: Who) -> Result<Acquisition<Real, Arc<LockDir>>, Error> {
        let target = self.resolve()?;
        Ok(Acquisition::new(self.dir, target, self.options, who))
    }

    /// The lock's state, owner, guard and leftovers, without changing anything.
    ///
    /// # Errors
    ///
    /// When the lock directory cannot be read, or the request cannot be resolved.
    pub fn status(&self) -> Result<Status, Error> {
        let name = self.resolve()?.name;
        let Some((dir, _)) = self.dir.existing()? else {
            // Nothing was ever locked in a directory that does not exist.
            return Ok(Status::free(
                self.dir.path.join(&name),
                name,
                self.options.grace,
            ));
        };
        let entries = Real
            .list(&dir)
            .map_err(|e| Error::io("list the lock directory", &self.dir.path, e))?;
        let related = inspect::group(&entries).remove(&name).unwrap_or_default();
        inspect::status(
            &self.dir.space(&dir),
            &name,
            &Real.identity(),
            self.options.grace,
            &related,
        )
    }

    /// Removes the lock if its owner is dead, by kernel proof or by evidence at any age (an
    /// operator asked, so the grace period does not apply), through the reclaim guard. With
    /// `force`, also removes a malformed lock, but only while no process holds a lock on it.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] for a live or unknown owner (it is never removed);
    /// [`Error::Malformed`] without `force`, or while a process holds a `flock` on it (its
    /// beacon, or a plain file's such as flock(1)'s lock files); [`Error::Unsafe`], with
    /// `force`, for what it leaves to be removed by hand: a symbolic link, a file it cannot
    /// open, a directory holding anything a lock never holds; [`Error::Guarded`] when another
    /// process is reclaiming; [`Error::Io`].
    pub fn unlock(&self, force: bool) -> Result<Unlocked, Error> {
        let Resolved { name, resource, .. } = self.resolve()?;
        let me = Real.identity();
        // A lock directory removed under it (a temp cleaner) is looked at again, made anew: the
        // lock is not there (not locked), rather than an I/O error.
        if self.dir.existing()?.is_none() {
            return Ok(Unlocked::NotLocked);
        }
        acquire::in_current_dir(&self.dir, |sp| {
            reclaim::unlock(sp, &name, &resource, &me, self.options.grace, force)
        })
    }

    /// Takes the lock, runs `f` with its guard, and releases the lock (also when `f` panics):
    /// [`LockRequest::run`] for work that needs the guard, to see a crashed predecessor
    /// ([`LockGuard::reclaimed_from`]) or name the lock for a child
    /// ([`LockGuard::name_in`]). When `f` succeeds but the release fails, what `f` returned
    /// is not lost: the error is [`Error::NotReleased`], which keeps it
    /// ([`Error::into_value`]).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// let repaired = locks.named_lock("cache.lock").run_with(|guard| {
    ///     // A predecessor that crashed may have left the cache half written.
    ///     Ok::<_, dirlock::Error>(guard.reclaimed_from().is_some())
    /// })?;
    /// assert!(!repaired);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `f`'s error; or, converted into `E`, the acquisition's error, or the release's as
    /// [`Error::NotReleased`] holding `f`'s value.
    pub fn run_with<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: FnOnce(&LockGuard) -> Result<T, E>,
        E: From<Error>,
        T: Send + Sync + 'static,
    {
        let guard = self.acquire()?;
        let result = f(&guard);
        finish(guard, result)
    }

    /// Takes the lock, runs `f`, and releases the lock (also when `f` panics).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`](crate::Locks::with_repository_lock).
    pub fn run<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        let guard = self.acquire()?;
        let result = f();
        settle(guard, result, |error, _value| error)
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl LockRequest {
    /// Takes the lock without holding a thread while it waits (feature `tokio`). Waiting,
    /// options, errors and refusals are those of [`LockRequest::acquire`]; the wait is in the
    /// runtime's reactor, woken by the kernel as a blocking wait is. The refusals are per
    /// task: a task that holds a lock and asks for it again is refused
    /// ([`Error::AlreadyHeld`]), while other tasks of the process wait for it like other
    /// processes. Futures joined in one task (`join!`, `select!`) are that task: one that asks
    /// for a lock another of them holds or waits for is refused ([`Error::AlreadyHeld`]); to
    /// have them wait for each other, spawn them as tasks.
    ///
    /// Timeouts and grace periods follow the real clock, also on a runtime whose clock is
    /// paused (tokio's `test-util`).
    ///
    /// The tasks of this runtime waiting for the same lock are served in the order they
    /// asked, first come, first served.
    ///
    /// Dropping the future (a `select!`, a `tokio::time::timeout`) cancels the acquisition
    /// and leaves nothing behind.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let guard = locks.named_lock("deploy.lock").acquire_async().await?;
    /// guard.release()?;
    /// # Ok::<(), dirlock::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`]; [`Error::InvalidInput`] when polled outside a tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// Where tokio panics: on a runtime built without time, or on Unix without I/O (call
    /// `enable_all` on the runtime builder). It does so at the first call on such a runtime,
    /// whether or not the lock is free.
    pub async fn acquire_async(self) -> Result<LockGuard, Error> {
        let runtime = acquire::runtime::Tokio::current()?;
        // An acquisition that finds the lock free never waits: it counts against the task's
        // budget, so that a task taking locks in a loop still lets the others run.
        tokio::task::consume_budget().await;
        let acquisition = self.acquisition(Who::current())?;
        let acquired = acquisition.run(&runtime).await?;
        Ok(LockGuard::new(acquisition, acquired))
    }

    /// Takes the lock without holding a thread, runs `f`'s future, and releases the lock
    /// (also when the future is dropped or panics): [`LockRequest::run`] for async code.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    pub async fn run_async<T, E, F, Fut>(self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let guard = self.acquire_async().await?;
        let result = f().await;
        settle(guard, result, |error, _value| error)
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl LockRequest {
    /// Takes the lock without holding a thread, runs `f` with its guard, and releases the lock
    /// (also when the future is dropped or `f` panics): [`LockRequest::run_with`] for async
    /// code, with the same [`Error::NotReleased`] when the release fails after `f`
    /// succeeded.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run_with`].
    pub async fn run_with_async<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&LockGuard) -> Result<T, E>,
        E: From<Error>,
        T: Send + Sync + 'static,
    {
        let guard = self.acquire_async().await?;
        let result = f(&guard).await;
        finish(guard, result)
    }
}

/// Releases `guard` after its work returned `result`: the work's error as it is (the guard is
/// dropped, which releases it, ignoring errors: the work's error is the one the caller
/// needs), or its value once the release worked; if the release fails, the error `lost` makes
/// of the release's error and the value.
pub(crate) fn settle<T, E>(
    guard: LockGuard,
    result: Result<T, E>,
    lost: impl FnOnce(Error, T) -> Error,
) -> Result<T, E>
where
    E: From<Error>,
{
    match result {
        Ok(value) => match guard.release() {
            Ok(()) => Ok(value),
            Err(error) => Err(E::from(lost(error, value))),
        },
        Err(e) => {
            drop(guard);
            Err(e)
        }
    }
}

/// [`settle`], keeping the work's value in [`Error::NotReleased`] if the release fails.
pub(crate) fn finish<T, E>(guard: LockGuard, result: Result<T, E>) -> Result<T, E>
where
    E: From<Error>,
    T: Send + Sync + 'static,
{
    settle(guard, result, |error, value| Error::NotReleased {
        error: Box::new(error),
        value: Box::new(value),
    })
}
