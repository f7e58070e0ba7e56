//! How long to wait for a lock, and the other knobs of an acquisition.

use crate::sys::CancelHandle;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// How many times in a row a candidate is made again after it vanished (a sweep or a temp
/// cleaner removed it; an acquisition's, or a reclaimer's guard while it is staged) before
/// the caller gives up.
pub(crate) const MAX_RESTAGES: u32 = 32;

/// The default grace period: how long a lock whose owner is dead *by evidence* (not by kernel
/// proof) must sit untouched before it is reclaimed. The same as the reference implementation.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// What to do when another process holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wait {
    /// Fail at once with a contention error ([`crate::Error::Locked`] or
    /// [`crate::Error::Stale`]). The repository lock's default.
    #[default]
    Immediately,
    /// Wait until the lock is free, however long that takes. The global setup lock's default.
    /// Without a [`Cancel`], a live holder is waited for in a blocking `flock` on its beacon,
    /// the fastest handoff; with one, in `poll`, so that the cancel can wake it.
    Forever,
    /// Wait at most this long, then fail with [`crate::Error::Timeout`].
    Timeout(Duration),
}

impl From<Duration> for Wait {
    fn from(d: Duration) -> Wait {
        Wait::Timeout(d)
    }
}

/// A handle that cancels a waiting acquisition from another thread.
///
/// Pass a clone to [`crate::LockRequest::cancel`]; calling [`Cancel::cancel`] wakes the waiter,
/// which then fails with [`crate::Error::Cancelled`] and leaves nothing behind. Once cancelled,
/// a handle stays cancelled.
///
/// ```
/// let cancel = dirlock::Cancel::new()?;
/// let c = cancel.clone();
/// std::thread::spawn(move || c.cancel());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cancel(pub(crate) Arc<CancelHandle>);

impl Cancel {
    /// Makes a new handle.
    ///
    /// # Errors
    ///
    /// When the system cannot make the wake-up descriptor (out of file descriptors).
    pub fn new() -> io::Result<Cancel> {
        Ok(Cancel(CancelHandle::new()?))
    }

    /// Cancels every wait using this handle (now and later).
    pub fn cancel(&self) {
        self.0.fire();
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_fired()
    }
}

/// What a waiting acquisition is waiting for (passed to [`crate::LockRequest::on_wait`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Waiting {
    /// What the lock is for, in words (`repository /home/me/src`, `named lock deploy`).
    pub resource: String,
    /// The lock's path.
    pub lock: std::path::PathBuf,
    /// Its holder.
    pub owner: crate::Owner,
    /// How the holder was judged.
    pub judgement: crate::Judgement,
    /// When the lock was taken (its directory's modification time).
    pub since: std::time::SystemTime,
    /// What keeps it out: the holder, or, once the holder has ended, what is left to wait for.
    /// When that changes (the holder ends, or the lock is taken over by another), the
    /// callback is told again (see [`crate::LockRequest::on_wait`]).
    pub blocked: Blocked,
}

/// What keeps a waiting acquisition out ([`Waiting::blocked`]), or kept it out when its wait
/// ran out ([`crate::Error::Timeout`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocked {
    /// The holder, judged live (or impossible to judge from here), or, for a task, the tasks
    /// of its runtime queued ahead of it.
    Holder,
    /// The holder seems to have ended (judged by evidence only, not by the kernel): its lock
    /// may be taken over once it has sat untouched for the grace period, `remaining` from
    /// when this was said.
    Grace {
        /// What is left of the grace period.
        remaining: Duration,
        /// The lock's modification time is in the future (a clock was set back): the grace
        /// period counts from when this wait first saw the lock unchanged, so a new wait
        /// starts it again (see [`crate::Error::Stale`]).
        clock_ahead: bool,
    },
    /// The holder has ended, and its lock is being taken over (by another process, or a task
    /// of this one queued ahead), under `guard`; or another program left that marker (it may
    /// have crashed), which is respected for `remaining` more, then reused.
    Takeover {
        /// The marker of the takeover (`NAME.reclaim`).
        guard: std::path::PathBuf,
        /// For a marker another program left: time until it may be reused.
        remaining: Option<Duration>,
    },
}

/// A callback told when an acquisition starts to wait, and again when what keeps it out
/// changes kind (see [`crate::LockRequest::on_wait`]).
pub(crate) type OnWait = Arc<dyn Fn(&Waiting) + Send + Sync>;

