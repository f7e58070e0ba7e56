//! Who may write a directory on Windows, and the words for it: access lists decide, not
//! owners and modes (see [`super::security`]).

use std::path::Path;

/// The owner and mode of `path`: never told here. The temporary directory is the user's own,
/// inside a profile whose ACL keeps other users out, and who may rename what is decided by
/// ACLs rather than by owners and modes: the namespace directories themselves are checked
/// (ours, private) where they are made.
pub(crate) fn owner_and_mode(_path: &Path) -> Option<(u32, u32)> {
    None
}

/// The problem with a lock directory's mode `mode`: its access list lets others write it.
pub(crate) fn mode_problem(mode: u32, _who: Option<&str>) -> String {
    format!("it has {}", crate::sys::mode_words(mode))
}

/// What to do about our own lock namespace `path` that is not private.
pub(crate) fn remake_private(path: &Path) -> String {
    format!(
        "it is your own lock namespace: remove it (`rmdir /s {}`) while no lock in it is held, and dirlock makes it again, private",
        path.display()
    )
}
