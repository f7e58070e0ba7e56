//! The model: directories and files with modes and mtimes, open file descriptions with
//! `flock`s, processes, a virtual clock, the baton that lets one process run at a time, and the
//! invariant checks run after every step.

use super::*;

pub(crate) type Ino = u64;

/// The unwinding payload of a crashed process.
pub(crate) struct Crashed;

#[derive(Debug)]
pub(crate) enum Node {
    Dir(BTreeMap<String, Ino>),
    File(Vec<u8>),
}

#[derive(Debug)]
pub(crate) struct Inode {
    pub(crate) node: Node,
    pub(crate) mode: u32,
    pub(crate) mtime: Duration,
    /// Bumped by events a watcher cares about (close, move, removal, mode change).
    pub(crate) epoch: u64,
    /// Made by the intruder (hostile input), not by the protocol.
    pub(crate) foreign: bool,
    /// Still linked into the tree (a removed directory lives on while handles are open).
    pub(crate) linked: bool,
    /// The inode number `fstat` reports: the key in [`State::inodes`], but on FUSE a removed
    /// directory's number goes to the next directory made (see [`State::unlinked`]).
    pub(crate) number: Ino,
}

#[derive(Debug)]
pub(crate) struct Ofd {
    pub(crate) ino: Ino,
    /// The processes whose descriptors refer to it (a fork shares its parent's): its flock
    /// goes with the last of them.
    pub(crate) holders: Vec<usize>,
    pub(crate) lock: Option<bool>, // Some(exclusive)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Status {
    /// The thread has not reached its first scheduling point yet.
    Starting,
    Running,
    Ready,
    Sleeping {
        until: Option<Duration>,
        watch: Option<SimWatch>,
    },
    Done,
}

/// What a sleeper is woken by, as inotify and a pidfd would wake it: a change of the inode
/// `ino` (its `epoch` moves on), or the exit of the process in `slot`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SimWatch {
    pub(crate) ino: Ino,
    pub(crate) epoch: u64,
    /// The watched process (the one the pid named when the watch was made: a pidfd does not
    /// follow a reused pid).
    pub(crate) slot: Option<usize>,
    /// A pid asked for that could not be watched: the sleeper looks again every
    /// [`SimWatch::RECHECK`], as the real watches do.
    pub(crate) recheck: bool,
    /// A notification (inotify, a pidfd, a kqueue event), which may be lost (see
    /// `Config::lossy`); not the kernel's own queue of a blocking `flock`.
    pub(crate) lossy: bool,
}

impl SimWatch {
    pub(crate) const RECHECK: Duration = Duration::from_millis(100);

    /// The same watch, with what has happened so far taken as seen: a notification lost.
    pub(crate) fn rearmed(&self, st: &State) -> SimWatch {
        SimWatch {
            epoch: st.inodes.get(&self.ino).map_or(self.epoch, |i| i.epoch),
            slot: self.slot.filter(|s| st.procs[*s].alive),
            ..*self
        }
    }

    /// When a sleep on `watch` for at most `timeout`, from `now`, ends (`None`: only when
    /// woken), and whether that end is a look again's ([`SimWatch::recheck`]), not the
    /// caller's deadline.
    pub(crate) fn sleep_until(
        watch: Option<&SimWatch>,
        timeout: Option<Duration>,
        now: Duration,
    ) -> (Option<Duration>, bool) {
        let recheck = watch
            .filter(|w| w.recheck)
            .map(|_| SimWatch::RECHECK)
            .filter(|r| timeout.is_none_or(|t| t > *r));
        (recheck.or(timeout).map(|t| now + t), recheck.is_some())
    }

    /// Whether what it watches has happened.
    pub(crate) fn fired(&self, st: &State) -> bool {
        st.inodes
            .get(&self.ino)
            .is_none_or(|i| i.epoch != self.epoch)
            || self.slot.is_some_and(|s| !st.procs[s].alive)
    }
}

/// A simulated thread: the first of its process, or another thread of it (same pid and start
/// time, the same tokens written).
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    /// The slot of its process's first thread (its own, for that one).
    pub(crate) process: usize,
    pub(crate) start: u64,
    pub(crate) alive: bool,
    pub(crate) crashed: bool,
    pub(crate) status: Status,
    /// The watch of the sleep it last woke from, as the scheduler left it (re-armed when its
    /// notification was lost).
    pub(crate) woke_on: Option<SimWatch>,
}

impl Proc {
    pub(crate) fn new(pid: u32, start: u64, process: usize) -> Proc {
        Proc {
            pid,
            process,
            start,
            alive: true,
            crashed: false,
            status: Status::Starting,
            woke_on: None,
        }
    }
}

