//! A contender's rounds behind a holder that has ended: the grace period, where only evidence
//! says so, then the takeover under the guard, or a wait while another process's takeover is
//! under way.

use super::{Contender, Evidence, Next};
use crate::error::Error;
use crate::liveness::Judgement;
use crate::options::{grace_left, Ages, Blocked};
use crate::owner::Owner;
use crate::paths::guard_name;
use crate::reclaim::{reclaim, Expect, Reclaim};
use crate::space::Space;
use crate::sys::{gone, Meta, System};
use std::time::Duration;

/// What keeps a waiter out of lock `name` whose holder was judged `judgement` (its lock's
/// metadata `meta`), for a waiter that does not reclaim it itself (a task queued behind
/// another): the holder, or, once it has ended, the grace period or the takeover.
pub(crate) fn blocked_by<S: System>(
    sp: &Space<S>,
    name: &str,
    meta: &Meta,
    judgement: &Judgement,
    grace: Duration,
) -> Blocked {
    if !judgement.liveness.is_dead() {
        return Blocked::Holder;
    }
    let (age, clock_ahead) = Ages::default().age(sp.sys, meta.id, meta.mtime);
    match grace_left(judgement.liveness, age, grace) {
        Some(remaining) if !remaining.is_zero() => Blocked::Grace {
            remaining,
            clock_ahead,
        },
        _ => Blocked::Takeover {
            guard: sp.entry(&guard_name(name)),
            remaining: None,
        },
    }
}

impl<S: System> Contender<'_, '_, S> {
    /// A dead holder: wait out the grace period (evidence only), then reclaim under the guard.
    pub(super) fn reclaim_dead(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
        judgement: Judgement,
    ) -> Result<Next<S>, Error> {
        // The directory judged may have left `NAME` since it was opened: handed over or
        // released (its holder's `flock` let go just after), it proves nothing about `NAME`.
        match self.sp.sys.meta_at(self.sp.dir, self.req.name) {
            Ok(now) if now.id == meta.id => {}
            Ok(_) => return self.idle_round(),
            Err(e) if gone(&e) => return self.idle_round(), // (ESTALE too: removed meanwhile)
            Err(e) => return Err(self.sp.io("check the lock", self.req.name, e)),
        }
        let grace = self.req.options.grace;
        let (age, clock_ahead) = self.ages.age(self.sp.sys, meta.id, meta.mtime);
        let remaining = grace_left(judgement.liveness, age, grace).unwrap_or_default();
        if !remaining.is_zero() {
            let grace = Blocked::Grace {
                remaining,
                clock_ahead,
            };
            self.kept_out(&owner, &judgement, meta.mtime, grace, |k| Error::Stale {
                lock: k.sp.entry(k.req.name),
                resource: k.req.resource.to_owned(),
                owner: Box::new(owner.clone()),
                judgement: judgement.clone(),
                remaining,
                clock_ahead,
            })?;
            return Ok(self.wait(dir, meta.id, Evidence::Nothing, Some(remaining), false));
        }
        drop(dir);
        let name = self.req.name;
        let expect = Expect::Token(&owner.token);
        match reclaim(self.sp, name, expect, grace, &mut self.ages)? {
            Reclaim::Done => {
                self.reclaimed_from = Some(owner);
                Ok(Next::Again)
            }
            Reclaim::Changed => self.idle_round(),
            Reclaim::Busy { remaining } => {
                let guard = self.sp.entry(&guard_name(name));
                let blocked = Blocked::Takeover {
                    guard: guard.clone(),
                    remaining,
                };
                self.kept_out(&owner, &judgement, meta.mtime, blocked, |k| {
                    Error::Guarded {
                        guard,
                        lock: k.sp.entry(name),
                        resource: k.req.resource.to_owned(),
                        remaining,
                    }
                })?;
                Ok(self.pause())
            }
        }
    }
}
