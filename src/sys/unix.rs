//! The real [`System`]: `libc` calls, Linux first. Other Unixes compile with fallbacks (plain
//! `rename` verified by the caller, backoff instead of kernel wake-ups) until they get their own
//! tuned code here.
#![allow(unsafe_code)]

use super::{FileId, Identity, Kind, Meta, Renamed, System, Wake};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

/// Identity facts, cached per pid (a forked child reads its own).
static IDENTITY: Mutex<Option<Identity>> = Mutex::new(None);

/// The tokens this process wrote and is not done with, with the pid that wrote them (a forked
/// child starts with none of its parent's).
static TOKENS: Mutex<Option<(u32, std::collections::HashSet<String>)>> = Mutex::new(None);

fn cstr(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains NUL"))
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Turns a `-1` return into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
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

/// Resets the thread's `errno`, so that a null `readdir` can tell end-of-stream from error.
fn clear_errno() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: errno is thread-local and always addressable.
    unsafe {
        *libc::__errno_location() = 0
    };
    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    // SAFETY: errno is thread-local and always addressable.
    unsafe {
        *libc::__error() = 0
    };
}

fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: callers pass a descriptor just returned by a successful open-like call, which
    // nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

// The field types of `stat` differ by platform; the casts are no-ops on some.
#[allow(clippy::unnecessary_cast)]
fn meta_of(st: &libc::stat) -> Meta {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    };
    let mtime = if st.st_mtime >= 0 {
        UNIX_EPOCH
            + Duration::new(
                st.st_mtime as u64,
                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
            )
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

fn fstat(fd: RawFd) -> io::Result<Meta> {
    // SAFETY: `stat` is plain old data; all-zero is a valid value that fstat overwrites.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor borrowed for the call; `st` is a valid out-pointer.
    retry(|| unsafe { libc::fstat(fd, &mut st) })?;
    Ok(meta_of(&st))
}

fn read_to_limit(fd: RawFd, limit: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; limit + 1];
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which we own.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        len += n as usize;
    }
    buf.truncate(len);
    Ok(buf)
}

/// `openat(at, name, flags, 0600)`, retried on EINTR. Callers spell out every flag
/// (`O_CLOEXEC` included) where they call it.
fn openat(at: &OwnedFd, name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let n = cstr(name)?;
    // SAFETY: `at` is an open directory and `n` is NUL-terminated; the mode is read only with
    // O_CREAT. The result is a new descriptor or -1.
    let fd = retry(|| unsafe {
        libc::openat(at.as_raw_fd(), n.as_ptr(), flags, 0o600 as libc::c_uint)
    })?;
    Ok(owned(fd))
}

fn read_small(path: &CStr) -> Option<String> {
    // SAFETY: `path` is NUL-terminated; the flags open a read-only descriptor we own.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let fd = owned(fd);
    let bytes = read_to_limit(fd.as_raw_fd(), 4096).ok()?;
    String::from_utf8(bytes).ok()
}

