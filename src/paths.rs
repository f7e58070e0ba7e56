//! The on-disk names: the lock directory, lock names, and the names derived from a lock name
//! (candidate, tombstone, reclaim guard).

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The owner record inside every lock and candidate directory.
pub(crate) const OWNER_FILE: &str = "owner.json";
/// The largest owner record we read or write.
pub(crate) const OWNER_LIMIT: usize = 4 * 1024;
/// The file that marks a reclaim guard as this crate's (always made under a held `flock`).
pub(crate) const GUARD_MARKER: &str = "dirlock.guard";
/// The name of the lock directory inside the per-user base directory.
pub(crate) const LOCK_DIR: &str = "operation-locks";

const CANDIDATE: &str = ".candidate.";
const TOMBSTONE: &str = ".tombstone.";
const RECLAIM: &str = ".reclaim";

fn hashed(prefix: &str, path: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prefix.as_bytes());
    hasher.update([0u8]);
    hasher.update(&*path_bytes(path));
    let digest = hasher.finalize();
    let mut name = String::with_capacity(prefix.len() + 1 + 64 + 5);
    name.push_str(prefix);
    name.push('-');
    for byte in digest.iter() {
        name.push_str(&format!("{byte:02x}"));
    }
    name.push_str(".lock");
    name
}

/// The bytes a path is hashed as: its own bytes on Unix; on Windows its UTF-8 (what Node.js
/// hashes for the reference: a lone surrogate becomes U+FFFD there too).
#[cfg(unix)]
fn path_bytes(path: &Path) -> std::borrow::Cow<'_, [u8]> {
    use std::os::unix::ffi::OsStrExt;
    std::borrow::Cow::Borrowed(path.as_os_str().as_bytes())
}

#[cfg(windows)]
fn path_bytes(path: &Path) -> std::borrow::Cow<'_, [u8]> {
    match path.to_string_lossy() {
        std::borrow::Cow::Borrowed(s) => std::borrow::Cow::Borrowed(s.as_bytes()),
        std::borrow::Cow::Owned(s) => std::borrow::Cow::Owned(s.into_bytes()),
    }
}

/// The real path of `path`, as the reference's `fs.realpathSync` gives it: on Windows without
/// the `\\?\` prefix that `std::fs::canonicalize` adds (`\\?\UNC\server\share` becomes
/// `\\server\share`), since the lock name hashes the path's text.
pub(crate) fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    let real = std::fs::canonicalize(path)?;
    #[cfg(windows)]
    {
        // A path that is not Unicode keeps its prefix (and so names no reference lock).
        if let Some(text) = real.to_str() {
            if let Some(unc) = text.strip_prefix(r"\\?\UNC\") {
                return Ok(PathBuf::from(format!(r"\\{unc}")));
            }
            if let Some(local) = text.strip_prefix(r"\\?\") {
                return Ok(PathBuf::from(local));
            }
        }
    }
    Ok(real)
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

/// The temporary directory as the reference implementation (Node.js `os.tmpdir()`) finds it:
/// on Unix `TMPDIR`, else `TMP`, else `TEMP`, else `/tmp`; on Windows `TEMP`, else `TMP`, else
/// `%SystemRoot%\temp`; without a trailing separator. Matching it exactly is what makes our
/// lock paths the reference's.
pub fn temp_dir() -> PathBuf {
    temp_source().1
}

