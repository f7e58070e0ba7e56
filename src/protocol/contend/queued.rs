//! A contender's place in the lock's queue ([`crate::protocol::queue`]): it takes a number when
//! it finds the lock held (or others queued), finds out at each round whether the lock was
//! handed to it, lets a live waiter ahead of it publish first, and leaves the queue when it
//! wins or gives up, releasing a lock handed to it at the moment it gave up.

use super::{Contender, Evidence, Next};
use crate::error::Error;
use crate::options::Bound;
use crate::paths::{queue_name, tombstone_name, Waiter as Kind};
use crate::protocol::queue;
use crate::protocol::shared::MARK_PATIENCE;
use crate::protocol::stage::{
    publish, refresh, restage, unstage, Held, Publish, Staged, REFRESH_AFTER,
};
use crate::space::{not_found, remove_tree};
use crate::sys::System;
use std::io;
use std::time::Duration;

/// How long a waiter that finds the lock free lets a live waiter ahead of it publish first,
/// before it publishes itself (a waiter ahead that is stopped, or slow to wake, is passed).
pub(super) const DEFER: Duration = Duration::from_millis(100);

/// Its pause between two looks while it lets a waiter ahead publish.
pub(super) const DEFER_PAUSE: Duration = Duration::from_millis(1);

/// Since when a waiter that finds the lock free has let the first live waiter ahead of it
/// (by its number) publish first, and how many have been first in turn since it last saw the
/// lock held. Each gets its own [`DEFER`]: a waiter that did not look while the one ahead of it
/// took the lock and let it go (stopped, or slow to wake) does not pass the next one at once,
/// as if the time that one took had been the next one's. At most [`DEFER_TURNS`] in a row
/// while the lock stays free: entries planted to leave one by one hold no waiter back for
/// longer than their number.
#[derive(Default)]
pub(crate) struct Deferral(Option<(Duration, u64, u32)>);

/// How many waiters ahead, one after another, a waiter lets go first while the lock stays free.
const DEFER_TURNS: u32 = 4;

impl Deferral {
    /// Whether to let the waiter numbered `first`, the first live one ahead, publish first
    /// at `now`: for [`DEFER`] from when it was first found first.
    fn defers(&mut self, now: Duration, first: u64) -> bool {
        let (since, turns) = match self.0 {
            Some((since, was, turns)) if was == first => (since, turns),
            Some((_, _, turns)) if turns < DEFER_TURNS => (now, turns + 1),
            Some((since, _, turns)) => (since, turns),
            None => (now, 1),
        };
        self.0 = Some((since, first, turns));
        now.saturating_sub(since) < DEFER
    }
}

