//! The contest for `NAME`: publish, and on losing judge the holder and wait for it, reclaim
//! from a dead one, or give up at the deadline. [`contend`] reads as those steps; each is a
//! method of [`Contest`], which keeps the deadline and what the acquisition has seen.

use super::stage::{publish, refresh, restage, Publish, Request, Staged, REFRESH_AFTER};
use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::options::{Ages, Backoff, Wait};
use crate::owner::Owner;
use crate::paths::guard_name;
use crate::reclaim::{reclaim, Expect, Reclaim};
use crate::space::{not_found, Seen, Space};
use crate::sys::{is, Errno, FileId, Identity, Meta, System, Wake};
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
    /// Nothing but the directory (an owner that cannot be judged from here, or a dead one
    /// waited out for the grace period).
    Nothing,
}

impl Evidence {
    /// What a watch of it follows: the pid whose exit to watch, and whether there is a beacon.
    fn watched(self) -> (Option<u32>, bool) {
        match self {
            Evidence::Beacon(pid) => (pid, true),
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
            Liveness::Live if owner.has_beacon() => Evidence::Beacon(Some(owner.pid)),
            Liveness::Live => Evidence::Pid(owner.pid),
            _ => Evidence::Nothing,
        }
    }
}

/// What an asynchronous acquisition does after a fail-fast attempt lost: see [`arm`].
#[cfg(feature = "tokio")]
pub(crate) enum Arm<S: System> {
    /// Look again at once: the lock changed or vanished since the attempt.
    Again,
    /// Sleep until `watch` fires (`None`: nothing here can wake us; back off instead). `dir`
    /// (identity `id`) is the lock directory watched, kept open while the watch lives, as a
    /// blocking waiter keeps it; `evidence` is what a wake-up re-checks ([`Arm::changed`]).
    Sleep {
        dir: S::Dir,
        id: FileId,
        evidence: Evidence,
        watch: Option<S::Watch>,
    },
    /// A damaged lock that no process holds: the attempt's error stands.
    Broken,
}

/// Arms a watch of the lock now at `NAME` for an asynchronous waiter, with the evidence a
/// blocking waiter would re-check, then looks once more (a change before the watch was armed
/// would otherwise be missed).
///
/// # Errors
///
/// As observing the lock directory.
#[cfg(feature = "tokio")]
pub(crate) fn arm<S: System>(sp: &Space<S>, name: &str, me: &Identity) -> Result<Arm<S>, Error> {
    let (dir, id, evidence) = match sp.observe(name)? {
        Seen::Gone => return Ok(Arm::Again),
        Seen::Malformed(_) => return Ok(Arm::Broken),
        Seen::InUse { dir, meta, .. } => (dir, meta.id, Evidence::Beacon(None)),
        Seen::Owned { dir, meta, owner } => {
            let evidence = Evidence::of(&owner, sp.judge(&dir, &owner, me).liveness);
            (dir, meta.id, evidence)
        }
    };
    let (pid, beacon) = evidence.watched();
    let watch = sp.sys.watch(&dir, pid, beacon).unwrap_or(None);
    if changed(sp, name, &dir, id, evidence) {
        return Ok(Arm::Again);
    }
    Ok(Arm::Sleep {
        dir,
        id,
        evidence,
        watch,
    })
}

#[cfg(feature = "tokio")]
impl<S: System> Arm<S> {
    /// After a wake-up: whether the lock at `name` really changed (moved, its beacon let go,
    /// its pid-judged holder gone), with no new open of the lock directory (an open and close
    /// would wake every other waiter). Only then is another attempt worth making.
    pub(crate) fn changed(&self, sp: &Space<S>, name: &str) -> bool {
        match self {
            Arm::Sleep {
                dir, id, evidence, ..
            } => changed(sp, name, dir, *id, *evidence),
            _ => true,
        }
    }
}

