//! The driver under simulation: where a simulated process takes its lock ([`SimSite`]), and
//! a simulated runtime of tasks ([`SimRuntime`]) that runs asynchronous acquisitions as a
//! tokio runtime does, queued per lock, on the simulated system's wake-ups (which may be lost
//! or merged), and cancelled by dropping their futures at any poll.
//!
//! A process with tasks runs them on its own thread: it polls each task that was woken, and
//! when none is, it sleeps (a scheduling point) until the first sleeping task's timeout or
//! its watch fires; then it polls them all (a runtime may poll a future for nothing), each
//! poll with a waker of its own, of which only the last one wakes the task. Checked besides I1
//! to I9: a task whose acquisition is dropped leaves nothing behind (no candidate, no lock),
//! and only the head of its process's queue publishes.

use super::*;
use crate::acquire::queue::Queue;
use crate::acquire::{Acquisition, Bounded, Resolved, Site, Sleep};
use crate::held::{Family, Who};
use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::task::{Context, Poll, Waker};

/// Where a simulated process takes its lock: the lock directory, made again when a cleaner
/// removed it. (The in-process refusals are the real process's, not simulated.)
pub(crate) struct SimSite<'a> {
    pub(crate) sys: &'a SimSys,
}

impl Site<SimSys> for SimSite<'_> {
    fn sys(&self) -> &SimSys {
        self.sys
    }

    fn open(&self) -> Result<(Arc<SimDir>, FileId), Error> {
        let dir = self.sys.lock_dir();
        let ino = self.sys.ino(&self.sys.world.lock(), &dir).unwrap_or(0);
        Ok((dir, FileId { dev: 1, ino }))
    }

    fn space<'b>(&'b self, dir: &'b SimDir) -> Space<'b, SimSys> {
        space(self.sys, dir)
    }

    fn refusals(&self, _: &SimDir, _: FileId, _: &Resolved, _: Who) -> Result<(), Error> {
        Ok(())
    }
}

/// The acquisition of the simulated lock by task `task` of the process of `sys`.
pub(crate) fn acquisition(
    sys: &SimSys,
    wait: Wait,
    grace: Duration,
    task: usize,
) -> Acquisition<SimSys, SimSite<'_>> {
    starting(sys, task);
    let mut options = Options::new(wait);
    options.grace = grace;
    let target = Resolved {
        name: LOCK.into(),
        path: Path::new("/sim").join(LOCK),
        resource: "sim".into(),
        family: Family::Named,
    };
    Acquisition::new(SimSite { sys }, target, options, Who::Sim(sys.slot, task))
}

/// A task's sleep, registered with its runtime until it ends.
struct Sleeper {
    task: usize,
    until: Option<Duration>,
    watch: Option<SimWatch>,
    /// Whether `until` is a look again's (see [`SimWatch::recheck`]), not the caller's.
    capped: bool,
    /// How it ended, once it has.
    woke: Option<Wake>,
}

impl SimSys {
    /// Whether the task being polled is in one of its runtime's queues, not at its head.
    pub(crate) fn out_of_turn(&self) -> bool {
        let me = Who::Sim(self.slot, self.task.get());
        let lines = self.lines.borrow();
        let mut queues = lines.iter().filter_map(Weak::upgrade);
        queues.any(|q| q.has(me) && q.head() != Some(me))
    }
}

/// A simulated process's runtime: its tasks' sleeps and its queues.
pub(crate) struct SimRuntime<'a> {
    sys: &'a SimSys,
    sleepers: RefCell<Vec<Sleeper>>,
    queues: RefCell<HashMap<(FileId, String), Weak<Queue>>>,
    wakers: Vec<Arc<Flag>>,
}

/// A task: whether it was woken since it was last polled, and how many times it was polled.
#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    polls: AtomicU64,
}

/// The waker of one poll of a task. Only the last poll's wakes the task: a future must wake
/// the waker it was last polled with (the one before may be another task's, had the future
/// moved), so one that keeps an older waker is seen to lose its wake-up.
struct PollWaker {
    task: Arc<Flag>,
    poll: u64,
}

impl std::task::Wake for PollWaker {
    fn wake(self: Arc<Self>) {
        if self.task.polls.load(Ordering::SeqCst) == self.poll {
            self.task.woken.store(true, Ordering::SeqCst);
        }
    }
}

