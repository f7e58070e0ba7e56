//! [`Locks`], a lock directory, and [`LockRequest`], the builder of one acquisition.

use crate::error::Error;
use crate::guard::{check_order, Family, LockGuard};
use crate::inspect::{self, Status};
use crate::options::Waiting;
use crate::options::{Cancel, Options, Wait};
use crate::paths::{self, LOCK_DIR};
use crate::protocol::{self, Request, Seen, Space, Sweep, Unlocked};
use crate::sys::{is, Errno, FileId, Real, System};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The environment variable that names the locks a process runs under, set by
/// [`LockGuard::keep_alive_in`] (and so by `dirlock run`): one line per lock,
/// `<holder pid> <dev>:<ino> <lock name>`, where `<dev>:<ino>` identifies the lock directory.
/// Identities, not path text: the same lock spelled differently (relative, through a symlink,
/// under a `TMPDIR` with a newline or a byte that is not UTF-8) is still recognised.
pub const HELD_VAR: &str = "DIRLOCK_HELD";

/// One `DIRLOCK_HELD` line.
pub(crate) fn held_line(pid: u32, dir: FileId, name: &str) -> String {
    format!("{pid} {}:{} {name}\n", dir.dev, dir.ino)
}

/// The holder pid that `DIRLOCK_HELD` names for lock `name` in the directory `dir`, unless
/// that is this process.
fn held_by_parent(dir: FileId, name: &str) -> Option<u32> {
    let var = std::env::var_os(HELD_VAR)?;
    let me = Real.pid();
    var.to_str()?.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let pid: u32 = fields.next()?.parse().ok()?;
        let (dev, ino) = fields.next()?.split_once(':')?;
        let id = FileId {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
        };
        (id == dir && fields.next()? == name && pid != me).then_some(pid)
    })
}

/// Refuses a directory that someone else could rename away, with whatever is inside it (our
/// lock namespace while a lock is held): one, or any directory above it, owned by a user other
/// than us and root, or writable by its group or others without the sticky bit. OpenSSH holds
/// the paths it trusts to the same rule. Both the path as given and its real path are checked.
fn check_ancestors(dir: &Path, uid: u32, fix: &str) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(dir).ok();
    let mut seen = std::collections::HashSet::new();
    for p in dir
        .ancestors()
        .chain(real.iter().flat_map(|r| r.ancestors()))
    {
        if p.as_os_str().is_empty() || !seen.insert(p.to_owned()) {
            continue;
        }
        let Ok(m) = std::fs::metadata(p) else {
            continue; // missing: the open that follows says so
        };
        let unsafe_dir = |problem: String| Error::Unsafe {
            path: p.to_owned(),
            problem,
            fix: fix.to_owned(),
        };
        if m.uid() != uid && m.uid() != 0 {
            return Err(unsafe_dir(format!(
                "it is owned by uid {}, who can rename what is inside it, lock directories included",
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            let who = if m.mode() & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            };
            return Err(unsafe_dir(format!(
                "{who} may write it and it has no sticky bit, so {who} can rename a lock directory inside it away while a lock is held"
            )));
        }
    }
    Ok(())
}

/// A lock directory: the place where a family of locks lives.
///
/// [`Locks::new`] uses the per-user namespace of an application,
/// `<temp dir>/<app>-<uid>/operation-locks` (the reference implementation's layout, so
/// `Locks::new("apnea")` addresses its locks); [`Locks::in_dir`] a directory of your own. Both
/// are created mode 0700 and must be real directories owned by this user and private to it.
///
/// A `Locks` is cheap to share (`Clone`, `Send`, `Sync`); it keeps the directory open.
#[derive(Clone, Debug)]
pub struct Locks {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// Where the directory comes from, to re-create it if a temp cleaner removed it.
    origin: Origin,
    dir: Mutex<(Arc<OwnedFd>, FileId)>,
    uid: u32,
}

#[derive(Debug)]
enum Origin {
    App { temp: PathBuf, app: String },
    Dir(PathBuf),
}

/// Which private directory [`open_private`] is opening, for the advice when it is refused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Part of the per-user namespace `<temp dir>/<app>-<uid>/operation-locks`.
    Namespace,
    /// A lock directory the caller chose.
    Chosen,
}

/// What to do about a lock directory that is not private, without ever suggesting a change
/// to a directory that others share.
const USE_A_PRIVATE_ONE: &str = "lock directories must be private to you: use the per-user namespace under the temporary directory (`Locks::new`), or a new directory made only for your locks (`Locks::in_dir`, which creates it with mode 700)";

