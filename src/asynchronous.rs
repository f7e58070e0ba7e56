//! Asynchronous acquisition (feature `tokio`): [`LockRequest::acquire_async`] and the `_async`
//! helpers.
//!
//! An asynchronous acquisition runs the contest a blocking one runs ([`Contender`]): one
//! candidate staged for the whole acquisition, and rounds of publishing, judging and
//! reclaiming, inline (a handful of short system calls; a round never sleeps). What differs
//! is the sleep between rounds: a wait in the runtime's reactor on the same kernel wake-ups a
//! blocking waiter sleeps on (Linux: inotify and a pidfd; macOS and FreeBSD: a kqueue;
//! Windows: the change notification and the holder's process, through the system's wait
//! threads), or a timer for a pause. A waiting task holds no thread.
//!
//! The tasks of one runtime that want the same lock queue behind one another, first come
//! first served: only the task at the head of the queue contends with other processes (and
//! the process's threads and other runtimes) and is woken when the lock changes hands, so a
//! release costs the same whatever the number of tasks waiting. The head keeps its place
//! while it holds the lock and gives it to the next task when the guard goes. Between
//! processes, as for blocking waiters, whoever is first to publish after a release wins.
//!
//! Dropping the future at any point leaves nothing behind: the contender's drop removes its
//! candidate, a wait is only registrations, and the future returns as soon as a round wins,
//! with no await between the publish and the guard, so a lock it published is always in the
//! guard it returns.

use crate::error::Error;
use crate::guard::LockGuard;
use crate::held::Who;
use crate::locks::Locks;
use crate::options::{Wait, Waiting};
use crate::protocol::{Contender, Held, Next, Patience, Request, MAX_RESTAGES};
use crate::queue::{queue, Place, Queue};
use crate::request::{LockRequest, Resolved};
use crate::space::{not_found, Seen, Space};
use crate::sys::{Clock, Identity, PerProcess, Real, System, Wake};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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

