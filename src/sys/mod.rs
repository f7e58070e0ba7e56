//! The one place where the crate meets the operating system.
//!
//! The protocol ([`crate::protocol`], [`crate::reclaim`]) is written against the [`System`]
//! trait below: the few filesystem, clock and process operations it needs, every filesystem
//! operation relative to an open directory handle. [`Real`] implements it with `libc` on Unix,
//! one module per platform under `unix` (all `unsafe` in the crate lives in this module's
//! children); a deterministic simulation can
//! implement it over an in-memory model and run the very same protocol code. The protocol is
//! generic over the trait, so the seam is resolved at compile time and costs nothing.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

mod per_process;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

pub(crate) use per_process::PerProcess;

/// The error numbers this platform's system answers with in the cases the simulation's kernel
/// models (Unix's `errno` values, or the Win32 errors Windows gives for the same cases), so that
/// [`is`] tells them apart in the simulation as it does for real.
#[cfg(any(test, fuzzing))]
pub(crate) mod errno {
    #[cfg(unix)]
    pub(crate) use libc::{EBADF, EEXIST, EISDIR, ENAMETOOLONG, ENOLCK, ENOTDIR, ENOTEMPTY};
    #[cfg(windows)]
    mod win32 {
        use windows_sys::Win32::Foundation as F;
        pub(crate) const EBADF: i32 = F::ERROR_INVALID_HANDLE as i32;
        pub(crate) const EEXIST: i32 = F::ERROR_ALREADY_EXISTS as i32;
        pub(crate) const ENOTDIR: i32 = F::ERROR_DIRECTORY as i32;
        pub(crate) const EISDIR: i32 = F::ERROR_ACCESS_DENIED as i32;
        pub(crate) const ENAMETOOLONG: i32 = F::ERROR_FILENAME_EXCED_RANGE as i32;
        pub(crate) const ENOLCK: i32 = F::ERROR_NOT_SUPPORTED as i32;
        pub(crate) const ENOTEMPTY: i32 = F::ERROR_DIR_NOT_EMPTY as i32;
    }
    #[cfg(windows)]
    pub(crate) use win32::*;
}

#[cfg(all(unix, test))]
pub(crate) use unix::finishes_in_a_fork;
#[cfg(unix)]
use unix::process_key;
#[cfg(all(unix, feature = "tokio"))]
pub(crate) use unix::{check_reactor, sleep_async};
#[cfg(unix)]
pub(crate) use unix::{filesystem, group_of, in_group};
#[cfg(unix)]
pub use unix::{CancelHandle, Real};
#[cfg(windows)]
pub(crate) use windows::filesystem;
#[cfg(windows)]
use windows::process_key;
#[cfg(all(windows, feature = "tokio"))]
pub(crate) use windows::{check_reactor, sleep_async};
#[cfg(windows)]
pub use windows::{CancelHandle, Real};
// The platform's part of naming (paths.rs) and of the lock directory's checks (lockdir.rs).
#[cfg(unix)]
pub(crate) use unix::{access::*, naming::*};
#[cfg(windows)]
pub(crate) use windows::{access::*, naming::*};

/// The longest environment variable (`NAME=value` and its terminator) a spawned program can be
/// given: Linux's `MAX_ARG_STRLEN` (32 pages: 128 KiB with 4 KiB pages, 2 MiB with 64 KiB
/// ones); Windows' 32767 characters (bytes here: a variable of ours is ASCII); elsewhere no
/// bound of its own (only the whole environment's, which the spawn reports).
pub(crate) fn max_variable() -> Option<usize> {
    #[cfg(target_os = "linux")]
    return Some(32 * unix::page_size());
    #[cfg(windows)]
    return Some(32_767);
    #[allow(unreachable_code)]
    None
}

/// The process's limit of open files, where it has one (Unix's `RLIMIT_NOFILE`, the soft
/// one; Windows has none to speak of).
pub(crate) fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    return unix::open_files_limit();
    #[allow(unreachable_code)]
    None
}

/// The real system's open directory.
pub(crate) type RealDir = <Real as System>::Dir;