/// One acquisition's contest for `NAME`: its deadline, what it has seen, and how it gives up.
struct Contest<'r, 'a, S: System> {
    sp: &'r Space<'a, S>,
    req: &'r Request<'r>,
    deadline: Option<Duration>,
    fail_fast: bool,
    /// Publishes lost so far.
    rounds: u32,
    /// Rounds in a row that did not wait.
    idle: u32,
    last_owner: Option<Owner>,
    told: bool,
    backoff: Backoff,
    ages: Ages,
}

impl<'r, 'a, S: System> Contest<'r, 'a, S> {
    fn new(sp: &'r Space<'a, S>, req: &'r Request<'r>) -> Self {
        let wait = req.options.wait;
        Contest {
            sp,
            req,
            deadline: match wait {
                Wait::Immediately => Some(req.started),
                Wait::Forever => None,
                Wait::Timeout(d) => Some(req.started.saturating_add(d)),
            },
            fail_fast: wait == Wait::Immediately,
            rounds: 0,
            idle: 0,
            last_owner: None,
            told: false,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(100)),
            ages: Ages::default(),
        }
    }

    fn cancel(&self) -> Option<&'r crate::sys::CancelHandle> {
        self.req.options.cancel.as_ref().map(|c| &*c.0)
    }

    fn cancelled(&self) -> Error {
        Error::Cancelled {
            lock: self.sp.entry(self.req.name),
            resource: self.req.resource.to_owned(),
        }
    }

    fn left(&self) -> Option<Duration> {
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

    /// Tells the caller's `on_wait` (once) who it waits for.
    fn tell(&mut self, owner: &Owner, judgement: &Judgement, since: std::time::SystemTime) {
        if let (false, Some(f)) = (self.told, &self.req.options.on_wait) {
            self.told = true;
            f(&crate::options::Waiting {
                lock: self.sp.entry(self.req.name),
                owner: owner.clone(),
                judgement: judgement.clone(),
                since,
            });
        }
    }

    /// A round that did not wait (the holder vanished, a reclaim found the lock changed): a
    /// fail-fast acquisition gives up after a bound, and a run of them pauses with backoff.
    fn idle_round(&mut self) -> Result<(), Error> {
        self.idle += 1;
        if self.fail_fast && self.rounds > MAX_FAIL_FAST_ROUNDS {
            return Err(self.timeout());
        }
        if self.idle >= SPIN_ROUNDS {
            if self.req.options.inline {
                return Err(self.timeout()); // the asynchronous caller pauses, not this thread
            }
            self.pause()?;
        }
        Ok(())
    }

    /// Sleeps one backoff pause (never past the deadline), unless cancelled.
    fn pause(&mut self) -> Result<(), Error> {
        let pause = self.backoff.next_pause();
        let pause = match self.left() {
            Some(l) if !self.fail_fast => l.min(pause),
            _ => pause,
        };
        let wake = self
            .sp
            .sys
            .sleep(None, Some(pause), self.cancel())
            .map_err(|e| self.sp.io("wait for the lock", self.req.name, e))?;
        if wake == Wake::Cancelled {
            return Err(self.cancelled());
        }
        Ok(())
    }

    /// Waits until the lock may have changed (see [`wait_for_change`]), at most `also`.
    fn wait(
        &mut self,
        dir: &S::Dir,
        id: FileId,
        evidence: Evidence,
        also: Option<Duration>,
    ) -> Result<Option<S::Watch>, Error> {
        self.idle = 0;
        let until = match (also, self.left()) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        wait_for_change(self, dir, id, evidence, until)
    }

    /// A live (or unknown) holder: give up at the deadline, else wait for it to change.
    fn wait_for_holder(
        &mut self,
        c: &mut Staged<S>,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<(), Error> {
        if self.expired() {
            return Err(self.give_up(|| Error::Locked {
                lock: self.sp.entry(self.req.name),
                resource: self.req.resource.to_owned(),
                owner: Box::new(owner.clone()),
                judgement: judgement.clone(),
                since: meta.mtime,
            }));
        }
        self.tell(&owner, &judgement, meta.mtime);
        // Re-check between wake-ups only the fact the judgement rests on.
        let evidence = Evidence::of(&owner, judgement.liveness);
        c.last_watch = self.wait(&dir, meta.id, evidence, None)?;
        c.last_seen = Some(dir);
        Ok(())
    }

    /// A damaged lock that a process holds ([`Seen::InUse`]): fail fast with what is wrong,
    /// or wait for its beacon to be let go, as for a live holder.
    fn wait_while_in_use(
        &mut self,
        c: &mut Staged<S>,
        dir: S::Dir,
        meta: Meta,
        problem: String,
    ) -> Result<(), Error> {
        if self.expired() {
            return Err(self.give_up(|| Error::Malformed {
                lock: self.sp.entry(self.req.name),
                resource: self.req.resource.to_owned(),
                problem: format!("{problem}, and a process holds a lock on it"),
            }));
        }
        c.last_watch = self.wait(&dir, meta.id, Evidence::Beacon(None), None)?;
        c.last_seen = Some(dir);
        Ok(())
    }

    /// A dead holder: wait out the grace period (evidence only), then reclaim under the guard.
    /// `Some(owner)` when this contender reclaimed it.
    fn reclaim_dead(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<Option<Owner>, Error> {
        let grace = self.req.options.grace;
        let (age, clock_ahead) = self.ages.age(self.sp.sys, meta.id, meta.mtime);
        if judgement.liveness != Liveness::DeadByProof && age < grace {
            let remaining = grace - age;
            if self.expired() {
                return Err(self.give_up(|| Error::Stale {
                    lock: self.sp.entry(self.req.name),
                    resource: self.req.resource.to_owned(),
                    owner: Box::new(owner.clone()),
                    judgement: judgement.clone(),
                    remaining,
                    clock_ahead,
                }));
            }
            self.tell(&owner, &judgement, meta.mtime);
            self.wait(&dir, meta.id, Evidence::Nothing, Some(remaining))?;
            return Ok(None);
        }
        drop(dir);
        let name = self.req.name;
        match reclaim(
            self.sp,
            name,
            Expect::Token(&owner.token),
            grace,
            &mut self.ages,
        )? {
            Reclaim::Done => Ok(Some(owner)),
            Reclaim::Changed => self.idle_round().map(|()| None),
            Reclaim::Busy { remaining } => {
                if self.expired() {
                    return Err(self.give_up(|| Error::Guarded {
                        guard: self.sp.entry(&guard_name(name)),
                        lock: self.sp.entry(name),
                        resource: self.req.resource.to_owned(),
                        remaining,
                    }));
                }
                self.pause().map(|()| None)
            }
        }
    }
}

/// The contest proper: publish, and on losing, judge the holder and wait for it, reclaim from
/// it, or give up. `Ok(Some(owner))` when the lock was reclaimed from a dead owner.
pub(super) fn contend<S: System>(
    sp: &Space<S>,
    req: &Request,
    me: &Identity,
    c: &mut Staged<S>,
) -> Result<Option<Owner>, Error> {
    let mut k = Contest::new(sp, req);
    let mut reclaimed_from = None;
    loop {
        if k.cancel().is_some_and(|c| c.is_fired()) {
            return Err(k.cancelled());
        }
        if sp.sys.monotonic().saturating_sub(c.staged_at) > REFRESH_AFTER {
            match refresh(sp, c, me, req.options) {
                Ok(()) => {}
                Err(e) if not_found(&e) && !sp.removed() => restage(sp, req, me, c)?,
                Err(e) => return Err(e),
            }
        }
        match publish(sp, c, req.name)? {
            Publish::Won => return Ok(reclaimed_from),
            Publish::Vanished => {
                restage(sp, req, me, c)?;
                continue;
            }
            Publish::Contended => k.rounds += 1,
        }
        let (dir, meta, owner) = match sp.observe(req.name)? {
            Seen::Gone => {
                k.idle_round()?;
                continue;
            }
            Seen::Malformed(problem) => {
                return Err(Error::Malformed {
                    lock: sp.entry(req.name),
                    resource: req.resource.to_owned(),
                    problem,
                })
            }
            Seen::InUse { dir, meta, problem } => {
                k.wait_while_in_use(c, dir, meta, problem)?;
                continue;
            }
            Seen::Owned { dir, meta, owner } => (dir, meta, owner),
        };
        let judgement = sp.judge(&dir, &owner, me);
        k.last_owner = Some(owner.clone());
        if judgement.liveness.is_dead() {
            if let Some(dead) = k.reclaim_dead(dir, meta, owner, judgement)? {
                reclaimed_from = Some(dead);
            }
        } else {
            k.wait_for_holder(c, dir, meta, owner, judgement)?;
        }
    }
}

/// Sleeps until the lock at `NAME` may have changed: released (moved away), its beacon dropped,
/// its (beacon-less) holder exited, `until` passed, or the wait cancelled. Wake-ups that
/// changed nothing are filtered here, with no new opens of the lock directory (an open and
/// close by us would wake every other waiter). Returns the watch it used, for the caller to
/// drop once its publish is done.
fn wait_for_change<S: System>(
    k: &Contest<S>,
    dir: &S::Dir,
    id: FileId,
    evidence: Evidence,
    until: Option<Duration>,
) -> Result<Option<S::Watch>, Error> {
    let (sp, name, cancel) = (k.sp, k.req.name, k.cancel());
    if matches!(evidence, Evidence::Beacon(_)) && cancel.is_none() && until.is_none() {
        // An unbounded wait on a beacon holder: sleep in the kernel's own lock handoff. The
        // holder's release unlocks the beacon explicitly (for every copy a fork made of it),
        // and its death closes it, so either wakes us.
        match sp.sys.wait_shared(dir) {
            Ok(()) => return Ok(None),
            Err(e) if is(&e, Errno::LockUnsupported) => {}
            Err(e) => return Err(sp.io("wait for the lock", name, e)),
        }
    }
    let (pid, beacon) = evidence.watched();
    let watch = sp.sys.watch(dir, pid, beacon).unwrap_or(None);
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(250));
    let start = sp.sys.monotonic();
    let mut spurious = 0u32;
    // Look once more each time the watch is armed: a change before it would be missed.
    while !changed(sp, name, dir, id, evidence) {
        let elapsed = sp.sys.monotonic().saturating_sub(start);
        let left = until.map(|t| t.saturating_sub(elapsed));
        if left == Some(Duration::ZERO) {
            break; // the caller re-judges and reports the deadline
        }
        // Without a watch, back off. After wake-ups that changed nothing (a reader opening
        // the lock directory, a pidfd of a zombie that stays readable), pause a little before
        // watching again, so that a storm of them cannot make a waiter spin; what happens
        // meanwhile is queued and wakes the next sleep at once.
        let (watching, timeout) = if watch.is_none() || spurious >= 3 {
            let pause = backoff.next_pause();
            (None, Some(left.map_or(pause, |l| l.min(pause))))
        } else {
            (watch.as_ref(), left)
        };
        let wake = sp
            .sys
            .sleep(watching, timeout, cancel)
            .map_err(|e| sp.io("wait for the lock", name, e))?;
        match wake {
            Wake::Cancelled => return Err(k.cancelled()),
            Wake::TimedOut if watching.is_some() => break,
            Wake::TimedOut if watch.is_some() => spurious = 0, // the pause is over
            Wake::TimedOut => {}
            Wake::Changed => spurious += 1,
        }
    }
    Ok(watch)
}

/// Whether the lock at `name` is no longer the directory `id` we wait on, or the `evidence`
/// its holder's life rests on is gone.
fn changed<S: System>(
    sp: &Space<S>,
    name: &str,
    dir: &S::Dir,
    id: FileId,
    evidence: Evidence,
) -> bool {
    let moved = sp.sys.meta_at(sp.dir, name).map_or(true, |m| m.id != id);
    moved
        || match evidence {
            Evidence::Beacon(_) => sp.sys.try_lock(dir, false).unwrap_or(false),
            Evidence::Pid(p) => sp.sys.process_alive(p) == Some(false),
            Evidence::Nothing => false,
        }
}
