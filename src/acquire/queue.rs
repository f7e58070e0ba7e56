//! The queue of one runtime's tasks for one lock: first come, first served, so that only the
//! task at the head publishes, contending with other processes (and with the process's threads
//! and other runtimes), and a release wakes one task, not all of them. A task that finds others
//! ahead of it stages its candidate and takes its number in the lock's queue on disk before it
//! waits here, so that it stands in the order of waiters with all others, and this queue's
//! order follows the numbers ([`Place::numbered`]). A queue is per runtime (in the
//! simulation, per simulated process): a task at its head holds back only the tasks that its
//! runtime drives. (A runtime that is no longer driven holds others back only as any waiter
//! that stopped does: its tasks' entries are let go first for a moment at each release.)
//!
//! Plain `std` (a mutex and the tasks' wakers), so that the simulation drives the same queue.

use crate::held::Who;
use crate::sys::{Real, System};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// How many of a runtime's tasks waiting for one lock take their places in the lock's queue on
/// disk (each holds three descriptors open: its candidate, its entry and the queue), within
/// the process's budget ([`Seat`]): those behind wait here,
/// holding none, until they come this near its head, so that thousands of waiting tasks do
/// not run the process out of descriptors.
pub(crate) const NEAR: usize = 32;

/// How many places this process's tasks hold on disk behind the heads of their runtimes'
/// queues, at most: one for each 32 files it may open (each holds three open: about a tenth of
/// its descriptors), at most 64, so that waiting tasks do not run it out of descriptors.
fn seats() -> usize {
    let limit = crate::sys::open_files_limit().unwrap_or(u64::MAX);
    usize::try_from(limit / 32).unwrap_or(usize::MAX).min(64)
}

/// The places held (see [`seats`]).
static SEATED: AtomicUsize = AtomicUsize::new(0);

/// A task's share of the process's budget of places on disk (see [`seats`]), held while it
/// contends.
pub(crate) struct Seat {
    counted: bool,
}

impl Seat {
    /// A seat, if one is free; `real`: for a task of this process (a simulated one is not
    /// counted).
    pub(crate) fn take(real: bool) -> Option<Seat> {
        if !real {
            return Some(Seat { counted: false });
        }
        // (Taken, then given back if there was none: no loop.)
        if SEATED.fetch_add(1, Ordering::SeqCst) < seats() {
            return Some(Seat { counted: true });
        }
        SEATED.fetch_sub(1, Ordering::SeqCst);
        None
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if self.counted {
            SEATED.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One lock's queue: who is in it, in turn (the first holds the turn), and the waker of each
/// waiting task.
#[derive(Default)]
pub(crate) struct Queue {
    line: Mutex<VecDeque<Spot>>,
}

/// A task in a queue: who, its number in the lock's queue on disk once it took one (`tried`:
/// it took one once), and its waker while it waits.
struct Spot {
    who: Who,
    number: Option<u64>,
    tried: bool,
    waker: Option<Waker>,
}

impl Queue {
    fn line(&self) -> MutexGuard<'_, VecDeque<Spot>> {
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `who` is in the queue (waiting for the lock, or holding it).
    pub(crate) fn has(&self, who: Who) -> bool {
        self.line().iter().any(|s| s.who == who)
    }

    /// Who has the turn.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn head(&self) -> Option<Who> {
        self.line().front().map(|s| s.who)
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
        queue.line().push_back(Spot {
            who,
            number: None,
            tried: false,
            waker: None,
        });
        Place {
            queue,
            who,
            pid: real.then(|| Real.pid()),
        }
    }

    /// Whether this place is at the head of the queue: its turn.
    pub(crate) fn first(&self) -> bool {
        self.queue.line().front().is_some_and(|s| s.who == self.who)
    }

    /// Returns once this place is at the head of the queue: its turn.
    pub(crate) fn turn(&self) -> impl Future<Output = ()> + '_ {
        self.within(1)
    }

    /// Returns once this place is [`NEAR`] the head of the queue.
    pub(crate) fn near(&self) -> impl Future<Output = ()> + '_ {
        self.within(NEAR)
    }

