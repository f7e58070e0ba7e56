//! Deterministic simulation of the protocol (test builds only).
//!
//! The protocol code itself ([`protocol::acquire`], [`protocol::release`], [`protocol::sweep`],
//! [`protocol::unlock`] and the reclaim under them) runs over [`SimSys`], an in-memory model of
//! the few system calls of the [`System`] seam: directories and files with modes and mtimes,
//! open file descriptions with `flock`s, processes with pids and start times, a virtual clock,
//! and inotify-like change counters. Each simulated process runs its script on an OS thread of
//! its own, but only one runs at a time: every system call is a scheduling point where it hands
//! a baton back to the scheduler, which picks who runs next (seeded at random, or exhaustively
//! by depth-first search within a preemption bound) and may crash any process there, as
//! `SIGKILL` would: its descriptors close (dropping its `flock`s) and its thread unwinds
//! without touching the model again. After every step the invariants I1 to I9 of the protocol
//! are checked against the model's ground truth.
//!
//! A failing seed prints the violation and the last steps; `SIM_DEBUG=1` also prints every
//! scheduling decision. Modes: working `flock` (owners judged by their beacon), no `flock`
//! (judged by pid, grace periods waited out, pids reused), hostile input (an intruder's empty
//! directory at the lock path), and the test-only mutants of [`Mutant`].

use crate::error::Error;
use crate::options::{Options, Wait};
use crate::owner::Owner;
use crate::paths::{classify, guard_name, Entry, OWNER_FILE};
use crate::protocol::{self, Request, Space};
use crate::sys::{CancelHandle, FileId, Identity, Kind, Meta, Mutant, Renamed, System, Wake};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type Ino = u64;
/// The directory that holds the lock directory (the per-user base directory).
const PARENT: Ino = 1;
/// The lock directory's name in `PARENT` (a cleaner may remove it; it is made again).
const LOCKS: &str = "locks";
const UID: u32 = 1000;
const LOCK: &str = "x.lock";
/// Each system call takes this long on the virtual clock.
const TICK: Duration = Duration::from_millis(1);

/// The unwinding payload of a crashed process.
struct Crashed;

#[derive(Debug)]
enum Node {
    Dir(BTreeMap<String, Ino>),
    File(Vec<u8>),
}

#[derive(Debug)]
struct Inode {
    node: Node,
    mode: u32,
    mtime: Duration,
    /// Bumped by events a watcher cares about (close, move, removal, mode change).
    epoch: u64,
    /// Made by the intruder (hostile input), not by the protocol.
    foreign: bool,
    /// Still linked into the tree (a removed directory lives on while handles are open).
    linked: bool,
}

#[derive(Debug)]
struct Ofd {
    ino: Ino,
    slot: usize,
    lock: Option<bool>, // Some(exclusive)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Status {
    /// The thread has not reached its first scheduling point yet.
    Starting,
    Running,
    Ready,
    Sleeping {
        until: Option<Duration>,
        watch: Option<(Ino, u64)>,
    },
    Done,
}

#[derive(Debug)]
struct Proc {
    pid: u32,
    start: u64,
    alive: bool,
    crashed: bool,
    status: Status,
}

/// What one simulated process does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Script {
    /// Acquire and release `rounds` times, with this wait policy.
    Worker { rounds: u32, wait: Wait },
    /// Sweep the lock directory once.
    Sweeper,
    /// An operator's `unlock` (dead owners only).
    Unlocker,
    /// Hostile input: makes an empty directory at the lock path while it is free.
    Intruder,
    /// Hostile input: plants a complete, valid lock whose record says `Plant` while the lock
    /// is free.
    Planter(Plant),
    /// An observer: looks at the lock's status a few times.
    Observer,
    /// `sweep --grace 0` beside acquisitions.
    SweeperNow,
    /// A temp cleaner (`rm -rf`): removes the whole lock directory whenever no lock is
    /// published in it (removing a held lock would break any lock; removing everything else,
    /// waiters' candidates included, must break none).
    Cleaner,
}

/// What a planted lock's record says.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Plant {
    /// A dead owner's beacon record whose token is not a safe name (`/`, `..`, 300 bytes, a
    /// NUL): never a path component.
    Token(u8),
    /// A record of our format (its pid namespace ours, no beacon) naming the pid of a live
    /// simulated process (the last one started) with a token that process never wrote: dead to
    /// it, live to the others until it exits.
    TheirOwnPid,
    /// A dead owner's beacon record from another host name on this kernel (our boot id).
    OtherHostThisKernel,
    /// A dead owner's reference record whose directory's mtime is an hour in the future.
    Future,
}

impl Plant {
    /// The record. Where there is no flock, a record claiming a beacon could never have been
    /// written (and one that cannot be probed judges its owner live, as it must): the beacon
    /// records say `false` there, and are judged by pid.
    fn record(self, victim: u32, no_flock: bool) -> String {
        let dead = 9_999;
        let beacon = !no_flock;
        match self {
            Plant::Token(n) => {
                let token = match n % 5 {
                    0 => "a/b".to_owned(),
                    1 => "..".to_owned(),
                    2 => "x".repeat(300),
                    3 => "nul\\u0000".to_owned(),
                    _ => "../../escape".to_owned(),
                };
                format!(r#"{{"pid":{dead},"token":"{token}","beacon":{beacon}}}"#)
            }
            Plant::TheirOwnPid => format!(
                r#"{{"pid":{victim},"token":"planted","pid_namespace":"pid:[sim]","beacon":false}}"#
            ),
            Plant::OtherHostThisKernel => format!(
                r#"{{"pid":{dead},"token":"planted","host":"elsewhere","boot_id":"sim-boot","beacon":{beacon}}}"#
            ),
            Plant::Future => format!(r#"{{"pid":{dead},"token":"planted"}}"#),
        }
    }

    /// Whether only the grace period can clear it (no kernel proof).
    fn evidence_only(self, no_flock: bool) -> bool {
        no_flock || matches!(self, Plant::TheirOwnPid | Plant::Future)
    }
}

struct State {
    turn: Option<usize>,
    procs: Vec<Proc>,
    inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    ofds: HashMap<u64, Ofd>,
    next_fd: u64,
    mono: Duration,
    tokens: HashMap<String, usize>,
    next_token: u64,
    inside: Vec<usize>,
    violations: Vec<String>,
    trace: Vec<String>,
    mutant: Mutant,
    /// Every flock fails with ENOLCK, as on filesystems without it: owners are judged by pid.
    no_flock: bool,
    /// A FUSE filesystem like bindfs: no `RENAME_NOREPLACE` (plain renames, which replace an
    /// empty directory, verified by the protocol), and `fstat` of a removed directory fails
    /// with ENOENT (a scheduling point, so that a removal can come between an open and it).
    fuse: bool,
    /// Who wrote the marker in each guard directory (the guard's holder where there is no flock).
    marked_by: HashMap<Ino, usize>,
    /// The tokens each process wrote and is not done with (`System::own_token`).
    owned: std::collections::HashSet<(usize, String)>,
}

pub(crate) struct World {
    state: Mutex<State>,
    cv: Condvar,
}

fn err(kind: io::ErrorKind) -> io::Error {
    io::Error::from(kind)
}

fn errno(n: i32) -> io::Error {
    io::Error::from_raw_os_error(n)
}

const EEXIST: i32 = 17;
const ENOTDIR: i32 = 20;
const ENOTEMPTY: i32 = 39;
const ENAMETOOLONG: i32 = 36;

/// What the kernel (and the real `sys`) says about a name that is not one directory entry: a
/// `/` makes it a path (whose directories do not exist here), a NUL cannot be passed at all,
/// and a name has at most 255 bytes.
fn check_name(name: &str) -> io::Result<()> {
    if name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "name contains NUL",
        ));
    }
    if name.len() > 255 {
        return Err(errno(ENAMETOOLONG));
    }
    if name.contains('/') || name.is_empty() || name == "." || name == ".." {
        return Err(err(io::ErrorKind::NotFound));
    }
    Ok(())
}

