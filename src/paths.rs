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

/// The real path of `path`, as the reference's `fs.realpathSync` makes it, since the lock
/// name hashes the path's text: on Unix `realpath(3)`; on Windows, see [`follow_links`].
pub(crate) fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    #[cfg(unix)]
    return std::fs::canonicalize(path);
    #[cfg(windows)]
    return follow_links(path, &crate::sys::name_on_disk);
}

/// The letter of a drive named `X:`.
#[cfg(any(windows, test))]
fn drive_letter(name: &std::ffi::OsStr) -> Option<u8> {
    match name.as_encoded_bytes() {
        [d, b':'] if d.is_ascii_alphabetic() => Some(*d),
        _ => None,
    }
}

/// Symbolic links and junctions followed in one path before it is refused (as `ELOOP`).
#[cfg(any(windows, test))]
const MAX_LINKS: usize = 40;

/// The real path on Windows, where `spell` is [`crate::sys::name_on_disk`] (tested on Unix
/// too, where links are easier to make). `path` is made absolute as Node's `path.resolve`
/// makes it (`GetFullPathNameW`: `/` becomes `\`, `.` and `..` are resolved by their text, a
/// trailing separator goes), then each component is looked at in turn: a symbolic link or
/// junction is replaced by its target, as `fs.realpathSync` does, and any other name is
/// spelled as `spell` says its directory spells it (the case it was made with, the long form of
/// an 8.3 name), where Node keeps the spelling it was given. The drive letter is upper case
/// (also of a `\\.\X:` spelling), and no `\\?\` prefix is kept (but for a volume GUID path,
/// which has no other spelling). Nothing else is resolved: a `subst` drive or a mapped network
/// drive stays as given, as in Node (`std::fs::canonicalize` would name the volume underneath).
/// So the reference names the same lock whenever it is given the path as the disk spells it
/// (as `git rev-parse --show-toplevel` gives it), and for `dirlock` spellings that differ only
/// in case name one lock.
#[cfg(any(windows, test))]
fn follow_links(
    path: &Path,
    spell: &dyn Fn(&Path) -> Option<std::ffi::OsString>,
) -> std::io::Result<PathBuf> {
    use std::path::{Component, Prefix};
    let mut todo = std::path::absolute(path)?;
    let mut links = 0;
    'resolve: loop {
        // `..` by its text, before any link is followed (`std::path::absolute` leaves it on
        // Unix); `out` holds only what is resolved, so popping it is Node's reading too.
        let mut out = PathBuf::new();
        let mut lexical = PathBuf::new();
        for component in todo.components() {
            match component {
                Component::ParentDir => {
                    lexical.pop();
                }
                Component::CurDir => {}
                c => lexical.push(c),
            }
        }
        let mut components = lexical.components();
        while let Some(component) = components.next() {
            match component {
                Component::Prefix(p) => match p.kind() {
                    Prefix::Disk(d) | Prefix::VerbatimDisk(d) => {
                        out.push(format!("{}:", char::from(d.to_ascii_uppercase())));
                    }
                    Prefix::UNC(server, share) | Prefix::VerbatimUNC(server, share) => {
                        let mut unc = std::ffi::OsString::from(r"\\");
                        unc.push(server);
                        unc.push(r"\");
                        unc.push(share);
                        out.push(unc);
                    }
                    // `\\.\Z:` is the drive `Z:` by another name; another device, or a
                    // volume GUID path (`\\?\Volume{...}`), has no other spelling.
                    Prefix::DeviceNS(d) => match drive_letter(d) {
                        Some(d) => out.push(format!("{}:", char::from(d.to_ascii_uppercase()))),
                        None => out.push(p.as_os_str()),
                    },
                    Prefix::Verbatim(_) => out.push(p.as_os_str()),
                },
                Component::RootDir => out.push(std::path::MAIN_SEPARATOR_STR),
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => {
                    let here = out.join(name);
                    if std::fs::symlink_metadata(&here)?.file_type().is_symlink() {
                        links += 1;
                        if links > MAX_LINKS {
                            return Err(std::io::Error::other(format!(
                                "more than {MAX_LINKS} symbolic links or junctions"
                            )));
                        }
                        // A relative target is relative to the link's directory, `out`.
                        let target = std::fs::read_link(&here)?;
                        let rest: PathBuf = components.collect();
                        todo = std::path::absolute(out.join(target))?.join(rest);
                        continue 'resolve;
                    }
                    match spell(&here) {
                        Some(spelled) => out.push(spelled),
                        None => out.push(name),
                    }
                }
            }
        }
        // The root too must exist (Node checks it); the names after it were looked at.
        if !out.components().any(|c| matches!(c, Component::Normal(_))) {
            std::fs::symlink_metadata(&out)?;
        }
        return Ok(out);
    }
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

/// The real path of `path`, which may not exist yet (a settings file about to be written): its
/// own real path if it exists; else, where it is a symbolic link to what does not exist yet,
/// its target's (followed link by link); else its parent's real path joined with its name.
/// So a symlink to it, a `..` and a relative spelling name one lock, before the file is made
/// and after.
pub(crate) fn file_identity(path: &Path) -> std::io::Result<PathBuf> {
    let mut path = std::path::absolute(path)?;
    for _ in 0..40 {
        match real_path(&path) {
            Ok(real) => return Ok(real),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            let target = std::fs::read_link(&path)?;
            let parent = path.parent().unwrap_or(Path::new("/")).to_owned();
            path = std::path::absolute(parent.join(target))?;
            continue;
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::ErrorKind::NotFound.into());
        };
        return Ok(real_path(parent)?.join(name));
    }
    Err(std::io::Error::other(
        "too many levels of symbolic links (more than 40)",
    ))
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
#[cfg(any(test, fuzzing))]
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

    /// The real path on Windows: what Node's `fs.realpathSync` gives for a path spelled as
    /// the disk spells it (the reference's lock name), the disk's spelling for any other, and
    /// links followed.
    #[cfg(windows)]
    #[test]
    fn windows_real_paths_are_the_references_for_the_disks_spelling() {
        let tmp = tempfile::tempdir().unwrap();
        let base = real_path(tmp.path()).unwrap();
        let text = base.to_str().unwrap();
        assert!(!text.starts_with(r"\\?\"), "{text}");
        assert!(
            text.as_bytes()[0].is_ascii_uppercase() && &text[1..3] == r":\",
            "{text}"
        );
        let repo = base.join("Repo");
        std::fs::create_dir_all(repo.join("Sub")).unwrap();
        // As given, when given as the disk spells it: what Node's realpathSync keeps.
        assert_eq!(real_path(&repo).unwrap(), repo);
        assert_eq!(
            real_path(&repo).unwrap(),
            std::path::absolute(&repo).unwrap()
        );
        // Another case, `/`, `.`, `..`, a trailing separator and a lower-case drive letter are
        // one lock.
        let lower = text.to_lowercase();
        for spelled in [
            format!(r"{lower}\rEPO"),
            format!(r"{text}/Repo/./Sub/../"),
            format!(r"{text}\REPO\sub\.."),
            format!(r"\\.\{text}\Repo"),
            format!(r"\\?\{text}\Repo"),
        ] {
            assert_eq!(real_path(Path::new(&spelled)).unwrap(), repo, "{spelled}");
        }
        assert_eq!(real_path(&repo.join("sub")).unwrap(), repo.join("Sub"));
        assert!(real_path(&repo.join("missing")).is_err());
        // A symbolic link to a directory is followed (where links can be made: Windows asks
        // for developer mode or a privilege).
        let link = base.join("link");
        // (Wine 8 reports success and makes nothing.)
        match std::os::windows::fs::symlink_dir(&repo, &link).and_then(|()| link.metadata()) {
            Ok(_) => {
                assert_eq!(real_path(&link.join("sub")).unwrap(), repo.join("Sub"));
                let relative = base.join("relative");
                std::os::windows::fs::symlink_dir(r"Repo\Sub", &relative).unwrap();
                assert_eq!(real_path(&relative).unwrap(), repo.join("Sub"));
            }
            Err(e) => eprintln!("skipped the link cases: cannot make a symbolic link: {e}"),
        }
    }

    /// The link-following walk that makes Windows' real paths, over real symbolic links here:
    /// absolute and relative targets, chains, links inside targets, `..` by its text (as
    /// Node's `path.resolve` reads it), a loop refused, and each kept name spelled as `spell`
    /// says.
    #[cfg(unix)]
    #[test]
    fn links_are_followed_and_kept_names_spelled_as_the_disk_spells_them() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let same = |p: &Path| follow_links(p, &|_| None).unwrap();
        std::fs::create_dir_all(base.join("repo/sub/deep")).unwrap();
        symlink(base.join("repo"), base.join("abs")).unwrap();
        symlink("repo/sub", base.join("rel")).unwrap();
        symlink("../rel", base.join("repo/up")).unwrap();
        symlink("abs", base.join("chain")).unwrap();
        for (given, real) in [
            ("repo", "repo"),
            ("abs", "repo"),
            ("abs/sub/deep", "repo/sub/deep"),
            ("rel/deep", "repo/sub/deep"),
            ("repo/up/deep", "repo/sub/deep"),
            ("chain/up", "repo/sub"),
            ("repo/./sub/../sub", "repo/sub"),
        ] {
            let got = same(&base.join(given));
            assert_eq!(got, base.join(real), "{given}");
            // Where no `..` follows a link, this is realpath(3).
            assert_eq!(
                got,
                std::fs::canonicalize(base.join(given)).unwrap(),
                "{given}"
            );
        }
        // `..` is read by its text, before any link (Node's `path.resolve`), not in the link's
        // target as realpath(3) reads it.
        assert_eq!(same(&base.join("rel/..")), base);
        assert!(follow_links(&base.join("missing"), &|_| None).is_err());
        symlink("loop-b", base.join("loop-a")).unwrap();
        symlink("loop-a", base.join("loop-b")).unwrap();
        let err = follow_links(&base.join("loop-a"), &|_| None).unwrap_err();
        assert!(err.to_string().contains("symbolic links"), "{err}");
        // Every kept name, and only those, is spelled as the disk spells it.
        let asked = std::cell::RefCell::new(Vec::new());
        let spell = |p: &Path| {
            asked.borrow_mut().push(p.to_owned());
            (p.file_name()? == "deep").then(|| "DEEP".into())
        };
        let got = follow_links(&base.join("rel/deep"), &spell).unwrap();
        assert_eq!(got, base.join("repo/sub/DEEP"));
        // (The walk starts again after each link: the paths before it are asked again.)
        let mut asked = asked.into_inner();
        let mut seen = std::collections::HashSet::new();
        asked.retain(|p| seen.insert(p.clone()));
        let mut kept: Vec<PathBuf> = base.ancestors().map(Path::to_owned).collect();
        kept.pop(); // the root is no name
        kept.reverse();
        kept.extend(["repo", "repo/sub", "repo/sub/deep"].map(|p| base.join(p)));
        assert_eq!(
            asked, kept,
            "asked to spell a link's name, or missed a kept one"
        );
    }
}
