//! The judgement table, row by row, and the reasons it gives.

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

/// A shared lock whose record names a reader that has left or died, while its `flock` is
/// held, is held by its other readers: not by a process its named reader started.
#[test]
fn a_held_shared_lock_is_held_by_its_readers_whoever_its_record_names() {
    let mut shared = full(false);
    shared.beacon = None;
    shared.shared = Some(true);
    let mut f = Facts {
        beacon_free: Some(false),
        alive: Some(false),
        ..Facts::default()
    };
    let j = judge(&shared, &me(), &mut f);
    assert_eq!(j.liveness, Liveness::Live);
    assert!(!j.owner_exited, "{}", j.reason);
    assert_eq!(j.reason, "readers hold it open");
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
