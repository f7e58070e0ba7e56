//! The real [`System`] on Windows: `windows-sys` calls.
//!
//! How the protocol's Unix facts are kept on Windows:
//!
//! - **Directory handles.** A [`Dir`] is a handle opened with `FILE_FLAG_BACKUP_SEMANTICS`
//!   and every sharing mode (it never stands in anyone's way), and with
//!   `FILE_FLAG_OPEN_REPARSE_POINT`, so a symbolic link or junction is seen, never followed. An
//!   operation "at" a directory uses the path the handle has *now*
//!   (`GetFinalPathNameByHandleW`), so a directory renamed since it was opened is still the one
//!   meant, as with `openat` on Unix.
//! - **The no-replace rename** is `SetFileInformationByHandle(FileRenameInfo)` with
//!   `ReplaceIfExists` false, through a handle opened for `DELETE` with every sharing mode: it
//!   fails with `ERROR_ALREADY_EXISTS` when the target exists, empty or not. Windows refuses
//!   to rename a directory while a file inside it is open (a contender reading `owner.json`,
//!   an antivirus scanner or indexer looking at a new file); such a refusal
//!   (`ERROR_ACCESS_DENIED`, `ERROR_SHARING_VIOLATION`) is retried for up to two seconds.
//! - **The beacon** is a sharing mode instead of an `flock`: the holder keeps its lock
//!   directory open for `FILE_ADD_FILE` (write access) while *denying* write sharing. A probe
//!   opens it for write access while sharing everything: the open fails with
//!   `ERROR_SHARING_VIOLATION` exactly while some handle denies it, and succeeds once the
//!   holder's handle is closed, by its release or by the kernel at its death. The holder's
//!   handle shares delete access, so its own release rename goes through.
//! - **Liveness without the beacon**: `OpenProcess` and `GetProcessTimes` (the creation time,
//!   which sees through a reused pid), and a wait of zero on the process handle for its exit.
//! - **Privacy** is an ACL: see [`security`].
//! - **Waiting**: see [`wait`].
#![allow(unsafe_code)]

mod security;
mod wait;
#[cfg(feature = "tokio")]
mod wait_async;

pub use wait::{CancelHandle, Watch};
#[cfg(feature = "tokio")]
pub(crate) use wait_async::{check_reactor, sleep_async};

use super::{FileId, Identity, Kind, Meta, Renamed, System, Wake};
use std::ffi::OsString;
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, ERROR_ACCESS_DENIED, ERROR_ALREADY_EXISTS, ERROR_DIRECTORY,
    ERROR_DIR_NOT_EMPTY, ERROR_FILE_EXISTS, ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED,
    ERROR_SHARING_VIOLATION, ERROR_STOPPED_ON_SYMLINK, FILETIME, GENERIC_READ, GENERIC_WRITE,
    HANDLE, INVALID_HANDLE_VALUE, WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateDirectoryW, CreateFileW, DeleteFileW, FileIdInfo, FileRenameInfo, FileStandardInfo,
    FindClose, FindFirstFileW, FlushFileBuffers, GetFileInformationByHandle,
    GetFileInformationByHandleEx, GetFinalPathNameByHandleW, ReadFile, RemoveDirectoryW,
    SetFileInformationByHandle, WriteFile, BY_HANDLE_FILE_INFORMATION, CREATE_NEW, DELETE,
    FILE_ADD_FILE, FILE_ATTRIBUTE_DEVICE, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, FILE_ID_INFO, FILE_LIST_DIRECTORY,
    FILE_NAME_NORMALIZED, FILE_READ_ATTRIBUTES, FILE_RENAME_INFO, FILE_SHARE_DELETE,
    FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_STANDARD_INFO, OPEN_EXISTING, READ_CONTROL,
    SYNCHRONIZE, VOLUME_NAME_DOS, WIN32_FIND_DATAW,
};
use windows_sys::Win32::System::SystemInformation::{
    ComputerNamePhysicalDnsHostname, GetComputerNameExW,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcessId, GetProcessTimes, OpenProcess, WaitForSingleObject,
    PROCESS_QUERY_LIMITED_INFORMATION,
};

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

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

