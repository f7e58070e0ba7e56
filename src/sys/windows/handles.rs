//! Handles and what they tell: owned handles, opening a path without following a link, a
//! file's identity and metadata, and directory handles (the path each has now).

use super::super::{FileId, Kind, Meta};
use std::ffi::OsString;
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_DIRECTORY, ERROR_STOPPED_ON_SYMLINK, FILETIME, HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FileIdInfo, FileStandardInfo, GetFileInformationByHandle,
    GetFileInformationByHandleEx, GetFinalPathNameByHandleW, BY_HANDLE_FILE_INFORMATION,
    FILE_ATTRIBUTE_DEVICE, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, FILE_ID_INFO,
    FILE_INFO_BY_HANDLE_CLASS, FILE_LIST_DIRECTORY, FILE_NAME_NORMALIZED, FILE_READ_ATTRIBUTES,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_STANDARD_INFO, OPEN_EXISTING,
    READ_CONTROL, SYNCHRONIZE, VOLUME_NAME_DOS,
};

/// An owned handle, closed on drop.
#[derive(Debug)]
pub(crate) struct Handle(pub(crate) HANDLE);

// SAFETY: a kernel handle may be used and closed from any thread.
unsafe impl Send for Handle {}
// SAFETY: as above; every use through `&Handle` is a system call that is thread-safe.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle was returned by a successful open and is closed once.
        unsafe { CloseHandle(self.0) };
    }
}

/// An open directory, and the sharing-mode lock (beacon or probe) taken through it.
#[derive(Debug)]
pub struct Dir {
    /// Replaced by one opened at its new name once it is renamed (see [`Dir::moved_to`]).
    handle: Mutex<Handle>,
    pub(super) lock: Mutex<Option<Handle>>,
}

/// The filesystem `dir` is on: the volume's file system name (`NTFS`, `ReFS`, `FAT32`), and
/// no options.
pub(crate) fn filesystem(dir: &Dir) -> Option<(String, String)> {
    use windows_sys::Win32::Storage::FileSystem::GetVolumeInformationByHandleW;
    let mut name = [0u16; 64];
    let (out, len) = (name.as_mut_ptr(), name.len() as u32);
    let (no_label, none) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the handle is open; `name` is writable for the length given; every other out
    // pointer may be null.
    let ok = unsafe {
        GetVolumeInformationByHandleW(dir.handle().0, no_label, 0, none, none, none, out, len)
    };
    if ok == 0 {
        return None;
    }
    Some((String::from_utf16_lossy(until_nul(&name)), String::new()))
}

/// `units` up to their first NUL, or all of them.
pub(super) fn until_nul(units: &[u16]) -> &[u16] {
    &units[..units.iter().position(|&c| c == 0).unwrap_or(units.len())]
}

pub(super) fn wide(path: &Path) -> Vec<u16> {
    path.as_os_str().encode_wide().chain(Some(0)).collect()
}

pub(super) fn last() -> io::Error {
    io::Error::last_os_error()
}

/// The result of a call that returns a `BOOL`: zero is failure, told by the last error.
pub(super) fn done(ret: i32) -> io::Result<()> {
    if ret == 0 {
        return Err(last());
    }
    Ok(())
}

