//! The protocol's two operations on a lock of one's own: **acquire** (stage a candidate,
//! contend for `NAME`, publish: [`Contender`], whose rounds the driver runs) and **release** (check `NAME` is still ours, retire it to a
//! tombstone, reap). With [`crate::reclaim`] and [`crate::sweep`], the only code that changes
//! lock state, and only through the [`System`] seam, relative to the lock directory's handle.

mod beside;
mod contend;
pub(crate) mod queue;
pub(crate) mod shared;
mod stage;

pub(crate) use contend::{ended::blocked_by, Contender, Next, Waiting};
pub(crate) use stage::{Held, Request};

use crate::error::Error;
use crate::paths::{tombstone_for, OWNER_FILE};
use crate::space::{remove_tree, Space};
use crate::sys::System;
use std::io;

/// Release: if this is the acquiring process, check that `NAME` is still our directory, retire
/// it to a tombstone, check the tombstone, drop the beacon (waking waiters), reap.
pub(crate) fn release<S: System>(
    sp: &Space<S>,
    mut held: Held<S>,
    resource: &str,
    acquirer: u32,
) -> Result<(), Error> {
    if sp.sys.pid() != acquirer {
        return Ok(()); // a forked child: the lock is the parent's
    }
    let (token, name) = (held.owner.token.clone(), held.name.clone());
    let mut ticket = held.ticket.take();
    let result = match held.shared {
        true => shared::leave(sp, held, resource),
        false => check_held(sp, &held, resource)
            .and_then(|()| retire_checked_own(sp, held, resource, &mut ticket)),
    };
    if let Some(t) = ticket {
        t.leave(sp, &name);
    }
    // Whatever happened, the token is no longer ours to hold: a record still carrying it (a
    // retire that failed) names a dead owner from now on.
    sp.sys.own_token(&token, false);
    result
}