pub(crate) struct State {
    pub(crate) turn: Option<usize>,
    pub(crate) procs: Vec<Proc>,
    pub(crate) inodes: HashMap<Ino, Inode>,
    pub(crate) next_ino: Ino,
    /// Numbers of removed directories, the last one freed first (FUSE only).
    pub(crate) free_numbers: Vec<Ino>,
    pub(crate) ofds: HashMap<u64, Ofd>,
    pub(crate) next_fd: u64,
    pub(crate) mono: Duration,
    /// Who drew each token: its process's slot, and the task in it (0 without tasks).
    pub(crate) tokens: HashMap<String, (usize, usize)>,
    pub(crate) next_token: u64,
    /// Who is in the critical section: (slot, task; 0 for a process without tasks).
    pub(crate) inside: Vec<(usize, usize)>,
    /// When a process last made progress (entered the critical section, or ended): waiters
    /// that poll on and on without it are wedged as surely as sleepers nothing can wake.
    pub(crate) progressed: Duration,
    pub(crate) violations: Vec<String>,
    pub(crate) trace: Vec<String>,
    pub(crate) mutant: Mutant,
    /// Every flock fails with ENOLCK, as on filesystems without it: owners are judged by pid.
    pub(crate) no_flock: bool,
    /// The slot whose pid a [`Plant::TheirOwnPid`](super::scripts::Plant) record names: the
    /// last process that is not a forked child (a child exists in the model before its fork,
    /// waiting for a parent that may be waiting for the planted lock: a deadlock of the
    /// scenario, not of the protocol).
    pub(crate) victim: usize,
    /// A FUSE filesystem like bindfs: no `RENAME_NOREPLACE` (plain renames, which replace an
    /// empty directory, verified by the protocol), `fstat` of a removed directory fails
    /// with ENOENT (a scheduling point, so that a removal can come between an open and it),
    /// and a removed directory's inode number goes to the next directory made.
    pub(crate) fuse: bool,
    /// No process-exit watch (as without pidfd): see `Config::no_pidfd`.
    pub(crate) no_pidfd: bool,
    /// Notifications may be lost: see `Config::lossy`.
    pub(crate) lossy: bool,
    /// Conversions take two steps: see `Config::split_convert`.
    pub(crate) split_convert: bool,
    /// No exchange of two names: see `Config::no_exchange`.
    pub(crate) no_exchange: bool,
    /// A turn at every release: see `Config::turns`.
    pub(crate) turns: bool,
    /// See `Config::deadline_slack`.
    pub(crate) deadline_slack: Option<Duration>,
    /// See `Config::poll_limit`.
    pub(crate) poll_limit: Option<Duration>,
    /// Who wrote the marker in each guard directory (the guard's holder where there is no flock).
    pub(crate) marked_by: HashMap<Ino, usize>,
    /// A process that runs alone, on a stopped clock, without crashes: a look at the lock
    /// and an acquisition that must agree with it (see `Script::Prober`).
    pub(crate) exclusive: Option<usize>,
    /// The observers looking at the lock, by slot (see [`Watch`]).
    pub(crate) watching: BTreeMap<usize, super::scripts::Watch>,
    /// The tokens each process (by its first thread's slot) wrote and is not done with
    /// (`System::own_token`).
    pub(crate) owned: std::collections::HashSet<(usize, String)>,
    /// What a forked child (by slot) inherited of the lock its parent held at the fork.
    pub(crate) forks: HashMap<usize, Inherited>,
    /// Who reads shared locks, and what I10 to I12 need to know of them.
    pub(crate) book: Book,
}

/// A lock a forked child finds in its copy of its parent's memory: the parent's `Held`.
#[derive(Clone, Debug)]
pub(crate) struct Inherited {
    pub(crate) name: String,
    pub(crate) owner: Owner,
    /// The beacon: the parent's descriptor, now the child's too.
    pub(crate) fd: u64,
    pub(crate) id: FileId,
}

pub(crate) struct World {
    pub(crate) state: Mutex<State>,
    pub(crate) cv: Condvar,
}

pub(crate) fn err(kind: io::ErrorKind) -> io::Error {
    io::Error::from(kind)
}

pub(crate) fn errno(n: i32) -> io::Error {
    io::Error::from_raw_os_error(n)
}

pub(crate) use crate::sys::errno::*;

