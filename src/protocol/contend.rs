//! The contest for `NAME`: publish, and on losing judge the holder and decide to wait for it,
//! reclaim from a dead one, or give up at the deadline. Each step is a method of
//! [`Contender`], which keeps the candidate, the deadline and what the acquisition has seen;
//! the driver ([`crate::acquire`]) runs its rounds and does the sleeping.

pub(crate) mod ended;
pub(crate) mod queued;
mod readers;

use super::queue::Ticket;
use super::shared::{Intent, MARK_PATIENCE};
use super::stage::{refresh, stage, Request, Staged, REFRESH_AFTER};
use super::Held;
use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::options::{Ages, Backoff, Blocked, Wait};
use crate::owner::Owner;
use crate::space::{beacon_free, Seen, Space};
use crate::sys::{FileId, Identity, Meta, System};
use std::mem::{discriminant, Discriminant};
use std::time::Duration;

/// How often a fail-fast acquisition republishes after the holder vanished under it before it
/// reports the lock as held (each round means some other process took and released it).
const MAX_FAIL_FAST_ROUNDS: u32 = 64;

/// Rounds in a row without a wait (the holder vanished, a reclaim found the lock changed)
/// after which a contender pauses (bounded backoff) before it looks again.
const SPIN_ROUNDS: u32 = 8;

/// The evidence a wait for a live holder watches, besides the lock directory itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// The holder's beacon `flock`, and the pid its record names (for a platform that cannot
    /// see a beacon let go, and watches that process's exit instead).
    Beacon(Option<u32>),
    /// The holder's pid (a pid-judged holder: no beacon).
    Pid(u32),
    /// A shared lock's readers: their shared `flock`s on the lock directory.
    Readers,
    /// Writers waiting for a shared lock's readers (their shared `flock`s on `NAME.writers`),
    /// which a reader lets go first.
    Writer,
    /// The writer queued nearest ahead of a reader, waiting in the shared lock: the exclusive
    /// `flock` on its queue entry, probed with a shared one (see [`Contender::changed`]).
    WriterAhead,
    /// Nothing but the directory (an owner that cannot be judged from here, or a dead one
    /// waited out for the grace period).
    Nothing,
}

impl Evidence {
    /// What a watch of it follows: the pid whose exit to watch, and whether there is a beacon.
    fn watched(self) -> (Option<u32>, bool) {
        match self {
            Evidence::Beacon(pid) => (pid, true),
            Evidence::Readers | Evidence::Writer | Evidence::WriterAhead => (None, true),
            Evidence::Pid(pid) => (Some(pid), false),
            Evidence::Nothing => (None, false),
        }
    }

    /// What a wait for the holder `owner`, judged `liveness`, re-checks between wake-ups: the
    /// beacon of a live beacon holder, the pid of a live pid-judged one. An unknown owner
    /// (another host or namespace) is waited for by its directory alone: its beacon and pid
    /// mean nothing here, and re-probing them would spin.
    fn of(owner: &Owner, liveness: Liveness) -> Evidence {
        match liveness {
            Liveness::Live if owner.is_shared() => Evidence::Readers,
            Liveness::Live if owner.has_beacon() => Evidence::Beacon(Some(owner.pid)),
            Liveness::Live => Evidence::Pid(owner.pid),
            _ => Evidence::Nothing,
        }
    }
}

/// What a contender does next, after a round: the contest's decision, which the driver
/// carries out, with a thread's sleeps or a runtime's.
pub(crate) enum Next<S: System> {
    /// The candidate is published: the lock is ours.
    Won,
    /// Publish again at once (the holder vanished, or the lock changed under a reclaim).
    Again,
    /// Sleep this long (never past the deadline), unless cancelled, then publish again.
    Pause(Duration),
    /// Sleep until the lock may have changed, then publish again.
    Wait(Waiting<S>),
}

/// A wait for the lock at `NAME` to change: released (moved away from directory `id`), its
/// `evidence` gone, or `until` passed. `dir` (the lock directory waited on) stays open while
/// the watch lives, and, when `keep`, until our publish is done (see [`Held::last_seen`]).
///
/// [`Held::last_seen`]: super::Held::last_seen
pub(crate) struct Waiting<S: System> {
    pub(crate) dir: S::Dir,
    pub(crate) id: FileId,
    evidence: Evidence,
    pub(crate) until: Option<Duration>,
    keep: bool,
    /// A queued writer behind another: that waiter's entry, which the wait watches instead of
    /// the holder (see [`Ticket::thread_ahead`]); the holder is looked at again only when it
    /// wakes (at least every [`System::look_again`]).
    ///
    /// [`Ticket::thread_ahead`]: crate::protocol::queue::Ticket::thread_ahead
    ahead: Option<S::Dir>,
}

