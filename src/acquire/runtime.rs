//! A tokio runtime's sleeps (feature `tokio`): a wait in the runtime's reactor on the same
//! kernel wake-ups a blocking waiter sleeps on (Linux: inotify and a pidfd; macOS and FreeBSD:
//! a kqueue; Windows: the change notification and the holder's process, through the system's
//! wait threads), or a timer for a pause; and the runtime's queues of tasks. A waiting task
//! holds no thread.

use super::queue::Queue;
use super::{Bounded, Sleep};
use crate::error::Error;
use crate::sys::{CancelHandle, FileId, PerProcess, Real, System, Wake};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The sleeps of the tasks of one tokio runtime.
pub(crate) struct Tokio(tokio::runtime::Id);

impl Tokio {
    /// The current runtime's, once it is known to serve a wait (see [`check_runtime`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] outside a tokio runtime.
    pub(crate) fn current() -> Result<Tokio, Error> {
        check_runtime()?;
        Ok(Tokio(tokio::runtime::Handle::current().id()))
    }
}

impl Sleep<Real> for Tokio {
    async fn sleep(
        &self,
        _: &Real,
        watch: Option<&<Real as System>::Watch>,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> io::Result<Wake> {
        let sleep = crate::sys::sleep_async(watch, cancel);
        match timeout {
            Some(t) => within(t, sleep).await.unwrap_or(Ok(Wake::TimedOut)),
            None => sleep.await,
        }
    }

    async fn bounded<T>(
        &self,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
        fut: impl Future<Output = T>,
    ) -> Bounded<T> {
        let bounded = async {
            match timeout {
                Some(t) => within(t, fut).await,
                None => Some(fut.await),
            }
        };
        match first(bounded, cancelled(cancel)).await {
            Either::A(Some(v)) => Bounded::Done(v),
            Either::A(None) => Bounded::TimedOut,
            Either::B(()) => Bounded::Cancelled,
        }
    }

    fn runs_alone(&self) -> bool {
        false
    }

    fn queue(&self, dir: FileId, name: &str) -> Option<Arc<Queue>> {
        let mut queues = QUEUES.lock();
        let key = (self.0, dir, name.to_owned());
        if let Some(q) = queues.get(&key).and_then(Weak::upgrade) {
            return Some(q);
        }
        queues.retain(|_, q| q.strong_count() > 0);
        let q = Arc::new(Queue::default());
        queues.insert(key, Arc::downgrade(&q));
        Some(q)
    }
}

/// Each lock's queue of one runtime's tasks, by runtime, lock directory and name (entries
/// whose queue is gone are pruned as new ones come). A forked child starts with no queues
/// (its parent's turns are not its own).
type Queues = HashMap<(tokio::runtime::Id, FileId, String), Weak<Queue>>;
static QUEUES: PerProcess<Queues> = PerProcess::new(HashMap::new);

/// `fut`, or `None` once `t` has passed. Time is the real clock's, as the lock's other
/// times are (a holder's age, a grace period): on a runtime whose clock is paused (tokio's
/// `test-util`), whose timers fire at once, the rest is slept on the blocking pool in steps,
/// rather than spinning.
async fn within<T>(t: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let end = std::time::Instant::now().checked_add(t);
    let mut fut = std::pin::pin!(fut);
    loop {
        let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
        if left == Some(Duration::ZERO) {
            return None;
        }
        // At most a day per timer: a far deadline would have a paused clock's wheel turn
        // through it.
        let timer = left
            .unwrap_or(Duration::MAX)
            .min(Duration::from_secs(86_400));
        match tokio::time::timeout(timer, fut.as_mut()).await {
            Ok(v) => return Some(v),
            Err(_) => {
                let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
                if left.is_some_and(|l| l < Duration::from_millis(2)) {
                    return None; // the timer's rounding
                }
                let step = left
                    .unwrap_or(Duration::MAX)
                    .min(Duration::from_millis(100));
                let step = tokio::task::spawn_blocking(move || std::thread::sleep(step));
                // Still watching `fut` meanwhile.
                if let Either::A(v) = first(fut.as_mut(), step).await {
                    return Some(v);
                }
            }
        }
    }
}

/// Which of two futures finished first.
enum Either<A, B> {
    A(A),
    B(B),
}

/// Runs `a` and `b` together until one finishes (`a` is polled first); the other is dropped.
async fn first<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
            return std::task::Poll::Ready(Either::A(v));
        }
        b.as_mut().poll(cx).map(Either::B)
    })
    .await
}

/// The runtimes [`check_runtime`] has seen enabled.
static CHECKED: PerProcess<Vec<tokio::runtime::Id>> = PerProcess::new(Vec::new);

/// Checks, once per runtime, that the current runtime can serve a wait: it has time and (on
/// Unix) I/O enabled. Without them tokio panics; this makes that panic happen at the first
/// asynchronous acquisition on the runtime, whether or not it has to wait, rather than only
/// under contention.
fn check_runtime() -> Result<(), Error> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Err(Error::InvalidInput {
            what: "acquire_async".into(),
            problem: "it must run on a tokio runtime (built with `enable_all`, or with time \
                      and I/O enabled); outside one, use `acquire`"
                .into(),
        });
    };
    let id = rt.id();
    if CHECKED.lock().contains(&id) {
        return Ok(());
    }
    drop(tokio::time::sleep(Duration::ZERO)); // panics without time
    crate::sys::check_reactor(); // panics without I/O, where a wait needs it
    let mut checked = CHECKED.lock();
    if checked.len() >= 64 {
        checked.remove(0); // a process making runtime after runtime: forget the oldest
    }
    checked.push(id);
    Ok(())
}

/// Returns once `cancel` fires (never without one).
async fn cancelled(cancel: Option<&crate::sys::CancelHandle>) {
    let Some(c) = cancel else {
        return std::future::pending().await;
    };
    loop {
        let notified = c.notify().notified();
        if c.is_fired() {
            return;
        }
        notified.await;
    }
}
