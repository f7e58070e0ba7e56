//! How Unix names what dirlock names: the bytes a path is hashed as, the temporary directory,
//! the per-user base directory.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The bytes a path is hashed as: its own bytes on Unix.
pub(crate) fn path_bytes(path: &Path) -> Cow<'_, [u8]> {
    Cow::Borrowed(path.as_os_str().as_bytes())
}

/// How the disk spells a name, where it differs from what it is given (`None`: it never does,
/// and `realpath(3)` makes real paths).
pub(crate) const DISK_SPELLING: Option<fn(&Path) -> Option<OsString>> = None;

/// The variable to point at another temporary directory.
pub(crate) const TEMP_VAR: &str = "TMPDIR";

/// [`crate::paths::temp_dir`] and the variable it came from (the fallback's name when none is set).
pub(crate) fn temp_source() -> (&'static str, PathBuf) {
    let (name, var) = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .filter_map(|n| std::env::var_os(n).map(|v| (n, v)))
        .find(|(_, v)| !v.is_empty())
        .unwrap_or(("/tmp", OsString::from("/tmp")));
    let mut bytes = var.as_bytes();
    while bytes.len() > 1 && bytes.ends_with(b"/") {
        bytes = &bytes[..bytes.len() - 1];
    }
    (name, PathBuf::from(OsStr::from_bytes(bytes)))
}

/// The per-user base directory name for application `app`: `<app>-<uid>`.
pub(crate) fn base_name(app: &str, uid: u32) -> String {
    format!("{app}-{uid}")
}

/// A path made of arbitrary bytes (for tests of what any path is named).
#[cfg(test)]
pub(crate) fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The link-following walk that makes Windows' real paths, over real symbolic links here:
    /// absolute and relative targets, chains, links inside targets, `..` by its text (as
    /// Node's `path.resolve` reads it), a loop refused, and each kept name spelled as `spell`
    /// says.
    #[test]
    fn links_are_followed_and_kept_names_spelled_as_the_disk_spells_them() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let same = |p: &Path| crate::paths::resolve::follow_links(p, &|_| None).unwrap();
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
        assert!(crate::paths::resolve::follow_links(&base.join("missing"), &|_| None).is_err());
        symlink("loop-b", base.join("loop-a")).unwrap();
        symlink("loop-a", base.join("loop-b")).unwrap();
        let err = crate::paths::resolve::follow_links(&base.join("loop-a"), &|_| None).unwrap_err();
        assert!(err.to_string().contains("symbolic links"), "{err}");
        // Every kept name, and only those, is spelled as the disk spells it.
        let asked = std::cell::RefCell::new(Vec::new());
        let spell = |p: &Path| {
            asked.borrow_mut().push(p.to_owned());
            (p.file_name()? == "deep").then(|| "DEEP".into())
        };
        let got = crate::paths::resolve::follow_links(&base.join("rel/deep"), &spell).unwrap();
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
