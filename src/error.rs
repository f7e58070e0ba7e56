//! The crate's one error type.

use crate::liveness::Judgement;
use crate::owner::Owner;
use crate::text;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What can go wrong taking, holding or releasing a lock.
///
/// Contention (someone else holds the lock: [`Error::Locked`], [`Error::Stale`],
/// [`Error::Guarded`], [`Error::Timeout`]) is told apart from failure ([`Error::Io`] and the
/// rest); [`Error::is_contended`] asks which. Every message names the lock and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process holds the lock and is judged live (or cannot be judged from here).
    #[error("{}", self.with_advice())]
    Locked {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects, in words.
        resource: String,
        /// Who holds it.
        owner: Box<Owner>,
        /// Why the holder counts as live or unknown.
        judgement: Judgement,
        /// When the lock was taken (its directory's modification time).
        since: SystemTime,
    },
    /// The wait for the lock ran out.
    #[error("gave up on {} after waiting {}: {}", subject(lock, resource), took(*waited),
        kept_out(owner.as_deref(), blocked.as_deref()))]
    Timeout {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// How long we waited.
        waited: Duration,
        /// Who held it last, if known.
        owner: Option<Box<Owner>>,
        /// What kept it out at the end, if known: the holder, or, once the holder had ended,
        /// what was left to wait for.
        blocked: Option<Box<crate::Blocked>>,
    },
    /// The holder is dead by evidence but the lock is still inside the grace period.
    #[error("{}", stale(lock, resource, owner, judgement, *remaining, *clock_ahead))]
    Stale {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// The dead holder's record.
        owner: Box<Owner>,
        /// The evidence.
        judgement: Judgement,
        /// Time left in the grace period.
        remaining: Duration,
        /// The lock's modification time is in the future (a clock was set back): the grace
        /// period then counts from when a waiting acquisition first sees the lock unchanged,
        /// and `remaining` is measured from the start of such a wait.
        clock_ahead: bool,
    },
    /// Another process is reclaiming the lock (or a foreign guard is still fresh).
    #[error("another process is taking over {} from a holder that ended{}", subject(lock, resource),
        match remaining { Some(r) => format!("; the marker {} that another program left for it is respected {} more (it may have crashed: it is reused then)", text::path(guard), text::time_left(*r)), None => "; retry in a moment".into() })]
    Guarded {
        /// The guard directory.
        guard: PathBuf,
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// For a guard without this crate's marker: time until it may be reused.
        remaining: Option<Duration>,
    },
    /// The lock's owner record cannot be trusted; it is never removed automatically.
    #[error("{}", self.with_advice())]
    Malformed {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// What is wrong with it.
        problem: String,
    },
    /// This thread (or task) already holds the lock, or, for a task, already waits for it in
    /// another future it joined: waiting would wait forever.
    #[error(
        "{} is already held (or waited for) by this thread or task; release the guard you have before taking it again, or wait for it in a task of its own",
        subject(lock, resource)
    )]
    AlreadyHeld {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
    },
    /// The lock is held by the `dirlock run` (or other process) this process runs under:
    /// waiting for it would wait for ourselves.
    #[error("{} is held by this process's parent, pid {pid} (it runs this command under the lock): the work is already serialized, so do it without taking the lock again", subject(lock, resource))]
    HeldByParent {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// The holder named by the `DIRLOCK_HELD` environment variable.
        pid: u32,
    },
    /// Taking this lock now would break the lock order (global setup first, then repository).
    #[error("{}", self.with_advice())]
    LockOrder {
        /// The lock that was asked for.
        lock: PathBuf,
        /// What it protects.
        resource: String,
        /// The repository lock this thread holds.
        held: PathBuf,
    },
    /// A release found the lock gone or replaced: someone took it away.
    #[error(
        "{} was lost: {problem}; the work done under it may have overlapped with another process",
        subject(lock, resource)
    )]
    Lost {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
        /// What was found instead.
        problem: String,
    },
    /// The work done under the lock succeeded, but releasing the lock failed (`error`: it was
    /// lost, or retiring it failed). What the work returned is kept: take it back with
    /// [`Error::into_value`]. Returned by [`crate::LockRequest::run_with`] and its async form.
    #[error("{error}; the work under it succeeded, and what it returned is kept in this error")]
    NotReleased {
        /// Why the release failed.
        #[source]
        error: Box<Error>,
        /// What the work returned.
        value: Box<dyn std::any::Any + Send + Sync>,
    },
    /// The wait was cancelled through its [`crate::Cancel`] handle.
    #[error("waiting for {} was cancelled", subject(lock, resource))]
    Cancelled {
        /// The lock directory.
        lock: PathBuf,
        /// What the lock protects.
        resource: String,
    },
    /// A directory or file is not private to this user (symlink, foreign owner, open mode).
    #[error(
        "refusing {}: {}; {}",
        text::path(path),
        text::escape(problem),
        text::escape(fix)
    )]
    Unsafe {
        /// The offending path.
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// An argument is unusable (an application or lock name, say).
    #[error("cannot use {}: {problem}", text::escape(what))]
    InvalidInput {
        /// Which argument, with its value.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A system call failed.
    #[error("cannot {op} {}", text::path(path))]
    Io {
        /// The operation, as a verb phrase ("create the candidate directory").
        op: &'static str,
        /// The path it was applied to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The message without the advice on what to do: what happened and to which lock. A
    /// caller that words the advice its own way (the `dirlock` command names its flags)
    /// appends its own to this.
    pub fn facts(&self) -> String {
        match self {
            Error::Locked {
                lock,
                resource,
                owner,
                judgement,
                since,
            } => {
                let by = if judgement.owner_exited {
                    format!(
                        "a process that {} started, which inherited the lock (pid {} itself has exited),",
                        holder(owner),
                        owner.pid
                    )
                } else {
                    holder(owner)
                };
                let head = format!(
                    "{} is held by {by} since {}",
                    subject(lock, resource),
                    when(*since)
                );
                if judgement.liveness == crate::Liveness::Unknown {
                    format!(
                        "{head}, which cannot be checked from here: {}",
                        text::escape(&judgement.reason)
                    )
                } else {
                    head
                }
            }
            Error::Malformed {
                lock,
                resource,
                problem,
            } => format!(
                "{} is damaged: {}; nothing removes it automatically",
                subject(lock, resource),
                text::escape(problem)
            ),
            Error::LockOrder {
                lock,
                resource,
                held,
            } => format!(
                "cannot take {} while this thread holds the repository lock {}",
                subject(lock, resource),
                text::path(held)
            ),
            other => other.to_string(),
        }
    }

    /// What to do, in the library's terms, for the errors whose message says it apart from
    /// [`Error::facts`].
    fn advice(&self) -> Option<String> {
        Some(match self {
            Error::Locked { judgement, .. } if judgement.liveness == crate::Liveness::Unknown => {
                "it is never reclaimed automatically: check the holder where it ran, and once it is gone remove the lock by hand".into()
            }
            Error::Locked { .. } => {
                "retry when it finishes, or wait for it".into()
            }
            Error::Malformed { lock, .. } => format!(
                "check that no process uses it, then remove {} by hand",
                text::path(lock)
            ),
            Error::LockOrder { .. } => {
                "take the global setup lock first, then the repository lock".into()
            }
            _ => return None,
        })
    }

    fn with_advice(&self) -> String {
        match self.advice() {
            Some(advice) => format!("{}; {advice}", self.facts()),
            None => self.facts(),
        }
    }

    /// Whether the error means "someone else has the lock" (held, stale, being reclaimed, held
    /// by our parent, or the wait ran out) rather than a failure.
    pub fn is_contended(&self) -> bool {
        matches!(
            self,
            Error::Locked { .. }
                | Error::Stale { .. }
                | Error::Guarded { .. }
                | Error::Timeout { .. }
                | Error::HeldByParent { .. }
        )
    }

    /// What the work under the lock returned, from an [`Error::NotReleased`] (whose release
    /// failed after the work succeeded); `Err(self)` for any other error, or a value of
    /// another type.
    ///
    /// # Errors
    ///
    /// The error itself, when it holds no `T`.
    pub fn into_value<T: 'static>(self) -> Result<T, Error> {
        match self {
            Error::NotReleased { error, value } => match value.downcast::<T>() {
                Ok(v) => Ok(*v),
                Err(value) => Err(Error::NotReleased { error, value }),
            },
            other => Err(other),
        }
    }

    /// The owner record the error is about, if any.
    pub fn owner(&self) -> Option<&Owner> {
        match self {
            Error::Locked { owner, .. } | Error::Stale { owner, .. } => Some(owner),
            Error::Timeout { owner, .. } => owner.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    /// Keeps the kind: contention is `WouldBlock` (or `TimedOut`), I/O failures keep theirs.
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { source, .. } => source.kind(),
            Error::Locked { .. }
            | Error::Stale { .. }
            | Error::Guarded { .. }
            | Error::HeldByParent { .. } => io::ErrorKind::WouldBlock,
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Unsafe { .. } => io::ErrorKind::PermissionDenied,
            Error::InvalidInput { .. } => io::ErrorKind::InvalidInput,
            Error::Cancelled { .. } => io::ErrorKind::Interrupted,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// The holder in words: "this process (pid 42 ...)" when it is this very process: its pid and
/// a token this process wrote (a pid alone may be a dead writer's, reused, or another pid
/// namespace's).
fn holder(owner: &Owner) -> String {
    use crate::sys::{Real, System};
    if owner.pid == Real.pid() && Real.wrote(&owner.token) {
        format!("this process ({owner})")
    } else {
        owner.to_string()
    }
}

/// Why a wait ran out, from who held the lock last and what kept the waiter out then.
fn kept_out(owner: Option<&Owner>, blocked: Option<&crate::Blocked>) -> String {
    use crate::Blocked;
    let Some(owner) = owner else {
        return "it kept changing hands".into();
    };
    let was = format!("it was held by {}", holder(owner));
    match blocked {
        Some(Blocked::Holder) => format!("it is held by {}", holder(owner)),
        None => format!("it was held last by {}", holder(owner)),
        Some(Blocked::Grace {
            remaining,
            clock_ahead: false,
        }) => format!(
            "{was}, which seems to have ended; it can be taken over in {} (retry then, or wait longer)",
            text::time_left(*remaining)
        ),
        // (What was left of this wait's grace period is no promise to the next wait: it
        // starts it again.)
        Some(Blocked::Grace {
            clock_ahead: true, ..
        }) => format!(
            "{was}, which seems to have ended; its modification time is in the future (a clock was set back), so its grace period counts from when a wait first sees it unchanged: a wait longer than the grace period takes it over"
        ),
        Some(Blocked::Takeover {
            remaining: None, ..
        }) => format!("{was}, which has ended, and it is being taken over"),
        Some(Blocked::Takeover {
            guard,
            remaining: Some(r),
        }) => format!(
            "{was}, which has ended; the marker {} that another program left for its takeover is respected {} more (it may have crashed: it is reused then)",
            text::path(guard),
            text::time_left(*r)
        ),
    }
}

/// What the lock is for, then its path: `named lock deploy (lock /srv/locks/deploy.lock)`.
fn subject(lock: &std::path::Path, resource: &str) -> String {
    format!("{} (lock {})", text::escape(resource), text::path(lock))
}

fn stale(
    lock: &std::path::Path,
    resource: &str,
    owner: &Owner,
    judgement: &Judgement,
    remaining: Duration,
    clock_ahead: bool,
) -> String {
    let head = format!(
        "{} was held by {}, which seems to have ended ({})",
        subject(lock, resource),
        holder(owner),
        text::escape(&judgement.reason)
    );
    if clock_ahead {
        format!(
            "{head}; its modification time is in the future (a clock was set back), so its grace period counts from when a waiting acquisition first sees it unchanged: wait for it, and it is taken over {} into the wait",
            text::time_left(remaining)
        )
    } else {
        format!(
            "{head}; it can be taken over in {} (retry then, or wait for it)",
            text::time_left(remaining)
        )
    }
}

/// A time spent, to the nearest second (or millisecond, under one).
fn took(d: Duration) -> String {
    if d.as_secs() >= 1 {
        format!("{:.0} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// A UTC timestamp, `2026-11-29 22:13:17 UTC`, without a date crate.
pub(crate) fn when(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (year, month, day, h, m, s) = text::civil_utc(secs);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_civil_utc() {
        assert_eq!(when(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            when(UNIX_EPOCH + Duration::from_secs(1_795_990_397)),
            "2026-11-29 22:13:17 UTC"
        );
        assert_eq!(
            when(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00 UTC"
        );
    }

    #[test]
    fn io_errors_keep_their_kind() {
        let e = Error::io(
            "create the candidate",
            "/x",
            io::Error::from(io::ErrorKind::StorageFull),
        );
        assert_eq!(e.to_string(), "cannot create the candidate /x");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::StorageFull);
    }
}