fn owned(h: HANDLE) -> Handle {
    Handle(h)
}

/// An open directory, and the sharing-mode lock (beacon or probe) taken through it.
#[derive(Debug)]
pub struct Dir {
    handle: Handle,
    lock: Mutex<Option<Handle>>,
}

/// The filesystem `dir` is on: the volume's file system name (`NTFS`, `ReFS`, `FAT32`), and
/// no options.
pub(crate) fn filesystem(dir: &Dir) -> Option<(String, String)> {
    use windows_sys::Win32::Storage::FileSystem::GetVolumeInformationByHandleW;
    let mut name = [0u16; 64];
    // SAFETY: the handle is open; `name` is writable for the length given; every other out
    // pointer may be null.
    let ok = unsafe {
        GetVolumeInformationByHandleW(
            dir.handle.0,
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            name.as_mut_ptr(),
            name.len() as u32,
        )
    };
    if ok == 0 {
        return None;
    }
    let len = name.iter().position(|c| *c == 0).unwrap_or(name.len());
    Some((String::from_utf16_lossy(&name[..len]), String::new()))
}

fn wide(path: &Path) -> Vec<u16> {
    path.as_os_str().encode_wide().chain(Some(0)).collect()
}

fn last() -> io::Error {
    io::Error::last_os_error()
}

/// The name of the existing file or directory `path` as its directory spells it: the case it
/// was created with, and the long form of an 8.3 short name. `None` when it cannot be read.
pub(crate) fn name_on_disk(path: &Path) -> Option<OsString> {
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
    let len = data
        .cFileName
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(data.cFileName.len());
    let found = OsString::from_wide(&data.cFileName[..len]);
    (!found.is_empty()).then_some(found)
}