impl<S: System> Waiting<S> {
    /// Whether the holder waited for is judged by its beacon (its release or death lets the
    /// beacon go).
    pub(crate) fn on_beacon(&self) -> bool {
        matches!(self.evidence, Evidence::Beacon(_)) && self.ahead.is_none()
    }

    /// Whether it waits for a shared lock's readers, or (a reader) for a writer among them.
    pub(crate) fn among_readers(&self) -> bool {
        matches!(
            self.evidence,
            Evidence::Readers | Evidence::Writer | Evidence::WriterAhead
        )
    }
}

/// One acquisition's contest for `NAME`, from staging to the win: its candidate, its
/// deadline, what it has seen, and how it gives up. Each [`Contender::round`] publishes once
/// and decides what to do next ([`Next`]); the caller does it. Dropped before it won, it
/// removes its candidate, whatever the way out (an error, a cancelled future).
pub(crate) struct Contender<'r, 'a, S: System> {
    sp: &'r Space<'a, S>,
    req: &'r Request<'r>,
    me: &'r Identity,
    /// Our staged candidate (taken out when won).
    c: Option<Staged<S>>,
    deadline: Option<Duration>,
    fail_fast: bool,
    /// Publishes lost so far.
    rounds: u32,
    /// Rounds in a row that did not wait.
    idle: u32,
    last_owner: Option<Owner>,
    /// What kept us out last (for a timeout's words).
    blocked: Option<Blocked>,
    /// What `on_wait` was last told keeps us out (its kind), once it was told.
    told: Option<Discriminant<Blocked>>,
    backoff: Backoff,
    ages: Ages,
    /// The dead owner this contender reclaimed the lock from, if it did.
    reclaimed_from: Option<Owner>,
    /// A reader: the shared lock it joined (instead of publishing its candidate).
    joined: Option<Held<S>>,
    /// A reader: what it waits on to let writers go first, while they wait (`NAME.writers`, or
    /// the entry of the writer queued ahead of it), and which of the two ([`Evidence`]).
    behind: Option<(S::Dir, FileId, Evidence)>,
    /// A writer: its entry in the shared lock whose readers it waits for (that lock's
    /// directory, and its identity), which keeps new readers out.
    intent: Option<Intent<S>>,
    /// Our place in the lock's queue, while we wait there; `queued` once we took one (the lock
    /// may be handed to our candidate from then on), and since when we let a waiter ahead of
    /// us take the free lock first; when we last left it free for those that do not queue;
    /// when we last failed to take a number.
    ticket: Option<Ticket<S>>,
    queued: bool,
    deferred: queued::Deferral,
    turned: Option<Duration>,
    /// A queued reader: the read lock it found with a live writer queued ahead of it, not yet
    /// in it, and since when it lets that writer go first.
    joining: Option<(FileId, Duration)>,
    /// Whether a release may hand the lock to us (not to a task: see `Sleep::runs_alone`).
    handable: bool,
    /// A reader: whether it had its first look (see [`Contender::first_look`]; one without a
    /// candidate looks at each round).
    looked: bool,
}

impl<S: System> Drop for Contender<'_, '_, S> {
    fn drop(&mut self) {
        // Also while a panic unwinds (in `on_wait`, or past a dropped future), but not in a
        // simulated crash: nothing is done for a crashed process.
        if self.sp.sys.crashed() {
            return;
        }
        // A writer's entry in a shared lock goes before its place in the queue: a reader that
        // finds the entry judges by that place (see `Intent::enter`).
        self.withdraw();
        if let Some(c) = self.c.take() {
            self.give_up_candidate(c);
        }
    }
}

