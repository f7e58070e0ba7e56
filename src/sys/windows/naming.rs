//! How Windows names what dirlock names: the bytes a path is hashed as, the names as the disk
//! spells them, the temporary directory, the per-user base directory.

use super::handles::{until_nul, verbatim, wide};
use std::borrow::Cow;
use std::ffi::OsString;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
use windows_sys::Win32::Storage::FileSystem::{FindClose, FindFirstFileW, WIN32_FIND_DATAW};

/// The bytes a path is hashed as: its UTF-8 (what Node.js hashes for the reference: a lone
/// surrogate becomes U+FFFD there too).
pub(crate) fn path_bytes(path: &Path) -> Cow<'_, [u8]> {
    match path.to_string_lossy() {
        Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
        Cow::Owned(s) => Cow::Owned(s.into_bytes()),
    }
}

/// How the disk spells a name, where it differs from what it is given: see [`name_on_disk`].
pub(crate) const DISK_SPELLING: Option<fn(&Path) -> Option<OsString>> = Some(name_on_disk);

/// The variable to point at another temporary directory.
pub(crate) const TEMP_VAR: &str = "TEMP";

/// The name of the existing file or directory `path` as its directory spells it: the case it
/// was created with, and the long form of an 8.3 short name. `None` when it cannot be read.
fn name_on_disk(path: &Path) -> Option<OsString> {
    let name = path.file_name()?;
    // A pattern would match something else: such names cannot exist on Windows anyway.
    if name
        .encode_wide()
        .any(|c| c == u16::from(b'*') || c == u16::from(b'?'))
    {
        return None;
    }
    // Asked in the `\\?\` form, so that a path longer than MAX_PATH is found too.
    let w = wide(&verbatim(path));
    // SAFETY: `w` is NUL-terminated; `data` is a valid WIN32_FIND_DATAW to fill.
    let mut data: WIN32_FIND_DATAW = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let h = unsafe { FindFirstFileW(w.as_ptr(), &mut data) };
    if h == INVALID_HANDLE_VALUE {
        return None;
    }
    // SAFETY: `h` is the search handle just opened, closed once.
    unsafe { FindClose(h) };
    let found = OsString::from_wide(until_nul(&data.cFileName));
    (!found.is_empty()).then_some(found)
}

/// [`crate::paths::temp_dir`] and the variable it came from (the fallback's name when none is set).
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
    let mut wide: Vec<u16> = var.encode_wide().collect();
    let backslash = u16::from(b'\\');
    let colon = u16::from(b':');
    if wide.len() > 1 && wide.last() == Some(&backslash) && wide[wide.len() - 2] != colon {
        wide.pop();
    }
    (name, PathBuf::from(OsString::from_wide(&wide)))
}

/// The per-user base directory name for application `app`: `<app>-user`, where there is no
/// uid, as the reference names it (the temporary directory is the user's own here).
pub(crate) fn base_name(app: &str, _uid: u32) -> String {
    format!("{app}-user")
}

/// A path made of arbitrary bytes, of the code units they pair into (for tests of what any
/// path is named).
#[cfg(test)]
pub(crate) fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    let units: Vec<u16> = bytes
        .chunks(2)
        .map(|c| u16::from(c[0]) | (u16::from(*c.get(1).unwrap_or(&0)) << 8))
        .collect();
    PathBuf::from(OsString::from_wide(&units))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The real path on Windows: what Node's `fs.realpathSync` gives for a path spelled as
    /// the disk spells it (the reference's lock name), the disk's spelling for any other, and
    /// links followed.
    #[test]
    fn windows_real_paths_are_the_references_for_the_disks_spelling() {
        let tmp = tempfile::tempdir().unwrap();
        let base = crate::paths::real_path(tmp.path()).unwrap();
        let text = base.to_str().unwrap();
        assert!(!text.starts_with(r"\\?\"), "{text}");
        assert!(
            text.as_bytes()[0].is_ascii_uppercase() && &text[1..3] == r":\",
            "{text}"
        );
        let repo = base.join("Repo");
        std::fs::create_dir_all(repo.join("Sub")).unwrap();
        // As given, when given as the disk spells it: what Node's realpathSync keeps.
        assert_eq!(crate::paths::real_path(&repo).unwrap(), repo);
        assert_eq!(
            crate::paths::real_path(&repo).unwrap(),
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
            assert_eq!(
                crate::paths::real_path(Path::new(&spelled)).unwrap(),
                repo,
                "{spelled}"
            );
        }
        assert_eq!(
            crate::paths::real_path(&repo.join("sub")).unwrap(),
            repo.join("Sub")
        );
        assert!(crate::paths::real_path(&repo.join("missing")).is_err());
        // A symbolic link to a directory is followed (where links can be made: Windows asks
        // for developer mode or a privilege).
        let link = base.join("link");
        // (Wine 8 reports success and makes nothing.)
        match std::os::windows::fs::symlink_dir(&repo, &link).and_then(|()| link.metadata()) {
            Ok(_) => {
                assert_eq!(
                    crate::paths::real_path(&link.join("sub")).unwrap(),
                    repo.join("Sub")
                );
                let relative = base.join("relative");
                std::os::windows::fs::symlink_dir(r"Repo\Sub", &relative).unwrap();
                assert_eq!(
                    crate::paths::real_path(&relative).unwrap(),
                    repo.join("Sub")
                );
            }
            Err(e) => eprintln!("skipped the link cases: cannot make a symbolic link: {e}"),
        }
    }
}
