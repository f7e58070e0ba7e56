//! The lock directory itself: created private (mode exactly 0700), or an existing one that
//! only its owner can write, or refused with advice,
//! its parents checked against renames by others, and re-created when a temp cleaner removed
//! it.

use crate::error::Error;
use crate::paths::LOCK_DIR;
use crate::space::{breach, writers, Breach, Space};
use crate::sys::{is, Errno, FileId, PerProcess, Real, RealDir, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Refuses a directory that someone else could rename away, with whatever is inside it (our
/// lock namespace while a lock is held): one, or any directory above it, owned by a user other
/// than us and root, or writable by its group or others without the sticky bit. OpenSSH holds
/// the paths it trusts to the same rule. Both the path as given and its real path are checked
/// (where the platform tells owners and modes: see [`crate::sys::owner_and_mode`]).
fn check_ancestors(dir: &Path, uid: u32, fix: &str) -> Result<(), Error> {
    let real = std::fs::canonicalize(dir).ok();
    let mut seen = std::collections::HashSet::new();
    for p in dir
        .ancestors()
        .chain(real.iter().flat_map(|r| r.ancestors()))
    {
        if p.as_os_str().is_empty() || !seen.insert(p.to_owned()) {
            continue;
        }
        let Some((owner, mode)) = crate::sys::owner_and_mode(p) else {
            continue; // missing: the open that follows says so
        };
        let problem = match writers(mode) {
            _ if owner != uid && owner != 0 => format!(
                "it is owned by uid {owner}, who can rename what is inside it, lock directories included"
            ),
            Some(who) if mode & 0o1000 == 0 => format!(
                "{who} may write it and it has no sticky bit, so {who} can rename a lock directory inside it away while a lock is held"
            ),
            _ => continue,
        };
        return Err(Error::Unsafe {
            path: p.to_owned(),
            problem,
            fix: fix.to_owned(),
        });
    }
    Ok(())
}

pub(crate) struct LockDir {
    pub(crate) path: PathBuf,
    /// Where the directory comes from, to re-create it if a temp cleaner removed it.
    origin: Origin,
    /// The open directory and its identity (`None`: to be opened, as in a forked child).
    dir: PerProcess<Option<Opened>>,
    pub(crate) uid: u32,
    /// The group that shares the directory, as last opened ([`NOT_SHARED`]: none).
    shared: AtomicU32,
}

/// [`LockDir::shared`] when no group shares the directory (no group has this id).
const NOT_SHARED: u32 = u32::MAX;

type Opened = (Arc<RealDir>, FileId);

impl std::fmt::Debug for LockDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockDir")
            .field("path", &self.path)
            .field("origin", &self.origin)
            .finish()
    }
}