/// Creates (mode exactly 0700) or opens the private directory `name` in `parent`.
fn open_private(
    parent: &OwnedFd,
    parent_path: &Path,
    name: &str,
    uid: u32,
    role: Role,
) -> Result<OwnedFd, Error> {
    let sys = Real;
    let path = parent_path.join(name);
    let created = match sys.mkdir_at(parent, name) {
        Ok(()) => true,
        Err(e) if is(&e, Errno::Exists) => false,
        Err(e) => return Err(Error::io("create the lock directory", path, e)),
    };
    let opened = if created {
        sys.open_made_dir_at(parent, name)
    } else {
        sys.open_dir_at(parent, name)
    };
    let dir = match opened {
        Ok(d) => d,
        Err(e) if is(&e, Errno::Loop) || is(&e, Errno::NotDir) => {
            return Err(Error::Unsafe {
                path,
                problem: "it is a symbolic link or not a directory".into(),
                fix: "lock directories must be real directories: name the directory itself, or another one of your own".into(),
            })
        }
        Err(e) => return Err(Error::io("open the lock directory", path, e)),
    };
    let meta = sys
        .meta(&dir)
        .map_err(|e| Error::io("inspect the lock directory", &path, e))?;
    if meta.uid != uid {
        let fix = match role {
            Role::Namespace => "another user made your lock namespace and may be trying to intercept your locks: have an administrator remove it, or point TMPDIR at a directory only you can write".to_owned(),
            Role::Chosen => USE_A_PRIVATE_ONE.to_owned(),
        };
        return Err(Error::Unsafe {
            problem: format!(
                "it is owned by uid {}, not by this user (uid {uid})",
                meta.uid
            ),
            fix,
            path,
        });
    }
    if created {
        // Whatever the umask took away (even the owner's bits), the mode is exactly 0700.
        sys.set_mode(&dir, 0o700)
            .map_err(|e| Error::io("set the mode of the lock directory", &path, e))?;
    } else if meta.mode & 0o777 != 0o700 {
        // Only our own namespace (named after our uid, made by us) may be made private again.
        // A directory the caller named may be anything (/usr, a project, /var/lib) and others
        // may rely on its mode: never advise changing it.
        let fix = match role {
            Role::Namespace => format!(
                "it is your own lock namespace: make it private again with `chmod 700 {}`",
                crate::text::shell_word(&path)
            ),
            Role::Chosen => USE_A_PRIVATE_ONE.to_owned(),
        };
        return Err(Error::Unsafe {
            problem: format!("it has mode {:o}, not 700", meta.mode & 0o7777),
            fix,
            path,
        });
    }
    Ok(dir)
}

fn open_origin(origin: &Origin, uid: u32) -> Result<(OwnedFd, PathBuf), Error> {
    match origin {
        Origin::App { temp, app } => {
            check_ancestors(
                temp,
                uid,
                "point TMPDIR at a directory that only you (or root) can write, such as $XDG_RUNTIME_DIR",
            )?;
            let tmp = Real
                .open_dir_path(temp)
                .map_err(|e| Error::io("open the temporary directory", temp, e))?;
            let base_name = paths::base_name(app, uid);
            let base = open_private(&tmp, temp, &base_name, uid, Role::Namespace)?;
            let base_path = temp.join(&base_name);
            let dir = open_private(&base, &base_path, LOCK_DIR, uid, Role::Namespace)?;
            Ok((dir, base_path.join(LOCK_DIR)))
        }
        Origin::Dir(path) => {
            let (parent, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
                (Some(p), Some(n)) if n != ".." => (
                    if p.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        p
                    },
                    n,
                ),
                _ => {
                    return Err(Error::InvalidInput {
                        what: format!("lock directory {}", path.display()),
                        problem: "it must end in a UTF-8 directory name".into(),
                    })
                }
            };
            check_ancestors(
                parent,
                uid,
                "choose a lock directory whose parents only you (or root) can write",
            )?;
            let p = Real
                .open_dir_path(parent)
                .map_err(|e| Error::io("open the parent of the lock directory", parent, e))?;
            Ok((
                open_private(&p, parent, name, uid, Role::Chosen)?,
                path.clone(),
            ))
        }
    }
}

impl Locks {
    /// The lock directory of application `app` for this user:
    /// `<temp dir>/<app>-<uid>/operation-locks`, where the temp dir is `TMPDIR` (else `TMP`,
    /// `TEMP`, `/tmp`, as Node.js finds it). Both directories are created mode 0700.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an unusable `app` name; [`Error::Unsafe`] when either
    /// directory is a symlink, owned by another user, or not mode 0700; [`Error::Io`] when it
    /// cannot be created or opened.
    ///
    /// ```no_run
    /// let locks = dirlock::Locks::new("myapp")?;
    /// # Ok::<(), dirlock::Error>(())
    /// ```
    pub fn new(app: &str) -> Result<Locks, Error> {
        paths::check_app(app).map_err(|p| Error::InvalidInput {
            what: format!("application name {app:?}"),
            problem: p.into(),
        })?;
        let (var, temp) = paths::temp_source();
        if !temp.is_absolute() {
            return Err(Error::Unsafe {
                problem: format!(
                    "{var} is a relative path, so the lock namespace would depend on the working directory and processes working in different directories would both get the same lock"
                ),
                fix: format!("set {var} to an absolute path"),
                path: temp,
            });
        }
        Locks::open(Origin::App {
            temp,
            app: app.to_owned(),
        })
    }

