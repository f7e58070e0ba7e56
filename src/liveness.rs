//! Judging a lock's owner: a pure decision table over the owner record, this process's
//! identity and a few facts probed lazily (the beacon, the pid, its start time).
//!
//! The first rule that applies decides:
//!
//! | # | rule | judgement |
//! | --- | --- | --- |
//! | 0 | operating system recorded and not ours (Windows beside Linux under Wine, or beside WSL) | unknown |
//! | 1 | host recorded and not ours, and boot id not recorded or not ours (another kernel) | unknown |
//! | 2 | boot id recorded and not ours: taken before this kernel booted (a previous boot) | dead by evidence |
//! | 2 | ... taken since (another kernel running now under our host name) | unknown |
//! | 2 | our record, whose boot id only one side knows (this kernel or not, cannot be told) | unknown |
//! | 3 | beacon recorded, and a shared `flock` on the lock directory is granted | dead by proof |
//! | 3' | beacon recorded, and the `flock` is held (or cannot be probed) | live (when the recorded pid is gone, a process it started keeps the lock) |
//! | 4 | pid namespace recorded and not ours (or ours unreadable) | unknown |
//! | 5 | the pid is this process's, and this process never wrote the token | dead by evidence (unknown if the record has no pid namespace) |
//! | 6 | the kernel says there is no process with the pid | dead by evidence |
//! | 7 | start time recorded and the pid's start time differs | dead by evidence |
//! | 8 | otherwise (including any fact that cannot be read) | live |
//!
//! A beacon or a pid is evidence only to a process that can test it as its writer held it:
//! on the same kernel (rules 1 and 2: the boot ids say so) and the same operating system
//! (rule 0: the record says which). A Windows program under Wine and a Linux one share a
//! kernel and a host name but see nothing of each other's beacons (a share mode against an
//! `flock`) and pids. What cannot be tested so is unknown, never dead. Rule 1 is about
//! another *kernel*: a record that carries our boot id was written on this kernel whatever
//! host name it gives (a container's own UTS namespace, a host renamed since), so its beacon
//! and pid facts mean what they say. Rule 5 sees through a pid that this very
//! process now has: the record's writer died and the kernel gave its pid to us. A record that
//! does not name its pid namespace (the reference implementation's) may instead come from
//! another namespace with the same pid (every container has a pid 1): unknown, never
//! reclaimed automatically.

use crate::owner::Owner;
use crate::sys::Identity;
use std::fmt;
use Liveness::{DeadByEvidence, DeadByProof, Live, Unknown};

/// What the judgement of an owner concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Liveness {
    /// The owner is (or may be) running: never reclaimed.
    Live,
    /// The owner cannot be judged from here (another host, another pid namespace): never
    /// reclaimed automatically.
    Unknown,
    /// The kernel proved the owner gone (its beacon `flock` was released): reclaimed at once.
    DeadByProof,
    /// The evidence says the owner is gone (no such pid, pid reused, previous boot): reclaimed
    /// once the lock is older than the grace period.
    DeadByEvidence,
}

impl Liveness {
    /// Whether the owner is judged dead (by proof or by evidence).
    pub fn is_dead(self) -> bool {
        matches!(self, Liveness::DeadByProof | Liveness::DeadByEvidence)
    }
}

impl fmt::Display for Liveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Liveness::Live => "live",
            Liveness::Unknown => "unknown",
            Liveness::DeadByProof => "dead (proven by the kernel)",
            Liveness::DeadByEvidence => "dead (by evidence)",
        })
    }
}

/// A judgement and the reason for it, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Judgement {
    /// The conclusion.
    pub liveness: Liveness,
    /// Why, in words (e.g. "a process holds it open").
    pub reason: String,
    /// The recorded owner has exited, and a process it started (which inherited the lock)
    /// holds it: the pid in the record is not who holds it.
    pub owner_exited: bool,
}

impl Judgement {
    pub(crate) fn new(liveness: Liveness, reason: impl Into<String>) -> Judgement {
        Judgement {
            liveness,
            reason: reason.into(),
            owner_exited: false,
        }
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.liveness, self.reason)
    }
}

/// The facts that cost a system call, asked for only when a rule needs them. `None` means the
/// fact could not be read, which judges the owner live (fail closed).
pub(crate) trait Probe {
    /// Whether a shared, non-blocking `flock` on the lock directory was granted.
    fn beacon_free(&mut self) -> Option<bool>;
    /// Whether a process with this pid exists.
    fn process_alive(&mut self, pid: u32) -> Option<bool>;
    /// The start time of the process with this pid.
    fn start_time(&mut self, pid: u32) -> Option<u64>;
    /// Whether this process wrote `token` (it staged it and has not finished with it since).
    fn wrote(&mut self, token: &str) -> bool;
}

/// Judges `owner` by the table in the module docs: the first rule that applies decides.
pub(crate) fn judge(owner: &Owner, me: &Identity, probe: &mut impl Probe) -> Judgement {
    another_system(owner, me)
        .or_else(|| another_kernel(owner, me))
        .or_else(|| beacon(owner, me, probe))
        .or_else(|| another_pid_namespace(owner, me))
        .or_else(|| our_own_pid(owner, me, probe))
        .unwrap_or_else(|| the_process(owner, probe))
}

/// Rule 0: another operating system's record.
fn another_system(owner: &Owner, me: &Identity) -> Option<Judgement> {
    let os = owner
        .os
        .as_deref()
        .filter(|os| me.os.as_deref() != Some(*os))?;
    Some(Judgement::new(
        Unknown,
        format!(
            "it was taken by a program for another operating system ({}), whose hold on it and process this one cannot see",
            crate::text::escape(os)
        ),
    ))
}

