//! The real [`System`] on Unix: `libc` calls. What every Unix shares is here; what differs
//! (the no-replace rename, the process start time, the boot identity, and the kernel's
//! wake-ups) is in one module per platform: `linux`, `apple` (macOS), `freebsd`, and `other`
//! (POSIX alone), with `kqueue` for macOS and FreeBSD. Which platform has what:
//! `docs/platforms.md`; the items each platform module offers: `ARCHITECTURE.md`.
#![allow(unsafe_code)]

pub(super) mod access;
mod identity;
pub(super) mod naming;
mod wait;
#[cfg(feature = "tokio")]
mod wait_async;

#[cfg(target_os = "macos")]
pub(crate) mod apple;
#[cfg(target_os = "freebsd")]
pub(crate) mod freebsd;
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
pub(crate) mod kqueue;
#[cfg(target_os = "linux")]
pub(crate) mod linux;
#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "freebsd")))]
pub(crate) mod other;
#[cfg(not(target_os = "linux"))]
mod readdir;

#[cfg(target_os = "macos")]
use apple as platform;
#[cfg(target_os = "freebsd")]
use freebsd as platform;
#[cfg(target_os = "linux")]
use linux as platform;
#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "freebsd")))]
use other as platform;

pub(crate) use access::{group_of, in_group};
pub(crate) use identity::process_key;
use identity::{getpid, read_identity};
pub use platform::Watch;
pub use wait::CancelHandle;
#[cfg(feature = "tokio")]
pub(crate) use wait_async::{check_reactor, sleep_async};

use super::{FileId, Identity, Kind, Meta, Renamed, System, Wake};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

fn cstr(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains NUL"))
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Turns a `-1` return into the thread's `errno`.
pub(super) fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A small text file of the kernel's (`/proc`), or `None`.
#[cfg_attr(
    not(target_os = "linux"),
    expect(dead_code, reason = "only Linux reads the kernel's facts from files")
)]
fn read_small(path: &str) -> Option<String> {
    let bytes = read_to_limit(std::fs::File::open(path).ok()?, 4096, 4096).ok()?;
    String::from_utf8(bytes).ok()
}

/// The error of a filesystem (or kernel) without a no-replace rename.
fn no_exclusive_rename() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this filesystem has no no-replace rename",
    )
}

/// The error of a filesystem (or kernel) that cannot exchange two names.
fn no_exchange() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this filesystem cannot exchange two names",
    )
}

/// Retries a call interrupted by a signal.
fn retry<F: FnMut() -> libc::c_int>(mut f: F) -> io::Result<libc::c_int> {
    loop {
        match check(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The process's limit of open files (the soft one), if it has one.
pub(crate) fn open_files_limit() -> Option<u64> {
    // SAFETY: rlimit is plain data; all-zero is valid, and getrlimit overwrites it.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    #[allow(clippy::useless_conversion, reason = "rlim_t is not u64 everywhere")]
    let cur = u64::try_from(r.rlim_cur).ok();
    cur.filter(|_| ok && r.rlim_cur != libc::RLIM_INFINITY)
}

/// The size of a memory page.
#[cfg(target_os = "linux")]
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf takes a plain name and returns a value or -1.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// The monotonic clock (`CLOCK_MONOTONIC`): read without a lock or a one-time initializer,
/// which a child forked while another thread ran it would wait for forever.
pub(super) fn monotonic() -> Duration {
    // SAFETY: timespec is plain data; all-zero is valid, and clock_gettime overwrites it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and out-pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

pub(super) fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: callers pass a descriptor just returned by a successful open-like call, which
    // nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

// The field types of `stat` differ by platform; the casts are no-ops on some.
#[allow(
    clippy::unnecessary_cast,
    reason = "the field types of stat differ by platform: these casts are needed on some"
)]
fn meta_of(st: &libc::stat) -> Meta {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    };
    #[cfg(target_os = "netbsd")]
    let nsec = st.st_mtimensec;
    #[cfg(not(target_os = "netbsd"))]
    let nsec = st.st_mtime_nsec;
    // Before 1970, or beyond what `SystemTime` counts: the nearest time it can say.
    let mtime = if st.st_mtime >= 0 {
        let d = Duration::new(st.st_mtime as u64, nsec.clamp(0, 999_999_999) as u32);
        UNIX_EPOCH
            .checked_add(d)
            .unwrap_or(UNIX_EPOCH + Duration::from_secs(u32::MAX.into()))
    } else {
        UNIX_EPOCH
    };
    Meta {
        id: FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        },
        kind,
        uid: st.st_uid,
        mode: (st.st_mode & 0o7777) as u32,
        size: st.st_size.max(0) as u64,
        nlink: st.st_nlink as u64,
        mtime,
    }
}

