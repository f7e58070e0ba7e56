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

pub(super) mod access;
mod handles;
pub(super) mod naming;
mod process;
mod security;
mod wait;
#[cfg(feature = "tokio")]
mod wait_async;

pub use wait::{CancelHandle, Watch};
#[cfg(feature = "tokio")]
pub(crate) use wait_async::{check_reactor, sleep_async};

use super::{Identity, Kind, Meta, Renamed, System, Wake};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};
use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_ALREADY_EXISTS, ERROR_DIRECTORY, ERROR_DIR_NOT_EMPTY,
    ERROR_FILE_EXISTS, ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED, ERROR_SHARING_VIOLATION,
    ERROR_STOPPED_ON_SYMLINK, GENERIC_READ, GENERIC_WRITE, WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateDirectoryW, DeleteFileW, FileRenameInfo, FlushFileBuffers, ReadFile, RemoveDirectoryW,
    SetFileInformationByHandle, WriteFile, CREATE_NEW, DELETE, FILE_ADD_FILE,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_READ_ATTRIBUTES, FILE_RENAME_INFO, FILE_SHARE_DELETE,
    FILE_SHARE_READ, OPEN_EXISTING, READ_CONTROL, SYNCHRONIZE,
};
use windows_sys::Win32::System::Threading::{
    WaitForSingleObject, PROCESS_QUERY_LIMITED_INFORMATION,
};

pub(crate) use handles::filesystem;
pub use handles::Dir;
use handles::*;
pub(crate) use process::process_key;
use process::{open_process, pid};

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

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

/// Renames `from` to `to` (both full paths), replacing what is at `to` when `replace`, else
/// failing there.
fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    let h = open_existing(from, DELETE | SYNCHRONIZE)?;
    let name: Vec<u16> = to.as_os_str().encode_wide().collect();
    let header = std::mem::size_of::<FILE_RENAME_INFO>();
    let size = header + name.len() * 2;
    // u64 units keep the structure aligned.
    let mut buf = vec![0u64; size.div_ceil(8)];
    let info = buf.as_mut_ptr() as *mut FILE_RENAME_INFO;
    // SAFETY: `buf` is large enough for the structure and the name that follows it.
    unsafe {
        (*info).Anonymous.ReplaceIfExists = replace;
        (*info).RootDirectory = std::ptr::null_mut();
        (*info).FileNameLength = (name.len() * 2) as u32;
        std::ptr::copy_nonoverlapping(name.as_ptr(), (*info).FileName.as_mut_ptr(), name.len());
    }
    // SAFETY: `h` is open for DELETE; `info` is valid for `size` bytes.
    done(unsafe { SetFileInformationByHandle(h.0, FileRenameInfo, info.cast(), size as u32) })
}

impl System for Real {
    type Dir = Dir;
    type Watch = Watch;

