//! Resolving a path to the real path its lock is named by, as the reference resolves it.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf, PrefixComponent};

/// The real path of `path`, as the reference's `fs.realpathSync` makes it, since the lock
/// name hashes the path's text: on Unix `realpath(3)`; where the platform spells names its own
/// way (Windows), see `follow_links`.
pub(crate) fn real_path(path: &Path) -> io::Result<PathBuf> {
    match crate::sys::DISK_SPELLING {
        None => std::fs::canonicalize(path),
        Some(spell) => follow_links(path, &spell),
    }
}

/// Symbolic links and junctions followed in one path before it is refused (as `ELOOP`).
const MAX_LINKS: usize = 40;

/// The real path where the platform spells names its own way (Windows), where `spell` is
/// [`crate::sys::DISK_SPELLING`]'s (tested on Unix too, where links are easier to make). `path` is made absolute as Node's `path.resolve`
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
pub(crate) fn follow_links(
    path: &Path,
    spell: &dyn Fn(&Path) -> Option<OsString>,
) -> io::Result<PathBuf> {
    let mut todo = std::path::absolute(path)?;
    let mut links = 0;
    'resolve: loop {
        // `out` holds only what is resolved, so a `..` read by its text is Node's reading too.
        let mut out = PathBuf::new();
        let lexical = lexical(&todo);
        let mut components = lexical.components();
        while let Some(component) = components.next() {
            match component {
                Component::Prefix(p) => out.push(prefix(p)),
                Component::RootDir => out.push(std::path::MAIN_SEPARATOR_STR),
                Component::CurDir | Component::ParentDir => {} // gone already
                Component::Normal(name) => {
                    let here = out.join(name);
                    if std::fs::symlink_metadata(&here)?.file_type().is_symlink() {
                        links += 1;
                        if links > MAX_LINKS {
                            return Err(io::Error::other(format!(
                                "more than {MAX_LINKS} symbolic links or junctions"
                            )));
                        }
                        // A relative target is relative to the link's directory, `out`.
                        let target = std::fs::read_link(&here)?;
                        let rest: PathBuf = components.collect();
                        todo = std::path::absolute(out.join(target))?.join(rest);
                        continue 'resolve;
                    }
                    out.push(spell(&here).unwrap_or_else(|| name.to_owned()));
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

/// `path` with `..` read by its text, before any link is followed (`std::path::absolute`
/// leaves it on Unix), as Node's `path.resolve` reads it.
fn lexical(path: &Path) -> PathBuf {
    let mut lexical = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            c => lexical.push(c),
        }
    }
    lexical
}

/// A path's prefix as the reference spells it: the drive letter upper case (also of a `\\.\X:`
/// spelling), no `\\?\`, but for a volume GUID path or another device, which have no other
/// spelling.
fn prefix(p: PrefixComponent<'_>) -> OsString {
    use std::path::Prefix;
    let drive = |d: u8| OsString::from(format!("{}:", char::from(d.to_ascii_uppercase())));
    match p.kind() {
        Prefix::Disk(d) | Prefix::VerbatimDisk(d) => drive(d),
        Prefix::UNC(server, share) | Prefix::VerbatimUNC(server, share) => {
            let mut unc = OsString::from(r"\\");
            unc.push(server);
            unc.push(r"\");
            unc.push(share);
            unc
        }
        // `\\.\Z:` is the drive `Z:` by another name.
        Prefix::DeviceNS(d) => match d.as_encoded_bytes() {
            [d, b':'] if d.is_ascii_alphabetic() => drive(*d),
            _ => p.as_os_str().to_owned(),
        },
        Prefix::Verbatim(_) => p.as_os_str().to_owned(),
    }
}

/// The real path of `path`, which may not exist yet (a settings file about to be written): its
/// own real path if it exists; else, where it is a symbolic link to what does not exist yet,
/// its target's (followed link by link); else its parent's real path joined with its name.
/// So a symlink to it, a `..` and a relative spelling name one lock, before the file is made
/// and after.
pub(crate) fn file_identity(path: &Path) -> io::Result<PathBuf> {
    let mut path = std::path::absolute(path)?;
    for _ in 0..40 {
        match real_path(&path) {
            Ok(real) => return Ok(real),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            let target = std::fs::read_link(&path)?;
            let parent = path.parent().unwrap_or(Path::new("/")).to_owned();
            path = std::path::absolute(parent.join(target))?;
            continue;
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::ErrorKind::NotFound.into());
        };
        return Ok(real_path(parent)?.join(name));
    }
    Err(io::Error::other(
        "too many levels of symbolic links (more than 40)",
    ))
}
