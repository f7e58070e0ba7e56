//! The queue's turn file: how waiters that hand the lock on among themselves leave it free,
//! now and then, for those that do not queue (see the module above).

use crate::paths::TURN_FILE;
use crate::space::remove_tree;
use crate::sys::System;
use std::io;
use std::time::Duration;

/// How long waiters may keep the lock among themselves, handing it on, before a release leaves
/// it free for those that do not queue.
pub(super) const TURN_EVERY: Duration = Duration::from_secs(2);

/// How long the lock is then left free: two polls of the reference implementation (25 ms).
pub(super) const TURN_FOR: Duration = Duration::from_millis(50);

/// What the turn file holds when a release left the lock free (the file that only starts the
/// clock is empty: the waiters it finds do not pause for it).
pub(super) const TURN_GIVEN: &[u8] = b"given\n";

/// What the turn file holds when the first waiter made it, taking its number: the clock has
/// not started. A holder that found the lock free with no one waiting was no part of the
/// waiters keeping it among themselves, however long it held it: the clock starts at the first
/// release by a holder that queued (see [`turn_due`]).
pub(super) const TURN_UNSTARTED: &[u8] = b"queued\n";

/// How long waiters may keep the lock among themselves on `sys` ([`TURN_EVERY`], unless the
/// system says otherwise: see `System::turn_every`).
pub(crate) fn turn_every<S: System>(sys: &S) -> Duration {
    sys.turn_every().unwrap_or(TURN_EVERY)
}

/// The age of a turn file dated `made` by our clock; `None` when it is dated [`TURN_FOR`] or
/// more ahead of our clock (the clock was set back since it was made): it gives no turn, and
/// is made anew.
pub(super) fn age_of<S: System>(sys: &S, made: std::time::SystemTime) -> Option<Duration> {
    match sys.now().duration_since(made) {
        Ok(age) => Some(age),
        Err(e) if e.duration() < TURN_FOR => Some(Duration::ZERO),
        Err(_) => None,
    }
}

/// Whether the release that looks at `queue`, where a live waiter waits, leaves the lock free
/// instead of handing it on (see [`TURN_EVERY`]): the turn file is that old (or dated ahead of
/// our clock: see [`age_of`]), and is made anew. One that finds no file, or (its holder
/// `holder_queued`) one whose clock has not started ([`TURN_UNSTARTED`]), starts the clock.
/// Best effort: where the file cannot be made, the lock is handed on.
pub(super) fn turn_due<S: System>(sys: &S, queue: &S::Dir, holder_queued: bool) -> bool {
    let turn = match sys.meta_at(queue, TURN_FILE) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = sys.create_file_at(queue, TURN_FILE, b"", false, None);
            return false;
        }
        Err(_) => return false,
    };
    if turn.size == TURN_UNSTARTED.len() as u64 {
        if holder_queued {
            remake_turn(sys, queue, b"");
        }
        return false;
    }
    let due = age_of(sys, turn.mtime).is_none_or(|age| age >= turn_every(sys));
    due && remake_turn(sys, queue, TURN_GIVEN)
}

/// Makes the turn file in `queue` anew, dated now, holding `contents`; `false` where it cannot
/// be made.
fn remake_turn<S: System>(sys: &S, queue: &S::Dir, contents: &[u8]) -> bool {
    remove_tree(sys, queue, TURN_FILE);
    sys.create_file_at(queue, TURN_FILE, contents, false, None)
        .is_ok()
}