    fn identity(&self) -> Identity {
        process::identity()
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
            return open_dir(&at.path()?, false);
        }
        open_dir(&at.join(name)?, false)
    }

    fn mkdir_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        // SAFETY: `w` is NUL-terminated; the new directory inherits its parent's ACL.
        done(unsafe { CreateDirectoryW(w.as_ptr(), std::ptr::null()) })
    }

    fn meta(&self, dir: &Dir) -> io::Result<Meta> {
        meta_of(&dir.handle())
    }

    fn meta_at(&self, at: &Dir, name: &str) -> io::Result<Meta> {
        meta_of(&open_existing(
            &at.join(name)?,
            FILE_READ_ATTRIBUTES | READ_CONTROL,
        )?)
    }

    fn set_mode(&self, dir: &Dir, _mode: u32) -> io::Result<()> {
        security::make_private(&dir.path()?)
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
        let path = at.join(name)?;
        let h = open(&path, GENERIC_WRITE, FILE_SHARE_READ, CREATE_NEW, 0)?;
        let mut rest = contents;
        while !rest.is_empty() {
            let mut n = 0u32;
            let chunk = rest.len().min(1 << 20) as u32;
            // SAFETY: `rest` is readable for `chunk` bytes; `n` receives the count written.
            done(unsafe { WriteFile(h.0, rest.as_ptr(), chunk, &mut n, std::ptr::null_mut()) })?;
            rest = &rest[n as usize..];
        }
        if !sync {
            return Ok(());
        }
        // SAFETY: `h` is open for writing.
        done(unsafe { FlushFileBuffers(h.0) })
    }

    fn open_file_at(&self, _at: &Dir, _name: &str, _create: bool) -> io::Result<Dir> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a takeover marker that is a file (made on a filesystem without a no-replace rename, by a Unix program) cannot be judged here",
        ))
    }

    fn read_file_at(&self, at: &Dir, name: &str, limit: usize) -> io::Result<(Meta, Vec<u8>)> {
        // Every sharing mode: a reader never stands in the way of a writer or a rename.
        let (path, access) = (at.join(name)?, GENERIC_READ | READ_CONTROL);
        let h = open(&path, access, SHARE_ALL, OPEN_EXISTING, 0)?;
        let meta = meta_of(&h)?;
        if meta.kind != Kind::File {
            return Ok((meta, Vec::new()));
        }
        let mut bytes = vec![0u8; limit + 1];
        let mut got = 0usize;
        while got < bytes.len() {
            let mut n = 0u32;
            let (rest, null) = (&mut bytes[got..], std::ptr::null_mut());
            // SAFETY: `rest` is writable for its length; `n` receives the count.
            done(unsafe { ReadFile(h.0, rest.as_mut_ptr(), rest.len() as u32, &mut n, null) })?;
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

    fn rename_dir_noreplace(
        &self,
        at: &Dir,
        dir: &Dir,
        from: &str,
        to: &str,
    ) -> io::Result<Renamed> {
        let renamed = self.rename_noreplace(at, from, to)?;
        // (Renamed whatever follows: the rename's result stands.)
        if let Ok(path) = at.join(to) {
            dir.moved_to(&path);
        }
        Ok(renamed)
    }

    fn rename_exclusive(&self, at: &Dir, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (at.join(from)?, at.join(to)?);
        patiently(|| rename(&from, &to, false))
    }

    fn replace_file_at(&self, at: &Dir, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (at.join(from)?, at.join(to)?);
        patiently(|| rename(&from, &to, true))
    }

    fn remove_file_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        // SAFETY: `w` is NUL-terminated.
        patiently(|| done(unsafe { DeleteFileW(w.as_ptr()) }))
    }

    fn remove_dir_at(&self, at: &Dir, name: &str) -> io::Result<()> {
        let w = wide(&at.join(name)?);
        // SAFETY: `w` is NUL-terminated.
        patiently(|| done(unsafe { RemoveDirectoryW(w.as_ptr()) }))
    }

    fn list(&self, dir: &Dir) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir.path()?)? {
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
        // A lock held through this handle already is let go first (converted, not in one
        // step: the other kind's handle would stand in the way of the new one).
        dir.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
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
        let here = file_id(&h, &info(&h)?);
        if here != dir.handle().id()? {
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
        let h = match open_process(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, pid) {
            Ok(h) => h,
            Err(e) => {
                return match e.raw_os_error().map(|n| n as u32) {
                    Some(ERROR_INVALID_PARAMETER) => Some(false), // no such process
                    Some(ERROR_ACCESS_DENIED) => Some(true),      // someone else's, alive
                    _ => None,
                };
            }
        };
        // A process that exited is signalled (its object lives on while handles to it do).
        // SAFETY: `h` is open with SYNCHRONIZE.
        Some(unsafe { WaitForSingleObject(h.0, 0) } != WAIT_OBJECT_0)
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        process::start_time(pid)
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
    let Some(n) = e.raw_os_error().map(|n| n as u32) else {
        return false;
    };
    match which {
        Exists => n == ERROR_ALREADY_EXISTS || n == ERROR_FILE_EXISTS,
        NotEmpty => n == ERROR_DIR_NOT_EMPTY,
        NotDir => n == ERROR_DIRECTORY,
        Loop => n == ERROR_STOPPED_ON_SYMLINK,
        LockUnsupported => n == ERROR_NOT_SUPPORTED,
    }
}
