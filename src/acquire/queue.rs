//! The queue of one runtime's tasks for one lock: first come, first served, so that only the
//! task at the head contends with other processes (and with the process's threads and other
//! runtimes), and a release wakes one task, not all of them. A queue is per runtime (in the
//! simulation, per simulated process): a task at its head holds back only the tasks that its
//! runtime drives, so a runtime that is no longer driven holds back no one else.
//!
//! Plain `std` (a mutex and the tasks' wakers), so that the simulation drives the same queue.

use crate::held::Who;
use crate::sys::{Real, System};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// One lock's queue: who is in it, in the order they came (the first holds the turn), and the
/// waker of each waiting task.
#[derive(Default)]
pub(crate) struct Queue {
    line: Mutex<VecDeque<(Who, Option<Waker>)>>,
}

impl Queue {
    fn line(&self) -> MutexGuard<'_, VecDeque<(Who, Option<Waker>)>> {
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `who` is in the queue (waiting for the lock, or holding it).
    pub(crate) fn has(&self, who: Who) -> bool {
        self.line().iter().any(|(w, _)| *w == who)
    }
}

/// A task's place in a lock's queue, from when it joins until it leaves (kept in the guard
/// while the task holds the lock). Dropped, it leaves the queue, and the turn passes on if it
/// had it.
pub(crate) struct Place {
    queue: Arc<Queue>,
    who: Who,
    /// The process that joined, for a real place: a forked child's copy (in a guard it
    /// inherited) is its parent's, and is left alone.
    pid: Option<u32>,
}

impl Place {
    /// Joins `queue` at the back as `who` (whom the caller found not in it: see
    /// [`Queue::has`]). `real`: a place of this process (not a simulated one).
    pub(crate) fn join(queue: Arc<Queue>, who: Who, real: bool) -> Place {
        queue.line().push_back((who, None));
        Place {
            queue,
            who,
            pid: real.then(|| Real.pid()),
        }
    }

    /// Whether this place is at the head of the queue: its turn.
    pub(crate) fn first(&self) -> bool {
        self.queue
            .line()
            .front()
            .is_some_and(|(w, _)| *w == self.who)
    }

    /// Returns once this place is at the head of the queue: its turn.
    pub(crate) fn turn(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            let mut line = self.queue.line();
            match line.iter().position(|(w, _)| *w == self.who) {
                Some(0) | None => Poll::Ready(()),
                Some(i) => {
                    line[i].1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.pid.is_some_and(|p| p != Real.pid()) {
            // A forked child's copy: the queue is the parent's, and its mutex may have been
            // held by a thread of the parent at the fork. Left alone.
            return;
        }
        let mut line = self.queue.line();
        let Some(i) = line.iter().position(|(w, _)| *w == self.who) else {
            return;
        };
        line.remove(i);
        if i == 0 {
            // The turn passes on: wake the new head.
            if let Some(waker) = line.front_mut().and_then(|(_, w)| w.take()) {
                waker.wake();
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A forked child that drops its copy of a place (in a guard it inherited) touches
    /// neither the queue nor its turn: a thread of the parent may have held the queue's lock
    /// at the fork.
    #[test]
    fn a_forked_child_leaves_its_parents_place_alone() {
        let queue = Arc::new(Queue::default());
        let place = Place::join(queue.clone(), Who::current(), true);
        // This thread holds the queue's lock at the fork, as a busy thread may.
        let held = queue.line();
        let finished = crate::sys::finishes_in_a_fork(Duration::from_secs(5), move || drop(place));
        drop(held);
        assert!(finished, "the child waited for its parent's queue");
    }
}