fn read_link(path: &CStr) -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `path` is NUL-terminated and `buf` is a writable buffer of the given length.
    let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 || n as usize >= buf.len() {
        return None;
    }
    String::from_utf8(buf[..n as usize].to_vec()).ok()
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`.
fn proc_start_time(pid: u32) -> Option<u64> {
    let path = CString::new(format!("/proc/{pid}/stat")).ok()?;
    let text = read_small(&path)?;
    parse_start_time(&text)
}

/// Parses field 22 out of a `/proc/<pid>/stat` line; the command name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|h| !h.is_empty())
}

/// This process's pid, cached (glibc no longer caches it, and the protocol asks often); a
/// `pthread_atfork` child handler clears the cache in every forked child.
static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn forget_pid_in_child() {
    // Async-signal-safe: a relaxed atomic store.
    PID.store(0, Ordering::Relaxed);
}

fn getpid() -> u32 {
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only performs an atomic store; no prepare or parent
        // handler.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
    });
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() as u32 };
    PID.store(pid, Ordering::Relaxed);
    pid
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn read_identity() -> Identity {
    let pid = getpid();
    Identity {
        pid,
        start_time: proc_start_time(pid),
        boot_id: read_small(c"/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()),
        host: hostname(),
        pid_namespace: read_link(c"/proc/self/ns/pid"),
        uid: geteuid(),
    }
}

/// A waiter's registrations: a watch in the process's inotify instance (with an eventfd that
/// whoever reads the instance's events uses to wake this waiter) and, for a pid-judged holder,
/// a pidfd. Dropping it removes the watch once no other waiter of the process shares it.
#[derive(Debug)]
pub struct Watch {
    #[cfg(target_os = "linux")]
    inotify: Option<inotify::Registration>,
    pidfd: Option<OwnedFd>,
}

/// One inotify instance for the whole process (closing an instance waits for an SRCU grace
/// period in the kernel, up to tens of milliseconds, and each user may have only 128 of them,
/// so instances are neither made per wait nor kept per thread). Waiters add a watch on the lock
/// directory they wait for (shared, counted, when several wait for the same one), each with an
/// eventfd of its own; whichever waiter finds the instance readable reads every queued event
/// and wakes the waiters of the watches they name. A forked child makes its own instance.
#[cfg(target_os = "linux")]
mod inotify {
    use super::{check, getpid, owned};
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::sync::Mutex;

    /// The events that may mean a lock directory changed hands: the final close of the
    /// holder's beacon (its release or its death: the moment the kernel drops its flock), a
    /// release's rename, a removal, a mode change.
    const MASK: u32 = libc::IN_CLOSE_NOWRITE
        | libc::IN_CLOSE_WRITE
        | libc::IN_MOVE_SELF
        | libc::IN_DELETE_SELF
        | libc::IN_ATTRIB;

    struct Watched {
        /// Tells this watch apart from a later one that got the same number.
        generation: u64,
        /// Bumped by every event on it.
        epoch: u64,
        /// The eventfds of the waiters sharing it.
        wakers: Vec<RawFd>,
    }

    struct Instance {
        pid: u32,
        fd: OwnedFd,
        watches: HashMap<libc::c_int, Watched>,
        generations: u64,
    }

    static INSTANCE: Mutex<Option<Instance>> = Mutex::new(None);

    /// One waiter's share of a watch.
    #[derive(Debug)]
    pub(super) struct Registration {
        pub(super) instance: RawFd,
        wd: libc::c_int,
        generation: u64,
        seen: std::cell::Cell<u64>,
        pub(super) waker: OwnedFd,
    }

    fn lock() -> std::sync::MutexGuard<'static, Option<Instance>> {
        INSTANCE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches the directory open as `dir` (through `/proc/self/fd/N`, so the very inode that
    /// was judged, whatever its name is now). `None` when inotify is not available.
    pub(super) fn register(dir: RawFd) -> Option<Registration> {
        // SAFETY: eventfd with valid flags returns a new descriptor or -1.
        let waker =
            owned(check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).ok()?);
        let path = CString::new(format!("/proc/self/fd/{dir}")).ok()?;
        let mut slot = lock();
        let pid = getpid();
        if slot.as_ref().is_none_or(|i| i.pid != pid) {
            // SAFETY: inotify_init1 with valid flags returns a new descriptor or -1.
            let fd =
                check(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) }).ok()?;
            // A forked parent's instance is dropped here: only this process's copy closes.
            *slot = Some(Instance {
                pid,
                fd: owned(fd),
                watches: HashMap::new(),
                generations: 0,
            });
        }
        let inst = slot.as_mut().expect("just made");
        // SAFETY: the instance is open and `path` is NUL-terminated.
        let wd = unsafe { libc::inotify_add_watch(inst.fd.as_raw_fd(), path.as_ptr(), MASK) };
        if wd < 0 {
            return None;
        }
        inst.generations += 1;
        let fresh = inst.generations;
        let watched = inst.watches.entry(wd).or_insert(Watched {
            generation: fresh,
            epoch: 0,
            wakers: Vec::new(),
        });
        watched.wakers.push(waker.as_raw_fd());
        Some(Registration {
            instance: inst.fd.as_raw_fd(),
            wd,
            generation: watched.generation,
            seen: std::cell::Cell::new(watched.epoch),
            waker,
        })
    }

    /// Reads every queued event, bumps the watches they name and wakes their waiters.
    pub(super) fn dispatch() {
        let mut slot = lock();
        let Some(inst) = slot.as_mut().filter(|i| i.pid == getpid()) else {
            return;
        };
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into a local buffer of the given length from the non-blocking
            // instance.
            let n = unsafe { libc::read(inst.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return; // EAGAIN: drained (or an error that the next poll reports again)
            }
            let mut at = 0;
            while at + std::mem::size_of::<libc::inotify_event>() <= n as usize {
                // SAFETY: the kernel wrote whole events; the header is read unaligned from the
                // byte buffer.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                at += std::mem::size_of::<libc::inotify_event>() + ev.len as usize;
                if ev.len > 0 {
                    // About an entry inside (a reader of owner.json closing it), not the
                    // lock directory itself: nothing a waiter waits for.
                    continue;
                }
                let gone = ev.mask & libc::IN_IGNORED != 0;
                if let Some(w) = inst.watches.get_mut(&ev.wd) {
                    w.epoch += 1;
                    for &waker in &w.wakers {
                        let one: u64 = 1;
                        // SAFETY: writes 8 bytes to a waiter's eventfd; the waiter removes it
                        // from this list (under this lock) before closing it.
                        unsafe { libc::write(waker, (&one as *const u64).cast(), 8) };
                    }
                }
                if gone {
                    // The kernel dropped the watch (its inode died): forget the number.
                    inst.watches.remove(&ev.wd);
                }
            }
        }
    }

    impl Registration {
        /// Whether an event on this watch was seen since the last call (and consumes the
        /// waiter's wake-up).
        pub(super) fn changed(&self) -> bool {
            let mut buf = 0u64;
            // SAFETY: reads 8 bytes into a local u64 from our non-blocking eventfd.
            let woken =
                unsafe { libc::read(self.waker.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) }
                    == 8;
            let slot = lock();
            let epoch = slot
                .as_ref()
                .and_then(|i| i.watches.get(&self.wd))
                .filter(|w| w.generation == self.generation)
                .map(|w| w.epoch);
            let changed = woken || epoch != Some(self.seen.get());
            if let Some(e) = epoch {
                self.seen.set(e);
            }
            changed
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let mut slot = lock();
            let Some(inst) = slot.as_mut().filter(|i| i.fd.as_raw_fd() == self.instance) else {
                return;
            };
            let waker = self.waker.as_raw_fd();
            let last = match inst.watches.get_mut(&self.wd) {
                Some(w) if w.generation == self.generation => {
                    w.wakers.retain(|&f| f != waker);
                    w.wakers.is_empty()
                }
                _ => false,
            };
            if last {
                inst.watches.remove(&self.wd);
                // SAFETY: removes a watch of our open instance; one the kernel already dropped
                // just fails.
                unsafe { libc::inotify_rm_watch(inst.fd.as_raw_fd(), self.wd) };
            }
        }
    }
}

/// A cancellation signal shared between a waiter and whoever may cancel it (an `eventfd` on
/// Linux, a pipe elsewhere): once fired, it stays fired.
#[derive(Debug)]
pub struct CancelHandle {
    read: OwnedFd,
    #[cfg(not(target_os = "linux"))]
    write: OwnedFd,
    fired: AtomicBool,
}

impl CancelHandle {
    /// Makes a new, unfired handle.
    pub fn new() -> io::Result<Arc<CancelHandle>> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: eventfd with valid flags returns a new descriptor or -1.
            let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
            Ok(Arc::new(CancelHandle {
                read: owned(fd),
                fired: AtomicBool::new(false),
            }))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut fds = [0; 2];
            // SAFETY: `fds` is a valid array of two descriptors for pipe to fill.
            check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
            let (read, write) = (owned(fds[0]), owned(fds[1]));
            for fd in [&read, &write] {
                // SAFETY: both descriptors are open and owned here.
                check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
            }
            Ok(Arc::new(CancelHandle {
                read,
                write,
                fired: AtomicBool::new(false),
            }))
        }
    }

    /// Fires the handle, waking every sleeper polling it.
    pub fn fire(&self) {
        if self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        let one: u64 = 1;
        #[cfg(target_os = "linux")]
        let fd = self.read.as_raw_fd();
        #[cfg(not(target_os = "linux"))]
        let fd = self.write.as_raw_fd();
        // SAFETY: writes 8 bytes from a live u64 to an open descriptor we own. A failure (the
        // counter cannot overflow from 0) would only lose a wake-up that `fired` still records.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }

    /// Whether the handle has fired.
    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

fn ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        // Round up so that a sleep never returns before its deadline.
        Some(d) => d.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    }
}

impl System for Real {
    type Dir = OwnedFd;
    type Watch = Watch;

    fn identity(&self) -> Identity {
        let pid = getpid();
        let mut cached = IDENTITY.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some(id) if id.pid == pid => id.clone(),
            _ => {
                let id = read_identity();
                *cached = Some(id.clone());
                id
            }
        }
    }

    fn pid(&self) -> u32 {
        getpid()
    }

    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Duration {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }

    fn token(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }

    fn own_token(&self, token: &str, own: bool) {
        let pid = getpid();
        let mut tokens = TOKENS.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.as_ref().is_none_or(|(p, _)| *p != pid) {
            *tokens = Some((pid, Default::default()));
        }
        let (_, set) = tokens.as_mut().expect("just made");
        if own {
            set.insert(token.to_owned());
        } else {
            set.remove(token);
        }
    }

    fn wrote(&self, token: &str) -> bool {
        let pid = getpid();
        let tokens = TOKENS.lock().unwrap_or_else(|e| e.into_inner());
        tokens
            .as_ref()
            .is_some_and(|(p, set)| *p == pid && set.contains(token))
    }

    fn open_dir_path(&self, path: &Path) -> io::Result<OwnedFd> {
        let p = cpath(path)?;
        // SAFETY: `p` is NUL-terminated; the result is a new descriptor or -1.
        let fd = retry(|| unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
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
        let n = cstr(name)?;
        // SAFETY: `at` is an open directory and `n` is NUL-terminated.
        retry(|| unsafe { libc::mkdirat(at.as_raw_fd(), n.as_ptr(), 0o700) })?;
        Ok(())
    }

    fn meta(&self, dir: &OwnedFd) -> io::Result<Meta> {
        fstat(dir.as_raw_fd())
    }

    fn meta_at(&self, at: &OwnedFd, name: &str) -> io::Result<Meta> {
        let n = cstr(name)?;
        // SAFETY: `stat` is plain old data; all-zero is a valid value that fstatat overwrites.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `at` is open, `n` is NUL-terminated and `st` is a valid out-pointer.
        retry(|| unsafe {
            libc::fstatat(
                at.as_raw_fd(),
                n.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(meta_of(&st))
    }

    fn set_mode(&self, dir: &OwnedFd, mode: u32) -> io::Result<()> {
        // SAFETY: `dir` is an open descriptor.
        retry(|| unsafe { libc::fchmod(dir.as_raw_fd(), mode as libc::mode_t) })?;
        Ok(())
    }

    fn set_mode_at(&self, at: &OwnedFd, name: &str, mode: u32) -> io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: `at` is open and `n` is NUL-terminated.
        retry(|| unsafe { libc::fchmodat(at.as_raw_fd(), n.as_ptr(), mode as libc::mode_t, 0) })?;
        Ok(())
    }

    fn create_file_at(
        &self,
        at: &OwnedFd,
        name: &str,
        contents: &[u8],
        sync: bool,
        exact_mode: bool,
    ) -> io::Result<()> {
        // O_EXCL | O_NOFOLLOW: a new file, or an error.
        let fd = openat(
            at,
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        if exact_mode {
            // The umask took bits away (even the owner's): set the mode exactly.
            // SAFETY: `fd` is the file just created.
            retry(|| unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) })?;
        }
        let mut written = 0;
        while written < contents.len() {
            let rest = &contents[written..];
            // SAFETY: the pointer and length describe the unwritten tail of `contents`.
            let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            written += n as usize;
        }
        if sync {
            // SAFETY: `fd` is open.
            retry(|| unsafe { libc::fsync(fd.as_raw_fd()) })?;
        }
        Ok(())
    }

    fn read_file_at(&self, at: &OwnedFd, name: &str, limit: usize) -> io::Result<(Meta, Vec<u8>)> {
        // O_NOFOLLOW refuses a symlink; O_NONBLOCK keeps a FIFO from blocking the open.
        let fd = openat(
            at,
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )?;
        let meta = fstat(fd.as_raw_fd())?;
        if meta.kind != Kind::File {
            // Never read from a FIFO, socket or device: the caller sees the kind and refuses.
            return Ok((meta, Vec::new()));
        }
        let bytes = read_to_limit(fd.as_raw_fd(), limit)?;
        Ok((meta, bytes))
    }

    fn sync_dir(&self, dir: &OwnedFd) -> io::Result<()> {
        // SAFETY: `dir` is open.
        match retry(|| unsafe { libc::fsync(dir.as_raw_fd()) }) {
            // Some filesystems cannot sync a directory; the data was synced already.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
                ) =>
            {
                Ok(())
            }
            other => other.map(drop),
        }
    }

    fn rename_noreplace(&self, at: &OwnedFd, from: &str, to: &str) -> io::Result<Renamed> {
        match self.rename_exclusive(at, from, to) {
            Ok(()) => return Ok(Renamed::Exclusive),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            Err(e) => return Err(e),
        }
        let (f, t) = (cstr(from)?, cstr(to)?);
        // Plain rename replaces only an empty directory; the protocol's lock directories are
        // never empty and the caller reads the token back.
        // SAFETY: both names are NUL-terminated and relative to the open directory `at`.
        retry(|| unsafe {
            libc::renameat(at.as_raw_fd(), f.as_ptr(), at.as_raw_fd(), t.as_ptr())
        })?;
        Ok(Renamed::Plain)
    }

    fn rename_exclusive(&self, at: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
        let unsupported = || {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "this filesystem has no no-replace rename",
            )
        };
        #[cfg(target_os = "linux")]
        {
            let (f, t) = (cstr(from)?, cstr(to)?);
            loop {
                // SAFETY: both names are NUL-terminated and relative to the open directory
                // `at`; renameat2 takes no pointers beyond them.
                let ret = unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        at.as_raw_fd(),
                        f.as_ptr(),
                        at.as_raw_fd(),
                        t.as_ptr(),
                        libc::RENAME_NOREPLACE,
                    )
                };
                if ret == 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    // Interrupted (NFS `intr` mounts): try again. Had the rename happened, the
                    // retry fails and the caller checks whether the target is its own.
                    Some(libc::EINTR) => continue,
                    // The kernel or this filesystem does not know the flag (asked again next
                    // time: another filesystem may know it).
                    Some(libc::EINVAL) | Some(libc::ENOSYS) => return Err(unsupported()),
                    _ => return Err(e),
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (at, from, to);
            Err(unsupported())
        }
    }

    fn remove_file_at(&self, at: &OwnedFd, name: &str) -> io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: `at` is open and `n` is NUL-terminated.
        retry(|| unsafe { libc::unlinkat(at.as_raw_fd(), n.as_ptr(), 0) })?;
        Ok(())
    }

    fn remove_dir_at(&self, at: &OwnedFd, name: &str) -> io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: `at` is open and `n` is NUL-terminated.
        retry(|| unsafe { libc::unlinkat(at.as_raw_fd(), n.as_ptr(), libc::AT_REMOVEDIR) })?;
        Ok(())
    }

    fn list(&self, dir: &OwnedFd) -> io::Result<Vec<String>> {
        // A fresh descriptor, so that the directory stream's offset is our own.
        let fresh = self.open_dir_at(dir, ".")?;
        // SAFETY: fdopendir takes ownership of the descriptor on success.
        let stream = unsafe { libc::fdopendir(fresh.as_raw_fd()) };
        if stream.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(fresh); // now owned by `stream`, closed by closedir below
        let mut names = Vec::new();
        let result = loop {
            clear_errno();
            // SAFETY: `stream` is a valid open directory stream.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                break if e.raw_os_error() == Some(0) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated; it stays
            // valid until the next readdir on this stream.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            // The protocol names everything it makes in ASCII: a name that is not UTF-8 is not
            // ours, and a lossy copy of it would name nothing (or something else).
            if let Ok(name) = std::str::from_utf8(bytes) {
                names.push(name.to_owned());
            }
        };
        // SAFETY: `stream` is valid and closed exactly once.
        unsafe { libc::closedir(stream) };
        result.map(|()| names)
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
        proc_start_time(pid)
    }

    #[cfg(target_os = "linux")]
    fn watch(&self, lock: &OwnedFd, pid: Option<u32>) -> io::Result<Option<Watch>> {
        let inotify = inotify::register(lock.as_raw_fd());
        let pidfd = pid.and_then(|pid| {
            // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            (fd >= 0).then(|| owned(fd as libc::c_int))
        });
        if inotify.is_none() && pidfd.is_none() {
            return Ok(None);
        }
        Ok(Some(Watch { inotify, pidfd }))
    }

    #[cfg(not(target_os = "linux"))]
    fn watch(&self, _lock: &OwnedFd, _pid: Option<u32>) -> io::Result<Option<Watch>> {
        Ok(None)
    }

    fn sleep(
        &self,
        watch: Option<&Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        if cancel.is_some_and(|c| c.is_fired()) {
            return Ok(Wake::Cancelled);
        }
        // Slots: the cancel's fd, the shared inotify instance, this waiter's eventfd, the
        // holder's pidfd (each only when there is one; -1 is ignored by poll).
        let cancel_fd = cancel.map_or(-1, |c| c.read.as_raw_fd());
        #[cfg(target_os = "linux")]
        let reg = watch.and_then(|w| w.inotify.as_ref());
        #[cfg(target_os = "linux")]
        let (instance, waker) = reg.map_or((-1, -1), |r| (r.instance, r.waker.as_raw_fd()));
        #[cfg(not(target_os = "linux"))]
        let (instance, waker) = (-1, -1);
        let pidfd = watch
            .and_then(|w| w.pidfd.as_ref())
            .map_or(-1, |f| f.as_raw_fd());
        let mut fds: Vec<libc::pollfd> = [cancel_fd, instance, waker, pidfd]
            .into_iter()
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms(left)) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Ok(Wake::TimedOut);
            }
            if fds[0].revents != 0 {
                return Ok(Wake::Cancelled);
            }
            if fds[3].revents != 0 {
                return Ok(Wake::Changed); // the holder exited (or its pidfd says something)
            }
            #[cfg(target_os = "linux")]
            if let Some(reg) = reg {
                if fds[1].revents != 0 {
                    inotify::dispatch();
                }
                if reg.changed() {
                    return Ok(Wake::Changed);
                }
                // Another waiter's event: sleep on.
                for f in &mut fds {
                    f.revents = 0;
                }
                continue;
            }
            return Ok(Wake::Changed);
        }
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Readers of what a lock directory holds (status reading owner.json) do not wake its
    /// waiters; its own rename does.
    #[test]
    fn only_the_lock_directory_itself_wakes_a_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let sys = Real;
        let parent = sys.open_dir_path(tmp.path()).unwrap();
        sys.mkdir_at(&parent, "l").unwrap();
        let lock = sys.open_dir_at(&parent, "l").unwrap();
        sys.create_file_at(&lock, "owner.json", b"{}", false, false)
            .unwrap();
        let watch = sys.watch(&lock, None).unwrap().expect("inotify");
        for _ in 0..5 {
            sys.read_file_at(&lock, "owner.json", 100).unwrap();
        }
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_millis(50)), None)
            .unwrap();
        assert_eq!(wake, Wake::TimedOut, "reading owner.json woke the waiter");
        let _ = sys.rename_noreplace(&parent, "l", "m").unwrap();
        let wake = sys
            .sleep(Some(&watch), Some(Duration::from_secs(5)), None)
            .unwrap();
        assert_eq!(wake, Wake::Changed, "the rename did not wake the waiter");
    }
}
