//! One acquisition, two ways to sleep. An [`Acquisition`] owns one acquisition from its
//! resolved target to the parts of its guard: the lock directory (opened again when it was
//! removed underneath), the refusals, a place in the queue of a runtime's tasks, and the
//! contest's rounds ([`Contender`]). Between rounds it sleeps as its [`Sleep`] does: a
//! thread's ([`Blocking`]: the kernel's lock handoff, the platform's sleep on a watch), a
//! tokio runtime's ([`runtime`]), or a simulated runtime's tasks (the simulation's). A blocking
//! acquisition is the same future, run by [`now`]: its sleeps never yield.

pub(crate) mod keeper;
mod patience;
pub(crate) mod queue;
#[cfg(feature = "tokio")]
pub(crate) mod runtime;

use crate::error::Error;
use crate::held::{check_order, held_by_parent, Family, Who};
use crate::lockdir::LockDir;
use crate::options::MAX_RESTAGES;
use crate::options::{Blocked, Options, Wait, Waiting};
use crate::protocol::{blocked_by, Contender, Held, Next, Request};
use crate::space::{not_found, Seen, Space};
use crate::sys::{is, CancelHandle, Errno, FileId, Identity, Real, RealDir, System, Wake};
use patience::Patience;
use queue::{Place, Queue, Seat};
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A request's target, resolved: the lock's name and path, the resource it stands for, and its
/// family (for the lock order).
pub(crate) struct Resolved {
    pub name: String,
    pub path: PathBuf,
    pub resource: String,
    pub family: Family,
}

/// How an acquisition sleeps between rounds.
#[allow(async_fn_in_trait)] // crate-private: the callers are this crate's, each concrete
pub(crate) trait Sleep<S: System> {
    /// Whether the places it takes in queues are this real process's (see [`Place::join`]).
    fn real(&self) -> bool {
        true
    }

    /// Sleeps on `watch` (`None`: a pause) for at most `timeout` (`None`: until woken), unless
    /// `cancel` fires first.
    async fn sleep(
        &self,
        sys: &S,
        watch: Option<&S::Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake>;

    /// Runs `fut` for at most `timeout` (`None`: as long as it takes) unless `cancel` fires.
    /// (A thread never needs to: it takes no place in a queue.)
    async fn bounded<T>(
        &self,
        _timeout: Option<Duration>,
        _cancel: Option<&CancelHandle>,
        fut: impl Future<Output = T>,
    ) -> Bounded<T> {
        Bounded::Done(fut.await)
    }

    /// Sleeps in the kernel's own lock handoff until the beacon `dir` is let go, where this
    /// way of sleeping can (a thread can; a task, which must not block its thread, cannot:
    /// `None`).
    fn handoff(&self, _sys: &S, _dir: &S::Dir) -> Option<io::Result<()>> {
        None
    }

    /// The queue of its tasks for the lock `name` in the lock directory `dir` (`None`: a
    /// thread, which does not queue).
    fn queue(&self, _dir: FileId, _name: &str) -> Option<Arc<Queue>> {
        None
    }

    /// Whether the waiter runs until it returns (a thread), so that a lock handed to it is
    /// taken up: a task runs only while its runtime polls it, which it may never do again.
    fn runs_alone(&self) -> bool {
        true
    }
}

/// How a [`Sleep::bounded`] run ended.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) enum Bounded<T> {
    Done(T),
    TimedOut,
    Cancelled,
}

/// A thread's sleeps: the platform's blocking sleep, and the kernel's lock handoff.
pub(crate) struct Blocking;

impl<S: System> Sleep<S> for Blocking {
    async fn sleep(
        &self,
        sys: &S,
        watch: Option<&S::Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        sys.sleep(watch, timeout, cancel)
    }

    fn handoff(&self, sys: &S, dir: &S::Dir) -> Option<io::Result<()>> {
        Some(sys.wait_shared(dir))
    }
}

