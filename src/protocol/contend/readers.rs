//! A contender's rounds where readers and writers meet at a shared lock: a reader's first look
//! (a shared lock is joined without a candidate), its join, its wait behind a writer, and a
//! writer's entry in the readers' lock while it waits for them.

use super::queued::{DEFER, DEFER_PAUSE};
use super::{Contender, Evidence, Next};
use crate::error::Error;
use crate::liveness::{Judgement, Liveness};
use crate::options::Blocked;
use crate::owner::Owner;
use crate::protocol::queue::{self, Ahead};
use crate::protocol::shared::{self, Intent, Join};
use crate::protocol::stage::stage;
use crate::space::{beacon_free, not_found, Seen};
use crate::sys::{FileId, Meta, System};

impl<S: System> Contender<'_, '_, S> {
    /// A reader behind a waiting writer lets it go first, until it is done (won, gave up,
    /// died): `Some` wait while it is not.
    pub(super) fn behind_writer(&mut self) -> Result<Option<Next<S>>, Error> {
        let reads = self.req.options.shared && self.c.as_ref().is_none_or(|c| c.shared);
        // Kept from the last round, or found now: a reader takes no lock, a new one neither
        // (once the last reader retired the one the writer waits in), while a writer waits. A
        // queued reader then waits only for the nearest writer queued ahead of it, and only if
        // that writer waits in the lock; else it goes on (it lets a writer ahead that is not
        // in the lock go first for a bounded time, as any waiter), before those queued after it.
        let (sp, name) = (self.sp, self.req.name);
        let found = match self.behind.take() {
            Some(behind) => Some(behind),
            None if !reads => None,
            None => shared::waiting_writers(sp, name)
                .and_then(|writers| self.waits_for(writers))
                .map(|(dir, evidence)| (dir, FileId { dev: 0, ino: 0 }, evidence)),
        };
        let Some((writer, id, evidence)) = found else {
            return Ok(None);
        };
        // `NAME.writers`: free of every waiting writer's shared `flock`. A writer's entry:
        // free of its exclusive one (see `Contender::changed`).
        let writers = evidence == Evidence::Writer;
        if beacon_free(self.sp.sys, &writer, writers).unwrap_or(false) {
            return Ok(None);
        }
        // Who holds the lock, for the caller's `on_wait` and the words of giving up: the
        // lock's record, and why a reader does not come in.
        let (expired, tell) = (
            self.expired(),
            self.req.options.on_wait.is_some()
                && self.told != Some(std::mem::discriminant(&Blocked::Holder)),
        );
        if expired || tell {
            if let Ok(Seen::Owned { meta, owner, .. }) = self.sp.observe(self.req.name) {
                self.last_owner = Some(owner.clone());
                self.held_by(&owner, &writer_first(), meta.mtime)?;
            }
        }
        if expired {
            return Err(self.timeout());
        }
        if self.take_a_number()? {
            return Ok(Some(Next::Again));
        }
        Ok(Some(self.wait(writer, id, evidence, None, false)))
    }

    /// A reader about to wait behind a writer, not yet queued, takes a number (staging its
    /// candidate first): it then waits only for the writers queued ahead of it, and goes
    /// before those that come after it. `true`: it took one, and looks again at once. (A
    /// task behind others of its runtime takes one so too: see `Contender::take_number`.)
    pub(super) fn take_a_number(&mut self) -> Result<bool, Error> {
        if self.ticket.is_some() || self.fail_fast {
            return Ok(false);
        }
        if self.c.is_none() {
            self.c = Some(stage(self.sp, self.req, self.me)?);
        }
        self.enqueue();
        Ok(self.ticket.is_some())
    }

    /// A reader's first round: a shared lock is joined without publishing (`Some`); any
    /// other lock, or none, and the reader stages its candidate (unless it did to take a
    /// number), to publish as a writer does.
    pub(super) fn first_look(&mut self) -> Result<Option<Next<S>>, Error> {
        let (sp, req, me) = (self.sp, self.req, self.me);
        if let Seen::Owned { dir, meta, owner } = sp.observe(req.name)? {
            if owner.is_shared() {
                return self.join_readers(dir, meta, owner).map(Some);
            }
        }
        if self.c.is_none() {
            self.c = Some(stage(sp, req, me)?);
        }
        Ok(None)
    }

