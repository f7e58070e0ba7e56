//! The keeper of the shared locks this process reads: a thread that, every second while this
//! process reads any, keeps each one's record naming a live reader and younger than
//! [`KEEP_FRESH`](crate::protocol::shared::KEEP_FRESH) (see [`crate::protocol::shared`]).
//! Programs that judge a lock by its pid alone (the reference implementation) then never find
//! a shared lock whose named reader died while others read on, past their grace period. The
//! thread ends a second after the last shared lock is released; a forked child has none (its
//! parent's locks are not its own) until it reads a lock itself.

use crate::lockdir::LockDir;
use crate::owner::Owner;
use crate::protocol::shared::keep_record;
use crate::sys::{FileId, PerProcess, RealDir};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the keeper looks at the locks this process reads.
const TICK: Duration = Duration::from_secs(1);

/// One shared lock this process reads.
struct Kept {
    serial: u64,
    lock_dir: Arc<LockDir>,
    dir: Arc<RealDir>,
    name: String,
    id: FileId,
    mine: Owner,
}

#[derive(Default)]
struct Keeper {
    kept: Vec<Kept>,
    running: bool,
}

static KEEPER: PerProcess<Keeper> = PerProcess::new(Keeper::default);
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Keeps the shared lock `name` (directory `id` in the lock directory `dir`) that this process
/// reads as `mine`, until [`forget`] is called with the serial returned.
pub(crate) fn keep(
    lock_dir: Arc<LockDir>,
    dir: Arc<RealDir>,
    name: &str,
    id: FileId,
    mine: &Owner,
) -> u64 {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut k = KEEPER.lock();
    k.kept.push(Kept {
        serial,
        lock_dir,
        dir,
        name: name.to_owned(),
        id,
        mine: mine.clone(),
    });
    if !k.running {
        // No thread (the system refuses one): the record is kept by the readers' comings
        // and goings alone.
        k.running = std::thread::Builder::new()
            .name("dirlock-keeper".into())
            .spawn(run)
            .is_ok();
    }
    serial
}

/// Stops keeping the lock `serial` names (its reader is about to leave).
pub(crate) fn forget(serial: u64) {
    KEEPER.lock().kept.retain(|k| k.serial != serial);
}

fn run() {
    loop {
        std::thread::sleep(TICK);
        // Under the registry's lock: a reader that leaves waits until its record is kept, so
        // that the keeper never names a reader gone.
        let mut k = KEEPER.lock();
        if k.kept.is_empty() {
            k.running = false;
            return;
        }
        for kept in &k.kept {
            let sp = kept.lock_dir.space(&kept.dir);
            let _ = keep_record(&sp, &kept.name, kept.id, &kept.mine);
        }
    }
}
