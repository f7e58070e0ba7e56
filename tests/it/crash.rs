//! Holders in other processes: a SIGKILLed holder's lock is reclaimed at once through its
//! beacon, and the new guard says whose lock it took over.

use crate::common::*;
use dirlock::{Error, Liveness};

#[test]
fn a_killed_holder_is_reclaimed_at_once() {
    let fx = Fixture::new();
    let repo = fx.repo();
    let holder = Holder::start(
        fx.dir(),
        &["--repository", repo.to_str().unwrap(), "--purpose", "sync"],
    );
    // While it lives, it is live by its beacon.
    let err = fx.locks.repository_lock(&repo).acquire().unwrap_err();
    match &err {
        Error::Locked {
            owner, judgement, ..
        } => {
            assert_eq!(owner.pid, holder.pid());
            assert_eq!(judgement.liveness, Liveness::Live);
            assert!(judgement.reason.contains("holds it open"), "{judgement}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let pid = holder.kill();
    // Killed: the kernel dropped its flock, so there is no grace period to wait out.
    let g = fx.locks.repository_lock(&repo).acquire().unwrap();
    let prev = g
        .reclaimed_from()
        .expect("the guard says whose lock it took over");
    assert_eq!(prev.pid, pid);
    assert_eq!(prev.purpose.as_deref(), Some("sync"));
    g.release().unwrap();
    assert_eq!(
        fx.entries(),
        Vec::<String>::new(),
        "reclaim leaves nothing behind"
    );
}

#[test]
fn a_released_lock_is_not_reported_as_reclaimed() {
    let fx = Fixture::new();
    let holder = Holder::start(fx.dir(), &["--lock", "x.lock"]);
    holder.release();
    let g = fx.locks.named_lock("x.lock").acquire().unwrap();
    assert!(g.reclaimed_from().is_none());
}

#[test]
fn holders_in_other_processes_are_excluded() {
    let fx = Fixture::new();
    let a = Holder::start(fx.dir(), &["--lock", "x.lock"]);
    let err = Holder::try_start(fx.dir(), &["--lock", "x.lock"])
        .err()
        .expect("second holder refused");
    assert!(err.contains("is held by pid"), "{err}");
    a.release();
    Holder::start(fx.dir(), &["--lock", "x.lock"]).release();
}

#[test]
fn publish_falls_back_to_plain_rename_where_renameat2_is_refused() {
    if lacks(
        "crash::publish_falls_back_to_plain_rename_where_renameat2_is_refused",
        "strace",
        have("strace"),
    ) {
        return;
    }
    let fx = Fixture::new();
    let trace = fx.tmp.path().join("strace.out");
    let trace_s = trace.to_str().unwrap();
    // Every renameat2 fails with EINVAL, as on filesystems without RENAME_NOREPLACE.
    let strace = strace_injecting(
        trace_s,
        "trace=renameat,renameat2",
        "inject=renameat2:error=EINVAL",
    );
    let a = Holder::try_start_under(&strace, fx.dir(), &["--lock", "x.lock"]).unwrap();
    let log = std::fs::read_to_string(&trace).unwrap();
    assert!(
        log.contains("RENAME_NOREPLACE) = -1 EINVAL") && log.contains("renameat("),
        "fallback not taken:\n{log}"
    );
    let record = std::fs::read_to_string(fx.dir().join("x.lock/owner.json")).unwrap();
    // A second fallback publisher cannot replace the (non-empty) lock.
    let b = Holder::try_start_under(&strace, fx.dir(), &["--lock", "x.lock"]);
    let err = b.err().expect("the second publisher is refused");
    assert!(err.contains("is held by pid"), "{err}");
    assert_eq!(
        std::fs::read_to_string(fx.dir().join("x.lock/owner.json")).unwrap(),
        record
    );
    // Release through the fallback too, leaving nothing behind.
    a.release();
    assert_eq!(fx.entries(), Vec::<String>::new());
}

#[test]
fn a_holder_in_another_pid_namespace_is_judged_by_its_beacon() {
    if lacks(
        "crash::a_holder_in_another_pid_namespace_is_judged_by_its_beacon",
        "root and unshare(1) (a new pid namespace)",
        is_root() && have("unshare"),
    ) {
        return;
    }
    let fx = Fixture::new();
    // The holder runs as pid 1 of a new pid namespace: its recorded pid means nothing here,
    // but the kernel's flock does.
    let h = Holder::try_start_under(
        &["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"],
        fx.dir(),
        &["--lock", "ns.lock"],
    )
    .expect("unshare --pid works as root");
    let record = std::fs::read_to_string(fx.dir().join("ns.lock/owner.json")).unwrap();
    let owner = dirlock::Owner::parse(record.as_bytes()).unwrap();
    assert_eq!(owner.pid, 1, "pid 1 inside its namespace");
    assert_ne!(
        owner.pid_namespace,
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .map(|p| p.display().to_string())
    );
    let err = fx.locks.named_lock("ns.lock").acquire().unwrap_err();
    match &err {
        Error::Locked { judgement, .. } => {
            assert_eq!(judgement.liveness, Liveness::Live, "{judgement}")
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    // Killing unshare kills its child (--kill-child), pid 1 of the namespace, and with it
    // every process in the namespace.
    h.kill();
    let g = fx
        .locks
        .named_lock("ns.lock")
        .wait(std::time::Duration::from_secs(10))
        .acquire()
        .unwrap();
    assert_eq!(g.reclaimed_from().unwrap().pid, 1);
}
