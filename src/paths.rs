//! The on-disk names: the lock directory, lock names, and the names derived from a lock name
//! (candidate, tombstone, reclaim guard).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub(crate) mod resolve;
pub(crate) use crate::sys::temp_source;
pub(crate) use resolve::{file_identity, real_path};

/// The owner record inside every lock and candidate directory.
pub(crate) const OWNER_FILE: &str = "owner.json";
/// The largest owner record we read or write.
pub(crate) const OWNER_LIMIT: usize = 4 * 1024;
/// The file that marks a reclaim guard as this crate's (always made under a held `flock`).
pub(crate) const GUARD_MARKER: &str = "dirlock.guard";
/// The file in a lock's queue whose mtime says when a release last left the lock free for
/// those that do not queue (see `protocol::queue`).
pub(crate) const TURN_FILE: &str = "turn";
/// The name of the lock directory inside the per-user base directory.
pub(crate) const LOCK_DIR: &str = "operation-locks";

const CANDIDATE: &str = ".candidate.";
const TOMBSTONE: &str = ".tombstone.";
const RECLAIM: &str = ".reclaim";
const WRITERS_SUFFIX: &str = ".writers";
const QUEUE_SUFFIX: &str = ".queue";

fn hashed(prefix: &str, path: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prefix.as_bytes());
    hasher.update([0u8]);
    hasher.update(&*crate::sys::path_bytes(path));
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{prefix}-{hex}.lock")
}

/// The lock name for a repository whose canonical (real) path is `root`:
/// `repository-` + hex(sha256(`"repository\0"` + path bytes)) + `.lock`, as the reference
/// implementation names it.
pub fn repository_lock_name(root: &Path) -> String {
    hashed("repository", root)
}

/// The lock name for the per-account setup of the account whose canonical home is `home`:
/// `global-setup-` + hex(sha256(`"global-setup\0"` + path bytes)) + `.lock`.
pub fn global_setup_lock_name(home: &Path) -> String {
    hashed("global-setup", home)
}

/// The lock name of the file or directory whose real path is `real`
/// ([`crate::Locks::path_lock`]): `path-` + hex(sha256(`"path\0"` + real path)) + `.lock`,
/// shaped like the reference's names (which has no such lock).
pub fn path_lock_name(real: &Path) -> String {
    hashed("path", real)
}

/// The temporary directory as the reference implementation (Node.js `os.tmpdir()`) finds it:
/// on Unix `TMPDIR`, else `TMP`, else `TEMP`, else `/tmp`; on Windows `TEMP`, else `TMP`, else
/// `%SystemRoot%\temp`; without a trailing separator. Matching it exactly is what makes our
/// lock paths the reference's.
pub fn temp_dir() -> PathBuf {
    crate::sys::temp_source().1
}

/// Checks an application name: it becomes a path component.
pub(crate) fn check_app(app: &str) -> Result<(), &'static str> {
    if app.is_empty() {
        return Err("it is empty");
    }
    if app.len() > 100 {
        return Err("it is longer than 100 bytes");
    }
    check_component(app)
}

/// Checks what becomes a path component: no leading dot, and only ASCII letters, digits, `-`,
/// `_` and `.`.
fn check_component(name: &str) -> Result<(), &'static str> {
    if name.starts_with('.') {
        return Err("it starts with a dot");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("it has a character other than ASCII letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

/// The directory name of a caller-chosen lock name (`--lock DIR/NAME`,
/// [`crate::Locks::named_lock`]): the name itself when it ends in `.lock`, else the name with
/// `.lock` added (so `deploy` and `deploy.lock` are one lock). Every lock's name ends in
/// `.lock`, which is what tells a lock from the candidates, tombstones and guards beside it.
pub(crate) fn named_lock_name(name: &str) -> Result<String, &'static str> {
    if name.is_empty() || name == ".lock" {
        return Err("it is empty");
    }
    let on_disk = if name.ends_with(".lock") {
        name.to_owned()
    } else {
        format!("{name}.lock")
    };
    check_lock_name(&on_disk)?;
    Ok(on_disk)
}

/// Checks a lock's directory name: safe characters, ending in `.lock`.
pub(crate) fn check_lock_name(name: &str) -> Result<(), &'static str> {
    if !name.ends_with(".lock") || name.len() <= ".lock".len() {
        return Err("it must end in \".lock\" after at least one other character");
    }
    if name.len() > 160 {
        return Err(
            "it is longer than 160 bytes with .lock (the names dirlock makes beside it must fit in the filesystem's 255)",
        );
    }
    check_component(name)?;
    if name.contains(CANDIDATE) || name.contains(TOMBSTONE) || name.contains(RECLAIM) {
        return Err("it contains \".candidate.\", \".tombstone.\" or \".reclaim\" (with .lock added), which dirlock uses for the names it makes beside a lock");
    }
    Ok(())
}

