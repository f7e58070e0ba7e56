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
    fn new(liveness: Liveness, reason: impl Into<String>) -> Judgement {
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

/// Judges `owner` by the table in the module docs.
pub(crate) fn judge(owner: &Owner, me: &Identity, probe: &mut impl Probe) -> Judgement {
    use Liveness::*;
    if let Some(os) = owner
        .os
        .as_deref()
        .filter(|os| me.os.as_deref() != Some(*os))
    {
        return Judgement::new(
            Unknown,
            format!(
                "it was taken by a program for another operating system ({}), whose hold on it and process this one cannot see",
                crate::text::escape(os)
            ),
        );
    }
    if let Some(host) = &owner.host {
        let this_kernel = owner.boot_id.is_some() && owner.boot_id == me.boot_id;
        if me.host.as_deref() != Some(host.as_str()) && !this_kernel {
            return Judgement::new(Unknown, format!("it was taken on host {host:?}"));
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
            return if since_boot {
                Judgement::new(
                    Unknown,
                    "it was taken on another kernel running under this host name (another boot id, since this one booted)",
                )
            } else {
                Judgement::new(DeadByEvidence, "it was taken before the last reboot")
            };
        }
        (Some(_), None) | (None, Some(_)) if owner.os.is_some() => {
            return Judgement::new(
                Unknown,
                "whether it was taken on this kernel cannot be told (only one side knows its boot id)",
            );
        }
        _ => {}
    }
    if owner.has_beacon() {
        return match probe.beacon_free() {
            Some(true) => Judgement::new(
                DeadByProof,
                "no process holds it open any more (the system says so)",
            ),
            Some(false) if recorded_owner_gone(owner, me, probe) => Judgement {
                owner_exited: true,
                ..Judgement::new(
                    Live,
                    format!(
                        "its recorded owner, pid {0}, has exited, but another process keeps the lock (one that pid {0} started, which inherited it)",
                        owner.pid
                    ),
                )
            },
            Some(false) => Judgement::new(Live, "a process holds it open"),
            None => Judgement::new(Live, "whether a process holds it open cannot be asked"),
        };
    }
    if let Some(ns) = &owner.pid_namespace {
        match &me.pid_namespace {
            Some(ours) if ours == ns => {}
            Some(_) => {
                return Judgement::new(Unknown, format!("it was taken in pid namespace {ns}"))
            }
            None => return Judgement::new(Unknown, "this process cannot read its pid namespace"),
        }
    }
    if owner.pid == me.pid && !probe.wrote(&owner.token) {
        // In our pid namespace (rule 4 checked it), the pid is ours now: its writer died. A
        // record that does not say its namespace (the reference implementation's) may come
        // from a process of another namespace with the same pid (pid 1 of another container):
        // it cannot be judged from here.
        return if owner.pid_namespace.is_some() {
            Judgement::new(
                DeadByEvidence,
                format!(
                    "pid {} is this process, which did not write this record (its writer died and the pid was reused)",
                    owner.pid
                ),
            )
        } else {
            Judgement::new(
                Unknown,
                format!(
                    "it names pid {}, this process, which did not write it: its writer died and the pid was reused, or it runs in another pid namespace",
                    owner.pid
                ),
            )
        };
    }
    match probe.process_alive(owner.pid) {
        Some(false) => {
            return Judgement::new(DeadByEvidence, format!("no process has pid {}", owner.pid))
        }
        Some(true) => {}
        None => return Judgement::new(Live, format!("cannot tell whether pid {} runs", owner.pid)),
    }
    if let Some(recorded) = owner.start_time {
        return match probe.start_time(owner.pid) {
            Some(now) if now != recorded => Judgement::new(
                DeadByEvidence,
                format!("pid {} now belongs to a newer process", owner.pid),
            ),
            Some(_) => Judgement::new(Live, format!("pid {} is running", owner.pid)),
            None => Judgement::new(
                Live,
                format!("pid {} runs but its start time is unreadable", owner.pid),
            ),
        };
    }
    Judgement::new(Live, format!("pid {} is running", owner.pid))
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
mod tests {
    use super::*;

    /// Facts for one row; `asked` records which probes the judgement used.
    #[derive(Default)]
    struct Facts {
        beacon_free: Option<bool>,
        alive: Option<bool>,
        start: Option<u64>,
        wrote: bool,
        asked: Vec<&'static str>,
    }

    impl Probe for Facts {
        fn beacon_free(&mut self) -> Option<bool> {
            self.asked.push("beacon");
            self.beacon_free
        }
        fn process_alive(&mut self, _: u32) -> Option<bool> {
            self.asked.push("kill");
            self.alive
        }
        fn start_time(&mut self, _: u32) -> Option<u64> {
            self.asked.push("start");
            self.start
        }
        fn wrote(&mut self, _: &str) -> bool {
            self.asked.push("wrote");
            self.wrote
        }
    }

    fn me() -> Identity {
        Identity {
            pid: 1000,
            start_time: Some(5),
            boot_id: Some("boot-A".into()),
            host: Some("here".into()),
            pid_namespace: Some("pid:[1]".into()),
            uid: 1000,
            os: Some("linux".into()),
            booted: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)),
        }
    }

    /// A record of ours, taken `secs` after `me()`'s kernel booted.
    fn taken(mut o: Owner, secs: i64) -> Owner {
        o.acquired_unix_ms = Some((1_700_000_000 + secs) as u64 * 1000);
        o
    }

    fn full(beacon: bool) -> Owner {
        let mut o = Owner::new(42, "t");
        o.start_time = Some(100);
        o.boot_id = Some("boot-A".into());
        o.host = Some("here".into());
        o.pid_namespace = Some("pid:[1]".into());
        o.beacon = Some(beacon);
        o.os = Some("linux".into());
        o
    }

    fn run(owner: Owner, me: Identity, mut facts: Facts) -> (Liveness, Vec<&'static str>) {
        let j = judge(&owner, &me, &mut facts);
        (j.liveness, facts.asked)
    }

    #[test]
    fn the_table_row_by_row() {
        use Liveness::*;
        let with = |f: fn(&mut Owner), beacon| {
            let mut o = full(beacon);
            f(&mut o);
            o
        };
        let facts = |b, a, s| Facts {
            beacon_free: b,
            alive: a,
            start: s,
            wrote: false,
            asked: vec![],
        };
        #[expect(
            clippy::type_complexity,
            reason = "one table row: case, record, identity, facts, verdict, probes"
        )]
        let rows: Vec<(&str, Owner, Identity, Facts, Liveness, Vec<&str>)> = vec![
            // 0: another operating system (Windows under Wine beside Linux): its beacon and
            // pid mean nothing here, whatever the host, the boot and the probes say.
            (
                "0 another OS, beacon free",
                with(|o| o.os = Some("windows".into()), true),
                me(),
                facts(Some(true), Some(false), None),
                Unknown,
                vec![],
            ),
            (
                "0 another OS without a boot id, pid dead",
                with(
                    |o| {
                        o.os = Some("windows".into());
                        o.boot_id = None
                    },
                    false,
                ),
                me(),
                facts(None, Some(false), None),
                Unknown,
                vec![],
            ),
            (
                "0 our OS recorded: judged on",
                full(true),
                me(),
                facts(Some(true), None, None),
                DeadByProof,
                vec!["beacon"],
            ),
            // 1: another host wins over everything, even a free beacon.
            (
                "1 other host",
                with(
                    |o| {
                        o.host = Some("there".into());
                        o.boot_id = Some("boot-B".into())
                    },
                    true,
                ),
                me(),
                facts(Some(true), Some(false), None),
                Unknown,
                vec![],
            ),
            (
                "1 our host unreadable, another boot",
                with(|o| o.boot_id = Some("boot-B".into()), true),
                Identity { host: None, ..me() },
                facts(Some(true), None, None),
                Unknown,
                vec![],
            ),
            (
                "1 our host unreadable, our boot: this kernel",
                full(true),
                Identity { host: None, ..me() },
                facts(Some(true), None, None),
                DeadByProof,
                vec!["beacon"],
            ),
            // 1 does not apply on this kernel: our boot id under another host name (a
            // container's UTS namespace, a renamed host) is judged by its beacon and pid.
            (
                "1 other host, our boot, beacon free",
                with(|o| o.host = Some("container".into()), true),
                me(),
                facts(Some(true), None, None),
                DeadByProof,
                vec!["beacon"],
            ),
            (
                "1 other host, our boot, pid dead",
                with(|o| o.host = Some("container".into()), false),
                me(),
                facts(None, Some(false), None),
                DeadByEvidence,
                vec!["kill"],
            ),
            (
                "1 other host, no boot id",
                with(
                    |o| {
                        o.host = Some("there".into());
                        o.boot_id = None
                    },
                    true,
                ),
                me(),
                facts(Some(true), Some(false), None),
                Unknown,
                vec![],
            ),
            // 2 / 2': the beacon decides and nothing else is asked.
            (
                "2 beacon free",
                full(true),
                me(),
                facts(Some(true), Some(true), Some(100)),
                DeadByProof,
                vec!["beacon"],
            ),
            (
                "2' beacon held",
                full(true),
                me(),
                facts(Some(false), Some(true), Some(100)),
                Live,
                vec!["beacon", "kill", "start"],
            ),
            // 2' with its recorded owner gone: still live (a process it started keeps the
            // beacon), said so in the reason (see `a_held_beacon_whose_owner_exited_says_so`).
            (
                "2' beacon held, recorded pid gone",
                full(true),
                me(),
                facts(Some(false), Some(false), None),
                Live,
                vec!["beacon", "kill"],
            ),
            (
                "2' beacon held, another namespace: the pid is not asked",
                with(|o| o.pid_namespace = Some("pid:[2]".into()), true),
                me(),
                facts(Some(false), Some(false), None),
                Live,
                vec!["beacon"],
            ),
            (
                "2' beacon unprobeable",
                full(true),
                me(),
                facts(None, Some(false), None),
                Live,
                vec!["beacon"],
            ),
            // 2: another kernel: its beacon is not this kernel's to probe. Taken before this
            // kernel booted (or when is not said): a previous boot, dead by evidence.
            (
                "2 other boot, beacon free",
                with(|o| o.boot_id = Some("boot-B".into()), true),
                me(),
                facts(Some(true), None, None),
                DeadByEvidence,
                vec![],
            ),
            (
                "2 other boot, taken before this boot",
                taken(with(|o| o.boot_id = Some("boot-B".into()), false), -60),
                me(),
                facts(None, Some(true), Some(100)),
                DeadByEvidence,
                vec![],
            ),
            // ... taken since: another kernel runs now under this host name.
            (
                "2 other boot, taken since this boot, beacon free",
                taken(with(|o| o.boot_id = Some("boot-B".into()), true), 60),
                me(),
                facts(Some(true), Some(false), None),
                Unknown,
                vec![],
            ),
            // ... or this kernel cannot be told from another: only one side knows a boot id.
            (
                "2 our boot unreadable",
                full(false),
                Identity {
                    boot_id: None,
                    ..me()
                },
                facts(None, Some(true), Some(100)),
                Unknown,
                vec![],
            ),
            (
                "2 our record without a boot id, beacon free",
                with(|o| o.boot_id = None, true),
                me(),
                facts(Some(true), None, None),
                Unknown,
                vec![],
            ),
            (
                "2 both without a boot id (FreeBSD): judged on",
                with(|o| o.boot_id = None, true),
                Identity {
                    boot_id: None,
                    ..me()
                },
                facts(Some(true), None, None),
                DeadByProof,
                vec!["beacon"],
            ),
            // 4: another pid namespace.
            (
                "4 other ns",
                with(|o| o.pid_namespace = Some("pid:[2]".into()), false),
                me(),
                facts(None, Some(false), None),
                Unknown,
                vec![],
            ),
            (
                "4 our ns unreadable",
                full(false),
                Identity {
                    pid_namespace: None,
                    ..me()
                },
                facts(None, Some(false), None),
                Unknown,
                vec![],
            ),
            // 5: our own pid, a token we never wrote: a dead writer's pid reused by us.
            (
                "5 our pid, foreign token",
                with(|o| o.pid = 1000, false),
                me(),
                facts(None, Some(true), Some(5)),
                DeadByEvidence,
                vec!["wrote"],
            ),
            (
                "5 reference record, our pid: maybe another namespace",
                Owner::new(1000, "t"),
                me(),
                facts(None, Some(true), None),
                Unknown,
                vec!["wrote"],
            ),
            (
                "5 our pid, a token we wrote: judged on",
                with(|o| o.pid = 1000, false),
                me(),
                Facts {
                    alive: Some(true),
                    start: Some(100),
                    wrote: true,
                    ..Facts::default()
                },
                Live,
                vec!["wrote", "kill", "start"],
            ),
            // 6: no such process.
            (
                "5 no process",
                full(false),
                me(),
                facts(None, Some(false), None),
                DeadByEvidence,
                vec!["kill"],
            ),
            (
                "5 kill fails",
                full(false),
                me(),
                facts(None, None, None),
                Live,
                vec!["kill"],
            ),
            // 7: pid reused.
            (
                "6 reused",
                full(false),
                me(),
                facts(None, Some(true), Some(101)),
                DeadByEvidence,
                vec!["kill", "start"],
            ),
            (
                "6 start unreadable",
                full(false),
                me(),
                facts(None, Some(true), None),
                Live,
                vec!["kill", "start"],
            ),
            // 8: live.
            (
                "7 same start",
                full(false),
                me(),
                facts(None, Some(true), Some(100)),
                Live,
                vec!["kill", "start"],
            ),
            // The reference implementation's {pid, token} records: rules 5 and 7 only.
            (
                "ref dead",
                Owner::new(42, "t"),
                me(),
                facts(Some(true), Some(false), None),
                DeadByEvidence,
                vec!["kill"],
            ),
            (
                "ref live",
                Owner::new(42, "t"),
                me(),
                facts(Some(true), Some(true), Some(1)),
                Live,
                vec!["kill"],
            ),
            (
                "ref unknown pid",
                Owner::new(42, "t"),
                me(),
                facts(None, None, None),
                Live,
                vec!["kill"],
            ),
        ];
        for (name, owner, me, facts, want, asked) in rows {
            let (got, used) = run(owner, me, facts);
            assert_eq!(got, want, "row {name}");
            assert_eq!(used, asked, "row {name}: probes used");
        }
    }

    /// A held beacon whose recorded owner has exited (or whose pid now names a newer process)
    /// is live, and the reason says who really keeps it.
    #[test]
    fn a_held_beacon_whose_owner_exited_says_so() {
        for (alive, start) in [(Some(false), None), (Some(true), Some(101))] {
            let mut f = Facts {
                beacon_free: Some(false),
                alive,
                start,
                ..Facts::default()
            };
            let j = judge(&full(true), &me(), &mut f);
            assert_eq!(j.liveness, Liveness::Live);
            assert!(
                j.reason.contains("pid 42, has exited") && j.reason.contains("another process"),
                "{}",
                j.reason
            );
        }
    }

    #[test]
    fn reasons_name_the_evidence() {
        let mut f = Facts {
            alive: Some(false),
            ..Facts::default()
        };
        let j = judge(&Owner::new(4242, "t"), &me(), &mut f);
        assert_eq!(j.to_string(), "dead (by evidence): no process has pid 4242");
    }
}
