//! Shared locks under simulation: the reader's script (with the keeper's step, which a real
//! process runs on a thread of its own every second), the bookkeeping of who reads and when
//! each reader looked for writers, and the checks of I10 to I12 against the model's ground
//! truth:
//!
//! - **I10**: nobody believes it writes (a writer, the reference) while another reads or
//!   writes ([`enter`], [`enter_shared`]), and nobody moves a shared lock away while a live
//!   reader reads it ([`State::moving`]).
//! - **I11**: a reader comes into a shared lock only if its last look for writers there came
//!   before the entry of every live writer waiting there was made and locked, or it queued
//!   before that writer ([`State::came_in`]).
//! - **I12**: while a live reader reads, the record names a live reader (or one still leaving),
//!   or did so within [`NAMED_SLACK`]; the lock directory never looks older than the keeper
//!   lets it ([`State::check_readers`]); and a reader the record names hands it over when it
//!   leaves while others read ([`read`]).
//!
//! And a dropped, cancelled or timed-out acquisition, reader's or writer's, leaves nothing of
//! its own behind, no entry in a shared lock included ([`left_nothing`]).

use super::*;
use crate::paths::{queue_name, Queued, Waiter, READER, WRITER};
use crate::protocol::shared::{keep_record, KEEP_FRESH};

/// How often a reading process's keeper looks at the record (as `acquire::keeper` does).
pub(crate) const KEEPER_TICK: Duration = Duration::from_secs(1);

/// How long the record may name no live reader while others read: a keeper's period and a
/// half (a named reader killed is replaced by the next keeper's look).
pub(crate) const NAMED_SLACK: Duration = Duration::from_millis(1500);

/// What the model knows of readers and writers of shared locks.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// Who reads (slot, task): from its acquisition's return to its release's start.
    pub(crate) reading: Vec<(usize, usize)>,
    /// Who is releasing its read (the record may still name it meanwhile).
    pub(crate) releasing: Vec<(usize, usize)>,
    /// When (the step) each (slot, task) last listed each directory: a reader's look for
    /// writers. Forgotten when it takes that directory's shared `flock` again (a new join).
    pub(crate) listed: HashMap<(usize, usize, Ino), usize>,
    /// When (the step) each queue entry took its number (was renamed to its numbered name).
    pub(crate) numbered: HashMap<Ino, usize>,
    /// When (the step) an exclusive `flock` was last granted on each inode.
    pub(crate) flocked: HashMap<Ino, usize>,
    /// The last time the record of the shared lock named a live reader, or nobody read.
    pub(crate) named_at: Duration,
    /// The lock directory whose age was reported already (once is enough).
    pub(crate) stale: Option<Ino>,
    /// The token count when each (slot, task)'s latest acquisition started: the tokens it
    /// drew since are its own (see [`left_nothing`]).
    pub(crate) since: HashMap<(usize, usize), u64>,
    /// The slots of the reference implementation's processes.
    pub(crate) references: Vec<usize>,
}

impl Book {
    /// A `flock` granted to `(slot, task)` on `ino` at `step`.
    pub(crate) fn locked(
        &mut self,
        slot: usize,
        task: usize,
        ino: Ino,
        exclusive: bool,
        step: usize,
    ) {
        if exclusive {
            self.flocked.insert(ino, step);
        } else {
            self.listed.remove(&(slot, task, ino));
        }
    }

    /// The process of `slot` is gone (crashed): it reads no more.
    pub(crate) fn gone(&mut self, slot: usize) {
        self.reading.retain(|(s, _)| *s != slot);
        self.releasing.retain(|(s, _)| *s != slot);
    }
}

