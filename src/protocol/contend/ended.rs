//! A contender's rounds behind a holder that has ended: the grace period, where only evidence
//! says so, then the takeover under the guard, or a wait while another process's takeover is
//! under way.

use super::{Contender, Evidence, Next};
use crate::error::Error;
use crate::liveness::Judgement;
use crate::options::{grace_left, Blocked};
use crate::owner::Owner;
use crate::paths::guard_name;
use crate::reclaim::{reclaim, Expect, Reclaim};
use crate::sys::{gone, Meta, System};

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
            let grace = Blocked::Grace { remaining };
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