/// Runs a blocking acquisition's future to its end: its sleeps block the thread, so it
/// finishes in one poll.
pub(crate) fn now<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("a blocking acquisition's sleeps never yield"),
    }
}

/// Where an acquisition takes its lock: the lock directory, as it is now, and what this
/// process refuses before it contends.
pub(crate) trait Site<S: System> {
    fn sys(&self) -> &S;

    /// The lock directory now: a handle and its identity (made again if it was removed).
    fn open(&self) -> Result<(Arc<S::Dir>, FileId), Error>;

    /// The lock directory `dir` as the protocol sees it.
    fn space<'a>(&'a self, dir: &'a S::Dir) -> Space<'a, S>;

    /// The refusals an acquisition by `who` of `t` in the lock directory `dir` checks before
    /// it contends (see [`Site<Real>`]).
    fn refusals(&self, dir: &S::Dir, dir_id: FileId, t: &Resolved, who: Who) -> Result<(), Error>;
}

impl Site<Real> for Arc<LockDir> {
    fn sys(&self) -> &Real {
        &Real
    }

    fn open(&self) -> Result<(Arc<RealDir>, FileId), Error> {
        self.current()
    }

    fn space<'a>(&'a self, dir: &'a RealDir) -> Space<'a, Real> {
        LockDir::space(self, dir)
    }

    /// The lock order, a lock `who` holds already, and a lock an ancestor runs us under
    /// (waiting would wait for ourselves).
    ///
    /// # Errors
    ///
    /// [`Error::LockOrder`], [`Error::AlreadyHeld`], [`Error::HeldByParent`], or an error
    /// observing the lock.
    fn refusals(&self, dir: &RealDir, dir_id: FileId, t: &Resolved, who: Who) -> Result<(), Error> {
        let (name, lock_path, resource) = (t.name.as_str(), t.path.as_path(), t.resource.as_str());
        let found = || Real.meta_at(dir, name).ok().map(|m| m.id);
        check_order(dir_id, name, found, t.family, lock_path, resource, who)?;
        let parents = held_by_parent(dir_id, name);
        if parents.is_empty() {
            return Ok(());
        }
        // An ancestor said it runs us under this lock: if that very acquisition still holds
        // it, waiting would wait for ourselves. (A line without a token, from a version
        // before them, says only its pid.)
        if let Seen::Owned {
            owner, dir: lock, ..
        } = self.space(dir).observe(name)?
        {
            // A shared lock's record names one of its readers (the first one has no entry):
            // theirs is that, or their entry.
            let reads = |t: &str| {
                *t == owner.token
                    || crate::paths::safe_token(t)
                        && Real
                            .meta_at(&lock, &format!("{}{t}", crate::paths::READER))
                            .is_ok()
            };
            let theirs = |(pid, token): &&(u32, Option<String>)| match token {
                Some(t) if owner.is_shared() => reads(t),
                Some(t) => *t == owner.token,
                None => *pid == owner.pid,
            };
            if let Some((pid, _)) = parents.iter().find(theirs) {
                return Err(Error::HeldByParent {
                    lock: lock_path.to_owned(),
                    resource: resource.to_owned(),
                    pid: *pid,
                });
            }
        }
        Ok(())
    }
}

/// The bounded retry over a lock directory removed underneath an operation (a temp cleaner,
/// `rm -rf`): a lock in a removed directory would exclude no one, and a waiter should go on
/// in the new one, not fail.
pub(crate) struct Retry(u32);

impl Retry {
    pub(crate) fn new() -> Retry {
        Retry(MAX_RESTAGES)
    }

    /// Whether to try again after `e` in the lock directory `dir`: it was not found because
    /// the directory was removed, and the bound is not reached.
    pub(crate) fn again<S: System>(&mut self, sys: &S, e: &Error, dir: &S::Dir) -> bool {
        let again = self.0 > 0 && not_found(e) && sys.unlinked(dir);
        self.0 -= u32::from(again);
        again
    }
}

