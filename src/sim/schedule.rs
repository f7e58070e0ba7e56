//! The scheduler: who runs (or crashes) at each scheduling point, seeded at random (choice by
//! choice, or in bursts), replayed for an exhaustive search, or read from a fuzzer's bytes.

use super::*;

/// How long the processes of a schedule may go without progress (entering the critical
/// section, ending) before the waiters among them count as wedged: longer than any wait the
/// scripts may rightly make (a 30 s timeout, a grace period).
const NO_PROGRESS: Duration = Duration::from_secs(120);

/// Picks what happens at each scheduling point: one of `runs` processes to run, or one of
/// `crashes` processes to crash (the options are numbered runs first).
pub(crate) trait Strategy {
    /// Chooses an option (`runs >= 1`).
    fn choose(&mut self, runs: usize, crashes: usize) -> usize;
}

/// Seeded pseudo-random choices (xorshift); a crash at any point with probability
/// `crash_permille / 1000`.
pub(crate) struct Random {
    pub(crate) state: u64,
    pub(crate) crash_permille: u64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            crash_permille: 15,
        }
    }
    pub(crate) fn next(&mut self) -> u64 {
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

/// Seeded bursts: the same option for a run of choices (of a random length, `mean` on
/// average), then another. Uniform choices rarely leave one process behind while others go
/// through whole acquisitions and releases (the odds fall geometrically with the steps it
/// misses); bursts do it all the time: a holder stalled between its handoff and its retire
/// while the waiter it woke releases, and the next one too. No crashes.
#[cfg(test)]
pub(crate) struct Bursts {
    random: Random,
    mean: u64,
    current: usize,
    left: u64,
}

#[cfg(test)]
impl Bursts {
    pub fn new(seed: u64, mean: u64) -> Bursts {
        Bursts {
            random: Random::new(seed),
            mean,
            current: 0,
            left: 0,
        }
    }
}

#[cfg(test)]
impl Strategy for Bursts {
    fn choose(&mut self, runs: usize, _crashes: usize) -> usize {
        if self.left == 0 || self.current >= runs {
            self.current = (self.random.next() % runs as u64) as usize;
            self.left = 1 + self.random.next() % (2 * self.mean);
        }
        self.left -= 1;
        self.current
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
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) rest: Random,
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

#[derive(Clone, Copy, Debug)]
pub(crate) enum Choice {
    Run(usize),
    Crash(usize),
}

pub(crate) fn schedule(
    world: &Arc<World>,
    scripts: &[Script],
    cfg: &Config,
    strategy: &mut dyn Strategy,
) -> usize {
    schedule_from(world, scripts, 0, cfg, strategy, false)
}

/// Starts one thread per script (slots `first..`) and drives them to the end; returns the
/// number of scheduling decisions taken.
pub(crate) fn schedule_from(
    world: &Arc<World>,
    scripts: &[Script],
    first: usize,
    cfg: &Config,
    strategy: &mut dyn Strategy,
    recovery: bool,
) -> usize {
    add_processes(world, first, scripts, recovery);
    {
        let mut st = world.lock();
        st.progressed = st.mono;
    }
    let handles: Vec<_> = scripts
        .iter()
        .enumerate()
        .map(|(i, script)| start(world, first + i, *script, cfg.grace, recovery))
        .collect();
    let mut run = Scheduler {
        slots: first..first + scripts.len(),
        crashes: vec![0; first + scripts.len()],
        preemptions: 0,
        last: None,
        steps: 0,
        cfg,
        recovery,
    };
    while run.step(world, strategy) {}
    for h in handles {
        let _ = h.join();
    }
    run.steps
}

/// Makes the threads of slots `first..`, one per script, not yet started: each the first
/// thread of a process of its own, but a [`Script::Thread`] after another script, which is
/// a thread of that one's process. A recovery process reuses a crashed process's pid (with
/// its own start time).
fn add_processes(world: &World, first: usize, scripts: &[Script], recovery: bool) {
    let mut st = world.lock();
    for (i, script) in scripts.iter().enumerate() {
        let slot = first + i;
        if let (Script::Thread { .. }, Some(before)) = (script, i.checked_sub(1)) {
            let process = st.procs[first + before].process;
            let (pid, start) = (st.procs[process].pid, st.procs[process].start);
            st.procs.push(Proc::new(pid, start, process));
            continue;
        }
        // (Not the reference's, nor that of another thread of its process: its records do not
        // say their pid namespace, and one naming the judge's own pid cannot be judged.)
        let reused = recovery
            .then(|| {
                let mut crashed = st.procs.iter().filter(|p| p.crashed);
                crashed.find(|p| !st.book.references.contains(&p.process))
            })
            .flatten()
            .map(|p| p.pid);
        let pid = reused.unwrap_or(100 + slot as u32);
        st.procs.push(Proc::new(pid, 1000 + slot as u64, slot));
    }
}

/// The thread of the process in `slot`: waits for its first turn, plays its script, and
/// reports a panic (a crash is not one: it unwinds on purpose).
fn start(
    world: &Arc<World>,
    slot: usize,
    script: Script,
    grace: Duration,
    recovery: bool,
) -> std::thread::JoinHandle<()> {
    let world = world.clone();
    std::thread::spawn(move || {
        let sys = SimSys {
            world: world.clone(),
            slot,
            task: Default::default(),
            lines: Default::default(),
            slept: Default::default(),
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
}

/// One schedule in progress.
struct Scheduler<'c> {
    slots: std::ops::Range<usize>,
    crashes: Vec<u32>,
    preemptions: u32,
    last: Option<usize>,
    steps: usize,
    cfg: &'c Config,
    recovery: bool,
}

impl Scheduler<'_> {
    /// Takes one decision (run or crash a process, or advance the clock); `false` once every
    /// process is done or the schedule ran too long.
    fn step(&mut self, world: &World, strategy: &mut dyn Strategy) -> bool {
        let mut st = world.lock();
        while st.turn.is_some()
            || self
                .slots
                .clone()
                .any(|s| st.procs[s].status == Status::Starting)
        {
            st = world.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if self.cfg.lossy && !self.recovery && st.exclusive.is_none() {
            self.lose_notifications(&mut st, strategy);
        }
        let runnable: Vec<usize> = self
            .slots
            .clone()
            .filter(|s| ready(&st, *s) && st.exclusive.is_none_or(|x| x == *s))
            .collect();
        if runnable.is_empty() {
            return self.idle(&mut st);
        }
        let last_runnable = self.last.filter(|l| runnable.contains(l));
        let (options, runs) = self.options(&st, &runnable, last_runnable);
        let choice = options[strategy.choose(runs, options.len() - runs)];
        self.steps += 1;
        if std::env::var_os("SIM_DEBUG").is_some() {
            let statuses: Vec<String> = self
                .slots
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
                    self.preemptions += 1;
                }
                self.last = Some(s);
                st.turn = Some(s);
            }
            Choice::Crash(s) => {
                self.crashes[s] += 1;
                st.crash(s);
                st.turn = Some(s); // it unwinds at once
            }
        }
        world.cv.notify_all();
        if self.steps > 200_000 {
            st.violation("the schedule did not end within 200000 steps".into());
            return false;
        }
        true
    }

    /// For each sleeper whose notification has come, the strategy decides whether it is
    /// delivered (option 0) or lost (option 1: the sleeper sleeps on, the watch re-armed as
    /// if what happened had been seen).
    fn lose_notifications(&mut self, st: &mut State, strategy: &mut dyn Strategy) {
        for s in self.slots.clone() {
            let Status::Sleeping {
                until,
                watch: Some(w),
            } = st.procs[s].status
            else {
                continue;
            };
            if !w.lossy || !w.fired(st) || strategy.choose(2, 0) == 0 {
                continue;
            }
            self.steps += 1;
            let watch = Some(w.rearmed(st));
            st.procs[s].status = Status::Sleeping { until, watch };
            st.trace.push(format!("p{s}'s notification lost"));
        }
    }

    /// Nobody can run: done, or the clock jumps to the next wake-up, or (nothing will ever
    /// wake anyone) a wedge, reported, and everyone crashed so that the threads end.
    fn idle(&self, st: &mut State) -> bool {
        if self
            .slots
            .clone()
            .all(|s| st.procs[s].status == Status::Done)
        {
            return false;
        }
        // (While a prober runs alone, only its own wake-up counts: one that sleeps until
        // another process acts would wait forever, as a fail-fast acquisition must not.)
        let wake = self
            .slots
            .clone()
            .filter(|s| st.exclusive.is_none_or(|x| x == *s))
            .filter_map(|s| match st.procs[s].status {
                Status::Sleeping { until, .. } => until,
                _ => None,
            })
            .min();
        match wake {
            // Sleepers that only ever wake to look again (a wait's bound of a second on its
            // watch: every notification may be lost) and never take the lock are wedged too.
            Some(t) if t.saturating_sub(st.progressed) > NO_PROGRESS => {
                st.violation(format!(
                    "I7: waiters have looked again for {:?} and nobody took the lock",
                    t.saturating_sub(st.progressed)
                ));
                for s in self.slots.clone() {
                    if st.procs[s].status != Status::Done {
                        st.crash(s);
                        st.procs[s].status = Status::Ready;
                    }
                }
            }
            Some(t) => st.mono = st.mono.max(t),
            None => {
                st.violation("I7: every process waits and nothing can wake it".into());
                // Crash them all; they unwind one by one as they are picked.
                for s in self.slots.clone() {
                    if st.procs[s].status != Status::Done {
                        st.crash(s);
                        st.procs[s].status = Status::Ready;
                    }
                }
            }
        }
        true
    }

    /// The options at this point, runs first: run any runnable process (switching away from
    /// one that could go on counts against the preemption bound), or crash a live one. Returns
    /// them and how many are runs.
    fn options(
        &self,
        st: &State,
        runnable: &[usize],
        last_runnable: Option<usize>,
    ) -> (Vec<Choice>, usize) {
        let mut options: Vec<Choice> = Vec::new();
        let can_switch = self.cfg.preemptions.is_none_or(|b| self.preemptions < b);
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
        let runs = options.len();
        let in_all = self.crashes.iter().sum::<u32>();
        if !self.recovery
            && st.exclusive.is_none()
            && self.cfg.crashes_in_all.is_none_or(|n| in_all < n)
        {
            for s in self.slots.clone() {
                let p = &st.procs[s];
                if p.alive && p.status != Status::Done && self.crashes[s] < self.cfg.crashes {
                    options.push(Choice::Crash(s));
                }
            }
        }
        (options, runs)
    }
}

/// Whether the process in `slot` can run now: ready, or asleep past its timeout or with its
/// watch changed.
fn ready(st: &State, slot: usize) -> bool {
    match st.procs[slot].status {
        Status::Ready => true,
        Status::Sleeping { until, watch } => {
            until.is_some_and(|u| u <= st.mono) || watch.is_some_and(|w| w.fired(st))
        }
        _ => false,
    }
}

impl SimSys {
    /// Opens the lock directory, making it (mode 0700) if a cleaner removed it, as
    /// `Locks` does.
    pub(crate) fn lock_dir(&self) -> Arc<SimDir> {
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