impl SimRuntime<'_> {
    /// How the sleep of the task being polled ended, if it has (and its registration goes).
    fn woke(&self) -> Option<Wake> {
        let task = self.sys.task.get();
        let mut sleepers = self.sleepers.borrow_mut();
        let i = sleepers
            .iter()
            .position(|s| s.task == task && s.woke.is_some())?;
        sleepers.remove(i).woke
    }

    fn register(&self, until: Option<Duration>, watch: Option<SimWatch>, capped: bool) {
        let task = self.sys.task.get();
        let mut sleepers = self.sleepers.borrow_mut();
        sleepers.retain(|s| s.task != task);
        sleepers.push(Sleeper {
            task,
            until,
            watch,
            capped,
            woke: None,
        });
    }

    fn forget(&self, task: usize) {
        self.sleepers.borrow_mut().retain(|s| s.task != task);
    }

    /// Returns `Pending` once, woken: lets the process's other tasks run.
    async fn yield_now(&self) {
        let mut yielded = false;
        poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    /// The sleep of a process none of whose tasks can run: until the first timeout, on the
    /// first watch (with another watch besides, looking again at least every
    /// [`SimWatch::RECHECK`]).
    fn sleep_of(&self, now: Duration) -> (Option<Duration>, Option<SimWatch>) {
        let sleepers = self.sleepers.borrow();
        let mut until = sleepers.iter().filter_map(|s| s.until).min();
        let mut watches = sleepers.iter().filter_map(|s| s.watch);
        let watch = watches.next();
        if watches.next().is_some() {
            let again = now + SimWatch::RECHECK;
            until = Some(until.map_or(again, |u| u.min(again)));
        }
        (until, watch)
    }

    /// After a sleep on `slept` (as the scheduler left it: re-armed if its notification was
    /// lost): ends the sleeps whose time has come or whose watch fired, and wakes their tasks.
    fn fire(&self, st: &State, yielded: Option<SimWatch>) {
        let woke_on = st.procs[self.sys.slot].woke_on;
        for s in self.sleepers.borrow_mut().iter_mut() {
            if s.watch.is_some() && s.watch == yielded {
                s.watch = woke_on; // a lost notification is lost for this sleeper too
            }
            let timed_out = s.until.is_some_and(|u| u <= st.mono);
            let fired = s.watch.is_some_and(|w| w.fired(st));
            if s.woke.is_none() && (timed_out || fired) {
                s.woke = Some(if fired || s.capped {
                    Wake::Changed
                } else {
                    Wake::TimedOut
                });
                self.wakers[s.task].woken.store(true, Ordering::SeqCst);
            }
        }
    }
}

impl Sleep<SimSys> for SimRuntime<'_> {
    fn real(&self) -> bool {
        false
    }

    async fn sleep(
        &self,
        sys: &SimSys,
        watch: Option<&SimWatch>,
        timeout: Option<Duration>,
        _: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        let (until, capped) = SimWatch::sleep_until(watch, timeout, sys.monotonic());
        self.register(until, watch.copied(), capped);
        Ok(poll_fn(|_| self.woke().map_or(Poll::Pending, Poll::Ready)).await)
    }

    async fn bounded<T>(
        &self,
        timeout: Option<Duration>,
        _: Option<&CancelHandle>,
        fut: impl Future<Output = T>,
    ) -> Bounded<T> {
        let until = timeout.map(|t| self.sys.monotonic() + t);
        let mut fut = pin!(fut);
        let mut registered = false;
        poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                self.forget(self.sys.task.get());
                return Poll::Ready(Bounded::Done(v));
            }
            if self.woke().is_some() {
                return Poll::Ready(Bounded::TimedOut);
            }
            if !registered && until.is_some() {
                self.register(until, None, false);
                registered = true;
            }
            Poll::Pending
        })
        .await
    }

    fn runs_alone(&self) -> bool {
        false
    }

    fn queue(&self, dir: FileId, name: &str) -> Option<Arc<Queue>> {
        let mut queues = self.queues.borrow_mut();
        let key = (dir, name.to_owned());
        if let Some(q) = queues.get(&key).and_then(Weak::upgrade) {
            return Some(q);
        }
        let q = Arc::new(Queue::default());
        queues.insert(key, Arc::downgrade(&q));
        self.sys.lines.borrow_mut().push(Arc::downgrade(&q));
        Some(q)
    }
}