/// Rules 1 and 2: another host's or another kernel's record, or one whose kernel cannot be
/// told.
fn another_kernel(owner: &Owner, me: &Identity) -> Option<Judgement> {
    if let Some(host) = &owner.host {
        let this_kernel = owner.boot_id.is_some() && owner.boot_id == me.boot_id;
        if me.host.as_deref() != Some(host.as_str()) && !this_kernel {
            return Some(Judgement::new(
                Unknown,
                format!("it was taken on host {host:?}"),
            ));
        }
    }
    match (&owner.boot_id, &me.boot_id) {
        (Some(theirs), Some(ours)) if theirs != ours => {
            // Not this kernel: its beacon and pid mean nothing here. Taken before this kernel
            // booted, it is a previous boot's (its holder went with it); taken since, another
            // kernel runs now under our host name (a virtual machine sharing the directory).
            let since_boot = matches!(
                (owner.acquired_at(), me.booted),
                (Some(taken), Some(booted)) if taken >= booted
            );
            Some(if since_boot {
                Judgement::new(
                    Unknown,
                    "it was taken on another kernel running under this host name (another boot id, since this one booted)",
                )
            } else {
                Judgement::new(DeadByEvidence, "it was taken before the last reboot")
            })
        }
        (Some(_), None) | (None, Some(_)) if owner.os.is_some() => Some(Judgement::new(
            Unknown,
            "whether it was taken on this kernel cannot be told (only one side knows its boot id)",
        )),
        _ => None,
    }
}

/// Rule 3: a record with a beacon is judged by it alone.
fn beacon(owner: &Owner, me: &Identity, probe: &mut impl Probe) -> Option<Judgement> {
    if !owner.has_beacon() {
        return None;
    }
    let pid = owner.pid;
    Some(match probe.beacon_free() {
        Some(true) => Judgement::new(
            DeadByProof,
            "no process holds it open any more (the system says so)",
        ),
        // A shared lock's record names one of its readers, which may have left or died
        // while others read on (until one of them names itself): they hold it, not a child.
        Some(false) if owner.is_shared() => Judgement::new(Live, "readers hold it open"),
        Some(false) if recorded_owner_gone(owner, me, probe) => Judgement {
            owner_exited: true,
            ..Judgement::new(
                Live,
                format!("its recorded owner, pid {pid}, has exited, but another process keeps the lock (one that pid {pid} started, which inherited it)"),
            )
        },
        Some(false) => Judgement::new(Live, "a process holds it open"),
        None => Judgement::new(Live, "whether a process holds it open cannot be asked"),
    })
}

/// Rule 4: a pid of another pid namespace (or of one we cannot tell) means nothing here.
fn another_pid_namespace(owner: &Owner, me: &Identity) -> Option<Judgement> {
    let ns = owner.pid_namespace.as_ref()?;
    let reason = match &me.pid_namespace {
        Some(ours) if ours == ns => return None,
        Some(_) => format!("it was taken in pid namespace {ns}"),
        None => "this process cannot read its pid namespace".into(),
    };
    Some(Judgement::new(Unknown, reason))
}

/// Rule 5: the pid is ours, but we did not write the record.
fn our_own_pid(owner: &Owner, me: &Identity, probe: &mut impl Probe) -> Option<Judgement> {
    if owner.pid != me.pid || probe.wrote(&owner.token) {
        return None;
    }
    // In our pid namespace (rule 4 checked it), the pid is ours now: its writer died. A
    // record that does not say its namespace (the reference implementation's) may come
    // from a process of another namespace with the same pid (pid 1 of another container):
    // it cannot be judged from here.
    let pid = owner.pid;
    Some(if owner.pid_namespace.is_some() {
        Judgement::new(
            DeadByEvidence,
            format!("pid {pid} is this process, which did not write this record (its writer died and the pid was reused)"),
        )
    } else {
        Judgement::new(
            Unknown,
            format!("it names pid {pid}, this process, which did not write it: its writer died and the pid was reused, or it runs in another pid namespace"),
        )
    })
}

/// Rules 6 to 8: whether the recorded process still runs.
fn the_process(owner: &Owner, probe: &mut impl Probe) -> Judgement {
    match probe.process_alive(owner.pid) {
        Some(false) => {
            return Judgement::new(DeadByEvidence, format!("no process has pid {}", owner.pid))
        }
        Some(true) => {}
        None => return Judgement::new(Live, format!("cannot tell whether pid {} runs", owner.pid)),
    }
    let Some(recorded) = owner.start_time else {
        return Judgement::new(Live, format!("pid {} is running", owner.pid));
    };
    match probe.start_time(owner.pid) {
        Some(now) if now != recorded => Judgement::new(
            DeadByEvidence,
            format!("pid {} now belongs to a newer process", owner.pid),
        ),
        Some(_) => Judgement::new(Live, format!("pid {} is running", owner.pid)),
        None => Judgement::new(
            Live,
            format!("pid {} runs but its start time is unreadable", owner.pid),
        ),
    }
}

/// Whether the process a held beacon's record names is gone (the lock then lives on in one it
/// started): asked only where its pid means what it says, in our pid namespace.
fn recorded_owner_gone(owner: &Owner, me: &Identity, probe: &mut impl Probe) -> bool {
    if owner.pid_namespace.is_none() || owner.pid_namespace != me.pid_namespace {
        return false;
    }
    match probe.process_alive(owner.pid) {
        Some(false) => true,
        Some(true) => owner.start_time.is_some_and(|recorded| {
            probe
                .start_time(owner.pid)
                .is_some_and(|now| now != recorded)
        }),
        None => false,
    }
}

#[cfg(test)]
mod tests;