/// `path` in the `\\?\` form (`C:\x` as `\\?\C:\x`, `\\server\share\x` as
/// `\\?\UNC\server\share\x`), which is not limited to MAX_PATH; any other as it is.
fn verbatim(path: &Path) -> PathBuf {
    use std::path::{Component, Prefix};
    let mut rest = path.components();
    let Some(Component::Prefix(p)) = rest.next() else {
        return path.to_owned();
    };
    let mut out = match p.kind() {
        Prefix::Disk(_) => {
            let mut s = std::ffi::OsString::from(r"\\?\");
            s.push(p.as_os_str());
            PathBuf::from(s)
        }
        Prefix::UNC(server, share) => {
            let mut s = std::ffi::OsString::from(r"\\?\UNC\");
            s.push(server);
            s.push(r"\");
            s.push(share);
            PathBuf::from(s)
        }
        _ => return path.to_owned(),
    };
    for c in rest {
        out.push(c);
    }
    out
}

/// Opens `path` (never following a reparse point) with `access` and `share`.
fn open(path: &Path, access: u32, share: u32, disposition: u32, flags: u32) -> io::Result<Handle> {
    let w = wide(path);
    // SAFETY: `w` is NUL-terminated; no security attributes or template.
    let h = unsafe {
        CreateFileW(
            w.as_ptr(),
            access,
            share,
            std::ptr::null(),
            disposition,
            flags | FILE_FLAG_OPEN_REPARSE_POINT,
            std::ptr::null_mut(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(last());
    }
    Ok(owned(h))
}

const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

fn info(h: &Handle) -> io::Result<BY_HANDLE_FILE_INFORMATION> {
    // SAFETY: the structure is plain data; all-zero is valid and the call overwrites it.
    let mut i: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is open; `i` is a valid out-pointer.
    if unsafe { GetFileInformationByHandle(h.0, &mut i) } == 0 {
        return Err(last());
    }
    Ok(i)
}

/// The identity of the file open as `h`: its volume's serial number and its file id. ReFS
/// ids are 128 bits, and the 64-bit index of `BY_HANDLE_FILE_INFORMATION` need not be unique
/// there: the whole `FILE_ID_INFO` is read, its two halves folded into one (an NTFS id has a
/// zero upper half, so it is the same index as before). Where `FileIdInfo` is refused (older
/// systems, Wine), the 64-bit index `info` gives.
fn file_id(h: &Handle, i: &BY_HANDLE_FILE_INFORMATION) -> FileId {
    // SAFETY: the structure is plain data; all-zero is valid and the call overwrites it.
    let mut id: FILE_ID_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is open; `id` is a valid out-buffer of the size given.
    let read = unsafe {
        GetFileInformationByHandleEx(
            h.0,
            FileIdInfo,
            (&mut id as *mut FILE_ID_INFO).cast(),
            std::mem::size_of::<FILE_ID_INFO>() as u32,
        )
    } != 0;
    if read {
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

/// 100-nanosecond intervals since 1601 to a `SystemTime`.
fn system_time(t: FILETIME) -> SystemTime {
    let ticks = (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
    const EPOCH_DIFF: u64 = 116_444_736_000_000_000; // 1601 to 1970 in 100 ns
    match ticks.checked_sub(EPOCH_DIFF) {
        Some(since) => UNIX_EPOCH + Duration::from_nanos(since.saturating_mul(100)),
        None => UNIX_EPOCH,
    }
}

fn meta_of(h: &Handle) -> io::Result<Meta> {
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
    // SAFETY: the structure is plain data; all-zero is valid and the call overwrites it.
    let mut standard: FILE_STANDARD_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is open; `standard` is writable for its size.
    let pending = unsafe {
        GetFileInformationByHandleEx(
            h.0,
            FileStandardInfo,
            (&mut standard as *mut FILE_STANDARD_INFO).cast(),
            std::mem::size_of::<FILE_STANDARD_INFO>() as u32,
        )
    } != 0
        && standard.DeletePending;
    let (uid, mode) = security::ownership(h.0, kind == Kind::Dir)?;
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
    /// The path this directory has now.
    fn current_path(&self) -> io::Result<PathBuf> {
        let mut buf = vec![0u16; 512];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                GetFinalPathNameByHandleW(
                    self.handle.0,
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                    FILE_NAME_NORMALIZED | VOLUME_NAME_DOS,
                )
            } as usize;
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

    fn join(&self, name: &str) -> io::Result<PathBuf> {
        if name.is_empty() || name.contains(['/', '\\', ':']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain name",
            ));
        }
        Ok(self.current_path()?.join(name))
    }
}

/// Opens the directory at `path` as a [`Dir`]; a reparse point (link, junction) is refused as
/// a symbolic link is by `O_NOFOLLOW`, and anything else that is not a directory as by
/// `O_DIRECTORY`.
fn open_dir(path: &Path, follow: bool) -> io::Result<Dir> {
    let access = FILE_LIST_DIRECTORY | FILE_READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE;
    let handle = if follow {
        let w = wide(path);
        // SAFETY: `w` is NUL-terminated; no security attributes or template.
        let h = unsafe {
            CreateFileW(
                w.as_ptr(),
                access,
                SHARE_ALL,
                std::ptr::null(),
                OPEN_EXISTING,
                FILE_FLAG_BACKUP_SEMANTICS,
                std::ptr::null_mut(),
            )
        };
        if h == INVALID_HANDLE_VALUE {
            return Err(last());
        }
        owned(h)
    } else {
        open(
            path,
            access,
            SHARE_ALL,
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS,
        )?
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
        handle,
        lock: Mutex::new(None),
    })
}

/// Whether `e` is one of the refusals that an open file inside a directory (or a scanner)
/// causes for a moment.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(|n| n as u32),
        Some(ERROR_ACCESS_DENIED) | Some(ERROR_SHARING_VIOLATION)
    )
}

/// Runs `op` again while it fails transiently, for up to two seconds (pauses from 1 to 50 ms).
fn patiently<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match op() {
            Err(e) if transient(&e) && start.elapsed() < Duration::from_secs(2) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Renames `from` to `to` (both full paths), failing if `to` exists.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let h = open(
        from,
        DELETE | SYNCHRONIZE,
        SHARE_ALL,
        OPEN_EXISTING,
        FILE_FLAG_BACKUP_SEMANTICS,
    )?;
    let name: Vec<u16> = to.as_os_str().encode_wide().collect();
    let header = std::mem::size_of::<FILE_RENAME_INFO>();
    let size = header + name.len() * 2;
    // u64 units keep the structure aligned.
    let mut buf = vec![0u64; size.div_ceil(8)];
    let info = buf.as_mut_ptr() as *mut FILE_RENAME_INFO;
    // SAFETY: `buf` is large enough for the structure and the name that follows it.
    unsafe {
        (*info).Anonymous.ReplaceIfExists = false;
        (*info).RootDirectory = std::ptr::null_mut();
        (*info).FileNameLength = (name.len() * 2) as u32;
        std::ptr::copy_nonoverlapping(name.as_ptr(), (*info).FileName.as_mut_ptr(), name.len());
    }
    // SAFETY: `h` is open for DELETE; `info` is valid for `size` bytes.
    if unsafe { SetFileInformationByHandle(h.0, FileRenameInfo, info.cast(), size as u32) } == 0 {
        return Err(last());
    }
    Ok(())
}

fn process_times(pid: u32) -> Option<(Handle, u64)> {
    // SAFETY: OpenProcess takes plain values and returns a handle or null.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, 0, pid) };
    if h.is_null() {
        return None;
    }
    let h = owned(h);
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: `h` is open with query access; the four out-pointers are locals.
    if unsafe { GetProcessTimes(h.0, &mut created, &mut exited, &mut kernel, &mut user) } == 0 {
        return None;
    }
    Some((
        h,
        (u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime),
    ))
}

fn hostname() -> Option<String> {
    let mut buf = vec![0u16; 256];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units; `len` receives the length written.
    if unsafe { GetComputerNameExW(ComputerNamePhysicalDnsHostname, buf.as_mut_ptr(), &mut len) }
        == 0
    {
        return None;
    }
    String::from_utf16(&buf[..len as usize])
        .ok()
        .filter(|h| !h.is_empty())
}

fn pid() -> u32 {
    // SAFETY: no preconditions; cannot fail.
    unsafe { GetCurrentProcessId() }
}

/// This process: its pid (Windows does not fork).
pub(crate) fn process_key() -> (u32, u64) {
    (pid(), 0)
}

impl System for Real {
    type Dir = Dir;
    type Watch = Watch;

    fn identity(&self) -> Identity {
        super::per_process::identity(|| {
            let pid = pid();
            Identity {
                pid,
                start_time: process_times(pid).map(|(_, t)| t),
                boot_id: None,
                host: hostname(),
                pid_namespace: None,
                uid: 0,
                os: Some(std::env::consts::OS.to_owned()),
                booted: None,
            }
        })
    }

    fn pid(&self) -> u32 {
        pid()
    }

    fn own_token(&self, token: &str, own: bool) {
        super::per_process::own_token(token, own)
    }

    fn wrote(&self, token: &str) -> bool {
        super::per_process::wrote(token)
    }

    fn open_dir_path(&self, path: &Path) -> io::Result<Dir> {
        open_dir(path, true)
    }

    fn open_dir_at(&self, at: &Dir, name: &str) -> io::Result<Dir> {
        if name == "." {
            return open_dir(&at.current_path()?, false);
        }
        open_dir(&at.join(name)?, false)
    }

    fn mkdir_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        // SAFETY: `w` is NUL-terminated; the new directory inherits its parent's ACL.
        if unsafe { CreateDirectoryW(w.as_ptr(), std::ptr::null()) } == 0 {
            return Err(last());
        }
        Ok(())
    }

    fn meta(&self, dir: &Dir) -> io::Result<Meta> {
        meta_of(&dir.handle)
    }

    fn meta_at(&self, at: &Dir, name: &str) -> io::Result<Meta> {
        let h = open(
            &at.join(name)?,
            FILE_READ_ATTRIBUTES | READ_CONTROL,
            SHARE_ALL,
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS,
        )?;
        meta_of(&h)
    }

    fn set_mode(&self, dir: &Dir, _mode: u32) -> io::Result<()> {
        security::make_private(&dir.current_path()?)
    }

    fn set_mode_at(&self, at: &Dir, name: &str, _mode: u32) -> io::Result<()> {
        security::make_private(&at.join(name)?)
    }

    fn create_file_at(
        &self,
        at: &Dir,
        name: &str,
        contents: &[u8],
        sync: bool,
        _mode: Option<u32>,
    ) -> io::Result<()> {
        // The file inherits the private ACL of the directory it is made in.
        let h = open(
            &at.join(name)?,
            GENERIC_WRITE,
            FILE_SHARE_READ,
            CREATE_NEW,
            0,
        )?;
        let mut rest = contents;
        while !rest.is_empty() {
            let mut n = 0u32;
            let chunk = rest.len().min(1 << 20) as u32;
            // SAFETY: `rest` is readable for `chunk` bytes; `n` receives the count written.
            if unsafe { WriteFile(h.0, rest.as_ptr(), chunk, &mut n, std::ptr::null_mut()) } == 0 {
                return Err(last());
            }
            rest = &rest[n as usize..];
        }
        // SAFETY: `h` is open for writing.
        if sync && unsafe { FlushFileBuffers(h.0) } == 0 {
            return Err(last());
        }
        Ok(())
    }

    fn open_file_at(&self, _at: &Dir, _name: &str, _create: bool) -> io::Result<Dir> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a reclaim guard that is a file (made on a filesystem without a no-replace rename, by a Unix program) cannot be judged here",
        ))
    }

    fn read_file_at(&self, at: &Dir, name: &str, limit: usize) -> io::Result<(Meta, Vec<u8>)> {
        // Every sharing mode: a reader never stands in the way of a writer or a rename.
        let h = open(
            &at.join(name)?,
            GENERIC_READ | READ_CONTROL,
            SHARE_ALL,
            OPEN_EXISTING,
            0,
        )?;
        let meta = meta_of(&h)?;
        if meta.kind != Kind::File {
            return Ok((meta, Vec::new()));
        }
        let mut bytes = vec![0u8; limit + 1];
        let mut got = 0usize;
        while got < bytes.len() {
            let mut n = 0u32;
            let want = (bytes.len() - got) as u32;
            // SAFETY: `bytes[got..]` is writable for `want` bytes; `n` receives the count.
            let ok = unsafe {
                ReadFile(
                    h.0,
                    bytes[got..].as_mut_ptr(),
                    want,
                    &mut n,
                    std::ptr::null_mut(),
                )
            };
            if ok == 0 {
                return Err(last());
            }
            if n == 0 {
                break;
            }
            got += n as usize;
        }
        bytes.truncate(got);
        Ok((meta, bytes))
    }

    fn sync_dir(&self, _dir: &Dir) -> io::Result<()> {
        // Windows cannot flush a directory opened for reading, and NTFS journals its names.
        Ok(())
    }

    fn rename_noreplace(&self, at: &Dir, from: &str, to: &str) -> io::Result<Renamed> {
        self.rename_exclusive(at, from, to)
            .map(|()| Renamed::Exclusive)
    }

    fn rename_exclusive(&self, at: &Dir, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (at.join(from)?, at.join(to)?);
        patiently(|| rename_no_replace(&from, &to))
    }

    fn remove_file_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        patiently(|| {
            // SAFETY: `w` is NUL-terminated.
            if unsafe { DeleteFileW(w.as_ptr()) } == 0 {
                Err(last())
            } else {
                Ok(())
            }
        })
    }

    fn remove_dir_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        patiently(|| {
            // SAFETY: `w` is NUL-terminated.
            if unsafe { RemoveDirectoryW(w.as_ptr()) } == 0 {
                Err(last())
            } else {
                Ok(())
            }
        })
    }

    fn list(&self, dir: &Dir) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir.current_path()?)? {
            // A name that is not Unicode is not ours (the protocol's names are ASCII).
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn try_lock(&self, dir: &Dir, exclusive: bool) -> io::Result<bool> {
        // Exclusive (the beacon): write access, write sharing denied. Shared (a probe): write
        // access, everything shared. Either fails with a sharing violation while the other
        // kind (or another beacon) is held.
        let share = if exclusive {
            FILE_SHARE_READ | FILE_SHARE_DELETE
        } else {
            SHARE_ALL
        };
        let path = dir.current_path()?;
        let h = match open(
            &path,
            FILE_ADD_FILE | SYNCHRONIZE,
            share,
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS,
        ) {
            Ok(h) => h,
            Err(e) if e.raw_os_error() == Some(ERROR_SHARING_VIOLATION as i32) => return Ok(false),
            Err(e) => return Err(e),
        };
        // The path may name another directory by now: a lock on it would mean nothing.
        if file_id(&h, &info(&h)?) != file_id(&dir.handle, &info(&dir.handle)?) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the directory was moved while it was being locked",
            ));
        }
        *dir.lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(true)
    }

    fn unlock(&self, dir: &Dir) -> io::Result<()> {
        dir.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }

    fn wait_shared(&self, _dir: &Dir) -> io::Result<()> {
        // No blocking open waits for a sharing mode: the caller watches instead.
        Err(io::Error::from_raw_os_error(ERROR_NOT_SUPPORTED as i32))
    }

    fn process_alive(&self, pid: u32) -> Option<bool> {
        // SAFETY: OpenProcess takes plain values and returns a handle or null.
        let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, 0, pid) };
        if h.is_null() {
            // SAFETY: no preconditions.
            return match unsafe { GetLastError() } {
                ERROR_INVALID_PARAMETER => Some(false), // no such process
                ERROR_ACCESS_DENIED => Some(true),      // someone else's, alive
                _ => None,
            };
        }
        let h = owned(h);
        // A process that exited is signalled (its object lives on while handles to it do).
        // SAFETY: `h` is open with SYNCHRONIZE.
        Some(unsafe { WaitForSingleObject(h.0, 0) } != WAIT_OBJECT_0)
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        process_times(pid).map(|(_, t)| t)
    }

    fn watch(&self, lock: &Dir, pid: Option<u32>, beacon: bool) -> io::Result<Option<Watch>> {
        wait::watch(lock, pid, beacon)
    }

    fn sleep(
        &self,
        watch: Option<&Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        wait::sleep(watch, timeout, cancel)
    }
}

pub(super) fn is(e: &io::Error, which: super::Errno) -> bool {
    use super::Errno::*;
    let Some(n) = e.raw_os_error() else {
        return false;
    };
    let n = n as u32;
    match which {
        Exists => n == ERROR_ALREADY_EXISTS || n == ERROR_FILE_EXISTS,
        NotEmpty => n == ERROR_DIR_NOT_EMPTY,
        NotDir => n == ERROR_DIRECTORY,
        Loop => n == ERROR_STOPPED_ON_SYMLINK,
        LockUnsupported => n == ERROR_NOT_SUPPORTED,
    }
}
