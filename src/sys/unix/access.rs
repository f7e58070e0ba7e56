//! Who may write a directory on Unix, and the words for it: its owner and mode, its group,
//! and what to do about one that is not private.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The owner and mode of `path` (followed if a link); `None` if it cannot be read (missing:
/// what opens it next says so).
pub(crate) fn owner_and_mode(path: &Path) -> Option<(u32, u32)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.uid(), m.mode()))
}

/// The problem with a lock directory's mode `mode`: `who` may write it (`None`: it is not
/// exactly 700, as our own namespace must be).
pub(crate) fn mode_problem(mode: u32, who: Option<&str>) -> String {
    match who {
        Some(who) => format!(
            "it has mode {:o}: {who} may write it, and so replace the locks inside or take them away",
            mode & 0o7777
        ),
        None => format!("it has mode {:o}, not 700", mode & 0o7777),
    }
}

/// What to do about our own lock namespace `path` that is not private.
pub(crate) fn remake_private(path: &Path) -> String {
    format!(
        "it is your own lock namespace: make it private again with `chmod 700 {}`",
        crate::text::shell_word(path)
    )
}

/// The group that owns directory `dir`.
pub(crate) fn group_of(dir: &OwnedFd) -> Option<u32> {
    super::fstat(dir.as_raw_fd()).ok().map(|st| st.st_gid)
}

/// Whether this process is in group `gid` (its effective group, or a supplementary one).
pub(crate) fn in_group(gid: u32) -> bool {
    // SAFETY: getegid takes nothing and cannot fail.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    // SAFETY: with a size of 0, getgroups only counts the groups.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let Ok(len) = usize::try_from(n) else {
        return false;
    };
    let mut groups: Vec<libc::gid_t> = vec![0; len];
    // SAFETY: `groups` is writable for `n` entries; getgroups writes at most that many.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    usize::try_from(got).is_ok_and(|got| groups[..got.min(len)].contains(&gid))
}
