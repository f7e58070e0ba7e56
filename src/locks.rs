//! [`Locks`], a lock directory and the requests for its locks, with the closure helpers.

use crate::error::Error;
use crate::inspect::{self, Status};
use crate::lockdir::{LockDir, Origin};
use crate::options::Wait;
use crate::paths;
use crate::request::{LockRequest, Target};
use crate::sweep::{self, Sweep};
use crate::sys::{Real, System};
#[cfg(feature = "tokio")]
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A lock directory: the place where a family of locks lives.
///
/// [`Locks::new`] uses the per-user namespace of an application,
/// `<temp dir>/<app>-<uid>/operation-locks` (on Windows `%TEMP%\<app>-user\operation-locks`:
/// the reference implementation's layout, so `Locks::new("apnea")` addresses its locks);
/// [`Locks::in_dir`] a directory of your own. A missing one is made by the first acquisition
/// (inspecting or sweeping makes nothing), private to this user (mode 0700; on Windows a
/// protected DACL). It must be a real directory owned by this user: the namespace's private to
/// it; one of your own at least not writable by anyone else (others may read it).
///
/// A `Locks` is cheap to share (`Clone`, `Send`, `Sync`); it keeps the directory open.
#[derive(Clone, Debug)]
pub struct Locks {
    inner: Arc<LockDir>,
}

impl Locks {
    /// The lock directory of application `app` for this user:
    /// `<temp dir>/<app>-<uid>/operation-locks`, where the temp dir is `TMPDIR` (else `TMP`,
    /// `TEMP`, `/tmp`, as Node.js finds it). Both directories are made mode 0700. On Windows
    /// `<temp dir>\<app>-user\operation-locks`, the temp dir `TEMP` (else `TMP`, else
    /// `%SystemRoot%\temp`), both directories private to this user by a protected DACL.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an unusable `app` name; [`Error::Unsafe`] when either
    /// directory is a symlink, owned by another user, or not private to this user (mode 0700,
    /// or a DACL that lets no one else write); [`Error::Io`] when it cannot be created or
    /// opened.
    ///
    /// ```no_run
    /// let locks = dirlock::Locks::new("myapp")?;
    /// # Ok::<(), dirlock::Error>(())
    /// ```
    pub fn new(app: &str) -> Result<Locks, Error> {
        let (var, temp) = paths::temp_source();
        if !temp.is_absolute() {
            return Err(Error::Unsafe {
                problem: format!(
                    "{var} is a relative path, so the lock namespace would depend on the working directory: processes in different directories would each take the same lock in a namespace of their own, and run at once"
                ),
                fix: format!("set {var} to an absolute path"),
                path: temp,
            });
        }
        Locks::in_temp(app, temp)
    }

    /// The lock directory of application `app` for this user under the temporary directory
    /// `temp` given, rather than the one the environment names: `<temp>/<app>-<uid>/operation-locks`.
    /// Processes whose environments differ (a cron job, a login shell, a service, each with
    /// its own `TMPDIR`) then still share one namespace. The `dirlock` command's own locks are
    /// `Locks::in_temp("dirlock", "/tmp")` on Unix.
    ///
    /// # Errors
    ///
    /// As [`Locks::new`]; [`Error::InvalidInput`] also for a relative `temp`.
    ///
    /// ```no_run
    /// let locks = dirlock::Locks::in_temp("myapp", "/tmp")?;
    /// # Ok::<(), dirlock::Error>(())
    /// ```
    pub fn in_temp(app: &str, temp: impl AsRef<Path>) -> Result<Locks, Error> {
        paths::check_app(app).map_err(|p| Error::InvalidInput {
            what: format!("application name {app:?}"),
            problem: p.into(),
        })?;
        let temp = temp.as_ref();
        if !temp.is_absolute() {
            return Err(Error::InvalidInput {
                what: format!("temporary directory {}", temp.display()),
                problem: "it is a relative path: give an absolute one".into(),
            });
        }
        Locks::open(Origin::App {
            temp: temp.to_owned(),
            app: app.to_owned(),
        })
    }