/// Knobs of one acquisition (the builder [`crate::LockRequest`] fills them in).
#[derive(Clone)]
pub(crate) struct Options {
    pub wait: Wait,
    pub grace: Duration,
    pub durable: bool,
    pub purpose: Option<String>,
    pub cancel: Option<Cancel>,
    pub on_wait: Option<OnWait>,
    /// A shared (read) lock rather than an exclusive one.
    pub shared: bool,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("wait", &self.wait)
            .field("grace", &self.grace)
            .field("durable", &self.durable)
            .field("purpose", &self.purpose)
            .field("cancel", &self.cancel)
            .field("on_wait", &self.on_wait.is_some())
            .field("shared", &self.shared)
            .finish()
    }
}

impl Options {
    pub fn new(wait: Wait) -> Options {
        Options {
            wait,
            grace: DEFAULT_GRACE,
            durable: true,
            purpose: None,
            cancel: None,
            on_wait: None,
            shared: false,
        }
    }
}

/// How long a waiter may try for a `flock` beside the lock: its time left (`None`: no
/// deadline) and its cancel.
#[derive(Clone, Copy)]
pub(crate) struct Bound<'c> {
    pub(crate) left: Option<Duration>,
    pub(crate) cancel: Option<&'c CancelHandle>,
}

impl Bound<'_> {
    /// `patience`, or the time left if that is shorter.
    pub(crate) fn cap(&self, patience: Duration) -> Duration {
        self.left.map_or(patience, |left| patience.min(left))
    }

    /// This bound, trying for `patience` at most.
    pub(crate) fn within(self, patience: Duration) -> Self {
        Bound {
            left: Some(self.cap(patience)),
            ..self
        }
    }
}

/// How [`crate::space::lock_persisting`] retries a `flock` held by others: pauses growing
/// from `first` to `most`, `tries` tries at most, and none once `patience` (if any) has passed.
pub(crate) struct Persist {
    pub(crate) first: Duration,
    pub(crate) most: Duration,
    pub(crate) tries: u32,
    pub(crate) patience: Option<Duration>,
}

/// Bounded exponential backoff, for the few waits the kernel cannot wake us from (a busy
/// reclaim guard, a filesystem without inotify).
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { next: first, max }
    }

    /// The next pause: doubling from `first`, never above `max`.
    pub fn next_pause(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }
}

/// How long ago `mtime` was on the wall clock (the age of an entry since its last change);
/// `None` when it is in the future (a clock set back, a restored backup).
pub(crate) fn since<S: crate::sys::System>(
    sys: &S,
    mtime: std::time::SystemTime,
) -> Option<Duration> {
    sys.now().duration_since(mtime).ok()
}

/// The grace rule: how much longer the lock of an owner judged `liveness`, unchanged for
/// `age`, is respected: `None` for a live owner, or one that cannot be judged from here (its
/// lock is never reclaimed); zero once it may be reclaimed, which is at once for an owner the
/// kernel proves gone, and once `grace` has passed for one gone by evidence only.
pub(crate) fn grace_left(
    liveness: crate::liveness::Liveness,
    age: Duration,
    grace: Duration,
) -> Option<Duration> {
    use crate::liveness::Liveness::*;
    match liveness {
        DeadByProof => Some(Duration::ZERO),
        DeadByEvidence => Some(grace.saturating_sub(age)),
        Live | Unknown => None,
    }
}

/// How long things have sat unchanged, as this process observed them. A directory's age is
/// the wall clock's `now - mtime`, but never less than how long this process has watched it
/// unchanged on the monotonic clock: a modification time in the future (a clock set back, a
/// restored backup) then counts from the moment it was first seen, instead of stalling the
/// grace period until the wall clock catches up.
#[derive(Debug, Default)]
pub(crate) struct Ages {
    /// `(identity, mtime, first seen on the monotonic clock)`, most recent last.
    seen: Vec<(crate::sys::FileId, std::time::SystemTime, Duration)>,
}

impl Ages {
    /// The age of the directory `id` with modification time `mtime`, and whether that time is
    /// in the future.
    pub fn age<S: crate::sys::System>(
        &mut self,
        sys: &S,
        id: crate::sys::FileId,
        mtime: std::time::SystemTime,
    ) -> (Duration, bool) {
        let mono = sys.monotonic();
        let first = match self.seen.iter().find(|s| s.0 == id && s.1 == mtime) {
            Some(s) => s.2,
            None => {
                if self.seen.len() >= 8 {
                    self.seen.remove(0);
                }
                self.seen.push((id, mtime, mono));
                mono
            }
        };
        let observed = mono.saturating_sub(first);
        match since(sys, mtime) {
            Some(wall) => (wall.max(observed), false),
            None => (observed, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        let pauses: Vec<u128> = (0..10).map(|_| b.next_pause().as_millis()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 100, 100, 100]);
    }

    #[test]
    fn durations_convert_to_timeouts() {
        assert_eq!(
            Wait::from(Duration::from_secs(3)),
            Wait::Timeout(Duration::from_secs(3))
        );
        assert_eq!(Wait::default(), Wait::Immediately);
    }
}