#[derive(Debug)]
pub(crate) enum Origin {
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
const USE_A_PRIVATE_ONE: &str = "a lock directory must be one that only you can write (others may read it): use your own lock namespace under the temporary directory, or a directory only you can write (a missing one is made with mode 700)";

/// Creates (mode exactly 0700) or opens the private directory `name` in `parent`, with its
/// identity. Without `create`, a missing one is `None`. With it, the group that shares it (see
/// [`shared_group`]), if any.
fn open_private(
    parent: &RealDir,
    parent_path: &Path,
    name: &str,
    uid: u32,
    role: Role,
    create: bool,
) -> Result<Option<(RealDir, FileId, Option<u32>)>, Error> {
    let sys = Real;
    let path = parent_path.join(name);
    let Some((dir, created)) = open_or_make(parent, name, &path, create)? else {
        return Ok(None);
    };
    let meta = sys
        .meta(&dir)
        .map_err(|e| Error::io("inspect the lock directory", &path, e))?;
    let shared = match role {
        Role::Chosen if !created => shared_group(&dir, &meta, uid, &path)?,
        _ => None,
    };
    check_private(&meta, uid, role, created, shared.is_some(), &path)?;
    if created {
        // Whatever the umask took away (even the owner's bits), the mode is exactly 0700.
        sys.set_mode(&dir, 0o700)
            .map_err(|e| Error::io("set the mode of the lock directory", &path, e))?;
    }
    Ok(Some((dir, meta.id, shared)))
}

/// Opens directory `name` in `parent` (at `path`), made first if `create`, and whether this
/// call made it; `None` when it is missing and not to be made. A symbolic link or anything
/// but a directory is refused.
fn open_or_make(
    parent: &RealDir,
    name: &str,
    path: &Path,
    create: bool,
) -> Result<Option<(RealDir, bool)>, Error> {
    let sys = Real;
    let created = create
        && match sys.mkdir_at(parent, name) {
            Ok(()) => true,
            Err(e) if is(&e, Errno::Exists) => false,
            Err(e) => return Err(Error::io("create the lock directory", path, e)),
        };
    let opened = if created {
        sys.open_made_dir_at(parent, name)
    } else {
        sys.open_dir_at(parent, name)
    };
    match opened {
        Ok(d) => Ok(Some((d, created))),
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if is(&e, Errno::Loop) || is(&e, Errno::NotDir) => Err(Error::Unsafe {
            path: path.to_owned(),
            problem: "it is a symbolic link or not a directory".into(),
            fix: "lock directories must be real directories: name the directory itself, or another one of your own".into(),
        }),
        Err(e) => Err(Error::io("open the lock directory", path, e)),
    }
}

/// Refuses lock directory `path` (`meta`) unless it keeps the privacy rule ([`breach`]), and
/// our own namespace unless it is exactly 0700 besides, as the reference makes it (one this
/// call `created` gets its mode next). Only our own namespace (named after our uid, made by us)
/// may be made private again: a directory the caller named may be anything (/usr, a project,
/// /var/lib) and others may rely on its mode, so the advice never suggests changing it.
fn check_private(
    meta: &crate::sys::Meta,
    uid: u32,
    role: Role,
    created: bool,
    shared: bool,
    path: &Path,
) -> Result<(), Error> {
    let breach = breach(meta, uid, shared);
    let (problem, fix) = match (role, breach) {
        (_, Some(Breach::Owner)) => (
            format!(
                "it is owned by {}, not by this user ({})",
                crate::sys::owner_words(meta.uid),
                crate::sys::owner_words(uid)
            ),
            match role {
                Role::Namespace => format!(
                    "another user made your lock namespace and may be trying to intercept your locks: have an administrator remove it, or point {} at a directory only you can write",
                    crate::sys::TEMP_VAR
                ),
                Role::Chosen => USE_A_PRIVATE_ONE.to_owned(),
            },
        ),
        _ if created => return Ok(()),
        (Role::Namespace, _) if meta.mode & 0o777 != 0o700 => (
            crate::sys::mode_problem(meta.mode, None),
            crate::sys::remake_private(path),
        ),
        (Role::Chosen, Some(Breach::Written(who))) => (
            crate::sys::mode_problem(meta.mode, Some(who)),
            USE_A_PRIVATE_ONE.to_owned(),
        ),
        _ => return Ok(()),
    };
    Err(Error::Unsafe {
        path: path.to_owned(),
        problem,
        fix,
    })
}

/// The group that shares lock directory `dir`, when it is one a group may write: it must be
/// setgid (what members make in it stays the group's), without the sticky bit (which would
/// keep members from taking over each other's dead locks), owned by root or this user, and
/// this process must be in its group. `Ok(None)` for a directory its group may not write; a
/// refusal naming what is missing otherwise.
fn shared_group(
    dir: &RealDir,
    meta: &crate::sys::Meta,
    uid: u32,
    path: &Path,
) -> Result<Option<u32>, Error> {
    if meta.mode & 0o020 == 0 || meta.mode & 0o002 != 0 {
        return Ok(None);
    }
    let Some(gid) = crate::sys::group_of(dir) else {
        return Ok(None);
    };
    let missing = if meta.mode & 0o2000 == 0 {
        Some("it is not setgid, so what one member makes in it would not be the group's")
    } else if meta.mode & 0o1000 != 0 {
        Some("it has the sticky bit, so members could not take over each other's dead locks")
    } else if meta.uid != uid && meta.uid != 0 {
        Some("it is owned by another user, who could change who may write it")
    } else if !crate::sys::in_group(gid) {
        Some("you are not in its group")
    } else {
        None
    };
    match missing {
        None => Ok(Some(gid)),
        Some(why) => Err(Error::Unsafe {
            path: path.to_owned(),
            problem: format!(
                "it has mode {:o}: its group ({}) may write it, but {why}",
                meta.mode & 0o7777,
                crate::sys::group_words(gid)
            ),
            fix: "a lock directory a group shares must be setgid, without the sticky bit, owned by root or you, and you in its group (as `install -d -m 2770 -g GROUP DIR` makes it as root); or use a directory only you can write".into(),
        }),
    }
}

/// Opens `dir`, where private directories are made, once [`check_ancestors`] trusts it (`fix`:
/// what to do if not; `op`: the operation an error names).
fn open_parent(dir: &Path, uid: u32, fix: &str, op: &'static str) -> Result<RealDir, Error> {
    check_ancestors(dir, uid, fix)?;
    Real.open_dir_path(dir).map_err(|e| Error::io(op, dir, e))
}

/// The path of the lock directory `origin` names.
fn path_of(origin: &Origin, uid: u32) -> PathBuf {
    match origin {
        Origin::App { temp, app } => temp.join(crate::sys::base_name(app, uid)).join(LOCK_DIR),
        Origin::Dir(path) => path.clone(),
    }
}

/// Opens the lock directory `origin` names, made (with the base directory of a namespace) if
/// missing and `create`; `None` when it is missing and not to be made.
fn open_origin(
    origin: &Origin,
    uid: u32,
    create: bool,
) -> Result<Option<(RealDir, FileId, Option<u32>)>, Error> {
    match origin {
        Origin::App { temp, app } => {
            let tmp = open_parent(
                temp,
                uid,
                "point TMPDIR at a directory that only you (or root) can write, such as $XDG_RUNTIME_DIR",
                "open the temporary directory",
            )?;
            let base_name = crate::sys::base_name(app, uid);
            let Some((base, _, _)) =
                open_private(&tmp, temp, &base_name, uid, Role::Namespace, create)?
            else {
                return Ok(None);
            };
            let base_path = temp.join(&base_name);
            open_private(&base, &base_path, LOCK_DIR, uid, Role::Namespace, create)
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
                        problem: if path.parent().is_none() {
                            "the root directory cannot be a lock directory: name a directory of your own for your locks".into()
                        } else {
                            "it must end in a UTF-8 directory name".into()
                        },
                    })
                }
            };
            let p = open_parent(
                parent,
                uid,
                "choose a lock directory whose parents only you (or root) can write",
                "open the parent of the lock directory",
            )?;
            open_private(&p, parent, name, uid, Role::Chosen, create)
        }
    }
}

