//! Sweep: reap every tombstone, and retire-then-reap every candidate whose creator is dead.
//! Locks and guards are never touched.

use crate::error::Error;
use crate::options::since;
use crate::paths::{classify, tombstone_name, Entry};
use crate::protocol::queue;
use crate::space::{creator, remove_tree, Creator, Space};
use crate::sys::{Identity, System};
use std::io;
use std::time::Duration;

/// What a [sweep](crate::Locks::sweep) removed and what it left, with why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Names removed from the lock directory.
    pub removed: Vec<String>,
    /// Names left in place, each with the reason.
    pub kept: Vec<(String, String)>,
}

/// A candidate without a record may be one being made right now (between its `mkdir` and its
/// beacon `flock`, microseconds): a sweep leaves it alone for at least this long, whatever its
/// grace period, so that even `sweep --grace 0` never removes a candidate under its creator.
pub(crate) const STAGING_FLOOR: Duration = Duration::from_secs(10);

/// Sweep: reap every tombstone, and retire-then-reap every candidate whose creator is dead.
/// Locks and guards are never touched.
pub(crate) fn sweep<S: System>(sp: &Space<S>, grace: Duration) -> Result<Sweep, Error> {
    let me = &sp.sys.identity();
    let entries = sp
        .sys
        .list(sp.dir)
        .map_err(|e| Error::io("list the lock directory", sp.path, e))?;
    let mut report = Sweep::default();
    for entry in entries {
        let outcome = match classify(&entry) {
            Entry::Tombstone { .. } => {
                if remove_tree(sp.sys, sp.dir, &entry) {
                    Swept::Removed
                } else {
                    Swept::Kept("it could not be removed".into())
                }
            }
            Entry::Candidate { lock, .. } => sweep_candidate(sp, &entry, &lock, grace, me),
            // Left by writers that died waiting for a shared lock's readers: removed once no
            // writer waits (it keeps no reader out then).
            Entry::Writers { lock } => match sp.sys.open_dir_at(sp.dir, &entry) {
                Ok(w) if crate::protocol::shared::remove_writers_if_free(sp, &lock, &w) => {
                    Swept::Removed
                }
                Ok(_) => Swept::Kept("a writer waits for the lock's readers".into()),
                // Not a directory: nothing dirlock made, and it would stop every writer.
                Err(e) if crate::space::is_not_dir(&e) => {
                    match sp.sys.remove_file_at(sp.dir, &entry) {
                        Ok(()) => Swept::Removed,
                        Err(e) => Swept::Kept(format!("it could not be removed: {e}")),
                    }
                }
                Err(_) => Swept::Untouched,
            },
            // Left by waiters that died in the lock's queue: removed once no one waits.
            Entry::Queue { .. } => match queue::sweep(sp, &entry) {
                Ok(None) => Swept::Removed,
                Ok(Some(kept)) => Swept::Kept(queue_kept(sp, &entry, kept)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Swept::Untouched,
                Err(e) => Swept::Kept(format!("it cannot be read: {e}")),
            },
            _ => Swept::Untouched,
        };
        match outcome {
            Swept::Removed => report.removed.push(entry),
            Swept::Kept(why) => report.kept.push((entry, why)),
            Swept::KeptAs(name, why) => report.kept.push((name, why)),
            Swept::Untouched => {}
        }
    }
    Ok(report)
}

/// Why a sweep kept lock queue `entry`, in the user's words.
fn queue_kept<S: System>(sp: &Space<S>, entry: &str, kept: queue::Kept) -> String {
    let paths = |names: &[String]| {
        let paths = names
            .iter()
            .map(|n| sp.entry(entry).join(n).display().to_string());
        paths.collect::<Vec<_>>().join(", ")
    };
    let mut why = Vec::new();
    match kept.waiters {
        0 => {}
        1 => why.push("a run waits its turn in it".to_owned()),
        n => why.push(format!("{n} runs wait their turn in it")),
    }
    if !kept.barred.is_empty() {
        let it = if kept.barred.len() == 1 { "it" } else { "them" };
        let barred = paths(&kept.barred);
        why.push(format!(
            "you may not open {barred} (your runs pass {it} by)"
        ));
    }
    if !kept.untold.is_empty() {
        why.push(format!("{} cannot be read", paths(&kept.untold)));
    }
    if let Some((e, held)) = kept.stuck {
        why.push(match held.is_empty() {
            true => format!("it could not be removed: {e}"),
            false => format!("it holds {}, and could not be removed: {e}", paths(&held)),
        });
    }
    why.join("; ")
}

/// What a sweep did with one entry.
enum Swept {
    Removed,
    Kept(String),
    /// Kept under another name (a candidate set aside as a tombstone), for a reason.
    KeptAs(String, String),
    Untouched,
}

/// A candidate is removed only when its creator is dead: its beacon is free and it holds a
/// complete record (written only under the beacon) and is older than `grace`; or, without a
/// record, it is older than both `grace` and [`STAGING_FLOOR`]. Where there is no `flock`, its
/// record judges its creator like any owner. It is retired to a tombstone first, so that its
/// creator's publish and the sweep cannot both win.
fn sweep_candidate<S: System>(
    sp: &Space<S>,
    entry: &str,
    lock: &str,
    grace: Duration,
    me: &Identity,
) -> Swept {
    let Ok(meta) = sp.sys.meta_at(sp.dir, entry) else {
        return Swept::Untouched; // published or removed meanwhile
    };
    let age = since(sp.sys, meta.mtime).unwrap_or_default();
    if age < grace {
        // (Whoever made it: a run may be starting with it, or one that ended may have left
        // it; neither is told before the grace period is over.)
        return Swept::Kept("it is younger than the grace period".into());
    }
    let Ok(dir) = sp.sys.open_dir_at(sp.dir, entry) else {
        return Swept::Kept("it cannot be opened".into());
    };
    let record = sp.read_owner(&dir).ok();
    match creator(sp, &dir, record.as_ref(), me) {
        Creator::Gone => {}
        Creator::Alive(why) | Creator::Untold(why) => return Swept::Kept(why),
    }
    if record.is_none() && age < STAGING_FLOOR {
        return Swept::Kept("it has no record yet (a run may be starting with it)".into());
    }
    // Named afresh: the lock this candidate's creator published may be a tombstone named by its
    // token already (handed over, a candidate's name holds the lock before it, on its way out).
    let tomb = tombstone_name(lock, &sp.sys.token());
    match sp.sys.rename_noreplace(sp.dir, entry, &tomb) {
        Ok(_) => {
            drop(dir);
            if remove_tree(sp.sys, sp.dir, &tomb) {
                Swept::Removed
            } else {
                Swept::KeptAs(tomb, "it could not be removed".into())
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Swept::Untouched,
        Err(e) => Swept::Kept(format!("it could not be set aside: {e}")),
    }
}