impl State {
    /// The lock directory now (0, which names nothing, while a cleaner has removed it).
    fn d(&self) -> Ino {
        self.lookup(PARENT, LOCKS).unwrap_or(0)
    }

    /// Removes what is in the lock directory (`whole`: and the directory itself), as a temp
    /// cleaner or `rm -rf` would, unless a lock is published in it. Handles stay open on what
    /// they named, now unlinked and empty.
    fn clean(&mut self, whole: bool) -> bool {
        let d = self.d();
        let Ok(entries) = self.dir_entries(d) else {
            return false;
        };
        if entries
            .keys()
            .any(|n| matches!(classify(n), Entry::Lock(_)))
        {
            return false;
        }
        if !whole {
            let inside: Vec<Ino> = self
                .dir_entries_mut(d)
                .map(|e| std::mem::take(e).into_values().collect())
                .unwrap_or_default();
            self.unlink_trees(inside);
            self.bump(d);
            return true;
        }
        self.unlink_trees(vec![d]);
        if let Ok(p) = self.dir_entries_mut(PARENT) {
            p.remove(LOCKS);
        }
        true
    }

    /// Unlinks the trees rooted at `doomed`.
    fn unlink_trees(&mut self, mut doomed: Vec<Ino>) {
        while let Some(ino) = doomed.pop() {
            if let Some(Node::Dir(e)) = self.inodes.get_mut(&ino).map(|i| &mut i.node) {
                doomed.extend(std::mem::take(e).into_values());
            }
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.linked = false;
                i.epoch += 1;
            }
        }
    }

    fn wall(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000) + self.mono
    }

    /// The process with this pid: the live one if the pid was reused.
    fn slot_of_pid(&self, pid: u32) -> Option<usize> {
        self.procs
            .iter()
            .position(|p| p.pid == pid && p.alive)
            .or_else(|| self.procs.iter().position(|p| p.pid == pid))
    }

    fn violation(&mut self, what: String) {
        let trace = self.trace[self.trace.len().saturating_sub(40)..].join("\n  ");
        self.violations
            .push(format!("{what}\n  last steps:\n  {trace}"));
    }

    fn dir_entries(&self, ino: Ino) -> io::Result<&BTreeMap<String, Ino>> {
        match self.inodes.get(&ino).map(|i| &i.node) {
            Some(Node::Dir(e)) => Ok(e),
            Some(_) => Err(errno(ENOTDIR)),
            None => Err(err(io::ErrorKind::NotFound)),
        }
    }

    fn dir_entries_mut(&mut self, ino: Ino) -> io::Result<&mut BTreeMap<String, Ino>> {
        match self.inodes.get_mut(&ino).map(|i| &mut i.node) {
            Some(Node::Dir(e)) => Ok(e),
            Some(_) => Err(errno(ENOTDIR)),
            None => Err(err(io::ErrorKind::NotFound)),
        }
    }

    fn lookup(&self, dir: Ino, name: &str) -> io::Result<Ino> {
        self.dir_entries(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| err(io::ErrorKind::NotFound))
    }

    fn meta(&self, ino: Ino) -> Meta {
        let i = &self.inodes[&ino];
        let (kind, size, nlink) = match &i.node {
            Node::Dir(e) => (Kind::Dir, 4096, 2 + e.len() as u64),
            Node::File(d) => (Kind::File, d.len() as u64, 1),
        };
        let nlink = if i.linked { nlink } else { 0 };
        Meta {
            id: FileId { dev: 1, ino },
            kind,
            uid: UID,
            mode: i.mode,
            size,
            nlink,
            mtime: UNIX_EPOCH + Duration::from_secs(1_700_000_000) + i.mtime,
        }
    }

    fn touch(&mut self, ino: Ino) {
        let now = self.mono;
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.mtime = now;
        }
    }

    fn bump(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.epoch += 1;
        }
    }

    fn new_inode(&mut self, node: Node, mode: u32, foreign: bool) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        let mtime = self.mono;
        self.inodes.insert(
            ino,
            Inode {
                node,
                mode,
                mtime,
                epoch: 0,
                foreign,
                linked: true,
            },
        );
        ino
    }

    fn open(&mut self, slot: usize, ino: Ino) -> u64 {
        let fd = self.next_fd;
        self.next_fd += 1;
        self.ofds.insert(
            fd,
            Ofd {
                ino,
                slot,
                lock: None,
            },
        );
        fd
    }

    /// Whether another descriptor's flock on `ino` stands in the way of `fd` taking one.
    fn flock_conflict(&self, fd: u64, ino: Ino, exclusive: bool) -> bool {
        self.ofds
            .iter()
            .any(|(f, o)| *f != fd && o.ino == ino && o.lock.is_some_and(|x| x || exclusive))
    }

    fn close(&mut self, fd: u64) {
        if let Some(ofd) = self.ofds.remove(&fd) {
            self.bump(ofd.ino);
        }
    }

    fn crash(&mut self, slot: usize) {
        let p = &mut self.procs[slot];
        p.alive = false;
        p.crashed = true;
        let fds: Vec<u64> = self
            .ofds
            .iter()
            .filter(|(_, o)| o.slot == slot)
            .map(|(fd, _)| *fd)
            .collect();
        for fd in fds {
            self.close(fd);
        }
        self.inside.retain(|s| *s != slot);
        self.trace.push(format!("CRASH p{slot}"));
    }

    /// The record of the lock directory `ino`, if complete.
    fn record(&self, ino: Ino) -> Option<Owner> {
        let rec = *self.dir_entries(ino).ok()?.get(OWNER_FILE)?;
        match &self.inodes.get(&rec)?.node {
            Node::File(d) => Owner::parse(d).ok(),
            Node::Dir(_) => None,
        }
    }

    /// Whether `slot` holds the guard of lock `name`: an exclusive flock on it, or, where
    /// there is no flock, the guard it marked and still has open.
    fn holds_guard(&self, slot: usize, name: &str) -> bool {
        let Ok(g) = self.lookup(self.d(), &guard_name(name)) else {
            return false;
        };
        let open = |lock: Option<bool>| {
            self.ofds
                .values()
                .any(|o| o.ino == g && o.slot == slot && (lock.is_none() || o.lock == lock))
        };
        open(Some(true)) || (self.no_flock && self.marked_by.get(&g) == Some(&slot) && open(None))
    }

    /// I2 and I8, checked after every step: a published lock is a private directory with a
    /// complete, private record.
    fn check(&mut self) {
        let entries: Vec<(String, Ino)> = match self.dir_entries(self.d()) {
            Ok(e) => e.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            Err(_) => return,
        };
        for (name, ino) in entries {
            if !matches!(classify(&name), Entry::Lock(_)) || self.inodes[&ino].foreign {
                continue;
            }
            let i = &self.inodes[&ino];
            if i.mode != 0o700 {
                let m = i.mode;
                self.violation(format!("I8: lock {name} has mode {m:o}"));
            }
            let rec = self
                .dir_entries(ino)
                .ok()
                .and_then(|e| e.get(OWNER_FILE).copied());
            match rec {
                Some(r) if self.inodes[&r].mode != 0o600 => {
                    self.violation(format!("I8: {name}/owner.json is not 0600"))
                }
                Some(_) if self.record(ino).is_some() => {}
                _ => self.violation(format!(
                    "I2: lock {name} is published without a complete record"
                )),
            }
        }
    }
}

impl World {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A scheduling point: hand the baton back and wait to be picked again. A process that was
    /// crashed meanwhile unwinds from here.
    fn yield_point(&self, slot: usize, status: Status) -> MutexGuard<'_, State> {
        let mut st = self.lock();
        st.procs[slot].status = status;
        // Only the baton's holder gives it back (a starting thread never held it).
        if st.turn == Some(slot) {
            st.turn = None;
        }
        self.cv.notify_all();
        while st.turn != Some(slot) {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.procs[slot].crashed {
            drop(st);
            resume_unwind(Box::new(Crashed));
        }
        st.procs[slot].status = Status::Running;
        st.mono += TICK;
        st
    }