/// Makes the beacon `dir` survive `exec` in the child that `cmd` spawns (Unix: the descriptor
/// stays close-on-exec here). On Windows a child cannot inherit it: nothing is done.
#[cfg(unix)]
pub(crate) fn keep_open_in_child(cmd: &mut std::process::Command, dir: &RealDir) {
    use std::os::fd::AsRawFd;
    unix::keep_open_in_child(cmd, dir.as_raw_fd());
}

/// See the Unix form: on Windows a child cannot inherit the beacon, so nothing is done.
#[cfg(windows)]
pub(crate) fn keep_open_in_child(_cmd: &mut std::process::Command, _dir: &RealDir) {}

/// The identity of a file: device and inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

/// What kind of file a path names (symlinks are never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// The facts the protocol needs about a file (an `lstat`/`fstat` subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Device and inode.
    pub id: FileId,
    /// File type.
    pub kind: Kind,
    /// Owning user.
    pub uid: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Link count; 0 for a directory that has been removed.
    pub nlink: u64,
    /// Last modification time.
    pub mtime: SystemTime,
}

/// How a [`System::rename_noreplace`] was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renamed {
    /// With no-replace semantics: its success proves `to` did not exist.
    Exclusive,
    /// With a plain rename (the filesystem refused no-replace): `to` may have been an empty
    /// directory that is now gone, so the caller checks what it renamed.
    #[cfg_attr(
        all(windows, not(any(test, fuzzing))),
        expect(dead_code, reason = "Windows always renames without replacing")
    )]
    Plain,
}

/// Why a [`System::sleep`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Something watched changed (or may have): look again.
    Changed,
    /// The timeout passed.
    TimedOut,
    /// The caller's cancel handle fired.
    Cancelled,
}

/// This process's identity facts, read once (see [`System::identity`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// Process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot (Linux: field 22 of `/proc/self/stat`).
    pub start_time: Option<u64>,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: Option<String>,
    /// Host name.
    pub host: Option<String>,
    /// Pid namespace (`/proc/self/ns/pid` link target).
    pub pid_namespace: Option<String>,
    /// Effective user id.
    pub uid: u32,
    /// The operating system this process runs on and judges with (`std::env::consts::OS`):
    /// its beacons and pids are the only ones it can test.
    pub os: Option<String>,
    /// When this kernel booted (wall clock), where the platform tells (with a boot id).
    pub booted: Option<SystemTime>,
}

/// Time and chance: the part of [`System`] that is the same on every platform (written once
/// for [`Real`]; the simulation has a virtual clock and counted tokens).
pub trait Clock {
    /// Wall-clock time (used for the grace period, measured against directory mtimes).
    fn now(&self) -> SystemTime;
    /// A monotonic clock reading, for deadlines.
    fn monotonic(&self) -> Duration;
    /// A fresh random token (a UUID v4 in the real system).
    fn token(&self) -> String;
}