/// Sleeps `pause`, or less if `cancel` fires: whether it was cancelled.
async fn pause(pause: Duration, cancel: Option<&crate::sys::CancelHandle>) -> bool {
    let sleep = within(pause, std::future::pending::<()>());
    matches!(first(sleep, cancelled(cancel)).await, Either::B(()))
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl LockRequest {
    /// Takes the lock without holding a thread while it waits (feature `tokio`). Waiting,
    /// options, errors and refusals are those of [`LockRequest::acquire`]; the wait is in the
    /// runtime's reactor, woken by the kernel as a blocking wait is. The refusals are per
    /// task: a task that holds a lock and asks for it again is refused
    /// ([`Error::AlreadyHeld`]), while other tasks of the process wait for it like other
    /// processes. Futures joined in one task (`join!`, `select!`) are that task: one that asks
    /// for a lock another of them holds or waits for is refused ([`Error::AlreadyHeld`]); to
    /// have them wait for each other, spawn them as tasks.
    ///
    /// Timeouts and grace periods follow the real clock, also on a runtime whose clock is
    /// paused (tokio's `test-util`).
    ///
    /// The tasks of this runtime waiting for the same lock are served in the order they
    /// asked; see the [module docs](crate#asynchronous-acquisition).
    ///
    /// Dropping the future (a `select!`, a `tokio::time::timeout`) cancels the acquisition
    /// and leaves nothing behind.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let locks = dirlock::Locks::in_dir(tmp.path().join("locks"))?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let guard = locks.named_lock("deploy.lock").acquire_async().await?;
    /// guard.release()?;
    /// # Ok::<(), dirlock::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`]; [`Error::InvalidInput`] when polled outside a tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// Where tokio panics: on a runtime built without time, or on Unix without I/O (call
    /// `enable_all` on the runtime builder). It does so at the first call on such a runtime,
    /// whether or not the lock is free.
    pub async fn acquire_async(self) -> Result<LockGuard, Error> {
        check_runtime()?;
        // An acquisition that finds the lock free never waits: it counts against the task's
        // budget, so that a task taking locks in a loop still lets the others run.
        tokio::task::consume_budget().await;
        let who = Who::current();
        let started = Real.monotonic();
        let t = self.target()?;
        let (dir, dir_id) = self.dir.current()?;
        // Before queueing: a task that holds the lock would wait behind itself.
        self.refusals(&dir, dir_id, &t, who)?;
        // Nor behind (or, failing fast, past) a future of this task that is in the lock's queue,
        // waiting or holding: it would wait for us, or we for it.
        let queue = queue(tokio::runtime::Handle::current().id(), dir_id, &t.name);
        if queue.has(who) {
            return Err(Error::AlreadyHeld {
                lock: t.path.clone(),
                resource: t.resource.clone(),
            });
        }
        let mut told = false;
        let turn = match self.options.wait {
            Wait::Immediately => None,
            _ => Some(self.queue(queue, who, &dir, &t, started, &mut told).await?),
        };
        let me = Real.identity();
        let mut left = MAX_RESTAGES;
        loop {
            let (dir, dir_id) = self.dir.current()?;
            self.refusals(&dir, dir_id, &t, who)?;
            let req = Request {
                name: &t.name,
                resource: &t.resource,
                options: &self.options,
                started,
            };
            let sp = self.dir.space(&dir);
            match contend(&sp, &req, &me, told).await {
                Ok(held) => {
                    let mut guard =
                        LockGuard::new(held, self.dir, dir, dir_id, t.resource, t.family, who);
                    guard.turn = turn;
                    return Ok(guard);
                }
                // The lock directory was removed under us (a temp cleaner): go on in a new one.
                Err(e) if left > 0 && not_found(&e) && Real.unlinked(&dir) => left -= 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for the turn of `who` (not in it yet) in `queue`, the runtime's tasks that want
    /// the lock `t` (in the lock directory `dir`), until the deadline or a cancel. A task that has to queue is
    /// told (`on_wait`) who holds the lock, and a timeout names it.
    async fn queue(
        &self,
        queue: Arc<Queue>,
        who: Who,
        dir: &<Real as System>::Dir,
        t: &Resolved,
        started: Duration,
        told: &mut bool,
    ) -> Result<Place, Error> {
        let mut place = Place::join(queue, who);
        let turns = place.queue.turns.clone();
        if let Ok(turn) = turns.clone().try_acquire_owned() {
            place.turn = Some(turn);
            return Ok(place);
        }
        let sp = self.dir.space(dir);
        let holder = || match sp.observe(&t.name) {
            Ok(Seen::Owned { dir, meta, owner }) => {
                let judgement = sp.judge(&dir, &owner, &Real.identity());
                Some((owner, judgement, meta.mtime))
            }
            _ => None,
        };
        if let Some(f) = &self.options.on_wait {
            if let Some((owner, judgement, since)) = holder() {
                *told = true;
                f(&Waiting {
                    resource: t.resource.clone(),
                    lock: t.path.clone(),
                    owner,
                    judgement,
                    since,
                });
            }
        }
        let cancel = self.options.cancel.as_ref().map(|c| &*c.0);
        let wait = async {
            match self.options.wait {
                Wait::Timeout(d) => {
                    let left = d.saturating_sub(Real.monotonic().saturating_sub(started));
                    within(left, turns.acquire_owned()).await
                }
                _ => Some(turns.acquire_owned().await),
            }
        };
        match first(wait, cancelled(cancel)).await {
            Either::A(Some(turn)) => {
                place.turn = Some(turn.expect("a lock's queue is never closed"));
                Ok(place)
            }
            Either::A(None) => Err(Error::Timeout {
                lock: t.path.clone(),
                resource: t.resource.clone(),
                waited: Real.monotonic().saturating_sub(started),
                owner: holder().map(|(owner, ..)| Box::new(owner)),
            }),
            Either::B(()) => Err(Error::Cancelled {
                lock: t.path.clone(),
                resource: t.resource.clone(),
            }),
        }
    }

    /// Takes the lock without holding a thread, runs `f`'s future, and releases the lock
    /// (also when the future is dropped or panics): [`LockRequest::run`] for async code.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    pub async fn run_async<T, E, F, Fut>(self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let guard = self.acquire_async().await?;
        let result = f().await;
        crate::request::settle(guard, result, |error, _value| error)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl LockRequest {
    /// Takes the lock without holding a thread, runs `f` with its guard, and releases the lock
    /// (also when the future is dropped or `f` panics): [`LockRequest::run_with`] for async
    /// code, with the same [`Error::NotReleased`] when the release fails after `f`
    /// succeeded.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run_with`].
    pub async fn run_with_async<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&LockGuard) -> Result<T, E>,
        E: From<Error>,
        T: Send + Sync + 'static,
    {
        let guard = self.acquire_async().await?;
        let result = f(&guard).await;
        crate::request::finish(guard, result)
    }
}

/// The contest of an asynchronous acquisition: [`Contender::round`]s as a blocking one runs
/// them, with the runtime's sleeps between them. One candidate is staged for the whole
/// contest, so that a release finds it ready to publish (and, when the future is dropped,
/// the contender's drop removes it).
async fn contend(
    sp: &Space<'_, Real>,
    req: &Request<'_>,
    me: &Identity,
    told: bool,
) -> Result<Held<Real>, Error> {
    let mut k = Contender::new(sp, req, me)?;
    if told {
        k.told();
    }
    let cancel = k.cancel();
    loop {
        match k.round()? {
            Next::Won => return Ok(k.won()),
            Next::Again => {}
            Next::Pause(p) => {
                if pause(p, cancel).await {
                    return Err(k.cancelled());
                }
            }
            Next::Wait(w) => {
                let mut p = Patience::new(&k, &w);
                while let Some((watching, timeout)) = p.next(&k, &w) {
                    let sleep = crate::sys::sleep_async(watching, cancel);
                    let wake = match timeout {
                        Some(t) => within(t, sleep).await.unwrap_or(Ok(Wake::TimedOut)),
                        None => sleep.await,
                    }
                    .map_err(|e| k.wait_failed(e))?;
                    if wake == Wake::Cancelled {
                        return Err(k.cancelled());
                    }
                    if !p.woke(wake) {
                        break;
                    }
                }
                k.waited(w, p.into_watch());
            }
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Locks {
    /// [`Locks::with_repository_lock`] for async code: waits without holding a thread (feature
    /// `tokio`).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_repository_lock_async<T, E, F, Fut>(
        &self,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.repository_lock(root).run_async(f).await
    }

    /// [`Locks::with_global_setup_lock`] for async code: waits, without holding a thread,
    /// while another process does setup (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_global_setup_lock_async<T, E, F, Fut>(
        &self,
        home: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.global_setup_lock(home).run_async(f).await
    }

    /// [`Locks::with_setup_locks`] for async code (feature `tokio`): the global setup lock
    /// for `home` outermost (waiting), the repository lock for `root` inside it (failing fast).
    ///
    /// # Errors
    ///
    /// As [`Locks::with_repository_lock`].
    pub async fn with_setup_locks_async<T, E, F, Fut>(
        &self,
        home: impl AsRef<Path>,
        root: impl AsRef<Path>,
        f: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let root = root.as_ref();
        self.with_global_setup_lock_async(home, || self.with_repository_lock_async(root, f))
            .await
    }
}
