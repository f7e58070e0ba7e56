//! The queue of one runtime's tasks for one lock (feature `tokio`): first come, first served,
//! so that only the task at the head contends with other processes (and with the process's
//! threads and other runtimes); see [`crate::asynchronous`]. A queue is per runtime: a task
//! at its head holds back only the tasks that its runtime drives, so a runtime that is no
//! longer driven (its `block_on` returned) holds back no one else.

use crate::held::Who;
use crate::sys::{FileId, PerProcess, Real, System};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One lock's queue of one runtime's tasks: one turn, and who is in the queue (waiting or
/// holding the turn), so that a task is never queued behind itself.
pub(crate) struct Queue {
    pub(crate) turns: Arc<Semaphore>,
    members: Mutex<Vec<Who>>,
}

/// Each lock's queue of one runtime's tasks, by runtime, lock directory and name (entries
/// whose queue is gone are pruned as new ones come). A forked child starts with no queues
/// (its parent's turns are not its own).
type Queues = HashMap<(tokio::runtime::Id, FileId, String), Weak<Queue>>;
static QUEUES: PerProcess<Queues> = PerProcess::new(HashMap::new);

/// The queue of the tasks of runtime `rt` for lock `name` in the lock directory `dir`.
pub(crate) fn queue(rt: tokio::runtime::Id, dir: FileId, name: &str) -> Arc<Queue> {
    let mut queues = QUEUES.lock();
    let key = (rt, dir, name.to_owned());
    if let Some(q) = queues.get(&key).and_then(Weak::upgrade) {
        return q;
    }
    queues.retain(|_, q| q.strong_count() > 0);
    let q = Arc::new(Queue {
        turns: Arc::new(Semaphore::new(1)),
        members: Mutex::new(Vec::new()),
    });
    queues.insert(key, Arc::downgrade(&q));
    q
}

/// A task's place in a lock's queue, from when it joins until it leaves it (kept in the guard
/// while the task holds the lock): its membership, and its turn once it has it.
pub(crate) struct Place {
    pub(crate) queue: Arc<Queue>,
    who: Who,
    pub(crate) turn: Option<OwnedSemaphorePermit>,
    /// The process that joined: a forked child's copy of the place (in a guard it inherited)
    /// is its parent's.
    pid: u32,
}

impl Queue {
    /// Whether `who` is in the queue (waiting for the lock in a future it joined, or holding
    /// it).
    pub(crate) fn has(&self, who: Who) -> bool {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&who)
    }
}

impl Place {
    /// Joins `queue` as `who` (who the caller found not in it: see [`Queue::has`]).
    pub(crate) fn join(queue: Arc<Queue>, who: Who) -> Place {
        queue
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(who);
        Place {
            queue,
            who,
            turn: None,
            pid: Real.pid(),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if Real.pid() != self.pid {
            // A forked child's copy: the queue and its turn are the parent's, and their locks
            // may have been held by a thread of the parent at the fork. Left alone.
            std::mem::forget(self.turn.take());
            return;
        }
        // Out of the queue before the turn passes on: whoever gets it next finds us gone.
        let mut members = self.queue.members.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = members.iter().position(|w| *w == self.who) {
            members.swap_remove(i);
        }
        drop(members);
        drop(self.turn.take());
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A forked child that drops its copy of a place (in a guard it inherited) touches neither
    /// the queue nor its turn: a thread of the parent may have held their locks at the fork.
    #[test]
    fn a_forked_child_leaves_its_parents_place_alone() {
        let queue = Arc::new(Queue {
            turns: Arc::new(Semaphore::new(1)),
            members: Mutex::new(Vec::new()),
        });
        let mut place = Place::join(queue.clone(), Who::current());
        place.turn = Some(queue.turns.clone().try_acquire_owned().unwrap());
        // This thread holds the queue's lock at the fork, as a busy thread may.
        let held = queue.members.lock().unwrap();
        let finished = crate::sys::finishes_in_a_fork(Duration::from_secs(5), move || drop(place));
        drop(held);
        assert!(finished, "the child waited for its parent's queue");
    }
}
