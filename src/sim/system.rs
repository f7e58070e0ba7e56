//! [`SimSys`]: one simulated process's view of the [`System`] seam, each call a scheduling
//! point.

use super::*;

/// One simulated process's view of the system.
pub(crate) struct SimSys {
    pub(crate) world: Arc<World>,
    pub(crate) slot: usize,
    /// The task of the process being polled (0 for a process without tasks).
    pub(crate) task: std::cell::Cell<usize>,
    /// The queues of its runtime's tasks (see `SimRuntime`), for the check that only a
    /// queue's head publishes.
    pub(crate) lines: std::cell::RefCell<Vec<std::sync::Weak<crate::acquire::queue::Queue>>>,
    /// While a runtime polls its woken tasks: how long they have slept so far in this pass
    /// (see `Config::poll_limit`).
    pub(crate) slept: std::cell::Cell<Option<Duration>>,
}

/// An open directory of a simulated process.
pub(crate) struct SimDir {
    pub(crate) world: Arc<World>,
    pub(crate) fd: u64,
    /// The process whose descriptor it is.
    pub(crate) slot: usize,
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
                .is_some_and(|o| o.lock == Some(false) && o.holders.contains(&self.slot))
        };
        if prober && !std::thread::panicking() {
            drop(self.world.yield_point(self.slot, Status::Ready));
        }
        // A crashed process's descriptors were closed when it crashed.
        self.world.lock().close(self.fd, self.slot);
    }
}

impl SimSys {
    pub(crate) fn call<T>(&self, what: &str, op: impl FnOnce(&mut State, usize) -> T) -> T
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

    pub(crate) fn ino(&self, st: &State, d: &SimDir) -> io::Result<Ino> {
        st.ofds
            .get(&d.fd)
            .map(|o| o.ino)
            .ok_or_else(|| errno(EBADF))
    }

    pub(crate) fn dir(&self, fd: u64) -> SimDir {
        SimDir {
            world: self.world.clone(),
            fd,
            slot: self.slot,
        }
    }
}

impl Clock for SimSys {
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
        st.tokens.insert(t.clone(), (self.slot, self.task.get()));
        t
    }
}

