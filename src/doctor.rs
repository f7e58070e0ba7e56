//! [`diagnose`]: whether a directory can host locks, and which of the protocol's guarantees
//! hold on its filesystem, found by trying them (in a private directory made for the purpose
//! and removed after) rather than by a table of filesystem names.

use crate::error::Error;
use crate::sys::{is, Clock, Errno, Real, System};
use std::path::{Path, PathBuf};

/// What [`diagnose`] found about one guarantee.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// It holds.
    Holds,
    /// It does not hold here; what that means for locks.
    Lost(String),
    /// It could not be told; why.
    Untold(String),
}

impl Finding {
    /// Whether the guarantee holds.
    pub fn holds(&self) -> bool {
        *self == Finding::Holds
    }
}

/// What a directory offers locks (see [`diagnose`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The directory examined.
    pub path: PathBuf,
    /// The filesystem's type where the system tells it (`ext4`, `tmpfs`, `fuse.bindfs`,
    /// `nfs4`, `apfs`, `NTFS`).
    pub filesystem: Option<String>,
    /// Only you (or root) can write the directory, so no one else can replace or remove a
    /// lock in it; or only a group you are in (see `shared_with`). Where this is lost, the
    /// directory cannot host locks: [`crate::Locks`] refuses it.
    pub private: Finding,
    /// The group that shares the directory ([`crate::Locks::shared_with`]).
    pub shared_with: Option<u32>,
    /// You can make what a lock needs in it. Lost (a read-only filesystem, a directory you may
    /// not write), no lock can be taken there.
    pub writable: Finding,
    /// Renames that never replace what is there: a lock is published only where there is
    /// none. Lost (on some FUSE filesystems), the protocol renames plainly and checks what it
    /// renamed: safe, but an empty directory someone else puts at a lock's path is replaced.
    pub exclusive_rename: Finding,
    /// `flock` excludes another open of the same directory: a crashed holder's lock is proven
    /// free by the kernel and taken over at once. Lost, holders are judged by their pid, and
    /// a crashed one's lock is taken over only once its grace period has passed.
    pub kernel_proof: Finding,
    /// The filesystem is this machine's own. Lost (a network filesystem), the locks are
    /// shared with the other machines that mount it: each machine's holders exclude the
    /// others', but the lock of a holder that crashed on another machine is never taken over
    /// automatically (it is removed by hand, or with `unlock` there).
    pub local: Finding,
}

impl Diagnosis {
    /// Whether every guarantee holds.
    pub fn all_hold(&self) -> bool {
        [
            &self.private,
            &self.writable,
            &self.exclusive_rename,
            &self.kernel_proof,
            &self.local,
        ]
        .iter()
        .all(|f| f.holds())
    }
}

/// Filesystems whose files other machines share (Linux `mountinfo` and BSD `statfs` names).
const NETWORK: &str =
    "nfs nfs4 cifs smb3 smbfs 9p afs ceph glusterfs lustre gpfs fuse.sshfs afpfs webdav";

/// Examines directory `dir`: whether it can host locks (only you can write it), and which of
/// the protocol's guarantees hold on its filesystem. The guarantees are tried, not looked up:
/// a private directory made in `dir` for the purpose (and removed after) is renamed onto
/// another without replacing it, and locked through two opens, as locks are. Nothing else in
/// `dir` is touched; nothing is left behind.
///
/// # Errors
///
/// [`Error::Io`] when `dir` cannot be opened (it is missing, not a directory, or not
/// readable). A guarantee that cannot be tried (a directory you may not write) is
/// [`Finding::Untold`], not an error.
///
/// ```
/// let tmp = tempfile::tempdir()?;
/// let found = dirlock::diagnose(tmp.path())?;
/// assert!(found.private.holds());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn diagnose(dir: impl AsRef<Path>) -> Result<Diagnosis, Error> {
    let path = std::path::absolute(dir.as_ref())
        .map_err(|e| Error::io("resolve the directory", dir.as_ref(), e))?;
    let sys = Real;
    let at = sys
        .open_dir_path(&path)
        .map_err(|e| Error::io("open the directory", &path, e))?;
    let fs = crate::sys::filesystem(&at);
    let mut shared_with = None;
    let private = match crate::Locks::in_dir(&path) {
        Ok(locks) => {
            shared_with = locks.shared_with();
            Finding::Holds
        }
        Err(Error::Unsafe { problem, path, .. }) => {
            Finding::Lost(format!("{}: {problem}", crate::text::path(&path)))
        }
        Err(e) => Finding::Untold(e.to_string()),
    };
    let local = match &fs {
        Some((name, options)) if NETWORK.split(' ').any(|n| n == name) => {
            let per_client = options
                .split(',')
                .any(|o| o == "local_lock=flock" || o == "local_lock=all");
            Finding::Lost(format!(
                "{name} is a network filesystem: other machines that mount it share its locks, and a lock whose holder crashed on another machine is never taken over automatically{}",
                if per_client {
                    "; and this mount keeps flock to this machine (local_lock), so what holds a lock open elsewhere is not seen here"
                } else {
                    ""
                }
            ))
        }
        Some(_) => Finding::Holds,
        None => Finding::Untold("this system does not tell the filesystem".into()),
    };
    remove_old_probes(&sys, &at);
    let (writable, exclusive_rename, kernel_proof) = try_guarantees(&sys, &at);
    Ok(Diagnosis {
        path,
        filesystem: fs.map(|f| f.0),
        private,
        shared_with,
        writable,
        exclusive_rename,
        kernel_proof,
        local,
    })
}