impl<'r, S: System> Contender<'r, '_, S> {
    /// Before a publish: the lock was handed to us (`Won`), or a live waiter ahead of us may
    /// take the free lock first (a pause); `None`: publish.
    fn before_publish(&mut self) -> Option<Next<S>> {
        let (sp, name) = (self.sp, self.req.name);
        if self.ticket.is_none()
            && !queue::no_queue(sp)
            && sp.sys.meta_at(sp.dir, &queue_name(name)).is_ok()
        {
            self.enqueue();
        }
        let Some(ticket) = &self.ticket else {
            return None;
        };
        match sp.sys.meta_at(sp.dir, name) {
            Ok(m) if Some(m.id) == self.c.as_ref().map(|c| c.id) => Some(Next::Won),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let now = sp.sys.monotonic();
                // Left free for those that do not queue: at most once in half a turn's
                // interval, whatever the turn file says (it is read from disk), and never past
                // our deadline.
                let every = queue::turn_every(sp.sys);
                let turned = self
                    .turned
                    .is_some_and(|t| now.saturating_sub(t) < every / 2);
                if let Some(left) = ticket.turn_given(sp).filter(|_| !turned && !self.expired()) {
                    self.turned = Some(now);
                    self.deferred = Deferral::default();
                    return Some(Next::Pause(self.left().map_or(left, |l| l.min(left))));
                }
                if self.expired() {
                    return None;
                }
                let first = ticket.ahead(sp)?;
                self.deferred
                    .defers(now, first)
                    .then_some(Next::Pause(DEFER_PAUSE))
            }
            _ => {
                self.deferred = Deferral::default();
                None
            }
        }
    }

    /// A round's publish, in turn: `Won`, or what to do instead (`None`: look at the holder).
    /// Before it, the lock may have been handed to us, or a waiter ahead may go first
    /// ([`Contender::before_publish`]); a candidate that waited is refreshed; after a publish
    /// that lost, we take a number.
    ///
    /// # Errors
    ///
    /// An I/O error staging, refreshing or publishing.
    pub(super) fn publish_in_turn(&mut self) -> Result<Option<Next<S>>, Error> {
        if let Some(next) = self.before_publish() {
            return Ok(Some(next));
        }
        let (sp, req, me) = (self.sp, self.req, self.me);
        let c = self.staged();
        if sp.sys.monotonic().saturating_sub(c.staged_at) > REFRESH_AFTER {
            match refresh(sp, c, me, req.options) {
                Ok(()) => {}
                Err(e) if not_found(&e) && !sp.removed() => {
                    self.dequeue();
                    restage(sp, req, me, self.staged())?;
                }
                Err(e) => return Err(e),
            }
        }
        match publish(sp, self.staged(), req.name)? {
            Publish::Won => Ok(Some(Next::Won)),
            _ if self.handed() => Ok(Some(Next::Won)),
            Publish::Vanished => {
                self.dequeue();
                restage(sp, req, me, self.staged())?;
                Ok(Some(Next::Again))
            }
            Publish::Contended => {
                self.rounds += 1;
                self.enqueue();
                Ok(None)
            }
        }
    }

    /// Whether the lock was handed to us (after a publish that lost: it may have been, at any
    /// moment of a round).
    pub(super) fn handed(&self) -> bool {
        let (sp, c) = (self.sp, self.c.as_ref());
        self.queued
            && c.is_some_and(|c| {
                sp.sys
                    .meta_at(sp.dir, self.req.name)
                    .is_ok_and(|m| m.id == c.id)
            })
    }

    /// What a queued writer that finds a live holder (whose beacon is its `evidence`) waits
    /// on instead of that holder: the entry of the writer queued just ahead of it, when that
    /// one is a thread (see [`queue::Ticket::thread_ahead`]). A task is handed nothing (it
    /// watches the holder), nor is a reader.
    pub(super) fn in_line(&self, evidence: Evidence) -> Option<S::Dir> {
        let writes = self.c.as_ref().is_some_and(|c| !c.shared);
        if !self.handable || !writes || !matches!(evidence, Evidence::Beacon(_)) {
            return None;
        }
        self.ticket.as_ref()?.thread_ahead(self.sp)
    }

    /// Takes a number in the queue now, once: a task that waits behind others of its runtime
    /// (see [`crate::acquire::queue`]). A reader stages its candidate for it (it stages one at
    /// its first look otherwise), as one about to wait behind a writer does; one that cannot
    /// is left without a number.
    pub(crate) fn take_number(&mut self) {
        let _ = self.take_a_number();
    }

    /// Steps out of the way of others while it waits in its runtime's queue: a writer's
    /// intent in a shared lock is withdrawn (readers come in again), to be declared anew.
    pub(crate) fn step_aside(&mut self) {
        self.withdraw();
    }

    /// Its number in the queue, while it has one.
    pub(crate) fn number(&self) -> Option<u64> {
        self.ticket.as_ref().map(|t| t.number())
    }

    /// How long a `flock` beside the lock may be tried for: the time left, and the cancel. A
    /// task tries for [`MARK_PATIENCE`] at most (again at its next round): its runtime's other
    /// tasks wait while it does.
    pub(super) fn bound(&self) -> Bound<'r> {
        let bound = Bound {
            left: self.left(),
            cancel: self.cancel(),
        };
        match self.handable {
            true => bound,
            false => bound.within(MARK_PATIENCE),
        }
    }

    /// Takes a number in the queue, once (a filesystem without `flock` has none; an
    /// acquisition that does not wait takes none).
    pub(super) fn enqueue(&mut self) {
        let Some(c) = self
            .c
            .as_ref()
            .filter(|_| self.ticket.is_none() && !self.fail_fast)
        else {
            return;
        };
        let kind = match (c.shared, self.handable) {
            (true, _) => Kind::Reader,
            (false, true) => Kind::Writer,
            (false, false) => Kind::Task,
        };
        // The queue orders waiters, and nothing more: one that cannot be used (not a private
        // directory, a full disk) leaves this acquisition to wait unqueued, as without one.
        self.ticket = queue::join(self.sp, self.req.name, &c.owner, kind).unwrap_or(None);
        self.queued |= self.ticket.is_some();
    }

    /// Leaves the queue (won, or about to stage anew: a new candidate takes a new number).
    pub(super) fn dequeue(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.leave(self.sp, self.req.name);
            queue::remove_if_spent(self.sp, self.req.name);
        }
    }

    /// Gives up candidate `c` (an error, a cancel, a dropped future). Unqueued, it is removed.
    /// Queued, the lock may be handed to it at any moment: it is withdrawn in one step, a
    /// rename to a tombstone, and what was withdrawn tells. Our candidate: nothing was handed.
    /// Anything else (the old lock, left at our candidate's name by its holder's exchange), or
    /// nothing: if `NAME` is our candidate, the lock was handed to us, and is released at once
    /// (to the next waiter).
    pub(super) fn give_up_candidate(&mut self, c: Staged<S>) {
        self.dequeue();
        if !self.queued {
            return unstage(self.sp, c);
        }
        let (sp, name) = (self.sp, self.req.name);
        let tomb = tombstone_name(name, &sp.sys.token());
        let moved = sp.sys.rename_noreplace(sp.dir, &c.name, &tomb).is_ok();
        let ours = moved && sp.sys.meta_at(sp.dir, &tomb).is_ok_and(|m| m.id == c.id);
        let handed = !ours && sp.sys.meta_at(sp.dir, name).is_ok_and(|m| m.id == c.id);
        if !handed {
            let token = c.owner.token.clone();
            drop(c); // closed first: where an open directory cannot be removed (Windows)
            if moved {
                remove_tree(sp.sys, sp.dir, &tomb);
            }
            return sp.sys.own_token(&token, false);
        }
        if moved {
            remove_tree(sp.sys, sp.dir, &tomb); // the old lock, at our candidate's name
        }
        let held = Held {
            name: name.to_owned(),
            owner: c.owner,
            beacon: c.dir,
            id: c.id,
            reclaimed_from: None,
            last_seen: c.last_seen,
            shared: c.shared,
            entry: None,
            ticket: None,
        };
        let _ = crate::protocol::release(sp, held, self.req.resource, sp.sys.pid());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each waiter ahead gets its own [`DEFER`]: the window starts anew when the first one
    /// ahead is another, and ends for each once it is over.
    #[test]
    fn each_waiter_ahead_is_let_go_first_for_its_own_while() {
        let ms = Duration::from_millis;
        let mut d = Deferral::default();
        assert!(d.defers(ms(1_000), 3));
        assert!(d.defers(ms(1_099), 3));
        assert!(!d.defers(ms(1_100), 3), "waiter 3 had its 100 ms");
        // Waiter 3 took the lock and let it go while we did not look: waiter 5 is first now.
        assert!(d.defers(ms(1_250), 5), "waiter 5 passed at once");
        assert!(d.defers(ms(1_349), 5));
        assert!(!d.defers(ms(1_350), 5), "waiter 5 had its 100 ms");
        // Two more, each with its own while; the next, a fifth in a row, has none of its own
        // (only what is left of the fourth's).
        assert!(d.defers(ms(1_400), 6));
        assert!(d.defers(ms(1_450), 7));
        assert!(d.defers(ms(1_549), 8));
        assert!(
            !d.defers(ms(1_560), 8),
            "a fifth waiter ahead in a row was let go first"
        );
        // Once the lock was seen held, they start again.
        let mut d = Deferral::default();
        assert!(d.defers(ms(2_000), 9));
    }

    /// A waiter that finds the lock free while a live waiter queued ahead of it has yet to take
    /// it lets that one publish first (a pause) rather than publish past it. (Nothing races a
    /// clock: the window starts when the waiter first finds the one ahead.)
    #[cfg(unix)]
    #[test]
    fn a_waiter_lets_a_live_waiter_ahead_take_the_free_lock_first() {
        use crate::options::{Options, Wait};
        use crate::protocol::stage::Request;
        use crate::space::Space;
        use crate::sys::{Clock, Real};
        let tmp = tempfile::tempdir().unwrap();
        let dir = Real.open_dir_path(tmp.path()).unwrap();
        let me = Real.identity();
        let sp = Space {
            sys: &Real,
            dir: &dir,
            path: tmp.path(),
            uid: me.uid,
            shared: None,
        };
        let options = Options::new(Wait::Forever);
        let req = Request {
            name: "x.lock",
            resource: "x",
            options: &options,
            started: Real.monotonic(),
        };
        let mut ahead = Contender::new(&sp, &req, &me).unwrap();
        ahead.enqueue();
        assert!(ahead.ticket.is_some(), "the waiter ahead took no number");
        let mut behind = Contender::new(&sp, &req, &me).unwrap();
        let next = behind.round().unwrap();
        assert!(behind.ticket.is_some(), "the waiter behind took no number");
        assert!(
            matches!(next, Next::Pause(_)),
            "the waiter behind did not let the live one ahead go first"
        );
        assert!(!tmp.path().join("x.lock").exists(), "the lock was taken");
    }
}
