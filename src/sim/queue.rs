//! The queue and the handoff under simulation: the exchange of two names, and the checks of
//! I13 (no lock is left to a waiter that gave up), I14 (a handoff goes to the first live
//! waiter) and I15 (only its waiter takes an entry's exclusive `flock`).

use super::*;
use crate::paths::{queue_name, Queued};

impl State {
    /// `exchange(a, b)` in directory `dir` by `(slot, task)`: both names swap places in one
    /// step. A lock moved away is checked as any move of a lock is (I4 to I6), and a lock
    /// handed to a waiter's candidate as I14 says.
    pub(crate) fn exchange(
        &mut self,
        (slot, task): (usize, usize),
        dir: Ino,
        a: &str,
        b: &str,
    ) -> io::Result<()> {
        check_name(a)?;
        check_name(b)?;
        if self.no_exchange || self.fuse {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "no exchange"));
        }
        let (ia, ib) = (self.lookup(dir, a)?, self.lookup(dir, b)?);
        for (name, ino, to) in [(a, ia, b), (b, ib, a)] {
            if let Entry::Lock(lock) = classify(name) {
                self.moving(slot, task, ino, &lock);
                if let Entry::Candidate { token, .. } = classify(to) {
                    let holder = self.record(ino).map(|o| o.token).unwrap_or_default();
                    self.handed_in_order((slot, task), &lock, &token, &holder);
                }
            }
        }
        let entries = self.dir_entries_mut(dir)?;
        entries.insert(a.to_owned(), ib);
        entries.insert(b.to_owned(), ia);
        self.touch(dir);
        self.bump(ia);
        self.bump(ib);
        Ok(())
    }

    /// I14: lock `lock`, handed by its holder `(slot, task)` (token `holder`, whose own entry
    /// stays in the queue until it released) to the waiter whose token is `token`, passes no
    /// live waiter queued before it: one ahead of it in the queue's order whose entry is
    /// exclusively `flock`ed by a live process, whose candidate is still there to be handed the
    /// lock, and which had its number when the holder last listed the queue (one numbered
    /// since, with a number it drew before, was not there to be seen: see
    /// `protocol::queue::join`).
    fn handed_in_order(
        &mut self,
        (slot, task): (usize, usize),
        lock: &str,
        token: &str,
        holder: &str,
    ) {
        let Ok(queue) = self.lookup(self.d(), &queue_name(lock)) else {
            return;
        };
        let Ok(entries) = self.dir_entries(queue) else {
            return;
        };
        let queued: Vec<(Queued, Ino)> = entries
            .iter()
            .filter_map(|(n, i)| Queued::parse(n).map(|q| (q, *i)))
            .collect();
        let Some(me) = queued.iter().find(|(q, _)| q.token == token) else {
            return;
        };
        let number = me.0.number;
        let looked = self.book.listed.get(&(slot, task, queue)).copied();
        let passed = queued.iter().find(|(q, ino)| {
            let candidate = crate::paths::candidate_name(lock, &q.token);
            let seen = looked.is_some_and(|l| self.book.numbered.get(ino).is_some_and(|n| *n < l));
            seen && q.place() < me.0.place()
                && q.token != holder
                && self.lookup(self.d(), &candidate).is_ok()
                && self.waiting(*ino)
        });
        if let Some((q, _)) = passed {
            let (n, m) = (number, q.number);
            self.violation(format!(
                "I14: p{slot} handed {lock} to waiter {n} past live waiter {m}, queued before it"
            ));
        }
    }

    /// I15: nobody takes the exclusive `flock` of a numbered queue entry (its waiter holds it
    /// from before its number, as a draft): for the instant it is held, a release takes the
    /// entry's waiter, which may hold the lock already, for one still waiting, and hands the
    /// lock to its candidate's name, where the lock's previous directory may still be.
    pub(crate) fn check_entry_flock(&mut self, slot: usize, ino: Ino) {
        let Ok(queue) = self.lookup(self.d(), &queue_name(LOCK)) else {
            return;
        };
        let Ok(entries) = self.dir_entries(queue) else {
            return;
        };
        let entry = entries
            .iter()
            .find(|(n, i)| **i == ino && Queued::parse(n).is_some());
        if let Some((name, _)) = entry {
            let name = name.clone();
            self.violation(format!(
                "I15: p{slot} took the exclusive flock of queue entry {name}"
            ));
        }
    }

    /// Whether a live process holds the exclusive `flock` of queue entry `ino`.
    fn waiting(&self, ino: Ino) -> bool {
        self.ofds.values().any(|o| {
            o.ino == ino && o.lock == Some(true) && o.holders.iter().any(|h| self.procs[*h].alive)
        })
    }

    /// I13, checked after every step: a lock is never left to a live process that no longer
    /// waits for it nor holds it (a waiter that gave up as it was handed the lock).
    pub(crate) fn check_handed(&mut self) {
        let Ok(lock) = self.lookup(self.d(), LOCK) else {
            return;
        };
        // (The reference's records name no writer: it has no queue, and keeps no tokens.)
        let mine = |o: &Owner| !o.is_shared() && o.writer.is_some();
        let Some(owner) = self.record(lock).filter(mine) else {
            return;
        };
        let Some(&(slot, task)) = self.tokens.get(&owner.token) else {
            return;
        };
        let p = &self.procs[slot];
        if p.alive && !self.owned.contains(&(p.process, owner.token.clone())) {
            self.violation(format!(
                "I13: {LOCK} is p{slot}.{task}'s, which neither waits for it nor holds it"
            ));
        }
    }
}

/// [`Script::Stopped`]: looks for the directory every 10 ms for a virtual second at most.
pub(crate) fn stop_holding(sys: &SimSys, root: &SimDir, beside: &str, make: bool, hold: u8) {
    let name = format!("{LOCK}{beside}");
    for _ in 0..100 {
        if make {
            let _ = sys.mkdir_at(root, &name);
        }
        if let Ok(d) = sys.open_dir_at(root, &name) {
            if sys.try_lock(&d, true).unwrap_or(false) {
                let _ = sys.sleep(None, Some(Duration::from_secs(hold.into())), None);
                let _ = sys.unlock(&d);
                return;
            }
        }
        let _ = sys.sleep(None, Some(Duration::from_millis(10)), None);
    }
}