/// Runs `attempt` in the lock directory `site` opens, and again in a fresh one each time the
/// directory was removed under it (see [`Retry`]).
pub(crate) fn in_current_dir<S: System, T>(
    site: &impl Site<S>,
    mut attempt: impl FnMut(&Space<S>) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut retry = Retry::new();
    loop {
        let (dir, _) = site.open()?;
        match attempt(&site.space(&dir)) {
            Err(e) if retry.again(site.sys(), &e, &dir) => {}
            other => return other,
        }
    }
}

/// One acquisition: what it takes, where, for whom, with which options, since when.
pub(crate) struct Acquisition<S: System, L: Site<S>> {
    pub(crate) site: L,
    pub(crate) target: Resolved,
    pub(crate) options: Options,
    pub(crate) who: Who,
    started: Duration,
    me: Identity,
    sys: std::marker::PhantomData<S>,
}

/// What an acquisition won: the lock, the handle of the lock directory it is in, and the
/// task's place at the head of its runtime's queue (kept until the lock is released).
pub(crate) struct Acquired<S: System> {
    pub(crate) held: Held<S>,
    pub(crate) dir: Arc<S::Dir>,
    pub(crate) dir_id: FileId,
    pub(crate) turn: Option<Place>,
}

impl<S: System, L: Site<S>> Acquisition<S, L> {
    /// Starts the acquisition of `target` in `site` by `who`: its clock starts now.
    pub(crate) fn new(site: L, target: Resolved, options: Options, who: Who) -> Self {
        let (started, me) = (site.sys().monotonic(), site.sys().identity());
        Acquisition {
            site,
            target,
            options,
            who,
            started,
            me,
            sys: std::marker::PhantomData,
        }
    }

