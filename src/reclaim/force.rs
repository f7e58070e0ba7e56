//! An operator's forced removal of a damaged lock: refused while a process holds it, and for
//! anything that may be no lock at all (a directory of one's own at a mistyped path); and
//! what is removed of it, only what a lock holds.

use super::{Error, Reclaim};
use crate::paths::{party_named, record_named};
use crate::space::Space;
use crate::sys::{gone, is, Errno, FileId, Kind, System};
use crate::text;
use std::io;

/// Removes what a forced removal set aside as `tomb`, checked to hold nothing a lock never
/// holds ([`stranger`]): only what a lock holds, so that what someone put in it since (a
/// directory of theirs, being filled) is never removed. Then it is put back at `NAME` (or,
/// were that taken meanwhile, left as `tomb`), and refused.
pub(super) fn remove_forced<S: System>(
    sp: &Space<S>,
    name: &str,
    tomb: &str,
) -> Result<Reclaim, Error> {
    let sys = sp.sys;
    let removed = match sys.meta_at(sp.dir, tomb).map(|m| m.kind == Kind::Dir) {
        Ok(false) => sys.remove_file_at(sp.dir, tomb),
        Ok(true) => sys
            .open_dir_at(sp.dir, tomb)
            .and_then(|d| remove_records(sys, &d, true))
            .and_then(|()| sys.remove_dir_at(sp.dir, tomb)),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => Ok(Reclaim::Done),
        Err(e) if gone(&e) => Ok(Reclaim::Done),
        Err(e) if is(&e, Errno::NotEmpty) || is(&e, Errno::Exists) => {
            let back = sys.rename_noreplace(sp.dir, tomb, name).is_ok();
            Err(Error::Unsafe {
                path: sp.entry(if back { name } else { tomb }),
                problem: "something a lock never holds was put in it while it was being removed, so it was left (what a lock holds in it was removed)".into(),
                fix: "look at what it holds, and if it is a lock, remove it by hand".into(),
            })
        }
        Err(e) => Err(sp.io("remove the damaged lock set aside as", tomb, e)),
    }
}

/// Removes from `dir` what a lock holds: its records (each a file, or an empty directory),
/// and with `parties` its readers' and writers' entries, emptied the same way. Anything else
/// stays.
fn remove_records<S: System>(sys: &S, dir: &S::Dir, parties: bool) -> io::Result<()> {
    for e in sys.list(dir)? {
        if record_named(&e) {
            let _ = sys
                .remove_file_at(dir, &e)
                .or_else(|_| sys.remove_dir_at(dir, &e));
        } else if parties && party_named(&e) {
            if let Ok(party) = sys.open_dir_at(dir, &e) {
                let _ = remove_records(sys, &party, false);
            }
            let _ = sys.remove_dir_at(dir, &e);
        }
    }
    Ok(())
}

/// Under the guard, for a forced removal: `NAME` is still the directory (or the file) `id`
/// and nobody holds a `flock` on it (`Some`, with the directory or file held exclusively
/// until it is retired); `None`: it changed, or is held.
pub(super) fn forced_still<S: System>(
    sp: &Space<S>,
    name: &str,
    id: FileId,
) -> Option<Option<S::Dir>> {
    let meta = sp.sys.meta_at(sp.dir, name).ok().filter(|m| m.id == id)?;
    let held = match meta.kind {
        Kind::Dir => sp.sys.open_dir_at(sp.dir, name).ok()?,
        Kind::File => match sp.sys.open_file_at(sp.dir, name, false) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return Some(None),
            Err(_) => return None,
        },
        _ => return Some(None), // a symlink, FIFO or socket where the lock should be
    };
    match sp.sys.try_lock(&held, true) {
        Ok(true) => Some(Some(held)),
        Err(e) if is(&e, Errno::LockUnsupported) => Some(Some(held)),
        _ => None,
    }
}

/// A malformed lock an operator asked to remove: refused without `force`, and refused while a
/// process holds a lock on it (it is in use, however damaged). The identity of what is to be
/// removed, or `None` when it vanished meanwhile.
pub(super) fn forced<S: System>(
    sp: &Space<S>,
    name: &str,
    resource: &str,
    problem: String,
    force: bool,
) -> Result<Option<FileId>, Error> {
    let malformed = |problem: String| Error::Malformed {
        lock: sp.entry(name),
        resource: resource.to_owned(),
        problem,
    };
    if !force {
        return Err(malformed(problem));
    }
    let meta = match sp.sys.meta_at(sp.dir, name) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(sp.io("inspect the lock", name, e)),
    };
    // A directory's holder keeps its flock; so does one of a plain file (flock(1)'s own lock
    // files), exclusive or shared.
    let unsafe_here = |problem: String| Error::Unsafe {
        path: sp.entry(name),
        problem,
        fix: "remove it by hand once no process uses it".into(),
    };
    let (opened, exclusive) = match meta.kind {
        Kind::Dir => (sp.sys.open_dir_at(sp.dir, name), false),
        Kind::File => (sp.sys.open_file_at(sp.dir, name, false), true),
        // flock(1) locks what a link points at, which dirlock never follows.
        Kind::Symlink => {
            return Err(unsafe_here(
                "it is a symbolic link, and another tool may lock what it points at".into(),
            ))
        }
        Kind::Other => return Ok(Some(meta.id)),
    };
    let held = match opened {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // (Windows opens no such file for its flock: nothing to ask.)
        Err(e) if e.kind() == io::ErrorKind::Unsupported => return Ok(Some(meta.id)),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(unsafe_here(format!(
                "it cannot be opened to tell whether a process holds a lock on it ({e})"
            )))
        }
        Err(e) => return Err(sp.io("open the lock", name, e)),
    };
    no_stranger(sp, name, &held, meta.kind)?;
    match sp.sys.try_lock(&held, exclusive) {
        Ok(true) => Ok(Some(meta.id)),
        // Where the filesystem has no such locks, no process holds one.
        Err(e) if is(&e, Errno::LockUnsupported) => Ok(Some(meta.id)),
        _ => Err(malformed(format!(
            "{problem}; a process holds a lock on it, so it is in use and a forced unlock refuses it"
        ))),
    }
}