    /// A lock directory of your own at `path` (its last component is created mode 0700 if
    /// missing; its parent must exist).
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
        let uid = Real.identity().uid;
        let (dir, path) = open_origin(&origin, uid)?;
        let id = Real
            .meta(&dir)
            .map_err(|e| Error::io("inspect the lock directory", &path, e))?
            .id;
        Ok(Locks {
            inner: Arc::new(Inner {
                path,
                origin,
                dir: Mutex::new((Arc::new(dir), id)),
                uid,
            }),
        })
    }

    /// The lock directory's path.
    pub fn dir(&self) -> &Path {
        &self.inner.path
    }

    /// The open lock directory, re-created if it was removed (a temp cleaner may remove an
    /// empty directory; a lock in a removed directory would exclude no one).
    fn current(&self) -> Result<(Arc<OwnedFd>, FileId), Error> {
        let mut slot = self.inner.dir.lock().unwrap_or_else(|e| e.into_inner());
        if !Real.unlinked(&slot.0) {
            return Ok((slot.0.clone(), slot.1));
        }
        let (dir, _) = open_origin(&self.inner.origin, self.inner.uid)?;
        let id = Real
            .meta(&dir)
            .map_err(|e| Error::io("inspect the lock directory", &self.inner.path, e))?
            .id;
        *slot = (Arc::new(dir), id);
        Ok((slot.0.clone(), id))
    }

    /// The lock for the repository (or any directory tree) at `root`, named after its real
    /// path. Fails fast by default ([`Wait::Immediately`]).
    pub fn repository_lock(&self, root: impl AsRef<Path>) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Target::Repository(root.as_ref().to_owned()),
            Wait::Immediately,
        )
    }

    /// The lock for per-account setup of the account whose home is `home`. Waits by default
    /// ([`Wait::Forever`]): setup that another process is doing is waited for, not failed.
    pub fn global_setup_lock(&self, home: impl AsRef<Path>) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Target::GlobalSetup(home.as_ref().to_owned()),
            Wait::Forever,
        )
    }

    /// A lock with a name of your choosing: ASCII letters, digits, `-`, `_` and `.`, ending
    /// in `.lock`. Fails fast by default.
    pub fn named_lock(&self, name: &str) -> LockRequest<'_> {
        LockRequest::new(self, Target::Named(name.to_owned()), Wait::Immediately)
    }

    /// The status of every lock with anything in this directory (lock, candidate, tombstone or
    /// guard), judged with the default grace period.
    ///
    /// # Errors
    ///
    /// When the directory cannot be listed or an entry cannot be inspected.
    pub fn statuses(&self) -> Result<Vec<Status>, Error> {
        let (dir, _) = self.current()?;
        let sp = self.space(&dir);
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
        let (dir, _) = self.current()?;
        protocol::sweep(&self.space(&dir), grace)
    }

    fn space<'a>(&'a self, dir: &'a OwnedFd) -> Space<'a, Real> {
        Space {
            sys: &Real,
            dir,
            path: &self.inner.path,
            uid: self.inner.uid,
        }
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

#[derive(Clone, Debug)]
enum Target {
    Repository(PathBuf),
    GlobalSetup(PathBuf),
    Named(String),
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
#[derive(Clone, Debug)]
#[must_use = "a request does nothing until acquire() or run()"]
pub struct LockRequest<'l> {
    locks: &'l Locks,
    target: Target,
    options: Options,
}

impl<'l> LockRequest<'l> {
    fn new(locks: &'l Locks, target: Target, wait: Wait) -> LockRequest<'l> {
        LockRequest {
            locks,
            target,
            options: Options::new(wait),
        }
    }

    /// How to wait while another process holds the lock.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.options.wait = wait.into();
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

    /// Calls `f` once if the acquisition has to wait, with who holds the lock (for a message
    /// such as "waiting for pid 42 (sync) since ...").
    pub fn on_wait(mut self, f: impl Fn(&Waiting) + Send + Sync + 'static) -> Self {
        self.options.on_wait = Some(Arc::new(f));
        self
    }

    /// A handle that cancels the wait from another thread.
    pub fn cancel(mut self, cancel: &Cancel) -> Self {
        self.options.cancel = Some(cancel.clone());
        self
    }

    /// The lock's name and a description of what it protects.
    fn resolve(&self) -> Result<(String, String, Family), Error> {
        let canonical = |p: &Path, what: &'static str| {
            let real = std::fs::canonicalize(p).map_err(|e| Error::io(what, p, e))?;
            if !real.is_dir() {
                return Err(Error::InvalidInput {
                    what: format!("{} {}", &what["resolve the ".len()..], crate::text::path(p)),
                    problem: "it is not a directory".into(),
                });
            }
            Ok(real)
        };
        Ok(match &self.target {
            Target::Repository(root) => {
                let root = canonical(root, "resolve the repository root")?;
                (
                    paths::repository_lock_name(&root),
                    format!("repository {}", root.display()),
                    Family::Repository,
                )
            }
            Target::GlobalSetup(home) => {
                let home = canonical(home, "resolve the account home")?;
                (
                    paths::global_setup_lock_name(&home),
                    format!("global setup of {}", home.display()),
                    Family::GlobalSetup,
                )
            }
            Target::Named(name) => {
                paths::check_lock_name(name).map_err(|p| Error::InvalidInput {
                    what: format!("lock name {name:?}"),
                    problem: p.into(),
                })?;
                (name.clone(), format!("named lock {name}"), Family::Named)
            }
        })
    }

    /// The path of the lock this request is for.
    ///
    /// # Errors
    ///
    /// When the repository root or home cannot be resolved, or the lock name is invalid.
    pub fn path(&self) -> Result<PathBuf, Error> {
        Ok(self.locks.dir().join(self.resolve()?.0))
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
        let (name, resource, family) = self.resolve()?;
        let inner = &self.locks.inner;
        let lock_path = inner.path.join(&name);
        let started = Real.monotonic();
        let me = Real.identity();
        let mut used = None;
        let held = protocol::in_current_dir(
            &Real,
            || self.locks.current(),
            |(dir, _)| dir,
            |(dir, dir_id)| {
                used = Some((dir.clone(), *dir_id));
                check_order(*dir_id, &name, family, &lock_path, &resource)?;
                let sp = self.locks.space(dir);
                if let Some(pid) = held_by_parent(*dir_id, &name) {
                    // Our parent said it runs us under this lock: if it still holds it,
                    // waiting would wait for ourselves.
                    if let Seen::Owned { owner, .. } = sp.observe(&name)? {
                        if owner.pid == pid {
                            return Err(Error::HeldByParent {
                                lock: lock_path.clone(),
                                resource: resource.clone(),
                                pid,
                            });
                        }
                    }
                }
                let req = Request {
                    name: &name,
                    resource: &resource,
                    options: &self.options,
                    started,
                };
                protocol::acquire(&sp, &req, &me)
            },
        )?;
        let (dir, dir_id) = used.expect("an acquisition ran in some directory");
        Ok(LockGuard::new(
            held,
            dir,
            dir_id,
            &inner.path,
            inner.uid,
            resource,
            family,
        ))
    }

    /// The lock's state, owner, guard and leftovers, without changing anything.
    ///
    /// # Errors
    ///
    /// When the lock directory cannot be read, or the request cannot be resolved.
    pub fn status(&self) -> Result<Status, Error> {
        let (name, _, _) = self.resolve()?;
        let (dir, _) = self.locks.current()?;
        let entries = Real
            .list(&dir)
            .map_err(|e| Error::io("list the lock directory", self.locks.dir(), e))?;
        let related = inspect::group(&entries).remove(&name).unwrap_or_default();
        inspect::status(
            &self.locks.space(&dir),
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
    /// [`Error::Malformed`] without `force`, or when its beacon is held; [`Error::Guarded`]
    /// when another process is reclaiming; [`Error::Io`].
    pub fn unlock(&self, force: bool) -> Result<Unlocked, Error> {
        let (name, resource, _) = self.resolve()?;
        let (dir, _) = self.locks.current()?;
        protocol::unlock(
            &self.locks.space(&dir),
            &name,
            &resource,
            &Real.identity(),
            self.options.grace,
            force,
        )
    }

    /// Takes the lock, runs `f`, and releases the lock (also when `f` panics).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub fn run<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        E: From<Error>,
    {
        let guard = self.acquire()?;
        match f() {
            Ok(value) => {
                guard.release()?;
                Ok(value)
            }
            Err(e) => {
                // The closure's error is the one the caller needs; the guard still releases.
                drop(guard);
                Err(e)
            }
        }
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
        let locks = Locks::in_dir(tmp.path().join("locks")).unwrap();
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