impl<'r, 'a, S: System> Contender<'r, 'a, S> {
    /// Stages a candidate for `req`.
    ///
    /// # Errors
    ///
    /// As [`stage`].
    pub(crate) fn new(
        sp: &'r Space<'a, S>,
        req: &'r Request<'r>,
        me: &'r Identity,
    ) -> Result<Self, Error> {
        let wait = req.options.wait;
        // A reader stages only when it finds no shared lock to join (see `Contender::round`).
        let c = match req.options.shared {
            true => None,
            false => Some(stage(sp, req, me)?),
        };
        Ok(Contender {
            sp,
            req,
            me,
            c,
            deadline: match wait {
                Wait::Immediately => Some(req.started),
                Wait::Forever => None,
                Wait::Timeout(d) => Some(req.started.saturating_add(d)),
            },
            fail_fast: wait == Wait::Immediately,
            rounds: 0,
            idle: 0,
            last_owner: None,
            blocked: None,
            told: None,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(100)),
            ages: Ages::default(),
            reclaimed_from: None,
            joined: None,
            behind: None,
            intent: None,
            ticket: None,
            queued: false,
            deferred: Default::default(),
            turned: None,
            joining: None,
            handable: true,
            looked: !req.options.shared,
        })
    }

    /// Marks it as one that a release must not hand the lock to (a task).
    pub(crate) fn not_to_be_handed(&mut self) {
        self.handable = false;
    }

    /// Marks `on_wait` as told already (by a wait before the contest) that `blocked` keeps us
    /// out.
    pub(crate) fn told(&mut self, blocked: &Blocked) {
        self.told = Some(discriminant(blocked));
    }

    fn staged(&mut self) -> &mut Staged<S> {
        self.c
            .as_mut()
            .expect("a contender holds its candidate until it wins")
    }

    /// The lock this contender won ([`Next::Won`]): published, or joined (a reader).
    pub(crate) fn won(mut self) -> Held<S> {
        if let Some(held) = self.joined.take() {
            if let Some(c) = self.c.take() {
                self.give_up_candidate(c);
            }
            return held;
        }
        let (sp, me, options) = (self.sp, self.me, self.req.options);
        let mut c = self
            .c
            .take()
            .expect("a contender holds its candidate until it wins");
        // Handed the lock after a long wait: its record says since when it is ours.
        if sp.sys.monotonic().saturating_sub(c.staged_at) > REFRESH_AFTER {
            let _ = refresh(sp, &mut c, me, options);
        }
        drop(c.last_watch);
        let held = Held {
            name: self.req.name.to_owned(),
            owner: c.owner,
            beacon: c.dir,
            id: c.id,
            reclaimed_from: self.reclaimed_from.take(),
            last_seen: c.last_seen,
            shared: c.shared,
            entry: None,
            ticket: self.ticket.take().map(|mut t| {
                t.taken(sp);
                t
            }),
        };
        self.withdraw();
        held
    }

    /// A writer that waited for readers takes its entry out of their lock (it won, or it
    /// gives up, or it waits for another lock now): readers come in again.
    fn withdraw(&mut self) {
        if let Some(intent) = self.intent.take() {
            intent.withdraw(self.sp, self.req.name);
        }
    }

    /// After a [`Next::Wait`]: keeps what a wait for a holder keeps until our publish is
    /// done, its `watch` and the directory it watched.
    pub(crate) fn waited(&mut self, w: Waiting<S>, watch: Option<S::Watch>) {
        if matches!(w.evidence, Evidence::Writer | Evidence::WriterAhead) {
            self.behind = Some((w.dir, w.id, w.evidence));
        } else if w.keep {
            let c = self.staged();
            c.last_watch = watch;
            c.last_seen = Some(w.dir);
        }
    }

    /// The system it contends on.
    pub(crate) fn sys(&self) -> &'a S {
        self.sp.sys
    }

    /// The watch of the wait `w` (`None`: nothing here can wake it; back off instead).
    pub(crate) fn watch(&self, w: &Waiting<S>) -> Option<S::Watch> {
        let sys = self.sp.sys;
        if let Some(entry) = &w.ahead {
            return sys.watch(entry, None, true).unwrap_or(None);
        }
        let (pid, beacon) = w.evidence.watched();
        sys.watch(&w.dir, pid, beacon).unwrap_or(None)
    }

    /// Whether the lock is no longer what the wait `w` waits on: it is no longer the
    /// directory waited on, or the evidence its holder's life rests on is gone.
    pub(crate) fn changed(&self, w: &Waiting<S>) -> bool {
        let sp = self.sp;
        let free = |readers| beacon_free(sp.sys, &w.dir, readers).unwrap_or(false);
        match w.evidence {
            Evidence::Writer => return free(true), // no writer waits (won, gave up or died)
            Evidence::WriterAhead => return free(false), // see below
            _ => {}
        }
        // The waiter ahead of us no longer waits (it holds the lock, gave up or died): its
        // entry's exclusive `flock` is free. Probed with a shared one, kept (as a release
        // probes entries): an exclusive probe, for the instant it held, made a release take
        // that waiter for one still waiting, and hand the lock to its candidate's name, where
        // the lock's previous directory may be until its holder retires it.
        if w.ahead
            .as_ref()
            .is_some_and(|e| beacon_free(sp.sys, e, false).unwrap_or(false))
        {
            return true;
        }
        let moved = sp
            .sys
            .meta_at(sp.dir, self.req.name)
            .map_or(true, |m| m.id != w.id);
        moved
            || match w.evidence {
                Evidence::Beacon(_) => free(false),
                Evidence::Readers => free(true),
                Evidence::Pid(p) => sp.sys.process_alive(p) == Some(false),
                Evidence::Writer | Evidence::WriterAhead | Evidence::Nothing => false,
            }
    }

    pub(crate) fn cancel(&self) -> Option<&'r crate::sys::CancelHandle> {
        self.req.options.cancel.as_ref().map(|c| &*c.0)
    }

    /// A failed sleep's error.
    pub(crate) fn wait_failed(&self, e: std::io::Error) -> Error {
        self.sp.io("wait for the lock", self.req.name, e)
    }

    pub(crate) fn cancelled(&self) -> Error {
        Error::Cancelled {
            lock: self.sp.entry(self.req.name),
            resource: self.req.resource.to_owned(),
        }
    }

    pub(super) fn left(&self) -> Option<Duration> {
        let now = self.sp.sys.monotonic();
        self.deadline.map(|d| d.saturating_sub(now))
    }

    fn expired(&self) -> bool {
        self.left() == Some(Duration::ZERO)
    }

    fn timeout(&self) -> Error {
        Error::Timeout {
            lock: self.sp.entry(self.req.name),
            resource: self.req.resource.to_owned(),
            waited: self.sp.sys.monotonic().saturating_sub(self.req.started),
            owner: self.last_owner.clone().map(Box::new),
            blocked: self.blocked.clone().map(Box::new),
        }
    }

    /// The error for a deadline that has passed: `contended` when failing fast, else a
    /// timeout.
    fn give_up(&self, contended: impl FnOnce() -> Error) -> Error {
        if self.fail_fast {
            contended()
        } else {
            self.timeout()
        }
    }

    /// `blocked` keeps us out (a holder `owner`, judged `judgement`, its lock taken `since`):
    /// past the deadline, the `contended` error when failing fast (else a timeout, which
    /// names `blocked`); before it, the caller's `on_wait` is told, once, and again when what
    /// keeps us out changes kind (not for each new holder).
    fn kept_out(
        &mut self,
        owner: &Owner,
        judgement: &Judgement,
        since: std::time::SystemTime,
        blocked: Blocked,
        contended: impl FnOnce(&Self) -> Error,
    ) -> Result<(), Error> {
        let news = self.told != Some(discriminant(&blocked));
        if let (false, true, Some(f)) = (self.expired(), news, &self.req.options.on_wait) {
            self.told = Some(discriminant(&blocked));
            f(&crate::options::Waiting {
                resource: self.req.resource.to_owned(),
                lock: self.sp.entry(self.req.name),
                owner: owner.clone(),
                judgement: judgement.clone(),
                since,
                blocked: blocked.clone(),
            });
        }
        self.blocked = Some(blocked);
        match self.expired() {
            true => Err(self.give_up(|| contended(self))),
            false => Ok(()),
        }
    }

    /// A round that did not wait (the holder vanished, a reclaim found the lock changed): a
    /// fail-fast acquisition gives up after a bound, and a run of them pauses with backoff.
    fn idle_round(&mut self) -> Result<Next<S>, Error> {
        self.idle += 1;
        if self.fail_fast && self.rounds > MAX_FAIL_FAST_ROUNDS {
            return Err(self.timeout());
        }
        if self.idle >= SPIN_ROUNDS {
            return Ok(self.pause());
        }
        Ok(Next::Again)
    }

    /// One backoff pause, never past the deadline.
    fn pause(&mut self) -> Next<S> {
        let pause = self.backoff.next_pause();
        Next::Pause(match self.left() {
            Some(l) if !self.fail_fast => l.min(pause),
            _ => pause,
        })
    }

    /// A wait until the lock may have changed, at most `also`.
    fn wait(
        &mut self,
        dir: S::Dir,
        id: FileId,
        evidence: Evidence,
        also: Option<Duration>,
        keep: bool,
    ) -> Next<S> {
        self.idle = 0;
        let until = match (also, self.left()) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        Next::Wait(Waiting {
            dir,
            id,
            evidence,
            until,
            keep,
            ahead: None,
        })
    }

    /// A holder `owner` (judged `judgement`, its lock taken `since`) keeps us out: see
    /// [`Self::kept_out`].
    fn held_by(
        &mut self,
        owner: &Owner,
        judgement: &Judgement,
        since: std::time::SystemTime,
    ) -> Result<(), Error> {
        self.kept_out(owner, judgement, since, Blocked::Holder, |k| {
            Error::Locked {
                lock: k.sp.entry(k.req.name),
                resource: k.req.resource.to_owned(),
                owner: Box::new(owner.clone()),
                judgement: judgement.clone(),
                since,
            }
        })
    }

    /// A live (or unknown) holder: give up at the deadline, else wait for it to change.
    fn wait_for_holder(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<Next<S>, Error> {
        self.held_by(&owner, &judgement, meta.mtime)?;
        // Re-check between wake-ups only the fact the judgement rests on.
        let evidence = Evidence::of(&owner, judgement.liveness);
        let mut next = self.wait(dir, meta.id, evidence, None, true);
        if let Next::Wait(w) = &mut next {
            w.ahead = self.in_line(evidence);
        }
        Ok(next)
    }

    /// A damaged lock that a process holds ([`Seen::InUse`]): fail fast with what is wrong,
    /// or wait for its beacon to be let go, as for a live holder.
    fn wait_while_in_use(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        problem: String,
    ) -> Result<Next<S>, Error> {
        if self.expired() {
            return Err(self.give_up(|| Error::Malformed {
                lock: self.sp.entry(self.req.name),
                resource: self.req.resource.to_owned(),
                problem: format!("{problem}, and a process holds a lock on it"),
            }));
        }
        Ok(self.wait(dir, meta.id, Evidence::Beacon(None), None, true))
    }

    /// One round of the contest: publish, and on losing, judge the holder and decide to wait
    /// for it, reclaim from it, or give up.
    ///
    /// # Errors
    ///
    /// Cancelled, the deadline (as the contended error when failing fast, else a timeout), a
    /// malformed lock, or an I/O error.
    pub(crate) fn round(&mut self) -> Result<Next<S>, Error> {
        if self.cancel().is_some_and(|c| c.is_fired()) {
            return Err(self.cancelled());
        }
        if let Some(next) = self.behind_writer()? {
            return Ok(next);
        }
        if !self.looked || self.c.is_none() {
            self.looked = true;
            if let Some(next) = self.first_look()? {
                return Ok(next);
            }
        }
        if let Some(next) = self.publish_in_turn()? {
            return Ok(next);
        }
        let (sp, req, me) = (self.sp, self.req, self.me);
        let (dir, meta, owner) = match sp.observe(req.name)? {
            Seen::Gone => return self.idle_round(),
            Seen::Malformed(problem) => {
                return Err(Error::Malformed {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                    problem,
                })
            }
            Seen::InUse { dir, meta, problem } => {
                return self.wait_while_in_use(dir, meta, problem)
            }
            Seen::Owned { dir, meta, owner } => (dir, meta, owner),
        };
        // Handed the lock since the publish (we queued after it).
        if self.c.as_ref().is_some_and(|c| c.id == meta.id) {
            return Ok(Next::Won);
        }
        // A reader joins (unless its candidate found no `flock` here: it then takes the lock
        // exclusively, as a writer).
        if owner.is_shared() && self.staged().shared {
            return self.join_readers(dir, meta, owner);
        }
        let judgement = sp.judge(&dir, &owner, me);
        self.last_owner = Some(owner.clone());
        if judgement.liveness.is_dead() {
            self.reclaim_dead(dir, meta, owner, judgement)
        } else {
            if owner.is_shared() && !self.expired() && !self.intend(meta.id)? {
                return Ok(Next::Pause(MARK_PATIENCE));
            }
            self.wait_for_holder(dir, meta, owner, judgement)
        }
    }
}