/// Whether `NAME` is still the directory `held` published (what a release checks first):
/// [`Error::Lost`] when it was taken away or replaced.
pub(crate) fn check_held<S: System>(
    sp: &Space<S>,
    held: &Held<S>,
    resource: &str,
) -> Result<(), Error> {
    let name = held.name.as_str();
    let lost = |problem: &str| Error::Lost {
        lock: sp.entry(name),
        resource: resource.to_owned(),
        problem: problem.to_owned(),
    };
    match sp.sys.meta_at(sp.dir, name) {
        Ok(m) if m.id == held.id => Ok(()),
        Ok(_) => Err(lost(
            "another owner's lock is in its place (it was reclaimed and taken)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(lost("it is gone (someone removed or reclaimed it)"))
        }
        Err(e) => Err(sp.io("check the lock", name, e)),
    }
}

/// Hands our lock to the first waiter, or retires it, to `tomb` either way (handed over, the
/// lock is at the waiter's candidate's name, returned, before it is retired), waking the
/// waiters: the one handed the lock needs nothing more from us, and is woken at once; else
/// `NAME` is free once retired, and the waiters are woken right after, before the checks and
/// the reaping. Explicitly, not just by closing: a forked child's copy of the beacon shares
/// its lock, and would otherwise keep them blocked until the child exits. Our place in the
/// queue is left after the handoff, or before a release that wakes waiters to contend (they
/// would wait for us).
fn hand_over_or_retire<S: System>(
    sp: &Space<S>,
    held: &Held<S>,
    tomb: &str,
    ticket: &mut Option<queue::Ticket<S>>,
) -> (Option<String>, io::Result<crate::sys::Renamed>) {
    let name = held.name.as_str();
    // What the look at the queue opened is closed once the waiter is woken.
    let mut opened = Vec::new();
    let handed = queue::hand_over(sp, name, &held.owner.token, ticket.is_some(), &mut opened);
    let queued = !opened.is_empty();
    match handed {
        Some(_) => {
            let _ = sp.sys.unlock(&held.beacon);
            // Let the waiter, woken on this processor, run first: the closing and the
            // retiring can wait.
            sp.sys.yield_now();
            drop(opened);
        }
        None => {
            drop(opened); // first: an open directory cannot be removed on Windows
            if let Some(t) = ticket.take() {
                t.leave(sp, name);
            }
        }
    }
    let from = handed.as_deref().unwrap_or(name);
    let retired = sp.sys.rename_noreplace(sp.dir, from, tomb);
    if handed.is_none() {
        let _ = sp.sys.unlock(&held.beacon);
        if queued {
            queue::remove_if_empty(sp, name); // emptied of dead waiters
        }
    }
    if let Some(t) = ticket.take() {
        t.leave(sp, name);
    }
    (handed, retired)
}

/// Whether `tomb`, where our lock (at `from`) was just renamed, is that lock, ours to reap
/// (`Ok(true)`). Not ours, or it cannot be told: it goes back to `from`, never over anything
/// (another's lock left retired would let a third in beside its holder; ours put back is
/// taken over by the next taker, its beacon free), and the release fails. Handed over
/// (`handed`), the lock is the waiter's, and only our old lock was ever at `from` (a
/// candidate's name is its token's, used once): a check that cannot tell leaves it retired
/// for a sweep, and the release stands (`Ok(false)`).
fn retired_own<S: System>(
    sp: &Space<S>,
    held: &Held<S>,
    tomb: &str,
    from: &str,
    handed: bool,
    lost: impl Fn(&str) -> Error,
) -> Result<bool, Error> {
    let found = sp.sys.meta_at(sp.dir, tomb);
    let ours = match &found {
        Ok(m) => m.id == held.id,
        // Already reaped (tombstones are anyone's to delete, at any time: a sweep got there
        // first): if our own directory is unlinked, what we retired was ours.
        Err(e) if e.kind() == io::ErrorKind::NotFound => sp.sys.unlinked(&held.beacon),
        Err(_) if handed => return Ok(false),
        Err(_) => false,
    };
    if ours {
        return Ok(true);
    }
    let back = sp.sys.rename_noreplace(sp.dir, tomb, from).is_ok();
    Err(match found {
        Err(e) if e.kind() != io::ErrorKind::NotFound => match back {
            true => sp.io(
                "tell whether the lock this process released was its own; the lock is back in place, for the next taker to take over, at",
                from,
                e,
            ),
            false => sp.io(
                "tell whether the lock this process released was its own; that lock is left retired at",
                tomb,
                e,
            ),
        },
        _ => lost("another owner's lock was in its place at the moment of release"),
    })
}

/// Release proper, once [`check_held`] found `NAME` ours: hand it over or retire it (see
/// [`hand_over_or_retire`]), check the tombstone, reap. (A shared lock's last reader, holding
/// its exclusive `flock`, too.)
fn retire_checked_own<S: System>(
    sp: &Space<S>,
    held: Held<S>,
    resource: &str,
    ticket: &mut Option<queue::Ticket<S>>,
) -> Result<(), Error> {
    let name = held.name.as_str();
    let lost = |problem: &str| Error::Lost {
        lock: sp.entry(name),
        resource: resource.to_owned(),
        problem: problem.to_owned(),
    };
    // Named by our token: unique (a token is published once), and no random draw needed.
    let tomb = tombstone_for(name, &held.owner.token, || sp.sys.token());
    let (handed, retired) = hand_over_or_retire(sp, &held, &tomb, ticket);
    let from = handed.as_deref().unwrap_or(name);
    match retired {
        Ok(_) => {}
        // The waiter gave up at the moment it was handed the lock, and retired our old lock
        // to a tombstone of its own (it releases its new one itself).
        Err(e) if e.kind() == io::ErrorKind::NotFound && handed.is_some() => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(lost("it vanished while being released"))
        }
        Err(e) => return Err(sp.io("retire the lock", name, e)),
    }
    if !retired_own(sp, &held, &tomb, from, handed.is_some(), lost)? {
        return Ok(());
    }
    // Reap: empty the tombstone through our handle (a shared lock's last reader's entry
    // too), drop the beacon, remove the directory; then close the previous holder's directory
    // we kept (see `Held::last_seen`).
    if let Some(entry) = held.entry {
        shared::remove_entry(sp.sys, &held.beacon, entry);
    }
    let _ = sp.sys.remove_file_at(&held.beacon, OWNER_FILE);
    drop(held.beacon);
    remove_tree(sp.sys, sp.dir, &tomb);
    drop(held.last_seen);
    Ok(())
}