/// `path` in the `\\?\` form (`C:\x` as `\\?\C:\x`, `\\server\share\x` as
/// `\\?\UNC\server\share\x`), which is not limited to MAX_PATH; any other as it is.
pub(super) fn verbatim(path: &Path) -> PathBuf {
    use std::path::{Component, Prefix};
    let mut rest = path.components();
    let Some(Component::Prefix(p)) = rest.next() else {
        return path.to_owned();
    };
    let mut out = OsString::from(r"\\?\");
    match p.kind() {
        Prefix::Disk(_) => out.push(p.as_os_str()),
        Prefix::UNC(server, share) => {
            out.push(r"UNC\");
            out.push(server);
            out.push(r"\");
            out.push(share);
        }
        _ => return path.to_owned(),
    }
    let mut out = PathBuf::from(out);
    out.extend(rest);
    out
}

/// Opens `path` with `access` and `share` (following a reparse point unless `flags` says not).
fn create(
    path: &Path,
    access: u32,
    share: u32,
    disposition: u32,
    flags: u32,
) -> io::Result<Handle> {
    let w = wide(path);
    let (security, template) = (std::ptr::null(), std::ptr::null_mut());
    // SAFETY: `w` is NUL-terminated; no security attributes or template.
    let h = unsafe {
        CreateFileW(
            w.as_ptr(),
            access,
            share,
            security,
            disposition,
            flags,
            template,
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(last());
    }
    Ok(Handle(h))
}

/// Opens `path` (never following a reparse point) with `access` and `share`.
pub(super) fn open(
    path: &Path,
    access: u32,
    share: u32,
    disposition: u32,
    flags: u32,
) -> io::Result<Handle> {
    create(
        path,
        access,
        share,
        disposition,
        flags | FILE_FLAG_OPEN_REPARSE_POINT,
    )
}

/// Opens the existing file or directory `path` (never following a reparse point) with
/// `access`, sharing everything.
pub(super) fn open_existing(path: &Path, access: u32) -> io::Result<Handle> {
    open(
        path,
        access,
        SHARE_ALL,
        OPEN_EXISTING,
        FILE_FLAG_BACKUP_SEMANTICS,
    )
}

pub(super) const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

/// The information of class `class` about the file open as `h` (`T` is its structure), if
/// the system tells it.
fn info_ex<T>(h: &Handle, class: FILE_INFO_BY_HANDLE_CLASS) -> Option<T> {
    // SAFETY: the structures asked for are plain data; all-zero is valid and the call
    // overwrites it.
    let mut out: T = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<T>() as u32;
    // SAFETY: `h` is open; `out` is a valid out-buffer of the size given.
    let read =
        unsafe { GetFileInformationByHandleEx(h.0, class, (&mut out as *mut T).cast(), size) };
    (read != 0).then_some(out)
}

pub(super) fn info(h: &Handle) -> io::Result<BY_HANDLE_FILE_INFORMATION> {
    // SAFETY: the structure is plain data; all-zero is valid and the call overwrites it.
    let mut i: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is open; `i` is a valid out-pointer.
    done(unsafe { GetFileInformationByHandle(h.0, &mut i) })?;
    Ok(i)
}

impl Handle {
    /// The identity of the file open as this.
    pub(super) fn id(&self) -> io::Result<FileId> {
        Ok(file_id(self, &info(self)?))
    }
}

/// The identity of the file open as `h`: its volume's serial number and its file id. ReFS
/// ids are 128 bits, and the 64-bit index of `BY_HANDLE_FILE_INFORMATION` need not be unique
/// there: the whole `FILE_ID_INFO` is read, its two halves folded into one (an NTFS id has a
/// zero upper half, so it is the same index as before). Where `FileIdInfo` is refused (older
/// systems, Wine), the 64-bit index `info` gives.
pub(super) fn file_id(h: &Handle, i: &BY_HANDLE_FILE_INFORMATION) -> FileId {
    if let Some(id) = info_ex::<FILE_ID_INFO>(h, FileIdInfo) {
        let bytes = id.FileId.Identifier;
        let low = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let high = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        return FileId {
            dev: id.VolumeSerialNumber,
            ino: low ^ high.rotate_left(32),
        };
    }
    FileId {
        dev: u64::from(i.dwVolumeSerialNumber),
        ino: (u64::from(i.nFileIndexHigh) << 32) | u64::from(i.nFileIndexLow),
    }
}

/// The 100-nanosecond intervals since 1601 that `t` counts.
pub(super) fn ticks(t: FILETIME) -> u64 {
    (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
}

/// 100-nanosecond intervals since 1601 to a `SystemTime`.
pub(super) fn system_time(t: FILETIME) -> SystemTime {
    const EPOCH_DIFF: u64 = 116_444_736_000_000_000; // 1601 to 1970 in 100 ns
    match ticks(t).checked_sub(EPOCH_DIFF) {
        Some(since) => UNIX_EPOCH + Duration::from_nanos(since.saturating_mul(100)),
        None => UNIX_EPOCH,
    }
}

pub(super) fn meta_of(h: &Handle) -> io::Result<Meta> {
    let i = info(h)?;
    let attrs = i.dwFileAttributes;
    let kind = if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        Kind::Symlink
    } else if attrs & FILE_ATTRIBUTE_DEVICE != 0 {
        Kind::Other
    } else if attrs & FILE_ATTRIBUTE_DIRECTORY != 0 {
        Kind::Dir
    } else {
        Kind::File
    };
    // A file or directory that was deleted while open is "delete pending": report it as
    // unlinked (link count 0), as a removed directory is on Unix.
    let pending =
        info_ex::<FILE_STANDARD_INFO>(h, FileStandardInfo).is_some_and(|s| s.DeletePending);
    let (uid, mode) = super::security::ownership(h.0, kind == Kind::Dir)?;
    Ok(Meta {
        id: file_id(h, &i),
        kind,
        uid,
        mode,
        size: (u64::from(i.nFileSizeHigh) << 32) | u64::from(i.nFileSizeLow),
        nlink: if pending {
            0
        } else {
            u64::from(i.nNumberOfLinks)
        },
        mtime: system_time(i.ftLastWriteTime),
    })
}

impl Dir {
    /// Its handle.
    pub(super) fn handle(&self) -> MutexGuard<'_, Handle> {
        self.handle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes note that this directory was renamed to `path`: a handle opened there replaces
    /// ours if it is this directory (Wine would go on reporting ours at its old name).
    pub(super) fn moved_to(&self, path: &Path) {
        let Ok(dir) = open_dir(path, false) else {
            return;
        };
        let mut handle = self.handle();
        // By index alone: Wine reports no volume for a handle whose name it has lost (both
        // are in one directory, so on one volume).
        let index = |h: &Handle| h.id().map(|id| id.ino).ok();
        if index(&dir.handle()).is_some_and(|i| index(&handle) == Some(i)) {
            std::mem::swap(&mut *handle, &mut *dir.handle());
        }
    }

    /// The path this directory has now.
    pub(super) fn current_path(&self) -> io::Result<PathBuf> {
        let mut buf = vec![0u16; 512];
        loop {
            let (out, len) = (buf.as_mut_ptr(), buf.len() as u32);
            let spelling = FILE_NAME_NORMALIZED | VOLUME_NAME_DOS;
            // SAFETY: `buf` is writable for its length.
            let n =
                unsafe { GetFinalPathNameByHandleW(self.handle().0, out, len, spelling) } as usize;
            if n == 0 {
                return Err(last());
            }
            if n < buf.len() {
                buf.truncate(n);
                return Ok(PathBuf::from(OsString::from_wide(&buf)));
            }
            buf.resize(n + 1, 0);
        }
    }

    pub(super) fn join(&self, name: &str) -> io::Result<PathBuf> {
        if name.is_empty() || name.contains(['/', '\\', ':']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain name",
            ));
        }
        Ok(self.path()?.join(name))
    }

    /// The path this directory has now, checked to be this directory: Wine reports the name a
    /// handle was opened by even once its directory has been renamed by name (as a lock is,
    /// by its release), and a path through it would reach whatever is at that name now (the
    /// next holder's lock). What `openat` relative to a descriptor gives on Unix.
    pub(super) fn path(&self) -> io::Result<PathBuf> {
        let path = self.current_path()?;
        let there = open_existing(&path, FILE_READ_ATTRIBUTES | SYNCHRONIZE)?.id()?;
        if there != self.handle().id()? {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the directory is no longer at its name",
            ));
        }
        Ok(path)
    }
}

/// Opens the directory at `path` as a [`Dir`]; a reparse point (link, junction) is refused as
/// a symbolic link is by `O_NOFOLLOW`, and anything else that is not a directory as by
/// `O_DIRECTORY`.
pub(super) fn open_dir(path: &Path, follow: bool) -> io::Result<Dir> {
    let access = FILE_LIST_DIRECTORY | FILE_READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE;
    let handle = if follow {
        create(
            path,
            access,
            SHARE_ALL,
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS,
        )?
    } else {
        open_existing(path, access)?
    };
    let attrs = info(&handle)?.dwFileAttributes;
    if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err(io::Error::from_raw_os_error(
            ERROR_STOPPED_ON_SYMLINK as i32,
        ));
    }
    if attrs & FILE_ATTRIBUTE_DIRECTORY == 0 {
        return Err(io::Error::from_raw_os_error(ERROR_DIRECTORY as i32));
    }
    Ok(Dir {
        handle: Mutex::new(handle),
        lock: Mutex::new(None),
    })
}