/// What the kernel (and the real `sys`) says about a name that is not one directory entry: a
/// `/` makes it a path (whose directories do not exist here), a NUL cannot be passed at all,
/// and a name has at most 255 bytes.
pub(crate) fn check_name(name: &str) -> io::Result<()> {
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
    /// Notes, for each observer, what NAME is now in the directory it looks in.
    pub(crate) fn watch(&mut self) {
        let now: Vec<Option<Ino>> = (self.watching.values())
            .map(|w| self.lookup(w.dir, LOCK).ok())
            .collect();
        for (w, now) in self.watching.values_mut().zip(now) {
            match now {
                None => w.missing = true,
                Some(ino) => drop(w.locks.insert(ino)),
            }
        }
    }

    /// The lock directory now (0, which names nothing, while a cleaner has removed it).
    pub(crate) fn d(&self) -> Ino {
        self.lookup(PARENT, LOCKS).unwrap_or(0)
    }

    /// Unlinks the trees rooted at `doomed`.
    pub(crate) fn unlink_trees(&mut self, mut doomed: Vec<Ino>) {
        while let Some(ino) = doomed.pop() {
            if let Some(Node::Dir(e)) = self.inodes.get_mut(&ino).map(|i| &mut i.node) {
                doomed.extend(std::mem::take(e).into_values());
            }
            self.unlinked(ino);
            self.bump(ino);
        }
    }

    /// Marks `ino` removed from the tree. On FUSE a directory's number is free at once, the
    /// next directory made gets it (bindfs over ext4 reports the backing numbers, and an open
    /// handle there does not keep the backing directory).
    pub(crate) fn unlinked(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            if i.linked && self.fuse && matches!(i.node, Node::Dir(_)) {
                self.free_numbers.push(i.number);
            }
            i.linked = false;
        }
    }

    pub(crate) fn wall(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000) + self.mono
    }

    /// The process with this pid: the live one if the pid was reused.
    pub(crate) fn slot_of_pid(&self, pid: u32) -> Option<usize> {
        self.procs
            .iter()
            .position(|p| p.pid == pid && p.alive)
            .or_else(|| self.procs.iter().position(|p| p.pid == pid))
    }

    pub(crate) fn violation(&mut self, what: String) {
        let trace = self.trace[self.trace.len().saturating_sub(40)..].join("\n  ");
        self.violations
            .push(format!("{what}\n  last steps:\n  {trace}"));
    }

    pub(crate) fn dir_entries(&self, ino: Ino) -> io::Result<&BTreeMap<String, Ino>> {
        match self.inodes.get(&ino).map(|i| &i.node) {
            Some(Node::Dir(e)) => Ok(e),
            Some(_) => Err(errno(ENOTDIR)),
            None => Err(err(io::ErrorKind::NotFound)),
        }
    }

    pub(crate) fn dir_entries_mut(&mut self, ino: Ino) -> io::Result<&mut BTreeMap<String, Ino>> {
        match self.inodes.get_mut(&ino).map(|i| &mut i.node) {
            Some(Node::Dir(e)) => Ok(e),
            Some(_) => Err(errno(ENOTDIR)),
            None => Err(err(io::ErrorKind::NotFound)),
        }
    }

    pub(crate) fn lookup(&self, dir: Ino, name: &str) -> io::Result<Ino> {
        self.dir_entries(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| err(io::ErrorKind::NotFound))
    }

    pub(crate) fn meta(&self, ino: Ino) -> Meta {
        let i = &self.inodes[&ino];
        let (kind, size, nlink) = match &i.node {
            // As on Linux's own filesystems: `.`, the name, and each subdirectory's `..`.
            Node::Dir(e) => {
                let subdirs = e
                    .values()
                    .filter(|i| matches!(self.inodes[i].node, Node::Dir(_)))
                    .count();
                (Kind::Dir, 4096, 2 + subdirs as u64)
            }
            Node::File(d) => (Kind::File, d.len() as u64, 1),
        };
        let nlink = if i.linked { nlink } else { 0 };
        Meta {
            id: FileId {
                dev: 1,
                ino: i.number,
            },
            kind,
            uid: UID,
            mode: i.mode,
            size,
            nlink,
            mtime: UNIX_EPOCH + Duration::from_secs(1_700_000_000) + i.mtime,
        }
    }

    pub(crate) fn touch(&mut self, ino: Ino) {
        let now = self.mono;
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.mtime = now;
        }
    }

    pub(crate) fn bump(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.epoch += 1;
        }
    }

    pub(crate) fn new_inode(&mut self, node: Node, mode: u32, foreign: bool) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        let number = match node {
            Node::Dir(_) => self.free_numbers.pop().unwrap_or(ino),
            Node::File(_) => ino,
        };
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
                number,
            },
        );
        ino
    }

    /// Makes `name` in directory `dir` (`mkdir`, or a file's `O_CREAT | O_EXCL`): `EEXIST`
    /// if anything is there, not found if `dir` was removed.
    pub(crate) fn create(
        &mut self,
        dir: Ino,
        name: &str,
        node: Node,
        mode: u32,
    ) -> io::Result<Ino> {
        if !self.inodes.get(&dir).is_some_and(|i| i.linked) {
            return Err(err(io::ErrorKind::NotFound)); // a removed directory
        }
        if self.dir_entries(dir)?.contains_key(name) {
            return Err(errno(EEXIST));
        }
        let ino = self.new_inode(node, mode, false);
        self.dir_entries_mut(dir)?.insert(name.to_owned(), ino);
        self.touch(dir);
        Ok(ino)
    }

    pub(crate) fn open(&mut self, slot: usize, ino: Ino) -> u64 {
        let fd = self.next_fd;
        self.next_fd += 1;
        self.ofds.insert(
            fd,
            Ofd {
                ino,
                holders: vec![slot],
                lock: None,
            },
        );
        fd
    }

    /// Whether another descriptor's flock on `ino` stands in the way of `fd` taking one.
    pub(crate) fn flock_conflict(&self, fd: u64, ino: Ino, exclusive: bool) -> bool {
        self.ofds
            .iter()
            .any(|(f, o)| *f != fd && o.ino == ino && o.lock.is_some_and(|x| x || exclusive))
    }

    /// Process `slot` closes its descriptor `fd`: the open description goes (and its flock
    /// with it) once no process refers to it.
    pub(crate) fn close(&mut self, fd: u64, slot: usize) {
        let Some(ofd) = self.ofds.get_mut(&fd) else {
            return;
        };
        ofd.holders.retain(|s| *s != slot);
        if ofd.holders.is_empty() {
            let ino = ofd.ino;
            self.ofds.remove(&fd);
            self.bump(ino);
        }
    }

    /// Closes every descriptor of process `slot` (it crashed or exited).
    pub(crate) fn close_all(&mut self, slot: usize) {
        let fds: Vec<u64> = self
            .ofds
            .iter()
            .filter(|(_, o)| o.holders.contains(&slot))
            .map(|(fd, _)| *fd)
            .collect();
        for fd in fds {
            self.close(fd, slot);
        }
    }

    /// Kills the process of thread `slot`, as `SIGKILL` would: every thread of it (the others
    /// unwind when they are next picked).
    pub(crate) fn crash(&mut self, slot: usize) {
        let process = self.procs[slot].process;
        for s in 0..self.procs.len() {
            let p = &mut self.procs[s];
            if p.process != process || p.status == Status::Done {
                continue;
            }
            p.alive = false;
            p.crashed = true;
            if s != slot && matches!(p.status, Status::Sleeping { .. }) {
                p.status = Status::Ready;
            }
            self.close_all(s);
            self.inside.retain(|(i, _)| *i != s);
            self.book.gone(s);
        }
        self.trace.push(format!("CRASH p{slot}"));
    }

    /// The record of the lock directory `ino`, if complete.
    pub(crate) fn record(&self, ino: Ino) -> Option<Owner> {
        let rec = *self.dir_entries(ino).ok()?.get(OWNER_FILE)?;
        match &self.inodes.get(&rec)?.node {
            Node::File(d) => Owner::parse(d).ok(),
            Node::Dir(_) => None,
        }
    }

    /// Whether `slot` holds the guard of lock `name`: an exclusive flock on it, or, where
    /// there is no flock, the guard it marked and still has open.
    pub(crate) fn holds_guard(&self, slot: usize, name: &str) -> bool {
        let Ok(g) = self.lookup(self.d(), &guard_name(name)) else {
            return false;
        };
        let open = |lock: Option<bool>| {
            self.ofds.values().any(|o| {
                o.ino == g && o.holders.contains(&slot) && (lock.is_none() || o.lock == lock)
            })
        };
        open(Some(true)) || (self.no_flock && self.marked_by.get(&g) == Some(&slot) && open(None))
    }

    /// I2 and I8, checked after every step: a published lock is a private directory with a
    /// complete, private record. (That of a process's tasks only the head of its queue
    /// publishes is checked at the publish: see `SimSys::rename_noreplace`.)
    pub(crate) fn check(&mut self) {
        self.watch();
        self.check_readers();
        self.check_handed();
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
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A scheduling point: hand the baton back and wait to be picked again. A process that was
    /// crashed meanwhile unwinds from here.
    pub(crate) fn yield_point(&self, slot: usize, status: Status) -> MutexGuard<'_, State> {
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
        if let Status::Sleeping { watch, .. } = st.procs[slot].status {
            st.procs[slot].woke_on = watch;
        }
        st.procs[slot].status = Status::Running;
        if st.exclusive.is_none() {
            st.mono += TICK;
        }
        st
    }

    pub(crate) fn finish(&self, slot: usize) {
        let mut st = self.lock();
        st.procs[slot].status = Status::Done;
        // Its script is over: the process exits (its pid no longer runs, and what it still
        // had open, a forked child's inherited descriptors, closes).
        st.procs[slot].alive = false;
        st.progressed = st.mono;
        st.close_all(slot);
        if st.turn == Some(slot) {
            st.turn = None;
        }
        self.cv.notify_all();
    }
}