    /// A lock directory of your own at `path` (the first acquisition makes its last component,
    /// mode 0700, if it is missing; its parent must exist). An existing one must be writable
    /// by you alone (others may read it), or be one a group shares: mode 2770 (setgid, not
    /// sticky), owned by root or you, and this process in its group. The members of that
    /// group take, wait for and take over (once its holder has ended) each other's locks, and
    /// what this process makes there is the group's to read ([`Locks::shared_with`]).
    ///
    /// # Errors
    ///
    /// As [`Locks::new`].
    ///
    /// ```
    /// let tmp = tempfile::tempdir()?;
    /// let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// let guard = locks.named_lock("deploy.lock").acquire()?;
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_dir(path: impl AsRef<Path>) -> Result<Locks, Error> {
        // Relative to the working directory now, once: messages and re-opening after a temp
        // cleaner then name the same directory.
        let path = path.as_ref();
        let mut path = std::path::absolute(path)
            .map_err(|e| Error::io("resolve the lock directory", path, e))?;
        // A path ending in `..` (or `.`) names its directory only once resolved.
        if matches!(
            path.components().next_back(),
            Some(std::path::Component::ParentDir | std::path::Component::CurDir)
        ) {
            path = std::fs::canonicalize(&path)
                .map_err(|e| Error::io("resolve the lock directory", &path, e))?;
        }
        Locks::open(Origin::Dir(path))
    }

    fn open(origin: Origin) -> Result<Locks, Error> {
        Ok(Locks {
            inner: Arc::new(LockDir::open(origin)?),
        })
    }

    /// The group that shares this lock directory (a directory of mode 2770, setgid, this
    /// process in its group), whose members take, wait for and take over each other's locks
    /// as their own; `None` for a directory private to this user.
    pub fn shared_with(&self) -> Option<u32> {
        self.inner.shared()
    }

    /// The lock directory's path.
    pub fn dir(&self) -> &Path {
        &self.inner.path
    }

    /// The lock for the repository (or any directory tree) at `root`, named after its real
    /// path. Fails fast by default ([`Wait::Immediately`]). A relative `root` is resolved when
    /// the request is used (acquired, inspected), against the working directory then: give an
    /// absolute path to a request that is kept or moved while the working directory changes.
    pub fn repository_lock(&self, root: impl AsRef<Path>) -> LockRequest {
        LockRequest::new(
            self.inner.clone(),
            Target::Repository(root.as_ref().to_owned()),
            Wait::Immediately,
        )
    }

    /// The lock for per-account setup of the account whose home is `home`. Waits by default
    /// ([`Wait::Forever`]): setup that another process is doing is waited for, not failed.
    pub fn global_setup_lock(&self, home: impl AsRef<Path>) -> LockRequest {
        LockRequest::new(
            self.inner.clone(),
            Target::GlobalSetup(home.as_ref().to_owned()),
            Wait::Forever,
        )
    }

    /// A lock with a name of your choosing: up to 155 ASCII letters, digits, `-`, `_` and
    /// `.`, not starting with a dot. Its directory is the name with `.lock` added unless it
    /// ends in `.lock` already (`deploy` and `deploy.lock` are one lock: [`LockRequest::path`]
    /// says which path). Fails fast by default.
    pub fn named_lock(&self, name: &str) -> LockRequest {
        LockRequest::new(
            self.inner.clone(),
            Target::Named(name.to_owned()),
            Wait::Immediately,
        )
    }

    /// The lock for a file or directory of your choosing (a settings file, a cache, a build
    /// output), named after its real path, so that every spelling of the path (a symlink, a
    /// `..`, a relative path) names one lock. The file need not exist yet, but its parent
    /// must. Fails fast by default. The lock lives in this lock directory, not beside the file:
    /// the file's directory needs no write access, and nothing appears beside it.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// let settings = tmp.path().join("settings.toml");
    /// let guard = locks.path_lock(&settings).wait(dirlock::Wait::Forever).acquire()?;
    /// std::fs::write(&settings, "theme = 'dark'\n")?;
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path_lock(&self, path: impl AsRef<Path>) -> LockRequest {
        LockRequest::new(
            self.inner.clone(),
            Target::Path(path.as_ref().to_owned()),
            Wait::Immediately,
        )
    }

    /// The status of every lock with anything in this directory (lock, candidate, tombstone or
    /// guard), judged with the default grace period.
    ///
    /// # Errors
    ///
    /// When the directory cannot be listed or an entry cannot be inspected.
    pub fn statuses(&self) -> Result<Vec<Status>, Error> {
        let Some((dir, _)) = self.inner.existing()? else {
            return Ok(Vec::new()); // nothing was ever locked here
        };
        let sp = self.inner.space(&dir);
        let entries = Real
            .list(&dir)
            .map_err(|e| Error::io("list the lock directory", &self.inner.path, e))?;
        let me = Real.identity();
        inspect::group(&entries)
            .iter()
            .map(|(name, related)| inspect::status(&sp, name, &me, crate::DEFAULT_GRACE, related))
            .collect()
    }