    fn request(&self) -> Request<'_> {
        Request {
            name: &self.target.name,
            resource: &self.target.resource,
            options: &self.options,
            started: self.started,
        }
    }

    /// Takes the lock, sleeping between rounds as `z` does: the refusals, then (a task) a
    /// place in its runtime's queue, then the contest, in the lock directory as it is, again
    /// in a new one if it is removed underneath.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`](crate::LockRequest::acquire).
    pub(crate) async fn run(&self, z: &impl Sleep<S>) -> Result<Acquired<S>, Error> {
        let mut told = None;
        let (mut dir, mut dir_id) = self.site.open()?;
        let turn = self.queue_up(&dir, dir_id, z, &mut told)?;
        let mut retry = Retry::new();
        loop {
            self.site.refusals(&dir, dir_id, &self.target, self.who)?;
            let won = self.contend(&dir, z, told.as_ref(), turn.as_ref()).await;
            match won {
                Ok(held) => {
                    // A reader is in: the next task may read (or wait as a writer) beside it.
                    let turn = turn.filter(|_| !held.shared);
                    return Ok(Acquired {
                        held,
                        dir,
                        dir_id,
                        turn,
                    });
                }
                // (Also where a task waited its turn in a directory removed meanwhile.)
                Err(e) if retry.again(self.site.sys(), &e, &dir) => {
                    (dir, dir_id) = self.site.open()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The contest in the lock directory `dir`: rounds until one wins, sleeping between them
    /// as `z` does. One candidate is staged for the whole contest, so that a release finds it
    /// ready to publish; however the contest ends but a win (an error, a dropped future), the
    /// contender's drop removes it. A task (its `place` in its runtime's queue) publishes only
    /// at the head of that queue: behind others, it stages its candidate and takes its number
    /// in the lock's queue on disk once it is [`NEAR`](queue::NEAR) that head, and waits its
    /// turn. Nothing is awaited between the winning publish and the
    /// return: a lock published is always in the guard made of it.
    async fn contend(
        &self,
        dir: &S::Dir,
        z: &impl Sleep<S>,
        told: Option<&Blocked>,
        place: Option<&Place>,
    ) -> Result<Held<S>, Error> {
        let (sp, req) = (self.site.space(dir), self.request());
        let (mut k, seat) = self.stage_in_line(&sp, &req, z, place).await?;
        if let Some(blocked) = told {
            k.told(blocked);
        }
        if !z.runs_alone() {
            k.not_to_be_handed();
        }
        loop {
            if let Some(p) = place.filter(|p| !p.first()) {
                // Numbers are taken in the order the tasks came (with a seat), then each
                // waits its turn, out of the way of others (a writer's intent withdrawn).
                if seat.is_some() {
                    self.wait_in_line(&sp, p.numbering(), z).await?;
                    k.take_number();
                    p.numbered(k.number());
                }
                if !p.first() {
                    k.step_aside();
                    self.wait_in_line(&sp, p.turn(), z).await?;
                }
            }
            let next = k.round()?;
            if let Some(p) = place {
                p.numbered(k.number()); // a number taken after a publish that lost
            }
            match next {
                Next::Won => return Ok(k.won()),
                Next::Again => {}
                Next::Pause(p) => {
                    let wake = z.sleep(sp.sys, None, Some(p), k.cancel()).await;
                    if wake.map_err(|e| k.wait_failed(e))? == Wake::Cancelled {
                        return Err(k.cancelled());
                    }
                }
                Next::Wait(w) => {
                    let watch = wait_for_change(&k, &w, z).await?;
                    k.waited(w, watch);
                }
            }
        }
    }

    /// Stages the contest's candidate ([`Contender::new`]). A task behind others (`place`)
    /// stages once it is near the head of its runtime's queue, if the process's budget of
    /// descriptors has a seat for it (returned, held while it contends), else (or if staging
    /// fails: short of descriptors, say) at the head.
    async fn stage_in_line<'r>(
        &'r self,
        sp: &'r Space<'r, S>,
        req: &'r Request<'r>,
        z: &impl Sleep<S>,
        place: Option<&Place>,
    ) -> Result<(Contender<'r, 'r, S>, Option<Seat>), Error> {
        let mut seat = None;
        if let Some(p) = place.filter(|p| !p.first()) {
            self.wait_in_line(sp, p.near(), z).await?;
            seat = Seat::take(z.real());
            if seat.is_none() {
                self.wait_in_line(sp, p.turn(), z).await?;
            }
        }
        loop {
            let behind = place.filter(|p| !p.first());
            match (Contender::new(sp, req, &self.me), behind) {
                (Ok(k), _) => return Ok((k, seat)),
                (Err(_), Some(p)) => self.wait_in_line(sp, p.turn(), z).await?,
                (Err(e), None) => return Err(e),
            }
        }
    }

    /// Who holds the lock now, judged, for a task that queues behind another (the holder
    /// may be anyone: a task ahead, a thread, another process).
    fn holder(&self, sp: &Space<S>) -> Option<Waiting> {
        let Ok(Seen::Owned { dir, meta, owner }) = sp.observe(&self.target.name) else {
            return None;
        };
        let judgement = sp.judge(&dir, &owner, &self.me);
        let name = &self.target.name;
        Some(Waiting {
            resource: self.target.resource.clone(),
            lock: self.target.path.clone(),
            blocked: blocked_by(sp, name, &meta, &judgement, self.options.grace),
            judgement,
            owner,
            since: meta.mtime,
        })
    }

    /// A task's place in its runtime's queue for the lock (`None` for a thread, or a task
    /// that does not wait). A task that finds others ahead of it is told (`on_wait`) who holds
    /// the lock.
    fn queue_up(
        &self,
        dir: &S::Dir,
        dir_id: FileId,
        z: &impl Sleep<S>,
        told: &mut Option<Blocked>,
    ) -> Result<Option<Place>, Error> {
        let t = &self.target;
        let Some(queue) = z.queue(dir_id, &t.name) else {
            return Ok(None);
        };
        // Before queueing: a task that holds the lock would wait behind itself; nor behind
        // (or, failing fast, past) a future of this task that is in the queue, waiting or
        // holding: it would wait for us, or we for it.
        self.site.refusals(dir, dir_id, t, self.who)?;
        if queue.has(self.who) {
            return Err(Error::AlreadyHeld {
                lock: t.path.clone(),
                resource: t.resource.clone(),
            });
        }
        if self.options.wait == Wait::Immediately {
            return Ok(None);
        }
        let place = Place::join(queue, self.who, z.real());
        if place.first() {
            return Ok(Some(place));
        }
        // (Only when asked: each look is a probe of the holder's lock that others step past.)
        let sp = self.site.space(dir);
        if let Some((f, waiting)) = self.options.on_wait.as_ref().zip(self.holder(&sp)) {
            f(&waiting);
            *told = Some(waiting.blocked);
        }
        Ok(Some(place))
    }

    /// Waits in its runtime's queue `until` it has moved up (see [`Place::turn`] and
    /// [`Place::near`]). A timeout names who holds the lock then.
    async fn wait_in_line(
        &self,
        sp: &Space<'_, S>,
        until: impl Future<Output = ()>,
        z: &impl Sleep<S>,
    ) -> Result<(), Error> {
        let t = &self.target;
        let left = match self.options.wait {
            Wait::Timeout(d) => Some(d.saturating_sub(sp.sys.monotonic() - self.started)),
            _ => None,
        };
        let cancel = self.options.cancel.as_ref().map(|c| &*c.0);
        // Already there: no wait, whatever is left of the deadline.
        let mut until = pin!(until);
        if until
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
        {
            return Ok(());
        }
        match z.bounded(left, cancel, until).await {
            Bounded::Done(()) => Ok(()),
            Bounded::TimedOut => {
                let holder = self.holder(sp);
                Err(Error::Timeout {
                    lock: t.path.clone(),
                    resource: t.resource.clone(),
                    waited: sp.sys.monotonic().saturating_sub(self.started),
                    owner: holder.as_ref().map(|w| Box::new(w.owner.clone())),
                    blocked: holder.map(|w| Box::new(w.blocked)),
                })
            }
            Bounded::Cancelled => Err(Error::Cancelled {
                lock: t.path.clone(),
                resource: t.resource.clone(),
            }),
        }
    }
}

/// Sleeps until the lock may have changed: released (moved away), its beacon dropped, its
/// (beacon-less) holder exited, the wait's end passed, or the wait cancelled. Returns the
/// watch it used, for the contender to keep until its publish is done.
async fn wait_for_change<S: System>(
    k: &Contender<'_, '_, S>,
    w: &crate::protocol::Waiting<S>,
    z: &impl Sleep<S>,
) -> Result<Option<S::Watch>, Error> {
    let cancel = k.cancel();
    if w.on_beacon() && cancel.is_none() && w.until.is_none() {
        // An unbounded wait on a beacon holder: sleep in the kernel's own lock handoff, where
        // we can. The holder's release unlocks the beacon explicitly (for every copy a fork
        // made of it), and its death closes it, so either wakes us.
        match z.handoff(k.sys(), &w.dir) {
            Some(Ok(())) => return Ok(None),
            Some(Err(e)) if !is(&e, Errno::LockUnsupported) => return Err(k.wait_failed(e)),
            _ => {}
        }
    }
    let mut p = Patience::new(k, w);
    while let Some((watching, timeout)) = p.next(k, w) {
        let wake = z.sleep(k.sys(), watching, timeout, cancel).await;
        let wake = wake.map_err(|e| k.wait_failed(e))?;
        if wake == Wake::Cancelled {
            return Err(k.cancelled());
        }
        if !p.woke(wake) {
            break;
        }
    }
    Ok(p.into_watch())
}