    /// Returns once each task ahead of this one has taken its number on disk (see
    /// [`Place::numbered`]): numbers are taken in the order the tasks came. (One that could not,
    /// short of descriptors or on a filesystem without a queue, holds those behind it back
    /// until it takes one at the head: they wait as it does.)
    pub(crate) fn numbering(&self) -> impl Future<Output = ()> + '_ {
        self.until(|line, i| line.iter().take(i).all(|s| s.tried))
    }

    /// Returns once fewer than `n` places are ahead of this one.
    fn within(&self, n: usize) -> impl Future<Output = ()> + '_ {
        self.until(move |_, i| i < n)
    }

    /// Returns once `ready(line, i)` holds with this place at `i` in the line (or it is not in
    /// it).
    fn until<'a>(
        &'a self,
        ready: impl Fn(&VecDeque<Spot>, usize) -> bool + 'a,
    ) -> impl Future<Output = ()> + 'a {
        std::future::poll_fn(move |cx| {
            let mut line = self.queue.line();
            match line.iter().position(|s| s.who == self.who) {
                Some(i) if !ready(&line, i) => {
                    line[i].waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
    }

    /// Takes `number`, this task's number in the lock's queue on disk (`None`: it has none),
    /// so that the turn follows the order on disk: the numbered tasks stand in the order of
    /// their numbers, the others where they came. The task moves no further than that order
    /// needs: behind those numbered lower, ahead of those numbered higher. When that makes
    /// another task the head (this one, which had the turn, was numbered after it), the turn
    /// passes to it. Numbered, it has tried (see [`Place::numbering`]).
    pub(crate) fn numbered(&self, number: Option<u64>) {
        let mut line = self.queue.line();
        let Some(i) = line.iter().position(|s| s.who == self.who) else {
            return;
        };
        if line[i].number == number {
            return;
        }
        let Some(mut spot) = line.remove(i) else {
            return;
        };
        spot.number = number;
        spot.tried |= number.is_some();
        let at = number.map_or(i, |n| {
            let below = line.iter().rposition(|s| s.number.is_some_and(|m| m < n));
            let above = line.iter().position(|s| s.number.is_some_and(|m| m > n));
            // (No panic even if the numbers came out of order: `clamp` would.)
            i.max(below.map_or(0, |b| b + 1))
                .min(above.unwrap_or(line.len()))
        });
        line.insert(at, spot);
        moved_up(&mut line);
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
        let Some(i) = line.iter().position(|s| s.who == self.who) else {
            return;
        };
        line.remove(i);
        moved_up(&mut line);
    }
}

/// Places moved up in `line`, or one took its number: wakes those [`NEAR`] its head (whose
/// turn it may be now, that may have just come near, or may take their numbers now; a task
/// woken for nothing looks and waits again).
fn moved_up(line: &mut VecDeque<Spot>) {
    for spot in line.iter_mut().take(NEAR) {
        if let Some(waker) = spot.waker.take() {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::Wake;

    /// A waker that notes it was woken.
    struct Noted(AtomicBool);

    impl Wake for Noted {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Numbers are taken in the order the tasks came (each once those ahead of it have one),
    /// and the turn follows them: waiting tasks stand in the order of their numbers, and a
    /// head numbered anew after others (it staged again) passes the turn (and wakes the new
    /// head).
    #[test]
    fn the_turn_follows_the_numbers_on_disk() {
        let queue = Arc::new(Queue::default());
        let [a, b, c, d] = [0, 1, 2, 3].map(|t| Place::join(queue.clone(), Who::Sim(0, t), false));
        let order = || queue.line().iter().map(|s| s.who).collect::<Vec<_>>();
        let cx = &mut std::task::Context::from_waker(Waker::noop());
        let mut numbering = std::pin::pin!(b.numbering());
        assert!(numbering.as_mut().poll(cx).is_pending());
        assert!(std::pin::pin!(a.numbering()).poll(cx).is_ready());
        a.numbered(None);
        assert!(
            numbering.as_mut().poll(cx).is_pending(),
            "no number is no number"
        );
        a.numbered(Some(3));
        assert!(numbering.as_mut().poll(cx).is_ready());
        // Numbered out of that order nonetheless: `c` first; `d` (no number) stays put.
        c.numbered(Some(5));
        b.numbered(Some(6));
        assert_eq!(order(), [a.who, c.who, b.who, d.who]);
        let woken = Arc::new(Noted(AtomicBool::new(false)));
        let waker = Waker::from(woken.clone());
        let mut turn = std::pin::pin!(c.turn());
        let pending = turn
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker));
        assert!(pending.is_pending());
        // The head numbered anew, after theirs: the turn passes to `c`, which is woken.
        a.numbered(Some(7));
        assert_eq!(order(), [c.who, b.who, a.who, d.who]);
        assert!(c.first() && !a.first());
        assert!(woken.0.load(Ordering::SeqCst), "the new head was not woken");
        // One that loses its number stays put.
        b.numbered(None);
        assert_eq!(order(), [c.who, b.who, a.who, d.who]);
    }

    /// A forked child that drops its copy of a place (in a guard it inherited) touches
    /// neither the queue nor its turn: a thread of the parent may have held the queue's lock
    /// at the fork.
    #[cfg(unix)]
    #[test]
    fn a_forked_child_leaves_its_parents_place_alone() {
        let queue = Arc::new(Queue::default());
        let place = Place::join(queue.clone(), Who::current(), true);
        // This thread holds the queue's lock at the fork, as a busy thread may.
        let held = queue.line();
        let five = std::time::Duration::from_secs(5);
        let finished = crate::sys::finishes_in_a_fork(five, move || drop(place));
        drop(held);
        assert!(finished, "the child waited for its parent's queue");
    }
}