impl Clock for Real {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Duration {
        #[cfg(unix)]
        return unix::monotonic();
        #[cfg(windows)]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed()
        }
    }

    fn token(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// The system operations the lock protocol is written against.
///
/// Every filesystem operation is relative to an open directory ([`System::Dir`]) and never
/// follows a symbolic link in its last component. Errors are plain [`io::Error`]s; the
/// protocol attaches the operation and the path.
pub trait System: Clock {
    /// An open directory handle; dropping it closes the descriptor (and so releases any
    /// `flock` held through it).
    type Dir;
    /// A registration that makes [`System::sleep`] return when a lock directory changes.
    type Watch;

    /// This process's identity. Implementations read it once and re-read only after a fork.
    fn identity(&self) -> Identity;
    /// The current process id (changes in a forked child).
    fn pid(&self) -> u32;
    /// Whether this process has crashed and is unwinding (the simulation's crash): nothing
    /// may then be done on its behalf, as nothing is after a real crash. Never, for real.
    fn crashed(&self) -> bool {
        false
    }
    /// Records that this process wrote `token` into a candidate (`true`, when it stages one)
    /// or is done with it (`false`: the candidate was removed, or the lock retired or lost).
    fn own_token(&self, token: &str, own: bool);
    /// Whether this process wrote `token` and is not done with it (see
    /// [`System::own_token`]). A record naming this process's pid with any other token was
    /// written by a dead process whose pid we now have.
    fn wrote(&self, token: &str) -> bool;

    /// Opens the directory at `path`, following symlinks (used for the temp dir only).
    fn open_dir_path(&self, path: &Path) -> io::Result<Self::Dir>;
    /// Opens directory `name` in `at` (`O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`).
    fn open_dir_at(&self, at: &Self::Dir, name: &str) -> io::Result<Self::Dir>;
    /// Creates directory `name` in `at` with mode 0700 (before the umask).
    fn mkdir_at(&self, at: &Self::Dir, name: &str) -> io::Result<()>;
    /// `fstat` of an open directory.
    fn meta(&self, dir: &Self::Dir) -> io::Result<Meta>;
    /// Whether the open directory `dir` was removed (its link count is 0, or `fstat` says it
    /// is [`gone`]).
    fn unlinked(&self, dir: &Self::Dir) -> bool {
        match self.meta(dir) {
            Ok(m) => m.nlink == 0,
            Err(e) => gone(&e),
        }
    }
    /// `fstatat(.., AT_SYMLINK_NOFOLLOW)`.
    fn meta_at(&self, at: &Self::Dir, name: &str) -> io::Result<Meta>;
    /// `fchmod` of an open directory.
    fn set_mode(&self, dir: &Self::Dir, mode: u32) -> io::Result<()>;
    /// `fchmodat` of entry `name` in `at`.
    fn set_mode_at(&self, at: &Self::Dir, name: &str, mode: u32) -> io::Result<()>;
    /// Opens directory `name` in `at`, which this process just made. Under a umask that takes
    /// the owner's own permissions away (0777), an unprivileged open of it is refused: its
    /// mode is then set to 0700 by name first, which is safe because nobody else can replace
    /// an entry in the directories the protocol makes them in (ours, or sticky ones).
    fn open_made_dir_at(&self, at: &Self::Dir, name: &str) -> io::Result<Self::Dir> {
        match self.open_dir_at(at, name) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                self.set_mode_at(at, name, 0o700)?;
                self.open_dir_at(at, name)
            }
            other => other,
        }
    }
    /// Creates file `name` in `at` with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600 (less
    /// the umask; exactly `mode` where one is given, before anything is written), writes
    /// `contents` and, if `sync`, fsyncs it.
    fn create_file_at(
        &self,
        at: &Self::Dir,
        name: &str,
        contents: &[u8],
        sync: bool,
        mode: Option<u32>,
    ) -> io::Result<()>;
    /// Opens regular file `name` in `at` for its `flock` (`O_RDONLY | O_NOFOLLOW | O_NONBLOCK
    /// | O_CLOEXEC`), or, with `create`, makes it first, empty and mode exactly 0600, failing
    /// with `EEXIST` when anything is there (`O_CREAT | O_EXCL`): the reclaim guard where the
    /// filesystem has no no-replace rename. Anything but a regular file fails (`ELOOP` for a
    /// symlink, `ENOTDIR`... as the platform says). Windows, whose renames never replace,
    /// makes no such guard, and answers [`io::ErrorKind::Unsupported`].
    fn open_file_at(&self, at: &Self::Dir, name: &str, create: bool) -> io::Result<Self::Dir>;
    /// Reads file `name` in `at` without following a symlink or blocking on a FIFO; returns its
    /// metadata and at most `limit + 1` bytes (so the caller can tell an oversized file).
    fn read_file_at(&self, at: &Self::Dir, name: &str, limit: usize)
        -> io::Result<(Meta, Vec<u8>)>;
    /// fsyncs an open directory.
    fn sync_dir(&self, dir: &Self::Dir) -> io::Result<()>;
    /// Renames `from` to `to` within `at`, failing with `EEXIST`/`ENOTEMPTY` if `to` exists.
    /// Where this filesystem rejects no-replace renames, falls back to a plain rename (which
    /// can replace only an *empty* directory) and says so: the caller verifies the result. The
    /// fallback is decided call by call (no-replace is tried every time), so a filesystem
    /// without it never makes renames plain on another.
    fn rename_noreplace(&self, at: &Self::Dir, from: &str, to: &str) -> io::Result<Renamed>;
    /// [`rename_noreplace`](Self::rename_noreplace) of directory `from`, open as `dir`, which
    /// afterwards knows its new name where a handle otherwise keeps the name it was opened
    /// by (Wine: a candidate published by name would go on being reached at its old one).
    fn rename_dir_noreplace(
        &self,
        at: &Self::Dir,
        dir: &Self::Dir,
        from: &str,
        to: &str,
    ) -> io::Result<Renamed> {
        let _ = dir;
        self.rename_noreplace(at, from, to)
    }
    /// Like [`System::rename_noreplace`], but never falls back to a plain rename: where the
    /// filesystem has no no-replace rename it fails with [`io::ErrorKind::Unsupported`] (for
    /// the reclaim guard, whose rival may be another implementation's empty directory).
    fn rename_exclusive(&self, at: &Self::Dir, from: &str, to: &str) -> io::Result<()>;
    /// Exchanges the entries `a` and `b` of `at` in one atomic step, both of which must exist
    /// (a lock handed over: the waiter's candidate becomes `NAME` as the old lock leaves).
    /// [`io::ErrorKind::Unsupported`] where the system or the filesystem cannot.
    fn exchange(&self, at: &Self::Dir, a: &str, b: &str) -> io::Result<()> {
        let _ = (at, a, b);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this system has no atomic exchange of two names",
        ))
    }
    /// Renames file `from` to `to` within `at`, replacing the file at `to` in one step (a
    /// shared lock's record rewritten: a reader of it sees the old record or the new one,
    /// never none).
    fn replace_file_at(&self, at: &Self::Dir, from: &str, to: &str) -> io::Result<()>;
    /// Removes file `name` in `at`.
    fn remove_file_at(&self, at: &Self::Dir, name: &str) -> io::Result<()>;
    /// Removes empty directory `name` in `at`.
    fn remove_dir_at(&self, at: &Self::Dir, name: &str) -> io::Result<()>;
    /// The names in a directory (without `.` and `..`, and without names that are not UTF-8:
    /// the protocol makes none, and leaves them alone).
    fn list(&self, dir: &Self::Dir) -> io::Result<Vec<String>>;
    /// [`System::list`], and whether it left out a name that is not UTF-8 (a sign that the
    /// directory is no lock's: the protocol makes no such name).
    fn list_all(&self, dir: &Self::Dir) -> io::Result<(Vec<String>, bool)> {
        Ok((self.list(dir)?, false))
    }
    /// [`System::list`] of a directory the caller just opened for it, and lists once: where the
    /// platform can, `dir`'s own stream is read (no descriptor opened and closed for it: a
    /// release lists the queue on its way to the handoff). Listed again, it would be empty.
    fn list_opened(&self, dir: &Self::Dir) -> io::Result<Vec<String>> {
        self.list(dir)
    }
    /// `flock` without blocking: `Ok(true)` when taken, `Ok(false)` when someone else holds a
    /// conflicting lock. A lock held through `dir` already is converted: in one step where the
    /// kernel does so (Linux; elsewhere it is let go first), and, not granted, let go.
    fn try_lock(&self, dir: &Self::Dir, exclusive: bool) -> io::Result<bool>;
    /// Drops the `flock` held through `dir`'s open file description, for every descriptor
    /// that shares it (a forked child's copy included), before `dir` is closed.
    fn unlock(&self, dir: &Self::Dir) -> io::Result<()>;
    /// Blocks until a shared `flock` on `dir` is granted (the exclusive holder let go: it
    /// released, or it died). The shared lock stays until `dir` is closed: it conflicts only
    /// with an exclusive one, which nobody takes on a lock that was released or whose owner
    /// died, and keeping it spares a system call on the way to the lock. The kernel's own
    /// handoff: the fastest wake-up there is, but neither cancellable nor timed, so only for
    /// unbounded waits.
    fn wait_shared(&self, dir: &Self::Dir) -> io::Result<()>;

    /// Whether process `pid` exists: `Some(false)` only when the kernel says there is no such
    /// process; `None` when it cannot tell.
    fn process_alive(&self, pid: u32) -> Option<bool>;
    /// The start time of process `pid`, if readable.
    fn start_time(&self, pid: u32) -> Option<u64>;

    /// Registers interest in lock directory `lock`: its rename or removal, its beacon's release
    /// (or the death of whoever held it) when `beacon`, and the exit of process `pid` when given:
    /// the holder a pid-judged lock waits on, or the beacon holder's recorded pid, which a
    /// platform that cannot see the beacon let go (macOS: kqueue reports no close) watches
    /// instead. What the watch cannot be woken for (a pid whose exit the kernel cannot report),
    /// its sleeps look at again every 100 ms. `Ok(None)` when the system offers no way to be
    /// woken; the caller then backs off.
    fn watch(
        &self,
        lock: &Self::Dir,
        pid: Option<u32>,
        beacon: bool,
    ) -> io::Result<Option<Self::Watch>>;
    /// How long a sleep on a watch may last at most before the waiter looks at the lock again,
    /// where a notification may be lost: on a real system, every one may (a kernel queue that
    /// overflows while the process is stopped or busy, a watch a platform drops), so a second.
    fn look_again(&self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }
    /// Gives the processor to another runnable thread, if any (a release that just woke the
    /// waiter it handed the lock to lets it run first, on this processor, where the kernel
    /// put it: its clean-up can wait). A simulation schedules its own steps: a no-op there.
    fn yield_now(&self) {
        std::thread::yield_now();
    }
    /// How long waiters may keep a lock among themselves, handing it on, before a release
    /// leaves it free for those that do not queue (`None`: the protocol's two seconds; a
    /// simulation, whose schedules never last that long, gives a turn at every release).
    fn turn_every(&self) -> Option<Duration> {
        None
    }
    /// Sleeps until `watch` fires, `timeout` passes (`None`: no timeout), or `cancel` fires.
    fn sleep(
        &self,
        watch: Option<&Self::Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake>;
}