    fn finish(&self, slot: usize) {
        let mut st = self.lock();
        st.procs[slot].status = Status::Done;
        // Its script is over: the process exits (its pid no longer runs).
        st.procs[slot].alive = false;
        if st.turn == Some(slot) {
            st.turn = None;
        }
        self.cv.notify_all();
    }
}

/// One simulated process's view of the system.
pub(crate) struct SimSys {
    world: Arc<World>,
    slot: usize,
}

/// An open directory of a simulated process.
pub(crate) struct SimDir {
    world: Arc<World>,
    fd: u64,
}

impl Drop for SimDir {
    fn drop(&mut self) {
        // Closing a descriptor that holds a shared flock (an observer's probe, a waiter's hold
        // on the previous holder's directory) is a scheduling point: until the close, others
        // find that lock held, as they would between the two system calls.
        let prober = {
            let st = self.world.lock();
            st.ofds
                .get(&self.fd)
                .filter(|o| o.lock == Some(false))
                .map(|o| o.slot)
        };
        if let (Some(slot), false) = (prober, std::thread::panicking()) {
            drop(self.world.yield_point(slot, Status::Ready));
        }
        // A crashed process's descriptors were closed when it crashed.
        self.world.lock().close(self.fd);
    }
}

impl SimSys {
    fn call<T>(&self, what: &str, op: impl FnOnce(&mut State, usize) -> T) -> T
    where
        T: std::fmt::Debug,
    {
        let mut st = self.world.yield_point(self.slot, Status::Ready);
        let r = op(&mut st, self.slot);
        let line = format!("p{} {what} -> {r:?}", self.slot);
        st.trace.push(line);
        st.check();
        r
    }

    fn ino(&self, st: &State, d: &SimDir) -> io::Result<Ino> {
        st.ofds.get(&d.fd).map(|o| o.ino).ok_or_else(|| errno(9)) // EBADF
    }

    fn dir(&self, fd: u64) -> SimDir {
        SimDir {
            world: self.world.clone(),
            fd,
        }
    }

    /// Opens the lock directory, making it (mode 0700) if a cleaner removed it, as
    /// `Locks` does.
    fn lock_dir(&self) -> Arc<SimDir> {
        let fd = self.call("open the lock directory", |st, slot| {
            let ino = match st.lookup(PARENT, LOCKS) {
                Ok(ino) => ino,
                Err(_) => {
                    let ino = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
                    st.dir_entries_mut(PARENT)
                        .expect("the parent")
                        .insert(LOCKS.into(), ino);
                    ino
                }
            };
            st.open(slot, ino)
        });
        Arc::new(self.dir(fd))
    }
}

impl System for SimSys {
    type Dir = SimDir;
    type Watch = (Ino, u64);

    fn identity(&self) -> Identity {
        let st = self.world.lock();
        let p = &st.procs[self.slot];
        Identity {
            pid: p.pid,
            start_time: Some(p.start),
            boot_id: Some("sim-boot".into()),
            host: Some("sim".into()),
            pid_namespace: Some("pid:[sim]".into()),
            uid: UID,
        }
    }

    fn pid(&self) -> u32 {
        self.world.lock().procs[self.slot].pid
    }

    fn now(&self) -> SystemTime {
        self.world.lock().wall()
    }

    fn monotonic(&self) -> Duration {
        self.world.lock().mono
    }

    fn token(&self) -> String {
        let mut st = self.world.lock();
        st.next_token += 1;
        let t = format!("tok-{}-{}", self.slot, st.next_token);
        st.tokens.insert(t.clone(), self.slot);
        t
    }

    fn own_token(&self, token: &str, own: bool) {
        let mut st = self.world.lock();
        if own {
            st.owned.insert((self.slot, token.to_owned()));
        } else {
            st.owned.remove(&(self.slot, token.to_owned()));
        }
    }

    fn wrote(&self, token: &str) -> bool {
        self.world
            .lock()
            .owned
            .contains(&(self.slot, token.to_owned()))
    }

    fn open_dir_path(&self, _: &Path) -> io::Result<SimDir> {
        let fd = self.world.lock().open(self.slot, PARENT);
        Ok(self.dir(fd))
    }