/// `NAME.candidate.<token>`.
pub(crate) fn candidate_name(lock: &str, token: &str) -> String {
    format!("{lock}{CANDIDATE}{token}")
}

/// `NAME.tombstone.<id>`.
pub(crate) fn tombstone_name(lock: &str, id: &str) -> String {
    format!("{lock}{TOMBSTONE}{id}")
}

/// Whether a token read from disk may become part of a name: 1 to 36 ASCII letters, digits,
/// `-` or `_` (a UUID is 36). Anything else (a `/`, `..`, a NUL, 300 characters) never
/// reaches a path.
pub(crate) fn safe_token(token: &str) -> bool {
    (1..=36).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The tombstone to retire lock (or candidate) `lock` to, named by `token` when that is a safe
/// name (unique: a token is published once), else by `fresh` (a new random token).
pub(crate) fn tombstone_for(lock: &str, token: &str, fresh: impl FnOnce() -> String) -> String {
    if safe_token(token) {
        tombstone_name(lock, token)
    } else {
        tombstone_name(lock, &fresh())
    }
}

/// Inside a shared lock, a reader's entry: `reader.<token>`, a directory holding the reader's
/// own record, on which the reader holds an exclusive `flock` while it reads.
pub(crate) const READER: &str = "reader.";
/// Inside a shared lock, a writer's entry while it waits for the readers: `writer.<token>`,
/// made like a reader's (its record, for people).
pub(crate) const WRITER: &str = "writer.";

/// What an entry inside a shared lock is, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inside {
    /// The record, `owner.json`.
    Record,
    /// A reader's entry, with its token.
    Reader(String),
    /// A waiting writer's entry, with its token.
    Writer(String),
    /// Anything else: a record being rewritten (`owner.json.<token>`), or not ours.
    Other,
}

/// Classifies an entry inside a shared lock by its name.
pub(crate) fn classify_inside(entry: &str) -> Inside {
    if entry == OWNER_FILE {
        Inside::Record
    } else if let Some(t) = entry.strip_prefix(READER).filter(|t| safe_token(t)) {
        Inside::Reader(t.to_owned())
    } else if let Some(t) = entry.strip_prefix(WRITER).filter(|t| safe_token(t)) {
        Inside::Writer(t.to_owned())
    } else {
        Inside::Other
    }
}

/// A token as this crate makes them for names: a UUID, `8-4-4-4-12` lowercase hex digits.
fn uuid_shaped(t: &str) -> bool {
    t.len() == 36
        && t.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// Whether `entry` is named as this crate names a lock's record, or a record being written
/// (`owner.json.<token>`): inside a lock, or inside a reader's or writer's entry.
pub(crate) fn record_named(entry: &str) -> bool {
    entry == OWNER_FILE
        || entry
            .strip_prefix(OWNER_FILE)
            .and_then(|t| t.strip_prefix('.'))
            .is_some_and(uuid_shaped)
}

/// Whether `entry` is named as this crate names a shared lock's reader's or writer's entry.
pub(crate) fn party_named(entry: &str) -> bool {
    [READER, WRITER]
        .iter()
        .any(|p| entry.strip_prefix(p).is_some_and(uuid_shaped))
}

/// `owner.json.<token>`: a shared lock's record being rewritten, then renamed over the old.
pub(crate) fn record_draft(token: &str) -> String {
    format!("{OWNER_FILE}.{token}")
}

/// `NAME.writers`: see [`Entry::Writers`].
pub(crate) fn writers_name(lock: &str) -> String {
    format!("{lock}{WRITERS_SUFFIX}")
}

/// `NAME.queue`: see [`Entry::Queue`].
pub(crate) fn queue_name(lock: &str) -> String {
    format!("{lock}{QUEUE_SUFFIX}")
}

/// What a waiter in a lock's queue waits as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A thread that takes the lock exclusively (`w`): a release may hand it the lock.
    Writer,
    /// A reader (`r`).
    Reader,
    /// A task that takes the lock exclusively (`t`): it runs only while its runtime polls it,
    /// so it publishes the lock itself.
    Task,
}

/// A waiter's entry in a lock's queue, by its name `<number>.<w|r|t>.<token>`: its number (the
/// order it came in), what it waits as, and its token (that of its candidate,
/// `NAME.candidate.<token>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Queued {
    pub number: u64,
    pub kind: Waiter,
    pub token: String,
}

