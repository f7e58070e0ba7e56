//! Asynchronous acquisition (feature `tokio`): [`LockRequest::acquire_async`] and the `_async`
//! helpers.
//!
//! An asynchronous acquisition is a loop of fail-fast attempts, run inline (staging,
//! publishing and reclaiming are a handful of short system calls; an attempt never sleeps),
//! and, between them, a wait in the runtime's reactor on the same kernel wake-ups a blocking
//! waiter sleeps on (Linux: inotify and a pidfd; macOS and FreeBSD: a kqueue; Windows: the
//! change notification and the holder's process, through the system's wait threads). A
//! waiting task holds no thread.
//!
//! The tasks of one process that want the same lock queue behind one another, first come
//! first served: only the task at the head of the queue contends with other processes and is
//! woken when the lock changes hands, so a release costs the same whatever the number of
//! tasks waiting. The head keeps its place while it holds the lock and gives it to the next
//! task when the guard goes. Between processes, as for blocking waiters, whoever is first to
//! publish after a release wins.
//!
//! Dropping the future at any point leaves nothing behind: a lost attempt has already removed
//! its candidate, a wait is only registrations, and the future returns as soon as an attempt
//! wins, so a lock it published is always in the guard it returns.

use crate::error::Error;
use crate::guard::LockGuard;
use crate::held::{check_order, Who};
use crate::locks::Locks;
use crate::options::{Backoff, Wait, Waiting};
use crate::owner::Owner;
use crate::protocol::{arm, Arm};
use crate::request::LockRequest;
use crate::sys::{FileId, Real, System, Wake};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Rounds in a row that found the lock changed before a wait could be armed, after which the
/// task pauses (bounded backoff) before it looks again.
const SPIN_ROUNDS: u32 = 8;

/// Each lock's queue of this process's tasks, by lock directory and name (entries whose queue
/// is gone are pruned as new ones come).
type Queues = HashMap<(FileId, String), Weak<Semaphore>>;
static QUEUES: Mutex<Option<Queues>> = Mutex::new(None);