    fn open_dir_at(&self, at: &SimDir, name: &str) -> io::Result<SimDir> {
        let fd = self.call(&format!("open {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            match st.inodes[&ino].node {
                Node::Dir(_) => Ok(st.open(slot, ino)),
                Node::File(_) => Err(errno(ENOTDIR)),
            }
        })?;
        Ok(self.dir(fd))
    }

    fn mkdir_at(&self, at: &SimDir, name: &str) -> io::Result<()> {
        self.call(&format!("mkdir {name}"), |st, _| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            if !st.inodes.get(&dir).is_some_and(|i| i.linked) {
                return Err(err(io::ErrorKind::NotFound)); // a removed directory
            }
            if st.dir_entries(dir)?.contains_key(name) {
                return Err(errno(EEXIST));
            }
            let ino = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
            st.dir_entries_mut(dir)?.insert(name.to_owned(), ino);
            st.touch(dir);
            Ok(())
        })
    }

    fn meta(&self, dir: &SimDir) -> io::Result<Meta> {
        if self.world.lock().fuse {
            return self.call("fstat", |st, _| {
                let ino = self.ino(st, dir)?;
                match st.inodes.get(&ino) {
                    Some(i) if i.linked => Ok(st.meta(ino)),
                    _ => Err(err(io::ErrorKind::NotFound)),
                }
            });
        }
        let st = self.world.lock();
        let ino = self.ino(&st, dir)?;
        Ok(st.meta(ino))
    }

    fn rename_exclusive(&self, at: &SimDir, from: &str, to: &str) -> io::Result<()> {
        if self.world.lock().fuse {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no no-replace rename",
            ));
        }
        self.rename_noreplace(at, from, to).map(drop)
    }

    fn meta_at(&self, at: &SimDir, name: &str) -> io::Result<Meta> {
        self.call(&format!("stat {name}"), |st, _| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            Ok(st.meta(ino))
        })
    }

    fn set_mode_at(&self, at: &SimDir, name: &str, mode: u32) -> io::Result<()> {
        self.call(&format!("chmod {name}"), |st, _| {
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            st.inodes.get_mut(&ino).expect("linked inode").mode = mode;
            st.bump(ino);
            Ok(())
        })
    }

    fn set_mode(&self, dir: &SimDir, mode: u32) -> io::Result<()> {
        let mut st = self.world.lock();
        let ino = self.ino(&st, dir)?;
        st.inodes.get_mut(&ino).expect("open inode").mode = mode;
        st.bump(ino);
        Ok(())
    }

    fn create_file_at(
        &self,
        at: &SimDir,
        name: &str,
        contents: &[u8],
        _sync: bool,
        _exact_mode: bool,
    ) -> io::Result<()> {
        // Two steps, so that a crash can leave an empty file behind.
        let file = self.call(&format!("create {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            if name == crate::paths::GUARD_MARKER {
                // Marking a guard (or finding it marked, when reusing one left by a crash) is
                // where a reclaimer starts working under it.
                st.marked_by.insert(dir, slot);
            }
            if !st.inodes.get(&dir).is_some_and(|i| i.linked) {
                return Err(err(io::ErrorKind::NotFound)); // a removed directory
            }
            if st.dir_entries(dir)?.contains_key(name) {
                return Err(errno(EEXIST));
            }
            let ino = st.new_inode(Node::File(Vec::new()), 0o600, false);
            st.dir_entries_mut(dir)?.insert(name.to_owned(), ino);
            st.touch(dir);
            Ok(ino)
        })?;
        self.call(&format!("write {name}"), |st, _| {
            if let Some(Inode {
                node: Node::File(d),
                ..
            }) = st.inodes.get_mut(&file)
            {
                d.extend_from_slice(contents);
            }
            Ok(())
        })
    }

    fn read_file_at(&self, at: &SimDir, name: &str, limit: usize) -> io::Result<(Meta, Vec<u8>)> {
        self.call(&format!("read {name}"), |st, _| {
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            let data = match &st.inodes[&ino].node {
                Node::File(d) => d[..d.len().min(limit + 1)].to_vec(),
                Node::Dir(_) => Vec::new(),
            };
            Ok((st.meta(ino), data))
        })
    }

    fn sync_dir(&self, _: &SimDir) -> io::Result<()> {
        Ok(())
    }

    fn rename_noreplace(&self, at: &SimDir, from: &str, to: &str) -> io::Result<Renamed> {
        self.call(&format!("rename {from} -> {to}"), |st, slot| {
            check_name(from)?;
            check_name(to)?;
            let dir = self.ino(st, at)?;
            let src = st.lookup(dir, from)?;
            if let Ok(dst) = st.lookup(dir, to) {
                let empty_dir = matches!(&st.inodes[&dst].node, Node::Dir(e) if e.is_empty());
                let plain = st.mutant == Mutant::PlainRename || st.fuse;
                if !plain || !empty_dir {
                    return Err(errno(if empty_dir { EEXIST } else { ENOTEMPTY }));
                }
                // Plain rename replaces an empty directory: whatever stood at `to` is gone.
                if matches!(classify(to), Entry::Lock(_)) {
                    st.violation(format!(
                        "I3: p{slot} replaced the directory at {to} by renaming over it"
                    ));
                }
                st.inodes.remove(&dst);
            }
            if let Entry::Lock(lock) = classify(from) {
                // Moving a lock away: only its holder, or the single guard holder for a dead
                // owner (I4, I5, I6).
                let token_slot = st
                    .record(src)
                    .and_then(|o| st.tokens.get(&o.token).copied());
                if token_slot != Some(slot) {
                    if !st.holds_guard(slot, &lock) {
                        st.violation(format!(
                            "I5: p{slot} moved {lock} away without holding its guard"
                        ));
                    }
                    if let Some(owner) = token_slot {
                        if st.procs[owner].alive {
                            st.violation(format!(
                                "I6: p{slot} moved away the lock of live p{owner}"
                            ));
                        }
                    }
                }
            }
            let entries = st.dir_entries_mut(dir)?;
            entries.remove(from);
            entries.insert(to.to_owned(), src);
            st.touch(dir);
            st.bump(src);
            // The PlainRename mutant renames plainly believing it exclusive; FUSE says so.
            Ok(if st.fuse {
                Renamed::Plain
            } else {
                Renamed::Exclusive
            })
        })
    }

    fn remove_file_at(&self, at: &SimDir, name: &str) -> io::Result<()> {
        self.call(&format!("unlink {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            if matches!(st.inodes[&ino].node, Node::Dir(_)) {
                return Err(errno(21)); // EISDIR
            }
            // I3: never delete the record of a published lock.
            let published = st
                .dir_entries(st.d())
                .map(|e| {
                    e.iter()
                        .any(|(n, i)| *i == dir && matches!(classify(n), Entry::Lock(_)))
                })
                .unwrap_or(false);
            if published && name == OWNER_FILE {
                st.violation(format!(
                    "I3: p{slot} deleted the record of a published lock"
                ));
            }
            st.dir_entries_mut(dir)?.remove(name);
            st.inodes.remove(&ino);
            st.touch(dir);
            Ok(())
        })
    }

    fn remove_dir_at(&self, at: &SimDir, name: &str) -> io::Result<()> {
        self.call(&format!("rmdir {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            match &st.inodes[&ino].node {
                Node::Dir(e) if !e.is_empty() => return Err(errno(ENOTEMPTY)),
                Node::Dir(_) => {}
                Node::File(_) => return Err(errno(ENOTDIR)),
            }
            if dir == st.d() && matches!(classify(name), Entry::Lock(_)) {
                st.violation(format!(
                    "I3: p{slot} removed the lock directory {name} in place"
                ));
            }
            st.dir_entries_mut(dir)?.remove(name);
            if let Some(i) = st.inodes.get_mut(&ino) {
                i.linked = false;
            }
            st.bump(ino);
            st.touch(dir);
            Ok(())
        })
    }

    fn list(&self, dir: &SimDir) -> io::Result<Vec<String>> {
        self.call("list", |st, _| {
            let ino = self.ino(st, dir)?;
            Ok(st.dir_entries(ino)?.keys().cloned().collect())
        })
    }

    fn try_lock(&self, dir: &SimDir, exclusive: bool) -> io::Result<bool> {
        let fd = dir.fd;
        self.call(
            &format!("flock {}", if exclusive { "EX" } else { "SH" }),
            |st, _| {
                let ino = self.ino(st, dir)?;
                if st.no_flock {
                    return Err(errno(37)); // ENOLCK
                }
                if st.flock_conflict(fd, ino, exclusive) {
                    return Ok(false);
                }
                st.ofds.get_mut(&fd).expect("open").lock = Some(exclusive);
                Ok(true)
            },
        )
    }

    fn unlock(&self, dir: &SimDir) -> io::Result<()> {
        let fd = dir.fd;
        self.call("flock UN", |st, _| {
            let ino = self.ino(st, dir)?;
            if let Some(o) = st.ofds.get_mut(&fd) {
                o.lock = None;
            }
            st.bump(ino); // waiters blocked on it are woken
            Ok(())
        })
    }

    fn wait_shared(&self, dir: &SimDir) -> io::Result<()> {
        let fd = dir.fd;
        loop {
            // Granted (and kept until the directory is closed) when no other descriptor
            // holds it exclusively; else sleep until the lock's state changes (an unlock or
            // a close bumps the inode's epoch).
            let blocked = self.call("flock SH (blocking)", |st, _| {
                let ino = self.ino(st, dir)?;
                if st.no_flock {
                    return Err(errno(37)); // ENOLCK
                }
                let conflict = st.flock_conflict(fd, ino, false);
                if !conflict {
                    st.ofds.get_mut(&fd).expect("open").lock = Some(false);
                }
                Ok(conflict.then(|| (ino, st.inodes.get(&ino).map_or(0, |i| i.epoch))))
            })?;
            match blocked {
                None => return Ok(()), // granted (kept until the directory is closed)
                Some(watch) => {
                    drop(self.world.yield_point(
                        self.slot,
                        Status::Sleeping {
                            until: None,
                            watch: Some(watch),
                        },
                    ));
                }
            }
        }
    }

    fn process_alive(&self, pid: u32) -> Option<bool> {
        self.call(&format!("kill {pid} 0"), |st, _| {
            Some(st.slot_of_pid(pid).is_some_and(|s| st.procs[s].alive))
        })
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        let st = self.world.lock();
        st.slot_of_pid(pid)
            .filter(|s| st.procs[*s].alive)
            .map(|s| st.procs[s].start)
    }

    fn watch(&self, lock: &SimDir, _pid: Option<u32>) -> io::Result<Option<(Ino, u64)>> {
        let st = self.world.lock();
        let ino = self.ino(&st, lock)?;
        Ok(Some((ino, st.inodes.get(&ino).map_or(0, |i| i.epoch))))
    }

    fn sleep(
        &self,
        watch: Option<&(Ino, u64)>,
        timeout: Option<Duration>,
        _cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        let until = {
            let st = self.world.lock();
            timeout.map(|t| st.mono + t)
        };
        let st = self.world.yield_point(
            self.slot,
            Status::Sleeping {
                until,
                watch: watch.copied(),
            },
        );
        let changed =
            watch.is_some_and(|(ino, epoch)| st.inodes.get(ino).is_none_or(|i| i.epoch != *epoch));
        Ok(if changed {
            Wake::Changed
        } else {
            Wake::TimedOut
        })
    }

    fn mutant(&self) -> Mutant {
        self.world.lock().mutant
    }
}

/// Picks what happens at each scheduling point: one of `runs` processes to run, or one of
/// `crashes` processes to crash (the options are numbered runs first).
pub(crate) trait Strategy {
    /// Chooses an option (`runs >= 1`).
    fn choose(&mut self, runs: usize, crashes: usize) -> usize;
}

