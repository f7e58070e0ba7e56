//! The sleeps of one wait for a holder: how long, on what, and when a wake-up changed nothing.

use crate::options::Backoff;
use crate::protocol::{Contender, Waiting};
use crate::sys::{System, Wake};
use std::time::Duration;

/// The sleeps of a [`Next::Wait`](crate::protocol::Next::Wait), for a thread and a task alike:
/// on the watch until the lock changed, with wake-ups that changed nothing filtered (with no new
/// opens of the lock directory: an open and close by us would wake every other waiter), and
/// backoff pauses where nothing can wake us or wake-ups keep changing nothing. No sleep on
/// the watch lasts longer than [`System::look_again`] (a lost notification costs that long,
/// never a wedge).
pub(crate) struct Patience<S: System> {
    watch: Option<S::Watch>,
    backoff: Backoff,
    start: Duration,
    /// Wake-ups in a row that changed nothing.
    spurious: u32,
    /// Whether the last sleep was on the watch.
    watching: bool,
    /// Whether the last sleep's timeout was [`System::look_again`], not the wait's own end.
    capped: bool,
}

impl<S: System> Patience<S> {
    /// Arms the watch of `w`. A wait on a shared lock's readers (or on a writer, for a reader)
    /// is woken by every reader coming and going: its pauses after wake-ups that changed
    /// nothing stay short, since such wake-ups are its holders at work, not a storm; growing
    /// like the others', they made a writer among a stream of readers wait 70 times a read.
    pub(crate) fn new(k: &Contender<S>, w: &Waiting<S>) -> Self {
        let most = match w.among_readers() {
            true => Duration::from_millis(5),
            false => Duration::from_millis(250),
        };
        Patience {
            watch: k.watch(w),
            backoff: Backoff::new(Duration::from_millis(5), most),
            start: k.sys().monotonic(),
            spurious: 0,
            watching: false,
            capped: false,
        }
    }

    /// The next sleep of the wait `w`: on the watch (`None`: a pause), for at most the
    /// duration (`None`: until woken); `None` once the wait is over, the lock changed or
    /// `w.until` passed. It looks at the lock each time the watch is armed: a change before
    /// would be missed.
    pub(crate) fn next(
        &mut self,
        k: &Contender<S>,
        w: &Waiting<S>,
    ) -> Option<(Option<&S::Watch>, Option<Duration>)> {
        if k.changed(w) {
            return None;
        }
        let elapsed = k.sys().monotonic().saturating_sub(self.start);
        let left = w.until.map(|t| t.saturating_sub(elapsed));
        if left == Some(Duration::ZERO) {
            return None; // the contender re-judges and reports the deadline
        }
        // Without a watch, back off. After wake-ups that changed nothing (a reader opening
        // the lock directory, a pidfd of a zombie that stays readable), pause a little before
        // watching again, so that a storm of them cannot make a waiter spin; what happens
        // meanwhile is queued and wakes the next sleep at once.
        self.watching = self.watch.is_some() && self.spurious < 3;
        if self.watching {
            let look_again = k.sys().look_again();
            self.capped = look_again.is_some_and(|a| left.is_none_or(|l| l > a));
            let timeout = if self.capped { look_again } else { left };
            Some((self.watch.as_ref(), timeout))
        } else {
            let pause = self.backoff.next_pause();
            Some((None, Some(left.map_or(pause, |l| l.min(pause)))))
        }
    }

    /// After a sleep (not cancelled) that ended with `wake`: whether the wait goes on.
    pub(crate) fn woke(&mut self, wake: Wake) -> bool {
        match wake {
            Wake::TimedOut if self.watching && self.capped => true, // look again
            Wake::TimedOut if self.watching => false,               // `until` passed
            Wake::TimedOut if self.watch.is_some() => {
                self.spurious = 0; // the pause is over
                true
            }
            Wake::TimedOut | Wake::Cancelled => true,
            Wake::Changed => {
                self.spurious += 1;
                true
            }
        }
    }

    /// The watch, for the contender to keep until its publish is done.
    pub(crate) fn into_watch(self) -> Option<S::Watch> {
        self.watch
    }
}
