//! What the command says: its errors in one paragraph, in its own terms, and its output.

use crate::args::{EX_TEMPFAIL, EX_USAGE};
use crate::when::when;
use dirlock::text::{escape, path as shown, time_left};
use dirlock::{Blocked, Error, Liveness};
use std::io::Write as _;

/// A failure: what to print (nothing for a closed output pipe) and the exit status.
pub(crate) struct Failure(pub(crate) String, pub(crate) u8);

/// The status of a command whose output pipe was closed: what a tool killed by `SIGPIPE`
/// reports (128 + 13), without a word.
pub(crate) const EX_PIPE: u8 = 141;

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match &e {
            e if e.is_contended() => EX_TEMPFAIL,
            // A name or an argument that cannot be used: a usage error.
            Error::InvalidInput { .. } => EX_USAGE,
            _ => 1,
        };
        Failure(explain(&e), code)
    }
}

/// The error in one paragraph, with its causes, and the advice in this command's terms (its
/// flags and subcommands, where the library's own message names its API).
pub(crate) fn explain(e: &Error) -> String {
    let head = match e {
        Error::Locked { .. } => {
            let head = held_words(e).unwrap_or_default();
            match e {
                Error::Locked { judgement, lock, .. }
                    if judgement.liveness == Liveness::Unknown =>
                {
                    format!(
                        "{head}: it is never taken over automatically; check that process where it ran, and once it is gone remove {} by hand",
                        shown(lock)
                    )
                }
                _ => format!("{head}; retry when it finishes"),
            }
        }
        Error::Malformed { lock, .. } => format!(
            "{}; check that no process uses it, then remove it with `dirlock unlock --force` for the same lock (it refuses while a process holds a lock on it), or remove {} by hand",
            e.facts(),
            shown(lock)
        ),
        _ => e.to_string(),
    };
    let mut msg = head;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// Writes the command's output. A reader that went away (`| head`) ends the command quietly,
/// as it ends other Unix tools; any other write error is reported.
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(Failure(String::new(), EX_PIPE))
        }
        Err(e) => Err(Failure(format!("cannot write the output: {e}"), 1)),
    }
}

/// A line on stderr; a stderr that cannot be written to is not worth failing over.
pub(crate) fn say(line: &str) {
    // One write: lines of runs that share a log are not interleaved.
    let _ = std::io::stderr().write_all(format!("dirlock: {line}\n").as_bytes());
}

/// A held lock in words, with local times: what it is for, who holds it since when, and, for
/// a holder that cannot be checked from here, why (`None` for other errors).
pub(crate) fn held_words(e: &Error) -> Option<String> {
    let Error::Locked {
        judgement,
        resource,
        owner,
        since,
        ..
    } = e
    else {
        return None;
    };
    let head = format!(
        "{} is {}",
        escape(resource),
        holder_words(owner, judgement.owner_exited, *since)
    );
    Some(if judgement.liveness == Liveness::Unknown {
        format!(
            "{head}, which cannot be checked from here ({})",
            escape(&judgement.reason)
        )
    } else {
        head
    })
}

/// Who holds a lock since when, in words after "is": `held by pid 42 (purpose: sync) since
/// 14:02:33 (2 min ago)`; for a shared lock, whose record names one of its readers (and whose
/// directory's time is when that record was last written), `read by pid 42 ... since ...,
/// and perhaps by others`.
pub(crate) fn holder_words(
    owner: &dirlock::Owner,
    owner_exited: bool,
    since: std::time::SystemTime,
) -> String {
    if !owner.is_shared() {
        return format!(
            "held by {} since {}",
            held_by(owner, owner_exited),
            when(since)
        );
    }
    let reading = owner
        .acquired_at()
        .map(|t| format!(" since {}", when(t)))
        .unwrap_or_default();
    format!("read by {owner}{reading}, and perhaps by others")
}

/// What a waiting run waits for, in words after "waiting for LOCK: ": its holder, or, once
/// the holder has ended, what is left to wait for.
pub(crate) fn waiting_words(w: &dirlock::Waiting) -> String {
    // An ended holder, by its record (for a shared lock, the reader it names).
    let ended = || format!("held by {} since {}", w.owner, when(w.since));
    match &w.blocked {
        Blocked::Grace {
            remaining,
            clock_ahead,
        } => format!(
            "{}, which seems to have ended ({}); {} {}",
            ended(),
            escape(&w.judgement.reason),
            match clock_ahead {
                false => "it can be taken over in",
                true => "its time is in the future (a clock was set back), so it can be taken over only this far into the wait:",
            },
            time_left(*remaining)
        ),
        Blocked::Takeover {
            remaining: None, ..
        } => format!("{}, which has ended, and it is being taken over", ended()),
        Blocked::Takeover {
            guard,
            remaining: Some(r),
        } => format!(
            "{}, which has ended; the marker {} that another program left for its takeover is respected {} more (it may have crashed: it is reused then)",
            ended(),
            shown(guard),
            time_left(*r)
        ),
        _ => holder_words(&w.owner, w.judgement.owner_exited, w.since),
    }
}

/// Who holds a lock, in words: its recorded owner, or, where that has exited and a process it
/// started holds the lock (it inherited it), that process.
pub(crate) fn held_by(owner: &dirlock::Owner, owner_exited: bool) -> String {
    if owner_exited {
        format!(
            "a process that {owner} started (pid {} itself has exited, but what it started inherited the lock)",
            owner.pid
        )
    } else {
        owner.to_string()
    }
}