impl System for SimSys {
    type Dir = SimDir;
    type Watch = SimWatch;

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
            os: Some("sim".into()),
            booted: Some(UNIX_EPOCH),
        }
    }

    fn pid(&self) -> u32 {
        self.world.lock().procs[self.slot].pid
    }

    fn crashed(&self) -> bool {
        self.world.lock().procs[self.slot].crashed
    }

    fn own_token(&self, token: &str, own: bool) {
        let mut st = self.world.lock();
        let process = st.procs[self.slot].process;
        if own {
            st.owned.insert((process, token.to_owned()));
        } else {
            st.owned.remove(&(process, token.to_owned()));
        }
    }

    fn wrote(&self, token: &str) -> bool {
        let st = self.world.lock();
        let process = st.procs[self.slot].process;
        st.owned.contains(&(process, token.to_owned()))
    }

    fn open_dir_path(&self, _: &Path) -> io::Result<SimDir> {
        let fd = self.world.lock().open(self.slot, PARENT);
        Ok(self.dir(fd))
    }

    fn open_dir_at(&self, at: &SimDir, name: &str) -> io::Result<SimDir> {
        let fd = self.call(&format!("open {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            if matches!(classify(name), Entry::Writers { .. }) {
                // A reader's look for waiting writers, for I11 (at the lock now published).
                if let Ok(lock) = st.lookup(st.d(), LOCK) {
                    let step = st.trace.len();
                    st.book.listed.insert((slot, self.task.get(), lock), step);
                }
            }
            let ino = st.lookup(dir, name)?;
            match st.inodes[&ino].node {
                Node::Dir(_) => Ok(st.open(slot, ino)),
                Node::File(_) => Err(errno(ENOTDIR)),
            }
        })?;
        Ok(self.dir(fd))
    }

    fn mkdir_at(&self, at: &SimDir, name: &str) -> io::Result<()> {
        self.call(&format!("mkdir {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            st.create(dir, name, Node::Dir(BTreeMap::new()), 0o700)?;
            st.came_in(slot, self.task.get(), dir, name);
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
        _mode: Option<u32>,
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
            st.create(dir, name, Node::File(Vec::new()), 0o600)
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

    fn open_file_at(&self, at: &SimDir, name: &str, create: bool) -> io::Result<SimDir> {
        let fd = self.call(
            &format!("open file {name} (create: {create})"),
            |st, slot| {
                check_name(name)?;
                let dir = self.ino(st, at)?;
                if create {
                    let ino = st.create(dir, name, Node::File(Vec::new()), 0o600)?;
                    return Ok(st.open(slot, ino));
                }
                let ino = st.lookup(dir, name)?;
                match st.inodes[&ino].node {
                    Node::File(_) => Ok(st.open(slot, ino)),
                    Node::Dir(_) => Err(errno(EISDIR)),
                }
            },
        )?;
        Ok(self.dir(fd))
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
            let publish = matches!(classify(from), Entry::Candidate { .. })
                && matches!(classify(to), Entry::Lock(_));
            if publish && self.out_of_turn() {
                let task = self.task.get();
                st.violation(format!(
                    "task {task} of p{slot} published {to} out of turn (only the head of its queue may)"
                ));
            }
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
                st.unlinked(dst);
                st.inodes.remove(&dst);
            }
            match classify(from) {
                Entry::Lock(lock) => st.moving(slot, self.task.get(), src, &lock),
                Entry::Candidate { token, .. } => st.moving_candidate(slot, src, from, &token),
                _ => {}
            }
            let entries = st.dir_entries_mut(dir)?;
            entries.remove(from);
            entries.insert(to.to_owned(), src);
            st.touch(dir);
            st.bump(src);
            if crate::paths::Queued::parse(to).is_some() {
                let step = st.trace.len();
                st.book.numbered.insert(src, step);
            }
            // The PlainRename mutant renames plainly believing it exclusive; FUSE says so.
            Ok(if st.fuse {
                Renamed::Plain
            } else {
                Renamed::Exclusive
            })
        })
    }

    fn exchange(&self, at: &SimDir, a: &str, b: &str) -> io::Result<()> {
        self.call(&format!("exchange {a} <-> {b}"), |st, slot| {
            let dir = self.ino(st, at)?;
            st.exchange((slot, self.task.get()), dir, a, b)
        })
    }

    fn replace_file_at(&self, at: &SimDir, from: &str, to: &str) -> io::Result<()> {
        self.call(&format!("rename {from} over {to}"), |st, _| {
            check_name(from)?;
            check_name(to)?;
            let dir = self.ino(st, at)?;
            let src = st.lookup(dir, from)?;
            if let Ok(dst) = st.lookup(dir, to) {
                if matches!(st.inodes[&dst].node, Node::Dir(_)) {
                    return Err(errno(EISDIR));
                }
                if !st.ofds.values().any(|o| o.ino == dst) {
                    st.inodes.remove(&dst);
                } else {
                    st.unlinked(dst);
                }
            }
            let entries = st.dir_entries_mut(dir)?;
            entries.remove(from);
            entries.insert(to.to_owned(), src);
            st.touch(dir);
            st.bump(src);
            Ok(())
        })
    }

    fn remove_file_at(&self, at: &SimDir, name: &str) -> io::Result<()> {
        self.call(&format!("unlink {name}"), |st, slot| {
            check_name(name)?;
            let dir = self.ino(st, at)?;
            let ino = st.lookup(dir, name)?;
            if matches!(st.inodes[&ino].node, Node::Dir(_)) {
                return Err(errno(EISDIR));
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
            if st.ofds.values().any(|o| o.ino == ino) {
                st.unlinked(ino); // still open (a file guard retired while held)
            } else {
                st.inodes.remove(&ino);
            }
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
            st.unlinked(ino);
            st.bump(ino);
            st.touch(dir);
            Ok(())
        })
    }

    fn list(&self, dir: &SimDir) -> io::Result<Vec<String>> {
        self.call("list", |st, slot| {
            let ino = self.ino(st, dir)?;
            let step = st.trace.len();
            st.book.listed.insert((slot, self.task.get(), ino), step);
            Ok(st.dir_entries(ino)?.keys().cloned().collect())
        })
    }

    fn try_lock(&self, dir: &SimDir, exclusive: bool) -> io::Result<bool> {
        let fd = dir.fd;
        let converting = {
            let st = self.world.lock();
            st.split_convert && st.ofds.get(&fd).is_some_and(|o| o.lock == Some(!exclusive))
        };
        if converting {
            self.call("flock UN (converting)", |st, _| {
                let ino = self.ino(st, dir)?;
                st.ofds.get_mut(&fd).expect("open").lock = None;
                st.bump(ino);
                Ok::<(), io::Error>(())
            })?;
        }
        self.call(
            &format!("flock {}", if exclusive { "EX" } else { "SH" }),
            |st, slot| {
                let ino = self.ino(st, dir)?;
                if st.no_flock {
                    return Err(errno(ENOLCK));
                }
                // A lock held through `fd` is converted in one step (unless `split_convert`);
                // not granted, it is gone (as Linux does it).
                if st.flock_conflict(fd, ino, exclusive) {
                    st.ofds.get_mut(&fd).expect("open").lock = None;
                    return Ok(false);
                }
                st.ofds.get_mut(&fd).expect("open").lock = Some(exclusive);
                st.book
                    .locked(slot, self.task.get(), ino, exclusive, st.trace.len());
                if exclusive {
                    st.check_entry_flock(slot, ino);
                }
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
                    return Err(errno(ENOLCK));
                }
                let conflict = st.flock_conflict(fd, ino, false);
                if !conflict {
                    st.ofds.get_mut(&fd).expect("open").lock = Some(false);
                }
                Ok(conflict.then(|| SimWatch {
                    ino,
                    epoch: st.inodes.get(&ino).map_or(0, |i| i.epoch),
                    slot: None,
                    recheck: false,
                    lossy: false,
                }))
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

    /// As on Linux: the directory's changes (inotify) and, for a holder judged by pid, its
    /// exit (a pidfd, of the live process the pid names now), or, without pidfd or a live
    /// process, a recheck.
    fn watch(&self, lock: &SimDir, pid: Option<u32>, beacon: bool) -> io::Result<Option<SimWatch>> {
        let st = self.world.lock();
        let ino = self.ino(&st, lock)?;
        let pid = pid.filter(|_| !beacon);
        let slot = pid
            .filter(|_| !st.no_pidfd)
            .and_then(|p| st.slot_of_pid(p))
            .filter(|s| st.procs[*s].alive);
        Ok(Some(SimWatch {
            ino,
            epoch: st.inodes.get(&ino).map_or(0, |i| i.epoch),
            slot,
            recheck: pid.is_some() && slot.is_none(),
            lossy: true,
        }))
    }

    /// As on a real system where notifications may be lost (`Config::lossy`); where none is
    /// lost, none: a waiter that would sleep forever is then seen to (I7).
    fn look_again(&self) -> Option<Duration> {
        self.world.lock().lossy.then_some(Duration::from_secs(1))
    }

    fn turn_every(&self) -> Option<Duration> {
        self.world.lock().turns.then_some(Duration::ZERO)
    }

    /// The scheduler decides who runs next, at every step.
    fn yield_now(&self) {}

    fn sleep(
        &self,
        watch: Option<&SimWatch>,
        timeout: Option<Duration>,
        _cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        let now = self.world.lock().mono;
        let (until, capped) = SimWatch::sleep_until(watch, timeout, now);
        let st = self.world.yield_point(
            self.slot,
            Status::Sleeping {
                until,
                watch: watch.copied(),
            },
        );
        self.slept
            .set(self.slept.get().map(|s| s + st.mono.saturating_sub(now)));
        // A recheck's end is not the caller's deadline: it is told to look again.
        Ok(if capped || watch.is_some_and(|w| w.fired(&st)) {
            Wake::Changed
        } else {
            Wake::TimedOut
        })
    }
}