impl Queued {
    /// The highest number an entry can have (twenty digits, below 10^19): a waiter that finds
    /// it taken (planted) takes it too, and goes by its token.
    pub(crate) const TOP: u64 = 9_999_999_999_999_999_999;

    /// The entry's name.
    pub(crate) fn name(&self) -> String {
        let kind = match self.kind {
            Waiter::Writer => 'w',
            Waiter::Reader => 'r',
            Waiter::Task => 't',
        };
        format!("{:020}.{kind}.{}", self.number, self.token)
    }

    /// Its place in the queue: by number, and among waiters that took the same number (at
    /// the same moment: see `protocol::queue::join`), by token.
    pub(crate) fn place(&self) -> (u64, &str) {
        (self.number, &self.token)
    }

    /// The waiter's entry named `entry`, if it is one (its token a safe name).
    pub(crate) fn parse(entry: &str) -> Option<Queued> {
        let (number, rest) = entry.split_once('.')?;
        let (kind, token) = rest.split_once('.')?;
        let kind = match kind {
            "w" => Waiter::Writer,
            "r" => Waiter::Reader,
            "t" => Waiter::Task,
            _ => return None,
        };
        // Twenty digits, below 10^19 (see `Queued::TOP`).
        let ok = number.len() == 20
            && number.starts_with('0')
            && number.bytes().all(|b| b.is_ascii_digit());
        if !ok || !safe_token(token) {
            return None;
        }
        Some(Queued {
            number: number.parse().ok()?,
            kind,
            token: token.to_owned(),
        })
    }
}

/// `NAME.reclaim`.
pub(crate) fn guard_name(lock: &str) -> String {
    format!("{lock}{RECLAIM}")
}

/// What an entry of a lock directory is, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entry {
    /// A lock (`NAME`).
    Lock(String),
    /// A candidate of lock `lock` staged by the process whose token is `token`.
    Candidate {
        /// The lock it was staged for.
        lock: String,
        /// Its creator's token.
        token: String,
    },
    /// A tombstone of lock `lock`.
    Tombstone {
        /// The lock it retired.
        lock: String,
    },
    /// The reclaim guard of lock `lock`.
    Guard {
        /// The lock it guards.
        lock: String,
    },
    /// The directory on which the writers waiting for shared lock `lock`'s readers hold a
    /// shared `flock` (new readers stay out while any does).
    Writers {
        /// The lock they wait for.
        lock: String,
    },
    /// The queue of lock `lock`'s waiters, first come, first served: an entry per waiter,
    /// exclusively `flock`ed by it while it waits.
    Queue {
        /// The lock they wait for.
        lock: String,
    },
    /// Anything else (not ours: left alone).
    Other,
}

#[cfg(test)]
thread_local! {
    /// How many entries this thread classified (a test of `status --all`'s linearity).
    #[allow(
        clippy::missing_const_for_thread_local,
        reason = "it is `const`: clippy on illumos says otherwise (thread_local! expands differently there)"
    )]
    pub(crate) static CLASSIFIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Classifies a lock-directory entry by its name.
pub fn classify(entry: &str) -> Entry {
    #[cfg(test)]
    CLASSIFIED.with(|c| c.set(c.get() + 1));
    if let Some(i) = entry.find(TOMBSTONE) {
        return Entry::Tombstone {
            lock: entry[..i].to_owned(),
        };
    }
    if let Some(i) = entry.find(CANDIDATE) {
        return Entry::Candidate {
            lock: entry[..i].to_owned(),
            token: entry[i + CANDIDATE.len()..].to_owned(),
        };
    }
    if let Some(lock) = entry.strip_suffix(RECLAIM) {
        return Entry::Guard {
            lock: lock.to_owned(),
        };
    }
    if let Some(lock) = entry
        .strip_suffix(WRITERS_SUFFIX)
        .filter(|l| l.ends_with(".lock"))
    {
        return Entry::Writers {
            lock: lock.to_owned(),
        };
    }
    if let Some(lock) = entry
        .strip_suffix(QUEUE_SUFFIX)
        .filter(|l| l.ends_with(".lock"))
    {
        return Entry::Queue {
            lock: lock.to_owned(),
        };
    }
    if entry.ends_with(".lock") && !entry.starts_with('.') {
        return Entry::Lock(entry.to_owned());
    }
    Entry::Other
}

