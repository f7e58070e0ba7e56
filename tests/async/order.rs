//! The order of a runtime's waiting tasks among all waiters (see `tests/async.rs`): each
//! takes its place in the lock's queue as a thread does, in the order the tasks came, within
//! the process's budget of descriptors.

#[cfg(unix)]
use super::tasks::portable;
use super::tasks::{entries, runtime, setup, within, LOCK};
use dirlock::{Locks, Wait};
#[cfg(unix)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The purposes of the waiters `status` lists in the queue of `LOCK`, in order.
fn queued(locks: &Locks) -> Vec<String> {
    let st = locks.named_lock(LOCK).status().unwrap();
    let purpose = |p: &dirlock::Party| p.owner.as_ref().and_then(|o| o.purpose.clone());
    st.queue
        .iter()
        .map(|p| purpose(p).unwrap_or_default())
        .collect()
}

/// Returns once `status` lists `want` in the queue of `LOCK` (fails the test after 10 s).
fn until_queued(locks: &Locks, want: &[&str]) {
    for _ in 0..1000 {
        if queued(locks) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the queue is {:?}, never {want:?}", queued(locks));
}

/// What the tasks of a test note as they are served: their purposes, in turn.
type Served = Arc<Mutex<Vec<&'static str>>>;

/// Spawns on `rt` a task that takes the lock `request` asks for, notes `purpose` in `served`
/// once it holds it, holds it for `hold`, and releases it.
fn spawn_holder(
    rt: &tokio::runtime::Runtime,
    request: dirlock::LockRequest,
    purpose: &'static str,
    served: &Served,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<(), dirlock::Error>> {
    let served = served.clone();
    rt.spawn(async move {
        let guard = request.acquire_async().await?;
        served.lock().unwrap().push(purpose);
        tokio::time::sleep(hold).await;
        guard.release()
    })
}

/// A task that waits behind another task of its runtime takes its place in the lock's queue
/// when it asks, as a thread does (though only the first of the runtime's tasks publishes):
/// `status` lists task, task, thread in the order they came, and they are served in that
/// order: the thread that came last does not pass the second task.
#[test]
fn a_task_behind_another_keeps_its_place_before_a_thread_that_came_after_it() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let served = Served::default();
    let held = locks.named_lock(LOCK).acquire().unwrap();
    let rt = runtime(2);
    let mut tasks = Vec::new();
    for (i, purpose) in ["task 1", "task 2"].into_iter().enumerate() {
        let request = locks.named_lock(LOCK).wait(Wait::Forever).purpose(purpose);
        let hold = Duration::from_millis(5);
        tasks.push(spawn_holder(&rt, request, purpose, &served, hold));
        until_queued(&locks, &["task 1", "task 2"][..=i]);
    }
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            let request = locks.named_lock(LOCK).wait(Wait::Forever).purpose("thread");
            let guard = request.acquire()?;
            served.lock().unwrap().push("thread");
            guard.release()
        });
        until_queued(&locks, &["task 1", "task 2", "thread"]);
        held.release().unwrap();
        thread.join().unwrap().unwrap();
    });
    for t in tasks {
        rt.block_on(within(30, t)).unwrap().unwrap();
    }
    assert_eq!(*served.lock().unwrap(), ["task 1", "task 2", "thread"]);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// Readers and writers among one runtime's waiting tasks keep the order they came in: each
/// takes its number on disk in that order (a reader too, though it stages its candidate only
/// for it), `status` lists them so, and they are served so.
#[test]
fn a_runtimes_readers_and_writers_keep_their_order() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let served = Served::default();
    let held = locks.named_lock(LOCK).acquire().unwrap();
    let rt = runtime(2);
    let order = ["writer 1", "reader 2", "writer 3", "reader 4"];
    let mut tasks = Vec::new();
    for (i, purpose) in order.into_iter().enumerate() {
        let request = locks.named_lock(LOCK).wait(Wait::Forever).purpose(purpose);
        let request = match purpose.starts_with("reader") {
            true => request.shared(),
            false => request,
        };
        let hold = Duration::from_millis(20);
        tasks.push(spawn_holder(&rt, request, purpose, &served, hold));
        until_queued(&locks, &order[..=i]);
    }
    held.release().unwrap();
    for t in tasks {
        rt.block_on(within(30, t)).unwrap().unwrap();
    }
    assert_eq!(*served.lock().unwrap(), order);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// A task with no time to wait takes a free lock, as a thread does.