impl LockDir {
    /// The lock directory `origin` names: opened and checked if it exists, else made (and
    /// checked) by the first acquisition, so that naming or inspecting a lock creates nothing.
    pub(crate) fn open(origin: Origin) -> Result<LockDir, Error> {
        let uid = Real.identity().uid;
        let lock_dir = LockDir {
            path: path_of(&origin, uid),
            origin,
            dir: PerProcess::with(None, || None),
            uid,
            shared: AtomicU32::new(NOT_SHARED),
        };
        lock_dir.opened(false)?;
        Ok(lock_dir)
    }

    /// The open lock directory, made if it is missing, and made again if it was removed (a
    /// temp cleaner may remove an empty directory; a lock in a removed directory would exclude
    /// no one), and opened anew in a forked child.
    pub(crate) fn current(&self) -> Result<Opened, Error> {
        self.opened(true)?.ok_or_else(|| {
            Error::io(
                "open the lock directory",
                &self.path,
                std::io::ErrorKind::NotFound.into(),
            )
        })
    }

    /// The open lock directory if it exists (inspecting and sweeping make nothing).
    pub(crate) fn existing(&self) -> Result<Option<Opened>, Error> {
        self.opened(false)
    }

    fn opened(&self, create: bool) -> Result<Option<Opened>, Error> {
        let mut slot = self.dir.lock();
        if let Some((dir, id)) = slot.as_ref().filter(|(d, _)| !Real.unlinked(d)) {
            return Ok(Some((dir.clone(), *id)));
        }
        let Some((dir, id, group)) = open_origin(&self.origin, self.uid, create)? else {
            return Ok(None);
        };
        self.shared
            .store(group.unwrap_or(NOT_SHARED), Ordering::Relaxed);
        let opened = (Arc::new(dir), id);
        *slot = Some(opened.clone());
        Ok(Some(opened))
    }

    /// The group that shares the directory, as it was last opened.
    pub(crate) fn shared(&self) -> Option<u32> {
        Some(self.shared.load(Ordering::Relaxed)).filter(|g| *g != NOT_SHARED)
    }

    /// The lock directory as the protocol sees it, through handle `dir`.
    pub(crate) fn space<'a>(&'a self, dir: &'a RealDir) -> Space<'a, Real> {
        Space {
            sys: &Real,
            dir,
            path: &self.path,
            uid: self.uid,
            shared: self.shared(),
        }
    }
}