/// Seeded pseudo-random choices (xorshift); a crash at any point with probability
/// `crash_permille / 1000`.
pub(crate) struct Random {
    state: u64,
    crash_permille: u64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            crash_permille: 15,
        }
    }
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }
}

impl Strategy for Random {
    fn choose(&mut self, runs: usize, crashes: usize) -> usize {
        if crashes > 0 && self.next() % 1000 < self.crash_permille {
            runs + (self.next() % crashes as u64) as usize
        } else {
            (self.next() % runs as u64) as usize
        }
    }
}

/// Replays a prefix of choices, then takes the first option, recording how many options each
/// point had: the engine of a depth-first search over all schedules.
#[cfg(test)]
pub(crate) struct Replay {
    pub prefix: Vec<usize>,
    pub taken: Vec<(usize, usize)>, // (choice, options)
}

#[cfg(test)]
impl Strategy for Replay {
    fn choose(&mut self, runs: usize, crashes: usize) -> usize {
        let n = runs + crashes;
        let i = self.taken.len();
        let c = self.prefix.get(i).copied().unwrap_or(0).min(n - 1);
        self.taken.push((c, n));
        c
    }
}

/// Choices read from a fuzzer's bytes: a byte below 8 crashes (if a crash is allowed), any
/// other picks who runs; past the end, a seeded random walk takes over.
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
    rest: Random,
}

impl Strategy for Bytes<'_> {
    fn choose(&mut self, runs: usize, crashes: usize) -> usize {
        let Some(&b) = self.data.get(self.pos) else {
            return self.rest.choose(runs, crashes);
        };
        self.pos += 1;
        if crashes > 0 && b < 8 {
            runs + b as usize % crashes
        } else {
            b as usize % runs
        }
    }
}

/// One simulation shaped and scheduled by arbitrary bytes (the fuzz target and its proptest
/// mirror): the first bytes choose 2 to 4 processes and their scripts and whether flock works,
/// (or an intruder's empty directory), the rest drive every scheduling decision and crash.
///
/// # Errors
///
/// The invariant violations found, with the steps that led to them.
pub fn fuzz(data: &[u8]) -> Result<(), String> {
    let (head, rest) = data.split_at(data.len().min(6));
    let at = |i: usize| head.get(i).copied().unwrap_or(0);
    let n = 2 + at(0) as usize % 3;
    let scripts: Vec<Script> = (0..n)
        .map(|i| {
            let b = at(1 + i);
            match b % 11 {
                0 => Script::Worker {
                    rounds: 2,
                    wait: Wait::Immediately,
                },
                1 | 2 => Script::Worker {
                    rounds: 2,
                    wait: Wait::Forever,
                },
                3 => Script::Worker {
                    rounds: 1,
                    wait: Wait::Timeout(Duration::from_secs(3)),
                },
                4 => Script::Sweeper,
                5 => Script::Unlocker,
                6 => Script::Intruder,
                7 => Script::Planter(match b / 11 % 4 {
                    0 => Plant::Token(b / 44),
                    1 => Plant::TheirOwnPid,
                    2 => Plant::OtherHostThisKernel,
                    _ => Plant::Future,
                }),
                8 => Script::Observer,
                9 => Script::SweeperNow,
                _ => Script::Cleaner,
            }
        })
        .collect();
    let fuse = at(5) % 4 == 1;
    // On a filesystem without no-replace renames, a plain rename replaces an empty directory
    // at the lock path: an intruder's empty directory there is a known limit (README), not a
    // finding.
    let scripts: Vec<Script> = scripts
        .into_iter()
        .map(|s| match s {
            Script::Intruder if fuse => Script::Observer,
            s => s,
        })
        .collect();
    let cfg = Config {
        scripts,
        mutant: Mutant::None,
        grace: Duration::from_secs(5),
        crashes: 1,
        preemptions: None,
        no_flock: at(5) % 4 == 0,
        fuse,
    };
    let mut strategy = Bytes {
        data: rest,
        pos: 0,
        rest: Random::new(data.len() as u64),
    };
    run(&cfg, &mut strategy).map(drop)
}

/// A simulation's shape.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub scripts: Vec<Script>,
    pub mutant: Mutant,
    pub grace: Duration,
    /// Crashes allowed per process.
    pub crashes: u32,
    /// Context switches away from a runnable process allowed (None: unbounded).
    pub preemptions: Option<u32>,
    /// Simulate a filesystem without flock.
    pub no_flock: bool,
    /// Simulate a FUSE filesystem without no-replace renames (see `State::fuse`).
    pub fuse: bool,
}

#[derive(Clone, Copy, Debug)]
enum Choice {
    Run(usize),
    Crash(usize),
}