    /// A reader found a shared lock: it joins it, or lets the writer waiting in it go first.
    /// One that finds others queued takes a number first (and looks again), as a writer does
    /// before it publishes: a writer queued before it may not be in the lock yet.
    pub(super) fn join_readers(
        &mut self,
        dir: S::Dir,
        meta: Meta,
        owner: Owner,
    ) -> Result<Next<S>, Error> {
        let (sp, name) = (self.sp, self.req.name);
        let queued = self.ticket.is_none() && queue::writer_queued(sp, name);
        if queued && self.take_a_number()? {
            return Ok(Next::Again);
        }
        if let Some(pause) = self.defer_to_a_writer(meta.id) {
            return Ok(pause);
        }
        let ticket = self.ticket.as_ref();
        match shared::join(self.sp, self.req, self.me, dir, meta.id, ticket)? {
            Join::Joined(held) => {
                self.joined = Some(*held);
                Ok(Next::Won)
            }
            Join::Changed => {
                self.rounds += 1; // (a fail-fast reader gives up after a bound, as on a publish)
                self.idle_round()
            }
            Join::Behind(writer) => {
                self.last_owner = Some(owner.clone());
                self.held_by(&owner, &writer_first(), meta.mtime)?;
                if self.take_a_number()? {
                    return Ok(Next::Again);
                }
                // Queued and waiting for none of them: the writer that keeps us out is not in
                // the queue, so all of them, as unqueued.
                let writer = self.waits_for(writer).or_else(|| {
                    shared::waiting_writers(self.sp, self.req.name).map(|w| (w, Evidence::Writer))
                });
                let Some((writer, evidence)) = writer else {
                    return self.idle_round();
                };
                Ok(self.wait(writer, meta.id, evidence, None, false))
            }
        }
    }

    /// What a reader that finds writers waiting (`writers`, `NAME.writers`) waits for: all of
    /// them (`writers`) unless it is queued; queued, the entry of the nearest writer queued
    /// ahead of it, when that writer waits in the lock (else `None`: it waits for none of
    /// them), and `writers` when the queue cannot be read.
    fn waits_for(&self, writers: S::Dir) -> Option<(S::Dir, Evidence)> {
        let Some(ticket) = self.ticket.as_ref() else {
            return Some((writers, Evidence::Writer));
        };
        match ticket.writer_ahead(self.sp) {
            Ahead::Unknown => Some((writers, Evidence::Writer)),
            Ahead::Writer(entry, token) if shared::waits_in(self.sp, self.req.name, &token) => {
                Some((entry, Evidence::WriterAhead))
            }
            Ahead::Writer(..) | Ahead::Nobody => None,
        }
    }

    /// A queued reader that finds the read lock `id` lets a live writer queued ahead of it,
    /// not yet in that lock, go first for up to [`DEFER`] (as any waiter lets one ahead of it
    /// take a free lock: one that is stopped or slow is passed): `Some` pause while it does.
    fn defer_to_a_writer(&mut self, id: FileId) -> Option<Next<S>> {
        let ticket = self.ticket.as_ref()?;
        if !matches!(ticket.writer_ahead(self.sp), Ahead::Writer(..)) {
            return None;
        }
        let now = self.sp.sys.monotonic();
        let since = match self.joining {
            Some((at, since)) if at == id => since,
            _ => now,
        };
        self.joining = Some((id, since));
        let defers = now.saturating_sub(since) < DEFER && !self.expired();
        defers.then_some(Next::Pause(DEFER_PAUSE))
    }

    /// A writer about to wait for the readers of the shared lock `id`: its entry there keeps
    /// new readers out (made once per lock; one in a lock waited for before is taken out).
    /// `Ok(false)` if `NAME.writers` stayed locked by another process (one stopped while it
    /// peeked) for as long as the writer may try: it pauses and tries again, rather than wait
    /// unmarked.
    pub(super) fn intend(&mut self, id: FileId) -> Result<bool, Error> {
        let (sp, req) = (self.sp, self.req);
        // Held from the first wait to the end: readers stay out also while the writer moves
        // on to a lock readers took anew (past the writer, before it came).
        if self.intent.is_none() {
            self.intent = Intent::new(sp, req.name, self.bound())?;
        }
        let (me, token) = (self.me, self.staged().owner.token.clone());
        let Some(intent) = self.intent.as_mut() else {
            return Ok(false);
        };
        if intent.entered(id) {
            return Ok(true);
        }
        let Ok(lock) = sp.sys.open_dir_at(sp.dir, req.name) else {
            return Ok(true); // gone meanwhile: the wait ends at once
        };
        if !sp.sys.meta(&lock).is_ok_and(|m| m.id == id) {
            return Ok(true);
        }
        match intent.enter(sp, req, me, (lock, id), token) {
            // Retired meanwhile (its last reader left, or a reclaimer took it): the wait ends
            // at once, as above.
            Err(e) if not_found(&e) => Ok(true),
            other => other.map(|()| true),
        }
    }
}

/// Why a reader waits although readers hold the lock: a writer waits, and goes first.
fn writer_first() -> Judgement {
    Judgement::new(
        Liveness::Live,
        "a writer waits for its readers to finish, and new readers wait for it",
    )
}