/// A process running `n` tasks, each of which takes the lock once (waiting as `wait` says;
/// task `i` a reader if `shared(i)`), holds it across a yield to the others, and releases it. The
/// acquisition of task `cancel.0` is dropped at its `cancel.1`-th pending poll, if it gets
/// that far.
pub(crate) fn tasks(
    sys: &SimSys,
    n: u8,
    wait: Wait,
    grace: Duration,
    cancel: Option<(u8, u8)>,
    shared: fn(usize) -> bool,
) {
    let rt = SimRuntime {
        sys,
        sleepers: RefCell::new(Vec::new()),
        queues: RefCell::new(HashMap::new()),
        wakers: (0..n)
            .map(|_| {
                let flag = Flag::default();
                flag.woken.store(true, Ordering::SeqCst);
                Arc::new(flag)
            })
            .collect(),
    };
    let acquiring: Vec<Cell<bool>> = (0..n).map(|_| Cell::new(true)).collect();
    let mut futures: Vec<Option<Pin<Box<dyn Future<Output = ()> + '_>>>> = (0..n as usize)
        .map(|i| {
            let (rt, acquiring) = (&rt, &acquiring[i]);
            Some(
                Box::pin(task(sys, rt, i, wait, grace, acquiring, shared(i)))
                    as Pin<Box<dyn Future<Output = ()>>>,
            )
        })
        .collect();
    let mut pending = vec![0u8; n as usize];
    loop {
        let mut polled = false;
        sys.slept.set(Some(Duration::ZERO));
        for i in 0..n as usize {
            if futures[i].is_none() || !rt.wakers[i].woken.swap(false, Ordering::SeqCst) {
                continue;
            }
            polled = true;
            sys.task.set(i);
            let poll = rt.wakers[i].polls.fetch_add(1, Ordering::SeqCst) + 1;
            let task = rt.wakers[i].clone();
            let waker = Waker::from(Arc::new(PollWaker { task, poll }));
            let fut = futures[i].as_mut().expect("checked");
            let ready = fut.as_mut().poll(&mut Context::from_waker(&waker));
            kept_no_longer_than_its_limit(sys, i, sys.slept.get().unwrap_or_default());
            if ready.is_ready() {
                futures[i] = None;
                rt.forget(i);
                continue;
            }
            pending[i] = pending[i].saturating_add(1);
            if acquiring[i].get() && cancel == Some((i as u8, pending[i])) {
                futures[i] = None; // the acquisition's future dropped, as a `select!` would
                rt.forget(i);
                left_nothing(sys, i);
            }
        }
        sys.slept.set(None);
        if futures.iter().all(Option::is_none) {
            return;
        }
        if !polled {
            let (until, watch) = rt.sleep_of(sys.monotonic());
            let st = sys
                .world
                .yield_point(sys.slot, Status::Sleeping { until, watch });
            rt.fire(&st, watch);
            // And every other task is polled too, for nothing, as a runtime may: a future
            // must cope, and must wake the waker of its last poll.
            for flag in &rt.wakers {
                flag.woken.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// A runtime's pass over its woken tasks, up to task `task`'s poll, that slept `slept` (its
/// other tasks and its timers waiting all the while) kept within `Config::poll_limit`.
fn kept_no_longer_than_its_limit(sys: &SimSys, task: usize, slept: Duration) {
    let limit = sys.world.lock().poll_limit;
    if limit.is_some_and(|limit| slept > limit) {
        let slot = sys.slot;
        report(
            sys,
            format!(
                "the tasks of p{slot} slept {slept:?} in one pass (up to task {task}'s poll), \
                 keeping their runtime's thread"
            ),
        );
    }
}

/// One task: acquire (`shared`: as a reader), hold the lock across a yield to the other tasks
/// and a system call, release (and leave the queue).
async fn task(
    sys: &SimSys,
    rt: &SimRuntime<'_>,
    i: usize,
    wait: Wait,
    grace: Duration,
    acquiring: &Cell<bool>,
    shared: bool,
) {
    let mut acq = acquisition(sys, wait, grace, i);
    acq.options.shared = shared;
    let got = acq.run(rt).await;
    acquiring.set(false);
    match got {
        Ok(got) => {
            let reads = got.held.shared;
            if reads {
                enter_shared(sys);
            } else {
                enter(sys);
            }
            rt.yield_now().await;
            let _ = sys.meta_at(&got.dir, OWNER_FILE);
            if reads {
                leave_shared(sys, true);
            } else {
                leave(sys);
            }
            let (id, token) = (got.held.id, got.held.owner.token.clone());
            let pid = sys.pid();
            let before = reading(sys);
            if let Err(e) = protocol::release(&space(sys, &got.dir), got.held, "sim", pid) {
                report(sys, format!("I9/I1: p{}.{i} lost its lock: {e}", sys.slot));
            }
            if reads {
                leave_shared(sys, false);
                handed_over(sys, id.ino, &token, &before);
            }
            drop(got.turn);
        }
        Err(e) if e.is_contended() => left_nothing(sys, i),
        Err(Error::Malformed { .. }) if intruded(sys) => {}
        Err(e) => report(sys, format!("p{}.{i} failed to acquire: {e}", sys.slot)),
    }
}