/// The token number of a simulated token (`tok-<slot>-<n>`).
fn number(token: &str) -> u64 {
    token
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl State {
    /// The live (slot, task)s that read.
    fn live_readers(&self) -> Vec<(usize, usize)> {
        let live = |r: &&(usize, usize)| self.procs[r.0].alive;
        self.book.reading.iter().filter(live).copied().collect()
    }

    /// Whether `slot` holds an exclusive `flock` on `ino`.
    fn holds_exclusive(&self, slot: usize, ino: Ino) -> bool {
        self.ofds
            .values()
            .any(|o| o.ino == ino && o.lock == Some(true) && o.holders.contains(&slot))
    }

    /// I4 to I6, and I10 for a shared lock: `(slot, task)` moves the lock `lock` (inode `src`)
    /// away. An exclusive lock: only its holder, or the single guard holder for a dead owner.
    /// A shared lock: only under its exclusive `flock` (no reader left), by its last reader
    /// leaving or by the guard holder, and never while a live reader reads it.
    pub(crate) fn moving(&mut self, slot: usize, task: usize, src: Ino, lock: &str) {
        let record = self.record(src);
        if record.as_ref().is_some_and(Owner::is_shared) {
            if !self.holds_exclusive(slot, src) {
                self.violation(format!(
                    "I5: p{slot} moved the shared lock {lock} away without its exclusive flock"
                ));
            }
            if !self.book.releasing.contains(&(slot, task)) && !self.holds_guard(slot, lock) {
                self.violation(format!(
                    "I5: p{slot} moved {lock} away without holding its guard"
                ));
            }
            if let Some((s, t)) = self.live_readers().first() {
                self.violation(format!(
                    "I10: p{slot} moved the shared lock {lock} away while p{s}.{t} reads it"
                ));
            }
            return;
        }
        let token_slot = record.and_then(|o| self.tokens.get(&o.token).map(|(slot, _)| *slot));
        if token_slot != Some(slot) {
            if !self.holds_guard(slot, lock) {
                self.violation(format!(
                    "I5: p{slot} moved {lock} away without holding its guard"
                ));
            }
            if let Some(owner) = token_slot {
                if self.procs[owner].alive {
                    self.violation(format!("I6: p{slot} moved away the lock of live p{owner}"));
                }
            }
        }
    }

    /// I6 for a candidate: `slot` moves `name`, the candidate of token `token` (inode `src`),
    /// away. One its maker still stages (its record is its own; a candidate's name holding
    /// another's record holds the lock before a handoff, on its way out) is another process's
    /// to move only once its maker is dead: a maker that gives it up removes its record
    /// before it lets go of its `flock` (see `stage::unstage`).
    pub(crate) fn moving_candidate(&mut self, slot: usize, src: Ino, name: &str, token: &str) {
        if self.record(src).is_none_or(|o| o.token != token) {
            return;
        }
        let Some(&(maker, _)) = self.tokens.get(token) else {
            return;
        };
        if self.procs[maker].alive && self.procs[maker].process != self.procs[slot].process {
            self.violation(format!(
                "I6: p{slot} moved away {name}, the candidate of live p{maker}"
            ));
        }
    }

    /// I11: `(slot, task)` made `name` in directory `dir`. A reader's entry in the published
    /// lock is its coming in: no live writer's entry may wait there, made and locked before
    /// the reader's last look for writers (or at all, if it did not look), unless the reader
    /// queued before that writer.
    pub(crate) fn came_in(&mut self, slot: usize, task: usize, dir: Ino, name: &str) {
        if !name.starts_with(READER) || self.lookup(self.d(), LOCK).ok() != Some(dir) {
            return;
        }
        let looked = self.book.listed.get(&(slot, task, dir)).copied();
        let Ok(entries) = self.dir_entries(dir) else {
            return;
        };
        let writers: Vec<(String, Ino)> = entries
            .iter()
            .filter(|(n, _)| n.starts_with(WRITER))
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        for (writer, ino) in writers {
            let waits = self.ofds.values().any(|o| {
                o.ino == ino
                    && o.lock == Some(true)
                    && o.holders.iter().any(|h| self.procs[*h].alive)
            });
            let since = self.book.flocked.get(&ino).copied();
            if let (true, Some(since)) = (waits, since) {
                if looked.is_none_or(|l| l > since) && !self.queued_before(slot, task, &writer) {
                    let how = looked.map_or("without looking for writers".into(), |l| {
                        format!("having looked for writers at step {l}")
                    });
                    self.violation(format!(
                        "I11: p{slot}.{task} came into the shared lock ({name}) {how}, \
                         while {writer}, waiting since step {since}, was there"
                    ));
                }
            }
        }
    }

    /// Whether `(slot, task)`, a reader, is queued before the writer whose entry in a shared
    /// lock is `writer` (both in the lock's queue, the reader's number lower): I11 lets it
    /// come in past that writer.
    fn queued_before(&self, slot: usize, task: usize, writer: &str) -> bool {
        let Some(token) = writer.strip_prefix(WRITER) else {
            return false;
        };
        let Ok(entries) = self
            .lookup(self.d(), &queue_name(LOCK))
            .and_then(|q| self.dir_entries(q))
        else {
            return false;
        };
        let queued: Vec<Queued> = entries.keys().filter_map(|n| Queued::parse(n)).collect();
        let number = |reader: bool| {
            queued.iter().find_map(|q| {
                let ours = match reader {
                    true => self.tokens.get(&q.token) == Some(&(slot, task)),
                    false => q.token == token,
                };
                (ours && (q.kind == Waiter::Reader) == reader).then_some(q.place())
            })
        };
        matches!((number(true), number(false)), (Some(r), Some(w)) if r < w)
    }

    /// I12, after every step: while a live reader reads the shared lock at `NAME`, its record
    /// names a live reader (its entry there, or, the first reader, which has none, reading)
    /// or one still releasing, or did so within
    /// [`NAMED_SLACK`]; and the lock directory is never older than [`KEEP_FRESH`] and a
    /// keeper's period and a half (a program that judges by pid waits 60 s from there).
    pub(crate) fn check_readers(&mut self) {
        let now = self.mono;
        let lock = self.lookup(self.d(), LOCK).ok();
        let record = lock.and_then(|l| self.record(l)).filter(Owner::is_shared);
        let (Some(l), Some(record), false) = (lock, record, self.live_readers().is_empty()) else {
            self.book.named_at = now;
            return;
        };
        let named = self.tokens.get(&record.token).copied();
        let entry = format!("{READER}{}", record.token);
        let fine = named.is_some_and(|(s, t)| {
            self.procs[s].alive
                && (self.lookup(l, &entry).is_ok()
                    || self.book.reading.contains(&(s, t))
                    || self.book.releasing.contains(&(s, t)))
        });
        if fine {
            self.book.named_at = now;
        } else if now.saturating_sub(self.book.named_at) > NAMED_SLACK {
            let (s, _) = self.live_readers()[0];
            self.violation(format!(
                "I12: p{s} reads, and for {:?} the shared lock's record has named pid {} \
                 ({named:?}), which reads no more",
                now - self.book.named_at,
                record.pid
            ));
            self.book.named_at = now;
        }
        let age = now.saturating_sub(self.inodes[&l].mtime);
        if age > KEEP_FRESH + NAMED_SLACK && self.book.stale != Some(l) {
            self.book.stale = Some(l);
            self.violation(format!(
                "I12: the shared lock is {age:?} old while readers read (the keeper rewrites \
                 it at {KEEP_FRESH:?})"
            ));
        }
    }
}

/// A live reader that reads now (slot, task), if any.
pub(crate) fn reading_now(sys: &SimSys) -> Option<(usize, usize)> {
    sys.world.lock().live_readers().first().copied()
}

/// Starts an acquisition's bookkeeping: the tokens drawn from now on are its own.
pub(crate) fn starting(sys: &SimSys, task: usize) {
    let mut st = sys.world.lock();
    let n = st.next_token;
    st.book.since.insert((sys.slot, task), n);
}

/// A failed (dropped, cancelled, timed-out) acquisition of task `task` left nothing of its own
/// behind: no candidate, no lock, no entry in a shared lock.
pub(crate) fn left_nothing(sys: &SimSys, task: usize) {
    let mut st = sys.world.lock();
    let me = (sys.slot, task);
    let since = st.book.since.get(&me).copied().unwrap_or(0);
    let mine = |t: &str| st.tokens.get(t) == Some(&me) && number(t) > since;
    let Ok(entries) = st.dir_entries(st.d()) else {
        return;
    };
    let mut left: Vec<String> = Vec::new();
    for (n, ino) in entries {
        // A tombstone named by another's token is that one's to reap: a waiter that gave up
        // as a give-up of ours handed it our old lock withdraws it to its own, then removes it.
        let others = n
            .rsplit_once(".tombstone.")
            .is_some_and(|(_, token)| !mine(token));
        if !others && st.record(*ino).is_some_and(|o| mine(&o.token)) {
            left.push(n.clone());
        }
        if !matches!(classify(n), Entry::Lock(_)) {
            continue;
        }
        for inner in st.dir_entries(*ino).map(|e| e.keys()).into_iter().flatten() {
            let token = inner
                .strip_prefix(READER)
                .or_else(|| inner.strip_prefix(WRITER));
            if token.is_some_and(mine) {
                left.push(format!("{n}/{inner}"));
            }
        }
    }
    if !left.is_empty() {
        st.violation(format!(
            "an acquisition of p{}.{task} that failed or was dropped left {left:?} behind",
            sys.slot
        ));
    }
}

/// A timed acquisition that `started` then, and failed with `got`, returns within
/// `Config::deadline_slack` past its deadline: nothing it waits on, a `flock` kept by a stopped
/// process included, holds it longer.
pub(crate) fn on_time<T>(sys: &SimSys, wait: Wait, started: Duration, got: &Result<T, Error>) {
    let took = sys.monotonic().saturating_sub(started);
    let slack = sys.world.lock().deadline_slack;
    if let (Wait::Timeout(t), Some(slack), Err(e)) = (wait, slack, got) {
        if took > t + slack {
            let past = took - t;
            report(
                sys,
                format!("p{} returned {past:?} past its deadline: {e}", sys.slot),
            );
        }
    }
}

/// I1 and I10: `(slot, task)` now believes it reads (a shared lock's reader).
pub(crate) fn enter_shared(sys: &SimSys) {
    let mut st = sys.world.lock();
    let me = (sys.slot, sys.task.get());
    if let Some((s, t)) = st.inside.iter().copied().find(|(s, _)| st.procs[*s].alive) {
        st.violation(format!(
            "I10: p{}.{} reads while p{s}.{t} writes",
            me.0, me.1
        ));
    }
    st.book.reading.push(me);
    st.progressed = st.mono;
    st.trace.push(format!("p{}.{} READ", me.0, me.1));
}

/// A reader that reads no more, and starts releasing (`releasing`) or is done.
pub(crate) fn leave_shared(sys: &SimSys, releasing: bool) {
    let mut st = sys.world.lock();
    let me = (sys.slot, sys.task.get());
    st.book.reading.retain(|r| *r != me);
    st.book.releasing.retain(|r| *r != me);
    if releasing {
        st.book.releasing.push(me);
        st.trace.push(format!("p{}.{} UNREAD", me.0, me.1));
    }
}

/// A reader's round: a shared acquisition (in the current lock directory), `hold` seconds of
/// reading with the keeper's look every [`KEEPER_TICK`] (none for `hold` 0: one scheduling
/// point), and the release. Where there is no `flock`, the lock is taken exclusively, and held
/// as a writer holds it.
pub(crate) fn read(sys: &SimSys, wait: Wait, hold: u8, grace: Duration, recovery: bool) {
    let mut acq = acquisition(sys, wait, grace, 0);
    acq.options.shared = true;
    let started = sys.monotonic();
    let got = acquire::now(acq.run(&Blocking));
    on_time(sys, wait, started, &got);
    let Acquired { held, dir: d, .. } = match got {
        Ok(a) => a,
        Err(e) if e.is_contended() && !recovery => return left_nothing(sys, 0),
        Err(Error::Malformed { .. }) if intruded(sys) => return,
        Err(e) => return report(sys, format!("p{} failed to acquire: {e}", sys.slot)),
    };
    let shared = held.shared;
    if shared {
        enter_shared(sys);
    } else {
        enter(sys);
    }
    let _ = sys.meta_at(&d, OWNER_FILE);
    for _ in 0..hold {
        let _ = sys.sleep(None, Some(KEEPER_TICK), None);
        if shared {
            let _ = keep_record(&space(sys, &d), LOCK, held.id, &held.owner);
        }
    }
    if shared {
        leave_shared(sys, true);
    } else {
        leave(sys);
    }
    let (id, token) = (held.id, held.owner.token.clone());
    let pid = sys.pid();
    let before = reading(sys);
    if let Err(e) = protocol::release(&space(sys, &d), held, "sim", pid) {
        report(sys, format!("I9/I1: p{} lost its lock: {e}", sys.slot));
    }
    if shared {
        leave_shared(sys, false);
        handed_over(sys, id.ino, &token, &before);
    }
}

/// Who reads now (for [`handed_over`]).
pub(crate) fn reading(sys: &SimSys) -> Vec<(usize, usize)> {
    sys.world.lock().live_readers()
}

/// I12, at a reader's release: if the lock it read (inode number `lock`) is still there, shared,
/// and read by others that read `before` it began to leave, its record no longer names this
/// reader (`token`). (A reader that came in meanwhile may have been between its shared `flock`
/// and its entry's when the leaving one looked, where no one can see it: the record then names
/// a reader gone, and the keepers name another within a second, as the check after every step
/// allows.)
pub(crate) fn handed_over(sys: &SimSys, lock: Ino, token: &str, before: &[(usize, usize)]) {
    let mut st = sys.world.lock();
    let Ok(at) = st.lookup(st.d(), LOCK) else {
        return;
    };
    if st.meta(at).id.ino != lock || st.record(at).is_none_or(|o| o.token != token) {
        return;
    }
    let still = st.live_readers().into_iter().find(|r| before.contains(r));
    if let Some((s, t)) = still {
        st.violation(format!(
            "I12: p{} left the shared lock still named by its record while p{s}.{t} reads it \
             (the record was not handed over)",
            sys.slot
        ));
    }
}
