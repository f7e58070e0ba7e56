//! The lock directory itself: created private (mode exactly 0700), or an existing one that
//! only its owner can write, or refused with advice,
//! its parents checked against renames by others, and re-created when a temp cleaner removed
//! it.

use crate::error::Error;
use crate::paths::{self, LOCK_DIR};
use crate::space::Space;
use crate::sys::{is, Errno, FileId, PerProcess, Real, RealDir, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Refuses a directory that someone else could rename away, with whatever is inside it (our
/// lock namespace while a lock is held): one, or any directory above it, owned by a user other
/// than us and root, or writable by its group or others without the sticky bit. OpenSSH holds
/// the paths it trusts to the same rule. Both the path as given and its real path are checked.
#[cfg(unix)]
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

/// On Windows the temporary directory is the user's own, inside a profile whose ACL keeps
/// other users out, and who may rename what is decided by ACLs rather than by owners and
/// modes: the namespace directories themselves are checked (ours, private) where they are made.
#[cfg(windows)]
fn check_ancestors(_dir: &Path, _uid: u32, _fix: &str) -> Result<(), Error> {
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

fn identified(dir: RealDir, path: &Path) -> Result<Opened, Error> {
    let id = Real
        .meta(&dir)
        .map_err(|e| Error::io("inspect the lock directory", path, e))?
        .id;
    Ok((Arc::new(dir), id))
}

fn unopened() -> Option<Opened> {
    None
}

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

/// Creates (mode exactly 0700) or opens the private directory `name` in `parent`.
/// Without `create`, a missing one is `None`. With it, the group that shares it (see
/// [`shared_group`]), if any.
fn open_private(
    parent: &RealDir,
    parent_path: &Path,
    name: &str,
    uid: u32,
    role: Role,
    create: bool,
) -> Result<Option<(RealDir, Option<u32>)>, Error> {
    let sys = Real;
    let path = parent_path.join(name);
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
    let dir = match opened {
        Ok(d) => d,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
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
    let shared = match role {
        Role::Chosen if !created => shared_group(&dir, &meta, uid, &path)?,
        _ => None,
    };
    if meta.uid != uid && !(shared.is_some() && meta.uid == 0) {
        let fix = match role {
            Role::Namespace => format!(
                "another user made your lock namespace and may be trying to intercept your locks: have an administrator remove it, or point {} at a directory only you can write",
                if cfg!(windows) { "TEMP" } else { "TMPDIR" }
            ),
            Role::Chosen => USE_A_PRIVATE_ONE.to_owned(),
        };
        return Err(Error::Unsafe {
            problem: format!(
                "it is owned by {}, not by this user ({})",
                crate::sys::owner_words(meta.uid),
                crate::sys::owner_words(uid)
            ),
            fix,
            path,
        });
    }
    if created {
        // Whatever the umask took away (even the owner's bits), the mode is exactly 0700.
        sys.set_mode(&dir, 0o700)
            .map_err(|e| Error::io("set the mode of the lock directory", &path, e))?;
    } else if match role {
        // Our own namespace is ours alone, as the reference makes it.
        Role::Namespace => meta.mode & 0o777 != 0o700,
        // A directory the caller chose (a project's, mode 755) may be read by others, as
        // OpenSSH's StrictModes allows: only writing it lets others replace or remove a lock,
        // and each lock inside is private. A group's (above) its members may write.
        Role::Chosen => meta.mode & 0o002 != 0 || (meta.mode & 0o020 != 0 && shared.is_none()),
    } {
        // Only our own namespace (named after our uid, made by us) may be made private again.
        // A directory the caller named may be anything (/usr, a project, /var/lib) and others
        // may rely on its mode: never advise changing it.
        let fix = match role {
            Role::Namespace if cfg!(windows) => format!(
                "it is your own lock namespace: remove it (`rmdir /s {}`) while no lock in it is held, and dirlock makes it again, private",
                path.display()
            ),
            Role::Namespace => format!(
                "it is your own lock namespace: make it private again with `chmod 700 {}`",
                crate::text::shell_word(&path)
            ),
            Role::Chosen => USE_A_PRIVATE_ONE.to_owned(),
        };
        return Err(Error::Unsafe {
            problem: if cfg!(windows) {
                format!("it has {}", crate::sys::mode_words(meta.mode))
            } else if role == Role::Namespace {
                format!("it has mode {:o}, not 700", meta.mode & 0o7777)
            } else {
                format!(
                    "it has mode {:o}: {} may write it, and so replace the locks inside or take them away",
                    meta.mode & 0o7777,
                    if meta.mode & 0o002 != 0 {
                        "anyone"
                    } else {
                        "its group"
                    }
                )
            },
            fix,
            path,
        });
    }
    Ok(Some((dir, shared)))
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
    if meta.mode & 0o020 == 0 || meta.mode & 0o002 != 0 || cfg!(windows) {
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

/// The path of the lock directory `origin` names.
fn path_of(origin: &Origin, uid: u32) -> PathBuf {
    match origin {
        Origin::App { temp, app } => temp.join(paths::base_name(app, uid)).join(LOCK_DIR),
        Origin::Dir(path) => path.clone(),
    }
}

/// Opens the lock directory `origin` names, made (with the base directory of a namespace) if
/// missing and `create`; `None` when it is missing and not to be made.
fn open_origin(
    origin: &Origin,
    uid: u32,
    create: bool,
) -> Result<Option<(RealDir, Option<u32>)>, Error> {
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
            let Some((base, _)) =
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
            check_ancestors(
                parent,
                uid,
                "choose a lock directory whose parents only you (or root) can write",
            )?;
            let p = Real
                .open_dir_path(parent)
                .map_err(|e| Error::io("open the parent of the lock directory", parent, e))?;
            open_private(&p, parent, name, uid, Role::Chosen, create)
        }
    }
}

impl LockDir {
    /// The lock directory `origin` names: opened and checked if it exists, else made (and
    /// checked) by the first acquisition, so that naming or inspecting a lock creates nothing.
    pub(crate) fn open(origin: Origin) -> Result<LockDir, Error> {
        let uid = Real.identity().uid;
        let path = path_of(&origin, uid);
        let shared = AtomicU32::new(NOT_SHARED);
        let opened = match open_origin(&origin, uid, false)? {
            Some((dir, group)) => {
                shared.store(group.unwrap_or(NOT_SHARED), Ordering::Relaxed);
                Some(identified(dir, &path)?)
            }
            None => None,
        };
        Ok(LockDir {
            path,
            origin,
            dir: PerProcess::with(opened, unopened),
            uid,
            shared,
        })
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
        let Some((dir, group)) = open_origin(&self.origin, self.uid, create)? else {
            return Ok(None);
        };
        self.shared
            .store(group.unwrap_or(NOT_SHARED), Ordering::Relaxed);
        let opened = identified(dir, &self.path)?;
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