/// A careless `--force` at a directory of one's own (`photos.lock`) must not empty it: refused
/// when what is at `NAME` (open as `held`, of kind `kind`) is a directory holding anything a
/// lock never holds. (Gone meanwhile: the removal under the guard finds it so.)
fn no_stranger<S: System>(
    sp: &Space<S>,
    name: &str,
    held: &S::Dir,
    kind: Kind,
) -> Result<(), Error> {
    if kind != Kind::Dir {
        return Ok(());
    }
    match stranger(sp.sys, held) {
        Ok(Some(stranger)) => Err(Error::Unsafe {
            path: sp.entry(name),
            problem: format!(
                "it holds {}, which a lock never holds, so it may be a directory of yours rather than a lock",
                text::escape(&stranger)
            ),
            fix: "look at what it holds, and if it is a lock, remove it by hand".into(),
        }),
        Ok(None) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(sp.io("list the lock", name, e)),
    }
}

/// The first entry of the directory `dir` (a damaged lock's) that a lock never holds: a sign
/// that it is no lock at all, but a directory of one's own at a mistyped path. A lock holds
/// its record (or one being written), and a shared lock its readers' and writers' entries,
/// each a directory of records; a record is never a directory that holds anything. Names
/// and kinds alike are checked, one level into each entry: `reader.md`, a file, is no
/// reader's.
pub(crate) fn stranger<S: System>(sys: &S, dir: &S::Dir) -> io::Result<Option<String>> {
    let (entries, unnamed) = sys.list_all(dir)?;
    if unnamed {
        return Ok(Some("a name that is not UTF-8".into()));
    }
    // Whether what is at `name` in `at` holds nothing at all, for a record that is a directory.
    let empty = |at: &S::Dir, name: &str| {
        sys.open_dir_at(at, name)
            .and_then(|d| sys.list_all(&d))
            .is_ok_and(|(l, more)| l.is_empty() && !more)
    };
    for entry in entries {
        let kind = match sys.meta_at(dir, &entry) {
            Ok(m) => m.kind,
            Err(e) if gone(&e) => continue, // removed meanwhile
            Err(e) => return Err(e),
        };
        let a_locks = if record_named(&entry) {
            kind != Kind::Dir || empty(dir, &entry)
        } else if party_named(&entry) && kind == Kind::Dir {
            let sub = match sys.open_dir_at(dir, &entry) {
                Ok(sub) => sub,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            };
            let (inside, more) = sys.list_all(&sub)?;
            !more
                && inside.iter().all(|r| {
                    record_named(r)
                        && sys
                            .meta_at(&sub, r)
                            .is_ok_and(|m| m.kind != Kind::Dir || empty(&sub, r))
                })
        } else {
            false
        };
        if !a_locks {
            return Ok(Some(entry));
        }
    }
    Ok(None)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::paths::OWNER_FILE;
    use crate::sys::Real;

    /// What comes into a damaged lock between the check and the removal (a directory of one's
    /// own, being filled) is never removed: only what a lock holds is, and the rest is put
    /// back at the lock's name and refused.
    #[test]
    fn a_forced_removal_leaves_what_came_in_meanwhile() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Real.open_dir_path(tmp.path()).unwrap();
        let sp = Space {
            sys: &Real,
            dir: &dir,
            path: tmp.path(),
            uid: 0,
            shared: None,
        };
        let tomb = tmp.path().join("x.lock.tombstone.t");
        let reader = tomb.join("reader.8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10");
        std::fs::create_dir_all(&reader).unwrap();
        std::fs::write(reader.join(OWNER_FILE), "{}").unwrap();
        std::fs::write(tomb.join(OWNER_FILE), "{}").unwrap();
        std::fs::write(tomb.join("a.jpg"), "precious").unwrap();
        let err = remove_forced(&sp, "x.lock", "x.lock.tombstone.t").unwrap_err();
        let back = tmp.path().join("x.lock");
        assert!(
            matches!(&err, Error::Unsafe { path, .. } if *path == back),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(&back)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["a.jpg"]);
        // Nothing else in it: removed whole.
        std::fs::remove_file(back.join("a.jpg")).unwrap();
        Real.rename_noreplace(&dir, "x.lock", "x.lock.tombstone.t")
            .unwrap();
        remove_forced(&sp, "x.lock", "x.lock.tombstone.t").unwrap();
        assert!(!tomb.exists());
    }
}
