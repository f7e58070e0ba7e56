//! A contender's rounds where readers and writers meet at a shared lock: a reader's first look
//! (a shared lock is joined without a candidate), its join, its wait behind a writer, and a
//! writer's entry in the readers' lock while it waits for them.

use super::{Contender, Evidence, Next};
use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::owner::Owner;
use crate::protocol::shared::{self, Join};
use crate::protocol::stage::stage;
use crate::space::{beacon_free, not_found, Seen};
use crate::sys::{FileId, Meta, System};

impl<S: System> Contender<'_, '_, S> {
    /// A reader behind a waiting writer lets it go first, until it is done (won, gave up,
    /// died): `Some` wait while it is not.
    pub(super) fn behind_writer(&mut self) -> Result<Option<Next<S>>, Error> {
        let Some((writer, id)) = self.behind.take() else {
            return Ok(None);
        };
        if beacon_free(self.sp.sys, &writer, false).unwrap_or(false) {
            return Ok(None);
        }
        if self.expired() {
            return Err(self.timeout());
        }
        Ok(Some(self.wait(writer, id, Evidence::Writer, None, false)))
    }

    /// A reader's first round: a shared lock is joined without a candidate (`Some`); any
    /// other lock, or none, and the reader stages one, to publish as a writer does.
    pub(super) fn first_look(&mut self) -> Result<Option<Next<S>>, Error> {
        let (sp, req, me) = (self.sp, self.req, self.me);
        if let Seen::Owned { dir, meta, owner } = sp.observe(req.name)? {
            if owner.is_shared() {
                return self.join_readers(dir, meta, owner).map(Some);
            }
        }
        self.c = Some(stage(sp, req, me)?);
        Ok(None)
    }

    /// A reader found a shared lock: it joins it, or lets the writer waiting in it go first.
    pub(super) fn join_readers(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
    ) -> Result<Next<S>, Error> {
        match shared::join(self.sp, self.req, self.me, dir, meta.id)? {
            Join::Joined(held) => {
                self.joined = Some(*held);
                Ok(Next::Won)
            }
            Join::Changed => {
                self.rounds += 1; // (a fail-fast reader gives up after a bound, as on a publish)
                self.idle_round()
            }
            Join::Behind(writer) => {
                let judgement = Judgement::new(
                    Liveness::Live,
                    "a writer waits for its readers to finish, and new readers wait for it",
                );
                self.last_owner = Some(owner.clone());
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
                Ok(self.wait(writer, meta.id, Evidence::Writer, None, false))
            }
        }
    }

    /// A writer about to wait for the readers of the shared lock `id`: its entry there keeps
    /// new readers out (made once per lock; one in a lock waited for before is taken out).
    pub(super) fn intend(&mut self, id: FileId) -> Result<(), Error> {
        if self.intent.as_ref().is_some_and(|(_, i, _)| *i == id) {
            return Ok(());
        }
        self.withdraw();
        let (sp, name) = (self.sp, self.req.name);
        let Ok(lock) = sp.sys.open_dir_at(sp.dir, name) else {
            return Ok(()); // gone meanwhile: the wait ends at once
        };
        if !sp.sys.meta(&lock).is_ok_and(|m| m.id == id) {
            return Ok(());
        }
        let intent = match shared::wait_as_writer(sp, self.req, self.me, &lock) {
            Ok(intent) => intent,
            // Retired meanwhile (its last reader left, or a reclaimer took it): the wait ends
            // at once, as above.
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.intent = Some((lock, id, intent));
        Ok(())
    }
}