/// Runs one simulation; `Err` holds the violations found, with the steps that led to them.
pub(crate) fn run(cfg: &Config, strategy: &mut dyn Strategy) -> Result<usize, String> {
    let world = Arc::new(World {
        state: Mutex::new(State {
            turn: None,
            procs: Vec::new(),
            inodes: HashMap::new(),
            next_ino: PARENT + 1,
            ofds: HashMap::new(),
            next_fd: 3,
            mono: Duration::from_secs(1),
            tokens: HashMap::new(),
            next_token: 0,
            inside: Vec::new(),
            violations: Vec::new(),
            trace: Vec::new(),
            mutant: cfg.mutant,
            no_flock: cfg.no_flock,
            fuse: cfg.fuse,
            marked_by: HashMap::new(),
            owned: Default::default(),
        }),
        cv: Condvar::new(),
    });
    {
        let mut st = world.lock();
        st.inodes.insert(
            PARENT,
            Inode {
                node: Node::Dir(BTreeMap::new()),
                mode: 0o700,
                mtime: Duration::ZERO,
                epoch: 0,
                foreign: false,
                linked: true,
            },
        );
        let d = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
        st.dir_entries_mut(PARENT)
            .expect("the parent")
            .insert(LOCKS.into(), d);
    }
    let mut steps = schedule(&world, &cfg.scripts, cfg, strategy);
    let recovery = Config {
        crashes: 0,
        preemptions: None,
        ..cfg.clone()
    };
    // I7, the kernel-proof half: where flock works and nothing foreign was planted, every owner
    // and every guard a crash left behind is proven dead by the kernel, so the lock is
    // acquirable at once, well before any grace period ends.
    let planted_evidence = cfg.scripts.iter().any(|s| match s {
        Script::Intruder => true,
        Script::Planter(p) => p.evidence_only(cfg.no_flock),
        _ => false,
    });
    // (On FUSE, without no-replace renames, the reclaim guard is made in place: a crash before
    // it is marked leaves it to be waited out for the grace period, by design.)
    if !cfg.no_flock && !cfg.fuse && !planted_evidence {
        let first = {
            let mut st = world.lock();
            // Nor may a crash leave a guard without this crate's marker (only the grace
            // period could clear it).
            let unmarked = st.lookup(st.d(), &guard_name(LOCK)).is_ok_and(|g| {
                st.dir_entries(g)
                    .is_ok_and(|e| !e.contains_key(crate::paths::GUARD_MARKER))
            });
            if unmarked {
                st.violation("I7: a crash left the reclaim guard unmarked".into());
            }
            st.procs.len()
        };
        steps += schedule_from(
            &world,
            &[Script::Worker {
                rounds: 1,
                wait: Wait::Timeout(cfg.grace / 2),
            }],
            first,
            &recovery,
            &mut Random::new(1),
            true,
        );
        let mut st = world.lock();
        if st
            .violations
            .iter()
            .any(|v| v.contains("failed to acquire"))
        {
            st.violation(
                "I7: with flock, the lock was not acquirable at once after the crashes".into(),
            );
        }
    }
    // I7: whatever happened, the lock is acquirable again by itself once the grace period has
    // passed, and a sweep leaves no candidate or tombstone behind.
    {
        let mut st = world.lock();
        // Past the grace period, and past the floor under which a sweep leaves a candidate
        // without a record alone (it may be being staged).
        st.mono += cfg.grace.max(protocol::STAGING_FLOOR) + Duration::from_secs(1);
        st.inside.clear();
    }
    let first = world.lock().procs.len();
    steps += schedule_from(
        &world,
        &[Script::Worker {
            rounds: 1,
            wait: Wait::Timeout(cfg.grace * 4),
        }],
        first,
        &recovery,
        &mut Random::new(1),
        true,
    );
    let mut st = world.lock();
    let left: Vec<String> = st
        .dir_entries(st.d())
        .map(|e| {
            e.iter()
                .filter(|(n, i)| {
                    matches!(
                        classify(n),
                        Entry::Candidate { .. } | Entry::Tombstone { .. }
                    ) && !st.inodes[*i].foreign
                })
                .map(|(n, _)| n.clone())
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        st.violation(format!("I7: a sweep after recovery left {left:?}"));
    }
    if st.violations.is_empty() {
        Ok(steps)
    } else {
        Err(st.violations.join("\n\n"))
    }
}

fn schedule(
    world: &Arc<World>,
    scripts: &[Script],
    cfg: &Config,
    strategy: &mut dyn Strategy,
) -> usize {
    schedule_from(world, scripts, 0, cfg, strategy, false)
}

/// Starts one thread per script (slots `first..`) and drives them to the end.
fn schedule_from(
    world: &Arc<World>,
    scripts: &[Script],
    first: usize,
    cfg: &Config,
    strategy: &mut dyn Strategy,
    recovery: bool,
) -> usize {
    {
        let mut st = world.lock();
        for (i, _) in scripts.iter().enumerate() {
            let slot = first + i;
            // The recovery process reuses a crashed process's pid (with its own start time).
            let reused = recovery
                .then(|| st.procs.iter().find(|p| p.crashed).map(|p| p.pid))
                .flatten();
            st.procs.push(Proc {
                pid: reused.unwrap_or(100 + slot as u32),
                start: 1000 + slot as u64,
                alive: true,
                crashed: false,
                status: Status::Starting,
            });
        }
    }
    let handles: Vec<_> = scripts
        .iter()
        .enumerate()
        .map(|(i, script)| {
            let world = world.clone();
            let script = *script;
            let slot = first + i;
            let grace = cfg.grace;
            std::thread::spawn(move || {
                let sys = SimSys {
                    world: world.clone(),
                    slot,
                };
                let result = catch_unwind(AssertUnwindSafe(|| {
                    drop(world.yield_point(slot, Status::Ready));
                    play(&sys, script, grace, recovery)
                }));
                if let Err(payload) = result {
                    if payload.downcast_ref::<Crashed>().is_none() {
                        let msg = payload
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        world.lock().violation(format!("p{slot} panicked: {msg}"));
                    }
                }
                world.finish(slot);
            })
        })
        .collect();
    let mut crashes = vec![0u32; first + scripts.len()];
    let mut preemptions = 0u32;
    let mut last: Option<usize> = None;
    let mut steps = 0usize;
    loop {
        let mut st = world.lock();
        let slots = first..first + scripts.len();
        while st.turn.is_some()
            || slots
                .clone()
                .any(|s| st.procs[s].status == Status::Starting)
        {
            st = world.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let now = st.mono;
        let ready = |st: &State, s: usize| match st.procs[s].status {
            Status::Ready => true,
            Status::Sleeping { until, watch } => {
                until.is_some_and(|u| u <= now)
                    || watch
                        .is_some_and(|(ino, e)| st.inodes.get(&ino).is_none_or(|i| i.epoch != e))
            }
            _ => false,
        };
        let runnable: Vec<usize> = slots.clone().filter(|s| ready(&st, *s)).collect();
        if runnable.is_empty() {
            if slots.clone().all(|s| st.procs[s].status == Status::Done) {
                break;
            }
            let wake = slots
                .clone()
                .filter_map(|s| match st.procs[s].status {
                    Status::Sleeping { until, .. } => until,
                    _ => None,
                })
                .min();
            match wake {
                Some(t) => st.mono = st.mono.max(t),
                None => {
                    st.violation("I7: every process waits and nothing can wake it".into());
                    // Crash them all; they unwind one by one as they are picked.
                    for s in slots.clone() {
                        if st.procs[s].status != Status::Done {
                            st.crash(s);
                            st.procs[s].status = Status::Ready;
                        }
                    }
                }
            }
            continue;
        }
        // The options: run any runnable process (switching away from one that could go on
        // counts against the preemption bound), or crash a live one.
        let mut options: Vec<Choice> = Vec::new();
        let mut crash_options: Vec<Choice> = Vec::new();
        let can_switch = cfg.preemptions.is_none_or(|b| preemptions < b);
        let last_runnable = last.filter(|l| runnable.contains(l));
        match last_runnable {
            Some(l) if !can_switch => options.push(Choice::Run(l)),
            Some(l) => {
                options.push(Choice::Run(l));
                options.extend(
                    runnable
                        .iter()
                        .filter(|s| **s != l)
                        .map(|s| Choice::Run(*s)),
                );
            }
            None => options.extend(runnable.iter().map(|s| Choice::Run(*s))),
        }
        if !recovery {
            for s in slots.clone() {
                if st.procs[s].alive
                    && st.procs[s].status != Status::Done
                    && crashes[s] < cfg.crashes
                {
                    crash_options.push(Choice::Crash(s));
                }
            }
        }
        let runs = options.len();
        options.extend(crash_options);
        let choice = options[strategy.choose(runs, options.len() - runs)];
        steps += 1;
        if std::env::var_os("SIM_DEBUG").is_some() {
            let statuses: Vec<String> = slots
                .clone()
                .map(|s| format!("{:?}", st.procs[s].status))
                .collect();
            eprintln!(
                "t={:?} {choice:?} {statuses:?} last={:?}",
                st.mono,
                st.trace.last()
            );
        }
        match choice {
            Choice::Run(s) => {
                if last_runnable.is_some_and(|l| l != s) {
                    preemptions += 1;
                }
                last = Some(s);
                st.turn = Some(s);
            }
            Choice::Crash(s) => {
                crashes[s] += 1;
                st.crash(s);
                st.turn = Some(s); // it unwinds at once
            }
        }
        world.cv.notify_all();
        if steps > 200_000 {
            st.violation("the schedule did not end within 200000 steps".into());
            break;
        }
    }
    for h in handles {
        let _ = h.join();
    }
    steps
}

/// What a simulated process does.
fn play(sys: &SimSys, script: Script, grace: Duration, recovery: bool) {
    let me = sys.identity();
    fn space<'a>(sys: &'a SimSys, dir: &'a SimDir) -> Space<'a, SimSys> {
        Space {
            sys,
            dir,
            path: Path::new("/sim"),
            uid: UID,
        }
    }
    let root = sys.lock_dir();
    let sp = space(sys, &root);
    match script {
        Script::Worker { rounds, wait } => {
            for _ in 0..rounds {
                let mut options = Options::new(wait);
                options.grace = grace;
                let req = Request {
                    name: LOCK,
                    resource: "sim",
                    options: &options,
                    started: sys.monotonic(),
                };
                // In the current lock directory, re-opened if a cleaner removed it, as
                // `Locks` does.
                let got = protocol::in_current_dir(
                    sys,
                    || Ok(sys.lock_dir()),
                    |d: &Arc<SimDir>| &**d,
                    |d| protocol::acquire(&space(sys, d), &req, &me).map(|held| (held, d.clone())),
                );
                match got {
                    Ok((held, d)) => {
                        enter(sys);
                        // The critical section: a scheduling point where others may run.
                        let _ = sys.meta_at(&d, OWNER_FILE);
                        leave(sys);
                        let pid = sys.pid();
                        if let Err(e) = protocol::release(&space(sys, &d), held, "sim", pid) {
                            // Only a cleaner may take a lock away (never a held one).
                            report(sys, format!("I9/I1: p{} lost its lock: {e}", sys.slot));
                        }
                    }
                    Err(e) if e.is_contended() && !recovery => {}
                    Err(Error::Malformed { .. }) if intruded(sys) => {}
                    Err(e) => report(sys, format!("p{} failed to acquire: {e}", sys.slot)),
                }
            }
            if recovery {
                if let Err(e) = protocol::sweep(&space(sys, &sys.lock_dir()), grace) {
                    report(sys, format!("sweep failed: {e}"));
                }
            }
        }
        Script::Sweeper | Script::SweeperNow => {
            let grace = match script {
                Script::SweeperNow => Duration::ZERO,
                _ => grace,
            };
            if let Err(e) = protocol::sweep(&sp, grace) {
                report(sys, format!("sweep failed: {e}"));
            }
        }
        Script::Unlocker => match protocol::unlock(&sp, LOCK, "sim", &me, grace, false) {
            Ok(_) => {}
            Err(e) if e.is_contended() => {}
            Err(Error::Malformed { .. }) if intruded(sys) => {}
            Err(e) => report(sys, format!("unlock failed: {e}")),
        },
        Script::Observer => {
            for _ in 0..3 {
                let status = sys
                    .list(&root)
                    .map_err(|e| Error::io("list", "/sim", e))
                    .and_then(|entries| {
                        let related = crate::inspect::group(&entries)
                            .remove(LOCK)
                            .unwrap_or_default();
                        crate::inspect::status(&sp, LOCK, &me, grace, &related)
                    });
                match status {
                    Ok(_) => {}
                    Err(Error::Malformed { .. }) if intruded(sys) => {}
                    Err(e) => report(sys, format!("status failed: {e}")),
                }
            }
        }
        Script::Cleaner => {
            for whole in [false, false, true, true] {
                sys.call(
                    &format!("clean the lock directory (whole: {whole})"),
                    |st, _| st.clean(whole),
                );
            }
        }
        Script::Intruder => {
            sys.call("intrude", |st, _| {
                let d = st.d();
                if st.lookup(d, LOCK).is_ok() {
                    return false;
                }
                let ino = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, true);
                st.dir_entries_mut(d)
                    .is_ok_and(|e| e.insert(LOCK.into(), ino).is_none())
            });
        }
        Script::Planter(plant) => {
            sys.call(&format!("plant {plant:?}"), |st, _| {
                let d = st.d();
                if st.lookup(d, LOCK).is_ok() || st.dir_entries(d).is_err() {
                    return false;
                }
                let victim = st.procs.last().map_or(0, |p| p.pid);
                let record = plant.record(victim, st.no_flock).into_bytes();
                let lock = st.new_inode(Node::Dir(BTreeMap::new()), 0o700, false);
                let file = st.new_inode(Node::File(record), 0o600, false);
                if let Ok(e) = st.dir_entries_mut(lock) {
                    e.insert(OWNER_FILE.into(), file);
                }
                if let Plant::Future = plant {
                    let ahead = st.mono + Duration::from_secs(3600);
                    if let Some(i) = st.inodes.get_mut(&lock) {
                        i.mtime = ahead;
                    }
                }
                st.dir_entries_mut(d)
                    .is_ok_and(|e| e.insert(LOCK.into(), lock).is_none())
            });
        }
    }
}

fn intruded(sys: &SimSys) -> bool {
    let st = sys.world.lock();
    st.inodes.values().any(|i| i.foreign)
}

fn report(sys: &SimSys, what: String) {
    sys.world.lock().violation(what);
}

/// I1: entering the critical section while another live process is inside is a violation.
fn enter(sys: &SimSys) {
    let mut st = sys.world.lock();
    let me = sys.slot;
    if let Some(other) = st.inside.iter().copied().find(|s| st.procs[*s].alive) {
        st.violation(format!("I1: p{me} entered while p{other} is inside"));
    }
    st.inside.push(me);
    st.trace.push(format!("p{me} ENTER"));
}

fn leave(sys: &SimSys) {
    let mut st = sys.world.lock();
    let me = sys.slot;
    st.inside.retain(|s| *s != me);
    st.trace.push(format!("p{me} LEAVE"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize, wait: Wait) -> Vec<Script> {
        vec![Script::Worker { rounds: 2, wait }; n]
    }

    fn config(scripts: Vec<Script>, mutant: Mutant) -> Config {
        Config {
            scripts,
            mutant,
            grace: Duration::from_secs(5),
            crashes: 1,
            preemptions: None,
            no_flock: false,
            fuse: false,
        }
    }

    /// Runs `seeds` random schedules; panics with the seed and the violation on the first.
    fn random(cfg: &Config, seeds: std::ops::Range<u64>) -> usize {
        let mut steps = 0;
        for seed in seeds {
            match run(cfg, &mut Random::new(seed)) {
                Ok(n) => steps += n,
                Err(v) => panic!("seed {seed} ({cfg:?}):\n{v}"),
            }
        }
        steps
    }

    /// Depth-first search over every schedule within the config's bounds; returns the number
    /// of schedules explored, or the first violation with its choice sequence.
    fn exhaustive(cfg: &Config, limit: usize) -> Result<usize, String> {
        let mut prefix: Vec<usize> = Vec::new();
        let mut runs = 0;
        loop {
            let mut replay = Replay {
                prefix: prefix.clone(),
                taken: Vec::new(),
            };
            runs += 1;
            if let Err(v) = run(cfg, &mut replay) {
                return Err(format!(
                    "schedule {:?}:\n{v}",
                    replay.taken.iter().map(|c| c.0).collect::<Vec<_>>()
                ));
            }
            // Next schedule: bump the deepest choice that has an untried option.
            let mut taken = replay.taken;
            loop {
                match taken.pop() {
                    None => return Ok(runs),
                    Some((c, n)) if c + 1 < n => {
                        prefix = taken.iter().map(|t| t.0).collect();
                        prefix.push(c + 1);
                        break;
                    }
                    Some(_) => {}
                }
            }
            if runs >= limit {
                return Ok(runs);
            }
        }
    }

    #[test]
    fn regressions() {
        // A sweep reaped a releaser's fresh tombstone before the releaser checked it; the
        // release reported its lock lost although it had retired it (found by the soak at
        // seed 18619; the schedule is seed 674 since the model gained scheduling points).
        let mut scripts = workers(3, Wait::Timeout(Duration::from_secs(3)));
        scripts.push(Script::Sweeper);
        if let Err(v) = run(&config(scripts, Mutant::None), &mut Random::new(674)) {
            panic!("seed 674:\n{v}");
        }
    }

    #[test]
    fn two_processes_exhaustively_within_bounds() {
        // Every schedule of two fail-fast workers with up to one crash each and one preemption,
        // and of two waiting workers with no crash and two preemptions.
        let mut cfg = config(
            vec![
                Script::Worker {
                    rounds: 1,
                    wait: Wait::Immediately
                };
                2
            ],
            Mutant::None,
        );
        cfg.preemptions = Some(1);
        let limit: usize = std::env::var("SIM_LIMIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(usize::MAX);
        let a = exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("{v}"));
        let mut cfg = config(
            vec![
                Script::Worker {
                    rounds: 1,
                    wait: Wait::Forever
                };
                2
            ],
            Mutant::None,
        );
        cfg.crashes = 0;
        cfg.preemptions = Some(2);
        let b = exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("{v}"));
        eprintln!("exhaustive: {a} + {b} schedules");
        assert!(
            a > 100 && b > 100,
            "the search explored {a} and {b} schedules"
        );
    }

    #[test]
    fn random_schedules_of_three_and_four_processes() {
        let mut steps = 0;
        steps += random(&config(workers(3, Wait::Forever), Mutant::None), 0..300);
        steps += random(&config(workers(3, Wait::Immediately), Mutant::None), 0..300);
        let mut mixed = workers(2, Wait::Timeout(Duration::from_secs(3)));
        mixed.push(Script::Sweeper);
        mixed.push(Script::Unlocker);
        steps += random(&config(mixed, Mutant::None), 0..300);
        let mut hostile = workers(2, Wait::Immediately);
        hostile.push(Script::Intruder);
        steps += random(&config(hostile, Mutant::None), 0..200);
        // Without flock: judged by pid, grace periods waited out, pids reused.
        for wait in [Wait::Forever, Wait::Immediately] {
            let mut cfg = config(workers(3, wait), Mutant::None);
            cfg.no_flock = true;
            steps += random(&cfg, 0..300);
        }
        // On FUSE: plain renames, verified; fstat of a removed directory fails.
        for wait in [Wait::Forever, Wait::Immediately] {
            let mut scripts = workers(3, wait);
            scripts.push(Script::Sweeper);
            let mut cfg = config(scripts, Mutant::None);
            cfg.fuse = true;
            steps += random(&cfg, 0..300);
        }
        eprintln!("random: {steps} steps");
    }

    /// Observers beside acquirers (status, sweep with grace 0, a temp cleaner removing the
    /// lock directory, an operator's unlock) never make an acquisition fail, and hostile
    /// records (unsafe tokens, our own pid, another host name on this kernel, a clock set
    /// back) neither wedge nor spin: every waiting worker gets the lock.
    #[test]
    fn observers_and_hostile_records_never_make_an_acquisition_fail() {
        let steps = observers_and_hostile_records(0..60);
        eprintln!("observers and hostile records: {steps} steps");
    }

    /// The shapes of [`observers_and_hostile_records_never_make_an_acquisition_fail`], over
    /// `seeds` for each.
    fn observers_and_hostile_records(seeds: std::ops::Range<u64>) -> usize {
        let timed = Wait::Timeout(Duration::from_secs(30));
        let mut shapes: Vec<(Vec<Script>, bool)> = Vec::new();
        for observer in [Script::Observer, Script::SweeperNow, Script::Cleaner] {
            for wait in [Wait::Forever, timed] {
                let mut scripts = workers(2, wait);
                scripts.push(observer);
                shapes.push((scripts, false));
            }
        }
        let mut all = workers(2, Wait::Forever);
        all.extend([
            Script::Observer,
            Script::SweeperNow,
            Script::Cleaner,
            Script::Unlocker,
        ]);
        shapes.push((all, false));
        for plant in [
            Plant::Token(0),
            Plant::Token(1),
            Plant::Token(2),
            Plant::Token(3),
            Plant::TheirOwnPid,
            Plant::OtherHostThisKernel,
            Plant::Future,
        ] {
            let mut scripts = vec![Script::Planter(plant)];
            scripts.extend(workers(2, Wait::Forever));
            shapes.push((scripts.clone(), false));
            shapes.push((scripts, true));
        }
        let mut steps = 0;
        for (scripts, no_flock) in shapes {
            let mut cfg = config(scripts, Mutant::None);
            cfg.no_flock = no_flock;
            steps += random(&cfg, seeds.clone());
        }
        steps
    }

    #[test]
    #[ignore = "soak: run with `cargo test --release --lib sim -- --ignored`"]
    fn soak_exhaustive_with_more_preemptions() {
        let mut cfg = config(
            vec![
                Script::Worker {
                    rounds: 1,
                    wait: Wait::Immediately
                };
                2
            ],
            Mutant::None,
        );
        cfg.preemptions = Some(2);
        let n = exhaustive(&cfg, usize::MAX).unwrap_or_else(|v| panic!("{v}"));
        let mut cfg = config(
            vec![
                Script::Worker {
                    rounds: 1,
                    wait: Wait::Forever
                };
                2
            ],
            Mutant::None,
        );
        cfg.preemptions = Some(1);
        cfg.no_flock = true;
        let m = exhaustive(&cfg, usize::MAX).unwrap_or_else(|v| panic!("{v}"));
        eprintln!("exhaustive soak: {n} + {m} schedules");
    }

    #[test]
    #[ignore = "soak: run with `cargo test --release --lib sim -- --ignored`"]
    fn soak_random_schedules() {
        let per = 25_000;
        observers_and_hostile_records(0..per / 10);
        random(&config(workers(3, Wait::Forever), Mutant::None), 0..per);
        random(&config(workers(4, Wait::Immediately), Mutant::None), 0..per);
        let mut mixed = workers(3, Wait::Timeout(Duration::from_secs(3)));
        mixed.push(Script::Sweeper);
        random(&config(mixed, Mutant::None), 0..per);
        let mut mixed = workers(2, Wait::Forever);
        mixed.push(Script::Unlocker);
        mixed.push(Script::Sweeper);
        random(&config(mixed, Mutant::None), 0..per);
        let mut cfg = config(workers(4, Wait::Forever), Mutant::None);
        cfg.no_flock = true;
        random(&cfg, 0..per);
    }

    /// Replays one input of the fuzz target or its proptest mirror, with its steps:
    /// `SIM_DATA=94,0,0,161 cargo test --lib sim::tests::replay -- --ignored --nocapture`.
    #[test]
    #[ignore = "a debugging aid: replays SIM_DATA"]
    fn replay() {
        let Ok(data) = std::env::var("SIM_DATA") else {
            return;
        };
        let data: Vec<u8> = data
            .split(',')
            .filter_map(|b| b.trim().parse().ok())
            .collect();
        if let Err(v) = fuzz(&data) {
            panic!("{v}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The stable mirror of the stateful fuzz target: arbitrary bytes shape and schedule a
        /// simulation; no schedule violates an invariant.
        #[test]
        fn arbitrary_schedules_keep_the_invariants(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            if let Err(v) = fuzz(&data) {
                panic!("{v}");
            }
        }
    }

    /// A mutant is caught when some seed finds a violation.
    fn caught(cfg: &Config, seeds: u64) -> Option<(u64, String)> {
        (0..seeds).find_map(|seed| run(cfg, &mut Random::new(seed)).err().map(|v| (seed, v)))
    }

    /// The first seed whose violations include `what`.
    fn caught_as(cfg: &Config, seeds: u64, what: &[&str]) -> Option<(u64, String)> {
        (0..seeds).find_map(|seed| match run(cfg, &mut Random::new(seed)) {
            Err(v) if what.iter().any(|w| v.contains(w)) => Some((seed, v)),
            _ => None,
        })
    }

    #[test]
    fn skipping_the_guard_lets_a_live_owner_lose_its_lock() {
        // Not only is the guard not held (I5): a second reclaimer of the same dead owner moves
        // the lock its new, live owner just published.
        let cfg = config(workers(3, Wait::Forever), Mutant::SkipGuard);
        let (seed, v) = caught_as(&cfg, 20_000, &["I6", "I1"])
            .expect("no consequence of skipping the guard found");
        eprintln!("SkipGuard: seed {seed}: {}", v.lines().next().unwrap_or(""));
    }

    #[test]
    fn the_simulation_catches_each_mutant() {
        // Skipping the guard or the token check lets two reclaimers of one dead owner race:
        // the later one moves the new owner's lock.
        let mut reclaimers = workers(3, Wait::Forever);
        reclaimers[0] = Script::Worker {
            rounds: 1,
            wait: Wait::Forever,
        };
        for mutant in [Mutant::SkipGuard, Mutant::SkipTokenCheck] {
            let cfg = config(reclaimers.clone(), mutant);
            let (seed, v) =
                caught(&cfg, 3000).unwrap_or_else(|| panic!("{mutant:?} was not caught"));
            assert!(
                v.contains("I5") || v.contains("I6") || v.contains("I1"),
                "{mutant:?} (seed {seed}): {v}"
            );
            eprintln!(
                "{mutant:?}: seed {seed}: {}",
                v.lines().next().unwrap_or("")
            );
        }
        // A plain rename replaces an empty directory found at the lock path.
        let mut hostile = workers(2, Wait::Immediately);
        hostile.insert(0, Script::Intruder);
        let cfg = config(hostile, Mutant::PlainRename);
        let (seed, v) = caught(&cfg, 3000).expect("PlainRename was not caught");
        assert!(v.contains("I3"), "{v}");
        eprintln!(
            "PlainRename: seed {seed}: {}",
            v.lines().next().unwrap_or("")
        );
    }
}
