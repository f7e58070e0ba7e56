//! The reference implementation (the TypeScript `acquireLock`, `removeStaleOwner` and
//! `removeIfOwned`), modelled step by step over the simulated filesystem beside the crate's
//! own code: a candidate holding `{pid, token}` (no beacon, no `flock`), renamed into place
//! plainly (which fails on a directory that is not empty); on contention, the record read and
//! its pid judged by `kill(pid, 0)`; a dead owner's lock reclaimed only when the lock
//! directory is older than [`REFERENCE_GRACE`], under a bare `mkdir` guard (there already: it
//! gives up), its token checked again, renamed to a tombstone and removed; and a release that
//! checks its token, retires and removes. Each file system call is a scheduling point, and the
//! reference's process lives and dies as any simulated process does.
//!
//! It sees a shared lock as a lock held by the reader its record names: while readers read,
//! that must be a live pid, and the lock must never be older than its grace period (I12), or
//! it would take the lock from them (I10).

use super::*;
use crate::paths::{candidate_name, tombstone_name};

/// The reference's grace period (`REPOSITORY_LOCK_RECLAIM_GRACE_MS`).
pub(crate) const REFERENCE_GRACE: Duration = Duration::from_secs(60);

/// How the reference's `acquireLock` failed.
#[derive(Debug)]
enum Failed {
    /// A live owner: `withLock` waits and tries again.
    Live,
    /// Anything else (a stale owner not yet reclaimable, a guard there, a malformed record,
    /// an error, a lock that changed three times): the operation fails.
    Other,
}

/// One operation of the reference: acquire (waiting a second for a live owner, `tries` times
/// at most), hold for a few steps of virtual time, release.
pub(crate) fn reference(sys: &SimSys, tries: u8) {
    {
        let mut st = sys.world.lock();
        if !st.book.references.contains(&sys.slot) {
            st.book.references.push(sys.slot);
        }
    }
    let mut token = None;
    for _ in 0..=tries {
        match acquire_lock(sys) {
            Ok(t) => {
                token = Some(t);
                break;
            }
            Err(Failed::Live) => {
                let _ = sys.sleep(None, Some(Duration::from_secs(1)), None);
            }
            Err(Failed::Other) => return,
        }
    }
    let Some(token) = token else {
        return;
    };
    enter(sys);
    let _ = sys.sleep(None, Some(Duration::from_millis(100)), None);
    leave(sys);
    remove_if_owned(sys, &token);
}