/// [`temp_dir`] and the variable it came from (the fallback's name when none is set).
#[cfg(unix)]
pub(crate) fn temp_source() -> (&'static str, PathBuf) {
    use std::os::unix::ffi::OsStrExt;
    let (name, var) = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .filter_map(|n| std::env::var_os(n).map(|v| (n, v)))
        .find(|(_, v)| !v.is_empty())
        .unwrap_or(("/tmp", OsString::from("/tmp")));
    let mut bytes = var.as_bytes();
    while bytes.len() > 1 && bytes.ends_with(b"/") {
        bytes = &bytes[..bytes.len() - 1];
    }
    (name, PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// [`temp_dir`] and the variable it came from (the fallback's name when none is set).
#[cfg(windows)]
pub(crate) fn temp_source() -> (&'static str, PathBuf) {
    let (name, var) = ["TEMP", "TMP"]
        .into_iter()
        .filter_map(|n| std::env::var_os(n).map(|v| (n, v)))
        .find(|(_, v)| !v.is_empty())
        .unwrap_or_else(|| {
            let root = std::env::var_os("SystemRoot")
                .or_else(|| std::env::var_os("windir"))
                .unwrap_or_else(|| OsString::from("C:\\Windows"));
            let mut temp = root;
            temp.push("\\temp");
            ("%SystemRoot%\\temp", temp)
        });
    // Node.js strips one trailing backslash, unless the path is a drive's root (`C:\`).
    use std::os::windows::ffi::{OsStrExt, OsStringExt};
    let mut wide: Vec<u16> = var.encode_wide().collect();
    let backslash = u16::from(b'\\');
    let colon = u16::from(b':');
    if wide.len() > 1 && wide.last() == Some(&backslash) && wide[wide.len() - 2] != colon {
        wide.pop();
    }
    (name, PathBuf::from(OsString::from_wide(&wide)))
}

/// The per-user base directory name for application `app`: `<app>-<uid>` on Unix; on Windows,
/// where there is no uid, `<app>-user`, as the reference names it (the temporary directory is
/// the user's own there).
pub(crate) fn base_name(app: &str, uid: u32) -> String {
    if cfg!(windows) {
        format!("{app}-user")
    } else {
        format!("{app}-{uid}")
    }
}

/// Checks an application name: it becomes a path component.
pub(crate) fn check_app(app: &str) -> Result<(), &'static str> {
    if app.is_empty() {
        return Err("it is empty");
    }
    if app.len() > 100 {
        return Err("it is longer than 100 bytes");
    }
    if app.starts_with('.') {
        return Err("it starts with a dot");
    }
    if !app
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("it has a character other than ASCII letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

/// Checks a caller-chosen lock name (`--lock DIR/NAME`, [`crate::Locks::named_lock`]).
pub(crate) fn check_lock_name(name: &str) -> Result<(), &'static str> {
    if !name.ends_with(".lock") || name.len() <= ".lock".len() {
        return Err("it must end in \".lock\" after at least one other character");
    }
    if name.len() > 160 {
        return Err(
            "it is longer than 160 bytes (the derived candidate and tombstone names must fit in 255)",
        );
    }
    if name.starts_with('.') {
        return Err("it starts with a dot");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("it has a character other than ASCII letters, digits, '-', '_' and '.'");
    }
    if name.contains(CANDIDATE) || name.contains(TOMBSTONE) || name.contains(RECLAIM) {
        return Err("it contains \".candidate.\", \".tombstone.\" or \".reclaim\", which the protocol reserves");
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

/// `NAME.reclaim`.
pub(crate) fn guard_name(lock: &str) -> String {
    format!("{lock}{RECLAIM}")
}

/// What an entry of a lock directory is, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Anything else (not ours: left alone).
    Other,
}

#[cfg(test)]
thread_local! {
    /// How many entries this thread classified (a test of `status --all`'s linearity).
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
    if entry.ends_with(".lock") && !entry.starts_with('.') {
        return Entry::Lock(entry.to_owned());
    }
    Entry::Other
}

/// Checks a caller-chosen lock name the way the fuzzer wants: when [`check_lock_name`] accepts
/// it, it classifies as a lock, and its candidate, tombstone and guard names classify back to
/// it.
#[cfg(any(test, feature = "sim"))]
#[doc(hidden)]
pub fn check_names(name: &str) {
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

    /// A path made of arbitrary bytes (on Windows, of the code units they pair into).
    fn path_from_bytes(bytes: &[u8]) -> PathBuf {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
        }
        #[cfg(windows)]
        {
            use std::os::windows::ffi::OsStringExt;
            let units: Vec<u16> = bytes
                .chunks(2)
                .map(|c| u16::from(c[0]) | (u16::from(*c.get(1).unwrap_or(&0)) << 8))
                .collect();
            PathBuf::from(std::ffi::OsString::from_wide(&units))
        }
    }

    proptest::proptest! {
        /// The stable mirror of the `lock_names` fuzz target.
        #[test]
        fn derived_names_have_the_reference_shape(path in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let p = &path_from_bytes(&path);
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
    }
}