/// The `stat` of the open descriptor `fd`.
pub(super) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain old data; all-zero is a valid value that fstat overwrites.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor borrowed for the call; `st` is a valid out-pointer.
    retry(|| unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// Reads `file` to its end, but at most `limit + 1` bytes (one more than allowed, so that the
/// caller can tell a file that is too large).
pub(super) fn read_to_limit(file: std::fs::File, limit: usize, size: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    // Room for what `fstat` said is there and one byte more, so that a record is read in one
    // call and its end seen in the next (without it, the buffer grows from 32 bytes: six reads
    // for a 260-byte record).
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(limit).min(limit) + 1);
    file.take(limit as u64 + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

/// `openat(at, name, flags, 0600)`, retried on EINTR. Callers spell out every flag
/// (`O_CLOEXEC` included) where they call it.
fn openat(at: &OwnedFd, name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `at` is an open directory and `n` is NUL-terminated; the mode is read only with
    // O_CREAT. The result is a new descriptor or -1.
    let fd = at_name(at, name, |at, n| unsafe {
        libc::openat(at, n, flags, 0o600 as libc::c_uint)
    })?;
    Ok(owned(fd))
}

/// `call(at, from, to)` on the descriptor of `at` and the names `from` and `to` as C strings,
/// retried on EINTR.
fn at_names(
    at: &OwnedFd,
    from: &str,
    to: &str,
    mut call: impl FnMut(RawFd, *const libc::c_char, *const libc::c_char) -> libc::c_int,
) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    retry(|| call(at.as_raw_fd(), f.as_ptr(), t.as_ptr())).map(drop)
}

/// `call(at, name)` on the descriptor of `at` and `name` as a C string, retried on EINTR.
fn at_name(
    at: &OwnedFd,
    name: &str,
    mut call: impl FnMut(RawFd, *const libc::c_char) -> libc::c_int,
) -> io::Result<libc::c_int> {
    let n = cstr(name)?;
    retry(|| call(at.as_raw_fd(), n.as_ptr()))
}

impl System for Real {
    type Dir = OwnedFd;
    type Watch = Watch;

    fn identity(&self) -> Identity {
        super::per_process::identity(read_identity)
    }

    fn pid(&self) -> u32 {
        getpid()
    }

    fn own_token(&self, token: &str, own: bool) {
        super::per_process::own_token(token, own)
    }

    fn wrote(&self, token: &str) -> bool {
        super::per_process::wrote(token)
    }

    fn open_dir_path(&self, path: &Path) -> io::Result<OwnedFd> {
        let p = cpath(path)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: `p` is NUL-terminated; the result is a new descriptor or -1.
        let fd = retry(|| unsafe { libc::open(p.as_ptr(), flags) })?;
        Ok(owned(fd))
    }

    fn open_dir_at(&self, at: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
        openat(
            at,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    }

    fn mkdir_at(&self, at: &OwnedFd, name: &str) -> io::Result<()> {
        // SAFETY: `at` is an open directory and `n` is NUL-terminated.
        at_name(at, name, |at, n| unsafe { libc::mkdirat(at, n, 0o700) }).map(drop)
    }

    fn meta(&self, dir: &OwnedFd) -> io::Result<Meta> {
        Ok(meta_of(&fstat(dir.as_raw_fd())?))
    }

    fn meta_at(&self, at: &OwnedFd, name: &str) -> io::Result<Meta> {
        // SAFETY: `stat` is plain old data; all-zero is a valid value that fstatat overwrites.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `at` is open, `n` is NUL-terminated and `st` is a valid out-pointer.
        at_name(at, name, |at, n| unsafe {
            libc::fstatat(at, n, &mut st, libc::AT_SYMLINK_NOFOLLOW)
        })?;
        Ok(meta_of(&st))
    }

    fn set_mode(&self, dir: &OwnedFd, mode: u32) -> io::Result<()> {
        // SAFETY: `dir` is an open descriptor.
        retry(|| unsafe { libc::fchmod(dir.as_raw_fd(), mode as libc::mode_t) }).map(drop)
    }

    fn set_mode_at(&self, at: &OwnedFd, name: &str, mode: u32) -> io::Result<()> {
        // SAFETY: `at` is open and `n` is NUL-terminated.
        at_name(at, name, |at, n| unsafe {
            libc::fchmodat(at, n, mode as libc::mode_t, 0)
        })
        .map(drop)
    }

    fn create_file_at(
        &self,
        at: &OwnedFd,
        name: &str,
        contents: &[u8],
        sync: bool,
        mode: Option<u32>,
    ) -> io::Result<()> {
        // O_EXCL | O_NOFOLLOW: a new file, or an error.
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let fd = openat(at, name, flags)?;
        let mut file = std::fs::File::from(fd);
        if let Some(mode) = mode {
            // Exactly this mode, whatever the umask took away.
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        std::io::Write::write_all(&mut file, contents)?;
        if sync {
            file.sync_all()?;
        }
        Ok(())
    }

    fn open_file_at(&self, at: &OwnedFd, name: &str, create: bool) -> io::Result<OwnedFd> {
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        let fd = if create {
            let fd = openat(at, name, flags | libc::O_CREAT | libc::O_EXCL)?;
            // Whatever the umask took away: exactly 0600.
            // SAFETY: `fd` is open; fchmod takes no pointers.
            retry(|| unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) })?;
            fd
        } else {
            openat(at, name, flags)?
        };
        if meta_of(&fstat(fd.as_raw_fd())?).kind != Kind::File {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(fd)
    }

    fn read_file_at(&self, at: &OwnedFd, name: &str, limit: usize) -> io::Result<(Meta, Vec<u8>)> {
        // O_NOFOLLOW refuses a symlink; O_NONBLOCK keeps a FIFO from blocking the open.
        let fd = openat(
            at,
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )?;
        let meta = meta_of(&fstat(fd.as_raw_fd())?);
        if meta.kind != Kind::File {
            // Never read from a FIFO, socket or device: the caller sees the kind and refuses.
            return Ok((meta, Vec::new()));
        }
        Ok((
            meta,
            read_to_limit(std::fs::File::from(fd), limit, meta.size)?,
        ))
    }

    fn sync_dir(&self, dir: &OwnedFd) -> io::Result<()> {
        // SAFETY: `dir` is open.
        match retry(|| unsafe { libc::fsync(dir.as_raw_fd()) }) {
            // Some filesystems cannot sync a directory; the data was synced already.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => Ok(()),
            other => other.map(drop),
        }
    }

    fn rename_noreplace(&self, at: &OwnedFd, from: &str, to: &str) -> io::Result<Renamed> {
        match self.rename_exclusive(at, from, to) {
            Ok(()) => return Ok(Renamed::Exclusive),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            Err(e) => return Err(e),
        }
        // Plain rename replaces only an empty directory; the protocol's lock directories are
        // never empty and the caller reads the token back.
        // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
        at_names(at, from, to, |at, f, t| unsafe {
            libc::renameat(at, f, at, t)
        })?;
        Ok(Renamed::Plain)
    }

    fn rename_exclusive(&self, at: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
        platform::rename_exclusive(at, from, to)
    }

    fn exchange(&self, at: &OwnedFd, a: &str, b: &str) -> io::Result<()> {
        platform::exchange(at, a, b)
    }

    fn replace_file_at(&self, at: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
        // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
        at_names(at, from, to, |at, f, t| unsafe {
            libc::renameat(at, f, at, t)
        })
        .map(drop)
    }

    fn remove_file_at(&self, at: &OwnedFd, name: &str) -> io::Result<()> {
        // SAFETY: `at` is open and `n` is NUL-terminated.
        at_name(at, name, |at, n| unsafe { libc::unlinkat(at, n, 0) }).map(drop)
    }

    fn remove_dir_at(&self, at: &OwnedFd, name: &str) -> io::Result<()> {
        // SAFETY: `at` is open and `n` is NUL-terminated.
        at_name(at, name, |at, n| unsafe {
            libc::unlinkat(at, n, libc::AT_REMOVEDIR)
        })
        .map(drop)
    }

    fn list(&self, dir: &OwnedFd) -> io::Result<Vec<String>> {
        Ok(self.list_all(dir)?.0)
    }

    fn list_all(&self, dir: &OwnedFd) -> io::Result<(Vec<String>, bool)> {
        // A fresh descriptor, so that the directory stream's offset is our own.
        let fresh = self.open_dir_at(dir, ".")?;
        names(|each| platform::list(fresh, each))
    }

    #[cfg(target_os = "linux")]
    fn list_opened(&self, dir: &OwnedFd) -> io::Result<Vec<String>> {
        Ok(names(|each| linux::list_opened(dir, each))?.0)
    }

    fn try_lock(&self, dir: &OwnedFd, exclusive: bool) -> io::Result<bool> {
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: `dir` is open; flock takes no pointers.
        match retry(|| unsafe { libc::flock(dir.as_raw_fd(), op | libc::LOCK_NB) }) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn unlock(&self, dir: &OwnedFd) -> io::Result<()> {
        // SAFETY: `dir` is open; flock takes no pointers.
        retry(|| unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_UN) }).map(drop)
    }

    fn wait_shared(&self, dir: &OwnedFd) -> io::Result<()> {
        // SAFETY: `dir` is open; flock takes no pointers. A blocking flock sleeps in the
        // kernel until the exclusive holder lets go; a signal (EINTR) just starts it again.
        retry(|| unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_SH) }).map(drop)
    }

    fn process_alive(&self, pid: u32) -> Option<bool> {
        let pid = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        // SAFETY: signal 0 only checks for existence and permission; nothing is delivered.
        if unsafe { libc::kill(pid, 0) } == 0 {
            return Some(true);
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(false),
            Some(libc::EPERM) => Some(true),
            _ => None,
        }
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        platform::start_time(pid)
    }

    fn watch(&self, lock: &OwnedFd, pid: Option<u32>, beacon: bool) -> io::Result<Option<Watch>> {
        platform::watch(lock, pid, beacon)
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
    match which {
        Exists => n == libc::EEXIST,
        NotEmpty => n == libc::ENOTEMPTY,
        NotDir => n == libc::ENOTDIR,
        Loop => n == libc::ELOOP,
        LockUnsupported => n == libc::ENOLCK || n == libc::EOPNOTSUPP || n == libc::ENOSYS,
    }
}