/// `acquireLock`: up to three attempts.
fn acquire_lock(sys: &SimSys) -> Result<String, Failed> {
    let pid = sys.pid();
    for _ in 0..3 {
        let token = sys.token();
        let candidate = candidate_name(LOCK, &token);
        let record = format!(r#"{{"pid":{pid},"token":"{token}"}}"#);
        let contended = match write_candidate(sys, &candidate, &record) {
            Err(_) => {
                rm_rf(sys, &candidate);
                return Err(Failed::Other);
            }
            Ok(()) if exists(sys, LOCK) => true,
            Ok(()) => match rename(sys, &candidate, LOCK) {
                Ok(()) => false,
                Err(e) if [EEXIST, ENOTEMPTY].contains(&e.raw_os_error().unwrap_or(0)) => true,
                Err(_) => {
                    rm_rf(sys, &candidate);
                    return Err(Failed::Other);
                }
            },
        };
        rm_rf(sys, &candidate); // finally
        if !contended {
            return Ok(token);
        }
        if !exists(sys, LOCK) {
            continue;
        }
        let Some(existing) = read_owner(sys, LOCK) else {
            return Err(Failed::Other); // malformed: never removed automatically
        };
        if sys.process_alive(existing.pid) != Some(false) {
            return Err(Failed::Live);
        }
        if age(sys, LOCK) >= REFERENCE_GRACE && remove_stale_owner(sys, &existing.token)? {
            continue;
        }
        return Err(Failed::Other);
    }
    Err(Failed::Other)
}

/// `removeStaleOwner`: under a bare `mkdir` guard (there already: give up), retire the lock if
/// it still carries `token`, remove it, remove the guard.
fn remove_stale_owner(sys: &SimSys, token: &str) -> Result<bool, Failed> {
    let guard = crate::paths::guard_name(LOCK);
    let made = sys.call(&format!("reference: mkdir {guard}"), |st, _| {
        let d = st.d();
        st.create(d, &guard, Node::Dir(BTreeMap::new()), 0o700)
            .map(drop)
    });
    if made.is_err() {
        return Err(Failed::Other);
    }
    let tomb = move_owned_to_tombstone(sys, LOCK, token);
    if let Some(t) = &tomb {
        rm_rf(sys, t);
    }
    sys.call(&format!("reference: rmdir {guard}"), |st, _| {
        let d = st.d();
        let ino = st.lookup(d, &guard)?;
        if !st.dir_entries(ino)?.is_empty() {
            return Err(errno(ENOTEMPTY));
        }
        st.dir_entries_mut(d)?.remove(&guard);
        st.unlink_trees(vec![ino]);
        st.touch(d);
        Ok(())
    })
    .ok();
    Ok(tomb.is_some())
}

/// `moveOwnedToTombstone`: the lock `lock` renamed to a fresh tombstone if its record carries
/// `token`, before and after.
fn move_owned_to_tombstone(sys: &SimSys, lock: &str, token: &str) -> Option<String> {
    if read_owner(sys, lock)?.token != token {
        return None;
    }
    let tomb = tombstone_name(lock, &sys.token());
    rename(sys, lock, &tomb).ok()?;
    if read_owner(sys, &tomb)?.token != token {
        return None;
    }
    Some(tomb)
}

/// `removeIfOwned`: the release.
fn remove_if_owned(sys: &SimSys, token: &str) {
    if let Some(t) = move_owned_to_tombstone(sys, LOCK, token) {
        rm_rf(sys, &t);
    }
}

/// `writeCandidate`: the directory, the record made and then written.
fn write_candidate(sys: &SimSys, name: &str, record: &str) -> io::Result<()> {
    let file = sys.call(
        &format!("reference: mkdir {name}, open owner.json"),
        |st, _| {
            let d = st.d();
            let dir = st.create(d, name, Node::Dir(BTreeMap::new()), 0o700)?;
            st.create(dir, OWNER_FILE, Node::File(Vec::new()), 0o600)
        },
    )?;
    sys.call("reference: write owner.json", |st, _| {
        match st.inodes.get_mut(&file).map(|i| &mut i.node) {
            Some(Node::File(d)) => d.extend_from_slice(record.as_bytes()),
            _ => return Err(errno(EBADF)),
        }
        Ok(())
    })
}

/// `pathExistsNoFollow`.
fn exists(sys: &SimSys, name: &str) -> bool {
    sys.call(&format!("reference: lstat {name}"), |st, _| {
        st.lookup(st.d(), name).is_ok()
    })
}

/// `readOwner`: `{pid, token}` of the record in the directory `name`, if it is complete.
fn read_owner(sys: &SimSys, name: &str) -> Option<Owner> {
    sys.call(&format!("reference: read {name}/owner.json"), |st, _| {
        let ino = st.lookup(st.d(), name).ok()?;
        st.record(ino)
    })
}

/// `lockAgeMs`: how long ago the directory `name` was modified (0 when it cannot be seen).
fn age(sys: &SimSys, name: &str) -> Duration {
    sys.call(&format!("reference: lstat {name} (age)"), |st, _| {
        st.lookup(st.d(), name).map_or(Duration::ZERO, |i| {
            st.mono.saturating_sub(st.inodes[&i].mtime)
        })
    })
}

/// `fs.rmSync(name, {recursive, force})`, in one step.
fn rm_rf(sys: &SimSys, name: &str) {
    sys.call(&format!("reference: rm -rf {name}"), |st, _| {
        let d = st.d();
        let Ok(ino) = st.lookup(d, name) else {
            return false;
        };
        if let Ok(e) = st.dir_entries_mut(d) {
            e.remove(name);
        }
        st.unlink_trees(vec![ino]);
        st.touch(d);
        true
    });
}

/// `fs.renameSync`: a plain rename, which replaces an empty directory and fails on one that
/// is not empty.
fn rename(sys: &SimSys, from: &str, to: &str) -> io::Result<()> {
    sys.call(&format!("reference: rename {from} -> {to}"), |st, slot| {
        let d = st.d();
        let src = st.lookup(d, from)?;
        if let Ok(dst) = st.lookup(d, to) {
            match &st.inodes[&dst].node {
                Node::Dir(e) if e.is_empty() => {
                    if matches!(classify(to), Entry::Lock(_)) {
                        st.violation(format!(
                            "I3: the reference p{slot} replaced the directory at {to}"
                        ));
                    }
                    st.unlink_trees(vec![dst]);
                }
                Node::Dir(_) => return Err(errno(ENOTEMPTY)),
                Node::File(_) => return Err(errno(ENOTDIR)),
            }
        }
        if let Entry::Lock(lock) = classify(from) {
            st.reference_moves(slot, src, &lock);
        }
        let entries = st.dir_entries_mut(d)?;
        entries.remove(from);
        entries.insert(to.to_owned(), src);
        st.touch(d);
        st.bump(src);
        Ok(())
    })
}

impl State {
    /// I6 and I10 for the reference: the lock it moves away (inode `src`) is its own, or its
    /// owner is dead; and nobody reads it.
    fn reference_moves(&mut self, slot: usize, src: Ino, lock: &str) {
        let owner = self
            .record(src)
            .and_then(|o| self.tokens.get(&o.token).copied());
        if let Some((s, _)) = owner.filter(|(s, _)| *s != slot && self.procs[*s].alive) {
            self.violation(format!(
                "I6: the reference p{slot} moved away the lock {lock} of live p{s}"
            ));
        }
        let reader = self.book.reading.iter().find(|(s, _)| self.procs[*s].alive);
        if let Some((s, t)) = reader.copied() {
            self.violation(format!(
                "I10: the reference p{slot} took the lock {lock} from p{s}.{t}, which reads it"
            ));
        }
    }
}