/// Windows has no group that shares a directory as Unix modes say it.
#[cfg(windows)]
pub(crate) fn group_of(_dir: &RealDir) -> Option<u32> {
    None
}

/// See [`group_of`].
#[cfg(windows)]
pub(crate) fn in_group(_gid: u32) -> bool {
    false
}

/// A group in words: `gid N`.
pub fn group_words(gid: u32) -> String {
    format!("gid {gid}")
}

/// A file's owner in the platform's words: `uid N` on Unix; on Windows, where the crate's
/// [`Meta::uid`] is 0 for us and 1 for anyone else, `this user` or `another user`.
pub fn owner_words(uid: u32) -> String {
    if cfg!(windows) {
        if uid == 0 {
            "this user"
        } else {
            "another user"
        }
        .to_owned()
    } else {
        format!("uid {uid}")
    }
}

/// What is wrong with a mode that lets others write, in the platform's words: `mode 775,
/// writable by group or others` on Unix; on Windows an ACL that lets other users write.
pub fn mode_words(mode: u32) -> String {
    if cfg!(windows) {
        "an access list that lets other users write".to_owned()
    } else {
        format!("mode {:o}, writable by group or others", mode & 0o777)
    }
}

/// The error numbers the protocol tells apart, named portably (the numbers differ by platform).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// `EEXIST`.
    Exists,
    /// `ENOTEMPTY`.
    NotEmpty,
    /// `ENOTDIR`.
    NotDir,
    /// `ELOOP` (what `O_NOFOLLOW` reports for a symlink).
    Loop,
    /// `ENOLCK`, `EOPNOTSUPP` or `ENOSYS` from `flock`: the filesystem has no such locks.
    LockUnsupported,
}

/// Whether `e`, from `fstat` of an open directory, says the directory no longer exists:
/// `ENOENT` (some FUSE filesystems answer so for a removed directory) or `ESTALE` (NFS: removed
/// on the server, by another client or another process).
pub(crate) fn gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::StaleNetworkFileHandle
    )
}

/// Whether `e` is the error `which`.
pub fn is(e: &io::Error, which: Errno) -> bool {
    #[cfg(unix)]
    return unix::is(e, which);
    #[cfg(windows)]
    return windows::is(e, which);
}