/// The queue of this process's tasks for lock `name` in the lock directory `dir`.
fn queue(dir: FileId, name: &str) -> Arc<Semaphore> {
    let mut queues = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    let queues = queues.get_or_insert_with(HashMap::new);
    let key = (dir, name.to_owned());
    if let Some(q) = queues.get(&key).and_then(Weak::upgrade) {
        return q;
    }
    queues.retain(|_, q| q.strong_count() > 0);
    let q = Arc::new(Semaphore::new(1));
    queues.insert(key, Arc::downgrade(&q));
    q
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

/// One asynchronous acquisition: what its errors name, and what it has seen.
struct Pursuit {
    lock: PathBuf,
    resource: String,
    started: Instant,
    deadline: Option<Instant>,
    last_owner: Option<Owner>,
    told: bool,
}

impl Pursuit {
    fn timeout(&self) -> Error {
        Error::Timeout {
            lock: self.lock.clone(),
            resource: self.resource.clone(),
            waited: self.started.elapsed(),
            owner: self.last_owner.clone().map(Box::new),
        }
    }

    fn cancelled(&self) -> Error {
        Error::Cancelled {
            lock: self.lock.clone(),
            resource: self.resource.clone(),
        }
    }

    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// `fut`, unless the deadline comes first (`None`).
    async fn by_deadline<T>(&self, fut: impl Future<Output = T>) -> Option<T> {
        match self.deadline {
            Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
            None => Some(fut.await),
        }
    }

    /// Sleeps `pause`, or less at the deadline.
    async fn pause(&self, pause: Duration) {
        let _ = self.by_deadline(tokio::time::sleep(pause)).await;
    }
}

impl LockRequest {
    /// Takes the lock without holding a thread while it waits (feature `tokio`; call it on a
    /// tokio runtime with time and I/O enabled). Waiting, options, errors and refusals are
    /// those of [`LockRequest::acquire`]; the wait is in the runtime's reactor, woken by the
    /// kernel as a blocking wait is. The refusals are per task: a task that holds a lock and
    /// asks for it again is refused ([`Error::AlreadyHeld`]), while other tasks of the process
    /// wait for it like other processes.
    ///
    /// The tasks of this process waiting for the same lock are served in the order they
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
    /// runtime. (A runtime without time or I/O enabled makes tokio panic.)
    pub async fn acquire_async(self) -> Result<LockGuard, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidInput {
                what: "acquire_async".into(),
                problem: "it must run on a tokio runtime (built with `enable_all`, or with time \
                          and I/O enabled); outside one, use `acquire`"
                    .into(),
            });
        }
        let who = Who::current();
        let started = Instant::now();
        let (name, resource, family) = self.resolve()?;
        let lock = self.dir.path.join(&name);
        let (dir, dir_id) = self.dir.current()?;
        // Before queueing: a task that holds the lock would wait behind itself.
        let found = || Real.meta_at(&dir, &name).ok().map(|m| m.id);
        check_order(dir_id, &name, found, family, &lock, &resource, who)?;
        let mut k = Pursuit {
            lock,
            resource,
            started,
            deadline: match self.options.wait {
                Wait::Immediately => Some(started),
                Wait::Forever => None,
                Wait::Timeout(d) => started.checked_add(d),
            },
            last_owner: None,
            told: false,
        };
        if self.options.wait == Wait::Immediately {
            return self.attempt(who);
        }
        let cancel = self.options.cancel.as_ref().map(|c| c.0.clone());
        let queue = queue(dir_id, &name);
        let cancelled = async {
            match cancel.as_deref() {
                Some(c) => crate::sys::sleep_async(None, Some(c)).await,
                None => std::future::pending().await,
            }
        };
        let turn = match first(k.by_deadline(queue.acquire_owned()), cancelled).await {
            Either::A(Some(turn)) => turn.expect("a lock's queue is never closed"),
            Either::A(None) => return Err(k.timeout()),
            Either::B(_) => return Err(k.cancelled()),
        };
        let me = Real.identity();
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(250));
        let mut idle = 0;
        loop {
            if cancel.as_ref().is_some_and(|c| c.is_fired()) {
                return Err(k.cancelled());
            }
            let err = match self.clone().attempt(who) {
                Ok(mut guard) => {
                    guard.turn = Some(turn);
                    return Ok(guard);
                }
                Err(e) => e,
            };
            // What to wait for: a change of the lock (`watch`), at most `pause`.
            let (watch, pause) = match &err {
                Error::Locked {
                    owner,
                    judgement,
                    since,
                    ..
                } => {
                    k.tell(&self, owner, judgement, *since);
                    (true, None)
                }
                Error::Stale {
                    owner,
                    judgement,
                    remaining,
                    ..
                } => {
                    let since = std::time::SystemTime::now();
                    k.tell(&self, owner, judgement, since);
                    (true, Some(*remaining))
                }
                // A damaged lock: waited for while a process holds it, else reported.
                Error::Malformed { .. } => (true, None),
                Error::Guarded { remaining, .. } => {
                    let pause = backoff.next_pause();
                    (false, Some(remaining.map_or(pause, |r| r.min(pause))))
                }
                // An attempt that kept finding the holder gone, without pausing.
                Error::Timeout { .. } => (false, Some(backoff.next_pause())),
                _ => return Err(err),
            };
            if let Some(owner) = err.owner() {
                k.last_owner = Some(owner.clone());
            }
            if k.expired() {
                return Err(k.timeout());
            }
            if !watch {
                k.pause(pause.unwrap_or_default()).await;
                continue;
            }
            let (ns, _) = self.dir.current()?;
            let armed = arm(&self.dir.space(&ns), &name, &me)?;
            match &armed {
                Arm::Broken => return Err(err),
                Arm::Again => {
                    idle += 1;
                    if idle >= SPIN_ROUNDS {
                        k.pause(backoff.next_pause()).await;
                    }
                    continue;
                }
                Arm::Sleep { watch: None, .. } => {
                    let p = backoff.next_pause();
                    k.pause(pause.map_or(p, |r| r.min(p))).await;
                    continue;
                }
                Arm::Sleep { watch: Some(w), .. } => {
                    idle = 0;
                    let until = pause.map(|p| Instant::now() + p);
                    // Wake-ups that changed nothing (a reader opening the lock directory, a
                    // zombie's pidfd that stays readable) go back to sleep, after a pause once
                    // there have been a few: as a blocking waiter, no attempt without a change.
                    let mut spurious = 0u32;
                    loop {
                        let sleep = crate::sys::sleep_async(Some(w), cancel.as_deref());
                        let bounded = async {
                            match until {
                                Some(u) => tokio::time::timeout_at(u, sleep).await.ok(),
                                None => Some(sleep.await),
                            }
                        };
                        match k.by_deadline(bounded).await {
                            // The deadline (the next attempt reports it), or the pause is over.
                            None | Some(None) => break,
                            Some(Some(Ok(Wake::Cancelled))) => return Err(k.cancelled()),
                            Some(Some(Err(e))) => {
                                return Err(Error::io("wait for the lock", &k.lock, e));
                            }
                            Some(Some(Ok(_))) => {}
                        }
                        let (ns, _) = self.dir.current()?;
                        if armed.changed(&self.dir.space(&ns), &name) {
                            break;
                        }
                        spurious += 1;
                        if spurious >= 3 {
                            spurious = 0;
                            let p = backoff.next_pause();
                            let p = until
                                .map_or(p, |u| p.min(u.saturating_duration_since(Instant::now())));
                            k.pause(p).await;
                        }
                    }
                }
            }
        }
    }

    /// One fail-fast attempt that never pauses, for `who`.
    fn attempt(mut self, who: Who) -> Result<LockGuard, Error> {
        self.options.wait = Wait::Immediately;
        self.options.inline = true;
        self.options.on_wait = None;
        self.acquire_as(who)
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

impl Pursuit {
    /// Tells the request's `on_wait` (once) who it waits for.
    fn tell(
        &mut self,
        req: &LockRequest,
        owner: &Owner,
        judgement: &crate::Judgement,
        since: std::time::SystemTime,
    ) {
        if let (false, Some(f)) = (self.told, &req.options.on_wait) {
            self.told = true;
            f(&Waiting {
                lock: self.lock.clone(),
                owner: owner.clone(),
                judgement: judgement.clone(),
                since,
            });
        }
    }
}

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
