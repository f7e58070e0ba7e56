//! Runtimes of tasks under simulation: beside blocking workers and threads, exhaustively
//! within bounds and at random, with acquisitions dropped and timing out.
use super::*;

fn tasks(n: u8, wait: Wait, cancel: Option<(u8, u8)>) -> Script {
    Script::Tasks { n, wait, cancel }
}

/// Every schedule, within two preemptions, of a runtime of two tasks beside a blocking
/// worker, for each way of dropping one task's acquisition at one of its first polls (or
/// none), and beside a blocking thread of its own process: the queue serves them in turn, a
/// dropped acquisition leaves nothing behind, and the others and the tasks exclude each
/// other.
#[test]
fn tasks_beside_a_worker_exhaustively_within_bounds() {
    let limit = limit();
    let mut explored = Vec::new();
    for cancel in [None, Some((0, 1)), Some((0, 2)), Some((1, 1)), Some((1, 2))] {
        let worker = Script::Worker {
            rounds: 1,
            wait: Wait::Forever,
        };
        let mut cfg = config(vec![tasks(2, Wait::Forever, cancel), worker], Mutant::None);
        cfg.crashes = 0;
        cfg.preemptions = Some(2);
        explored.push(exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("{cancel:?}: {v}")));
    }
    // A blocking thread of the runtime's own process, beside its tasks.
    let thread = Script::Thread {
        wait: Wait::Forever,
    };
    let mut cfg = config(vec![tasks(2, Wait::Forever, None), thread], Mutant::None);
    cfg.crashes = 0;
    cfg.preemptions = Some(2);
    explored.push(exhaustive(&cfg, limit).unwrap_or_else(|v| panic!("a thread beside: {v}")));
    eprintln!("exhaustive with tasks: {explored:?} schedules");
    assert!(
        explored.iter().all(|n| *n > 20),
        "the search explored {explored:?}"
    );
}

/// Random schedules of runtimes of tasks (some acquisitions dropped, some timing out), a
/// blocking thread beside one runtime in its process, blocking workers, a sweeper and a temp
/// cleaner, with crashes (which take a process's threads and tasks together), with and without flock,
/// with lost notifications and without pidfd.
#[test]
fn random_schedules_of_tasks_and_processes() {
    let mut steps = 0;
    for (no_flock, lossy, no_pidfd) in [
        (false, false, false),
        (false, true, false),
        (true, false, true),
        (true, true, false),
    ] {
        for cancel in [None, Some((1, 1)), Some((0, 3))] {
            let scripts = vec![
                tasks(3, Wait::Forever, cancel),
                Script::Thread {
                    wait: Wait::Forever,
                },
                tasks(2, Wait::Timeout(Duration::from_secs(3)), None),
                Script::Worker {
                    rounds: 2,
                    wait: Wait::Forever,
                },
                Script::Sweeper,
                Script::Cleaner,
            ];
            let mut cfg = config(scripts, Mutant::None);
            (cfg.no_flock, cfg.lossy, cfg.no_pidfd) = (no_flock, lossy, no_pidfd);
            // (Without flock, seeds 12, 21 and 26 find a task that was never woken for its
            // turn, or was woken by a waker it no longer polls with.)
            steps += random(&cfg, 0..30);
        }
    }
    assert!(steps > 10_000, "only {steps} steps");
}