    /// Removes leftovers: every tombstone, and every candidate whose creator is dead (its
    /// beacon free, and older than `grace`; a candidate is retired to a tombstone before it is
    /// removed, so its creator's publish and the sweep cannot both win). Locks and reclaim
    /// guards are never touched.
    ///
    /// # Errors
    ///
    /// When the directory cannot be listed.
    pub fn sweep(&self, grace: Duration) -> Result<Sweep, Error> {
        let Some((dir, _)) = self.inner.existing()? else {
            return Ok(Sweep::default());
        };
        sweep::sweep(&self.inner.space(&dir), grace)
    }

    /// Runs `f` holding the repository lock for `root` (failing fast if another process holds
    /// it), then releases it.
    ///
    /// # Errors
    ///
    /// `f`'s error; or, converted into `E`, the acquisition's error or the release's (a
    /// release error is reported only when `f` succeeded). A panic in `f` still releases the
    /// lock.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// # let root = tmp.path();
    /// let n = locks.with_repository_lock(root, || Ok::<_, dirlock::Error>(42))?;
    /// assert_eq!(n, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_repository_lock<T, E, F>(&self, root: impl AsRef<Path>, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        self.repository_lock(root).run(f)
    }

    /// Runs `f` holding the repository lock for `root` shared (a read lock, see
    /// [`LockRequest::shared`]), with any other readers, then releases it; it fails fast while
    /// a writer holds the lock or waits for it. For a named lock or any path, the same reads
    /// `locks.named_lock(name).shared().run(f)` and `locks.path_lock(path).shared().run(f)`.
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub fn with_repository_read_lock<T, E, F>(&self, root: impl AsRef<Path>, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        self.repository_lock(root).shared().run(f)
    }

    /// Runs `f` holding the global setup lock for `home`, waiting while another process does
    /// setup, then releases it.
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub fn with_global_setup_lock<T, E, F>(&self, home: impl AsRef<Path>, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        self.global_setup_lock(home).run(f)
    }

    /// Runs `f` under both locks in the one safe order: the global setup lock for `home`
    /// outermost (waiting), the repository lock for `root` inside it (failing fast).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub fn with_setup_locks<T, E, F>(
        &self,
        home: impl AsRef<Path>,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        let root = root.as_ref();
        self.with_global_setup_lock(home, || self.with_repository_lock(root, f))
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Locks {
    /// [`Locks::with_repository_lock`] for async code: waits without holding a thread (feature
    /// `tokio`).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_repository_lock_async<T, E, F, Fut>(
        &self,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.repository_lock(root).run_async(f).await
    }

    /// [`Locks::with_repository_read_lock`] for async code (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_repository_read_lock_async<T, E, F, Fut>(
        &self,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.repository_lock(root).shared().run_async(f).await
    }

    /// [`Locks::with_global_setup_lock`] for async code: waits, without holding a thread,
    /// while another process does setup (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_global_setup_lock_async<T, E, F, Fut>(
        &self,
        home: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.global_setup_lock(home).run_async(f).await
    }

    /// [`Locks::with_setup_locks`] for async code (feature `tokio`): the global setup lock
    /// for `home` outermost (waiting), the repository lock for `root` inside it (failing fast).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_setup_locks_async<T, E, F, Fut>(
        &self,
        home: impl AsRef<Path>,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let root = root.as_ref();
        self.with_global_setup_lock_async(home, || self.with_repository_lock_async(root, f))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `status --all` was quadratic (4 s for 8,000 leftovers): every lock's status scanned the
    /// whole listing. Each entry is now classified once, whatever the number of locks.
    #[test]
    fn statuses_classify_each_entry_once() {
        let tmp = tempfile::tempdir().unwrap();
        let locks = Locks::in_dir(tmp.path()).unwrap();
        let n = 300;
        for i in 0..n {
            std::fs::create_dir(locks.dir().join(format!("l{i}.lock.tombstone.t"))).unwrap();
        }
        crate::paths::CLASSIFIED.with(|c| c.set(0));
        let statuses = locks.statuses().unwrap();
        let classified = crate::paths::CLASSIFIED.with(|c| c.get());
        assert_eq!(statuses.len(), n);
        assert!(statuses.iter().all(|s| s.tombstones.len() == 1));
        assert!(
            classified <= 2 * n,
            "{classified} classifications for {n} entries"
        );
    }
}