#[test]
fn a_task_with_no_time_to_wait_takes_a_free_lock() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    for wait in [Duration::ZERO, Duration::from_nanos(1)] {
        let request = locks.named_lock(LOCK).wait(wait);
        let guard = runtime(1).block_on(request.acquire_async());
        guard
            .unwrap_or_else(|e| panic!("{wait:?}: {e}"))
            .release()
            .unwrap();
    }
}

/// Run by the test below in a process allowed 64 open files: 100 tasks wait for a lock this
/// thread holds, and another task takes a free lock meanwhile. The tasks waiting hold places
/// on disk only as far as the process's budget allows (the head, and a seat for each 32
/// files), so that neither they nor the other task run out of descriptors: all are served.
#[cfg(unix)]
#[test]
#[ignore = "run by a_process_short_of_files_serves_all_its_waiting_tasks, with few files"]
fn hundred_tasks_with_few_files() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let held = locks.named_lock(LOCK).acquire().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let rt = runtime(2);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (request, served) = (locks.named_lock(LOCK).wait(Wait::Forever), served.clone());
            rt.spawn(async move {
                let guard = request.acquire_async().await?;
                served.fetch_add(1, Ordering::SeqCst);
                guard.release()
            })
        })
        .collect();
    // On disk: the head of the runtime's queue, and a seat for each 32 of the 64 files.
    let on_disk = || locks.named_lock(LOCK).status().unwrap().queue.len();
    let mut tries = 0;
    while on_disk() < 3 {
        tries += 1;
        assert!(tries < 1000, "fewer than 3 tasks queued on disk");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(on_disk(), 3, "places on disk past the process's budget");
    let other = rt.block_on(locks.named_lock("other.lock").acquire_async());
    other.unwrap().release().unwrap();
    held.release().unwrap();
    for t in tasks {
        rt.block_on(within(60, t)).unwrap().unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 100);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

#[cfg(unix)]
#[test]
fn a_process_short_of_files_serves_all_its_waiting_tasks() {
    alone("order::hundred_tasks_with_few_files", "ulimit -n 64 && ");
}

/// Runs the ignored test `name` alone in a process of its own (`limit`: a shell command run
/// before it), so that the process's budget of places on disk is its own; fails if it fails
/// or does not run.
#[cfg(unix)]
pub(super) fn alone(name: &str, limit: &str) {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &format!("{limit}exec \"$0\" \"$@\" 2>&1")])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::piped());
    let child = portable::Holder::adopt(cmd.spawn().unwrap());
    let out = child.output();
    let out_text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out_text}");
    // A name that no longer matches runs nothing, and passes.
    assert!(
        out_text.contains("1 passed"),
        "{name} did not run: {out_text}"
    );
}

/// Run by the test below, alone in its process: 34 tasks wait for a lock this thread holds.
/// The first 32 take their places in the lock's queue at once, the last two hold none (they
/// are not near the head). Once two tasks ahead leave, the last two have come near the head,
/// and take their places before their turn: `status` lists them.
#[cfg(unix)]
#[test]
#[ignore = "run by tasks_that_come_near_the_head_take_their_places, alone in a process"]
fn tasks_coming_near_the_head() {
    let (_tmp, dir, _) = setup();
    let locks = Locks::in_dir(&dir).unwrap();
    let held = locks.named_lock(LOCK).acquire().unwrap();
    let rt = runtime(2);
    let names: Vec<String> = (1..=34).map(|i| format!("task {i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    for (i, purpose) in names.iter().enumerate() {
        let request = locks.named_lock(LOCK).wait(Wait::Forever).purpose(*purpose);
        tasks.push(rt.spawn(async move { request.acquire_async().await?.release() }));
        match i < 32 {
            true => until_queued(&locks, &names[..=i]),
            false => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    assert_eq!(queued(&locks), names[..32], "only 32 near the head");
    for t in tasks.drain(..2) {
        t.abort();
    }
    until_queued(&locks, &names[2..]);
    held.release().unwrap();
    for t in tasks {
        rt.block_on(within(30, t)).unwrap().unwrap();
    }
    assert_eq!(entries(&dir), Vec::<String>::new());
}

/// A task that comes near the head of its runtime's queue (those ahead leave) takes its place
/// in the lock's queue then, before its turn.
#[cfg(unix)]
#[test]
fn tasks_that_come_near_the_head_take_their_places() {
    alone("order::tasks_coming_near_the_head", "");
}