/// Checks a caller-chosen lock name the way the fuzzer wants: when [`check_lock_name`] accepts
/// it, it classifies as a lock, and its candidate, tombstone and guard names classify back to
/// it.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub fn check_names(name: &str) {
    // Inside a shared lock: a token read from an entry's name is a safe name, and the name is
    // exactly what that token makes.
    match classify_inside(name) {
        Inside::Reader(t) => assert!(safe_token(&t) && name == format!("{READER}{t}")),
        Inside::Writer(t) => assert!(safe_token(&t) && name == format!("{WRITER}{t}")),
        Inside::Record => assert_eq!(name, OWNER_FILE),
        Inside::Other => {
            for prefix in [READER, WRITER] {
                assert!(
                    !name.strip_prefix(prefix).is_some_and(safe_token),
                    "{name:?}"
                );
            }
        }
    }
    if check_lock_name(name).is_err() {
        return;
    }
    assert_eq!(classify(name), Entry::Lock(name.to_owned()), "{name:?}");
    assert_eq!(
        classify(&candidate_name(name, "t")),
        Entry::Candidate {
            lock: name.to_owned(),
            token: "t".into()
        }
    );
    assert_eq!(
        classify(&tombstone_name(name, "u")),
        Entry::Tombstone {
            lock: name.to_owned()
        }
    );
    assert_eq!(
        classify(&guard_name(name)),
        Entry::Guard {
            lock: name.to_owned()
        }
    );
    assert_eq!(
        classify(&writers_name(name)),
        Entry::Writers {
            lock: name.to_owned()
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_classify_back() {
        let lock = "repository-ab.lock";
        assert!(check_lock_name(lock).is_ok());
        check_names(lock);
        assert_eq!(classify("notes.txt"), Entry::Other);
    }

    #[test]
    fn lock_names_are_checked() {
        assert!(check_lock_name("deploy.lock").is_ok());
        for bad in [
            "",
            ".lock",
            "deploy",
            "../x.lock",
            "a/b.lock",
            ".hidden.lock",
            "x.candidate.y.lock",
            "x.tombstone.y.lock",
            "x.reclaim.lock",
            "sp ace.lock",
        ] {
            assert!(check_lock_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(check_lock_name(&format!("{}.lock", "a".repeat(156))).is_err());
        // A name of the caller's gets `.lock` where it has none, and is then held to the same
        // rule.
        assert_eq!(named_lock_name("deploy").as_deref(), Ok("deploy.lock"));
        assert_eq!(named_lock_name("deploy.lock").as_deref(), Ok("deploy.lock"));
        assert_eq!(named_lock_name("a.b").as_deref(), Ok("a.b.lock"));
        for bad in [
            "",
            ".lock",
            "a/b",
            "..",
            "x.candidate.y",
            "x.reclaim",
            "sp ace",
        ] {
            assert!(named_lock_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(named_lock_name(&"a".repeat(156)).is_err());
    }

    #[test]
    fn only_safe_tokens_become_names() {
        assert!(safe_token("8a1c0f2e-1b7e-4a57-9a43-2b6d7c2b9f10"));
        assert!(safe_token("tok-1-2"));
        for bad in ["", "a/b", "..", ".", "a\0b", "x.y", &"x".repeat(37)] {
            assert!(!safe_token(bad), "{bad:?} was accepted");
            let tomb = tombstone_for("x.lock", bad, || "fresh".into());
            assert_eq!(tomb, "x.lock.tombstone.fresh");
        }
    }

    #[test]
    fn app_names_are_checked() {
        assert!(check_app("apnea").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", ".x"] {
            assert!(check_app(bad).is_err(), "{bad:?} was accepted");
        }
    }

    proptest::proptest! {
        /// The stable mirror of the `lock_names` fuzz target.
        #[test]
        fn derived_names_have_the_reference_shape(path in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let p = &crate::sys::path_from_bytes(&path);
            for (name, prefix) in [(repository_lock_name(p), "repository-"), (global_setup_lock_name(p), "global-setup-")] {
                let hex = name.strip_prefix(prefix).and_then(|n| n.strip_suffix(".lock")).unwrap();
                proptest::prop_assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
                proptest::prop_assert_eq!(classify(&name), Entry::Lock(name.clone()));
            }
        }

        /// Accepted lock names, and the names derived from them, classify back.
        #[test]
        fn accepted_names_classify_back(name in "[A-Za-z0-9._-]{0,40}(\\.lock)?") {
            let _ = classify(&name);
            check_names(&name);
        }

        /// Entries inside a shared lock, hostile ones among them, classify to safe tokens.
        #[test]
        fn entries_inside_a_shared_lock_classify_to_safe_tokens(name in "(reader\\.|writer\\.|owner\\.json)?[A-Za-z0-9._/\\x00-]{0,40}") {
            check_names(&name);
        }
    }
}