/// The prefix of the probe directories [`diagnose`] makes.
const PROBE: &str = ".dirlock-doctor.";

/// Removes the probes of examinations that were killed (a signal, a hung network filesystem
/// given up on) at least a minute ago: only `diagnose` makes them, and it removes its own.
fn remove_old_probes(sys: &Real, at: &<Real as System>::Dir) {
    let Ok(names) = sys.list(at) else {
        return;
    };
    for name in names.iter().filter(|n| n.starts_with(PROBE)) {
        let old = sys.meta_at(at, name).is_ok_and(|m| {
            std::time::SystemTime::now()
                .duration_since(m.mtime)
                .is_ok_and(|age| age > std::time::Duration::from_secs(60))
        });
        if old {
            remove_probe(sys, at, name);
        }
    }
}

fn remove_probe(sys: &Real, at: &<Real as System>::Dir, probe: &str) {
    if let Ok(dir) = sys.open_dir_at(at, probe) {
        for name in ["a", "b", "c"] {
            let _ = sys.remove_dir_at(&dir, name);
        }
    }
    let _ = sys.remove_dir_at(at, probe);
}

/// Makes a private directory in `at` (whether that can be done is the first finding), tries
/// the no-replace rename and `flock` in it, and removes it (also when a try fails).
fn try_guarantees(sys: &Real, at: &<Real as System>::Dir) -> (Finding, Finding, Finding) {
    let probe = format!("{PROBE}{}", sys.token());
    if let Err(e) = sys.mkdir_at(at, &probe) {
        let why = "it cannot be tried where nothing can be made".to_owned();
        return (
            Finding::Lost(format!("nothing can be made in it ({e})")),
            Finding::Untold(why.clone()),
            Finding::Untold(why),
        );
    }
    let found = (|| {
        let dir = sys.open_dir_at(at, &probe)?;
        sys.mkdir_at(&dir, "a")?;
        sys.mkdir_at(&dir, "b")?;
        // Onto a name that is free: where the target exists, Linux refuses a no-replace
        // rename before the filesystem is asked, whether or not the filesystem has it.
        let rename = match sys.rename_exclusive(&dir, "a", "c") {
            Ok(()) => match sys.rename_exclusive(&dir, "c", "b") {
                Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Finding::Holds,
                Ok(()) => Finding::Lost(
                    "a rename that was to fail where its target exists replaced it: this filesystem breaks no-replace renames".into(),
                ),
                Err(e) => Finding::Untold(format!("the rename failed: {e}")),
            },
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => Finding::Lost(
                "this filesystem cannot rename without replacing: locks are renamed plainly and checked after, which is safe, but an empty directory someone puts at a lock's path is replaced".into(),
            ),
            Err(e) => Finding::Untold(format!("the rename failed: {e}")),
        };
        let (one, two) = (sys.open_dir_at(at, &probe)?, sys.open_dir_at(at, &probe)?);
        let proof = flock_finding(sys.try_lock(&one, true), sys.try_lock(&two, true));
        let _ = sys.unlock(&one);
        Ok::<_, std::io::Error>((rename, proof))
    })();
    remove_probe(sys, at, &probe);
    let (rename, proof) = found.unwrap_or_else(|e| {
        let why = format!("it cannot be tried here ({e})");
        (Finding::Untold(why.clone()), Finding::Untold(why))
    });
    (Finding::Holds, rename, proof)
}

/// What two exclusive `flock`s through two opens of one directory say: the second must be
/// refused while the first is held.
fn flock_finding(first: std::io::Result<bool>, second: std::io::Result<bool>) -> Finding {
    match (first, second) {
        (Ok(true), Ok(false)) => Finding::Holds,
        (Ok(true), Ok(true)) => Finding::Lost(
            "flock is granted twice here (emulated without effect): holders are judged by their pid, and a crashed one's lock is taken over only after the grace period".into(),
        ),
        (Err(e), _) | (_, Err(e)) if is(&e, Errno::LockUnsupported) => Finding::Lost(
            "this filesystem has no flock: holders are judged by their pid, and a crashed one's lock is taken over only after the grace period".into(),
        ),
        (Err(e), _) | (_, Err(e)) => Finding::Untold(format!("flock failed: {e}")),
        (Ok(false), _) => Finding::Untold("another process holds the probe's flock".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flock_granted_twice_or_missing_is_a_lost_guarantee() {
        assert_eq!(flock_finding(Ok(true), Ok(false)), Finding::Holds);
        assert!(matches!(
            flock_finding(Ok(true), Ok(true)),
            Finding::Lost(_)
        ));
        assert!(matches!(
            flock_finding(Err(std::io::ErrorKind::Other.into()), Ok(true)),
            Finding::Untold(_)
        ));
    }

    #[test]
    fn a_private_directory_keeps_every_guarantee_and_is_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("work"), "x").unwrap();
        let found = diagnose(tmp.path()).unwrap();
        assert_eq!(found.private, Finding::Holds);
        assert_eq!(found.exclusive_rename, Finding::Holds);
        assert_eq!(found.kernel_proof, Finding::Holds);
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["work"], "the probe is removed");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        let err = diagnose(&missing).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        assert!(!missing.exists());
    }
}