/// The filesystem `dir` is on: its type (`ext4`, `fuse.bindfs`, `nfs4`, `apfs`) and, where
/// the platform tells them, its mount options.
#[cfg(not(any(target_os = "macos", target_os = "freebsd")))]
pub(crate) fn filesystem(dir: &OwnedFd) -> Option<(String, String)> {
    platform::filesystem(dir)
}

/// The filesystem `dir` is on, on the BSDs: `fstatfs`'s type name (`apfs`, `nfs`, `ufs`,
/// `zfs`), and no options.
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
pub(crate) fn filesystem(dir: &OwnedFd) -> Option<(String, String)> {
    // SAFETY: all-zero is a valid `statfs`, which fstatfs overwrites; `dir` is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor and `st` is writable.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    let name: Vec<u8> = st
        .f_fstypename
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    Some((String::from_utf8_lossy(&name).into_owned(), String::new()))
}

#[cfg(test)]
/// Runs `f` in a forked child of this process (the calling thread's copy; the parent forgets
/// `f`) and says whether the child finished within `limit`: a child that did not (it waits
/// for a lock a thread of this process held at the fork) is killed. For the tests of what a
/// forked child may touch.
pub(crate) fn finishes_in_a_fork(limit: Duration, f: impl FnOnce()) -> bool {
    // SAFETY: the child runs only `f`, which tests make of drops and lock-free calls, and
    // leaves through _exit without unwinding or running its parent's destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        f();
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    std::mem::forget(f);
    let deadline = std::time::Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: polls our own child; `status` is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return true;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kills and reaps the child forked above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Makes `fd` survive `exec` in the child that `cmd` spawns (it stays close-on-exec here).
pub(crate) fn keep_open_in_child(cmd: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only calls fcntl, which
    // is async-signal-safe, on a descriptor the child inherited from us.
    unsafe {
        cmd.pre_exec(move || {
            let flags = check(libc::fcntl(fd, libc::F_GETFD))?;
            check(libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
            Ok(())
        });
    }
}

/// The names a platform's listing passes (see [`System::list`]): without `.` and `..`, and
/// without those that are not UTF-8 (and whether there were any such).
fn names(
    list: impl FnOnce(&mut dyn FnMut(&[u8])) -> io::Result<()>,
) -> io::Result<(Vec<String>, bool)> {
    let (mut names, mut more) = (Vec::new(), false);
    list(&mut |bytes| {
        // The protocol names everything it makes in ASCII: a name that is not UTF-8 is not
        // ours, and a lossy copy of it would name nothing (or something else).
        if bytes != b"." && bytes != b".." {
            match std::str::from_utf8(bytes) {
                Ok(name) => names.push(name.to_owned()),
                Err(_) => more = true,
            }
        }
    })?;
    Ok((names, more))
}
