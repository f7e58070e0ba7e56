//! The process's own state, safe across `fork`: [`PerProcess`], and the two facts of the real
//! system kept in it (this process's identity, and the tokens it wrote).
//!
//! A child forked while another thread of its parent holds one of the library's locks would
//! wait for that lock forever: the thread that would let go does not exist in the child. So
//! no lock of the parent's is ever taken in a child: a [`PerProcess`] value is made anew, with
//! a lock of its own, the first time a process other than its maker uses it, and the parent's
//! copy (perhaps locked, perhaps half changed) is left alone.
#![allow(unsafe_code)]

use super::{process_key, Identity};
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A value behind a lock that only threads of this process ever take: in a forked child, the
/// first [`PerProcess::lock`] makes a fresh value (with `make`) instead of touching the
/// parent's.
pub(crate) struct PerProcess<T> {
    current: AtomicPtr<Slot<T>>,
    make: fn() -> T,
    /// `Send` and `Sync` exactly when a `Mutex<T>` is.
    _value: PhantomData<Mutex<T>>,
}

/// One process's value.
struct Slot<T> {
    /// The process (see `process_key`).
    process: (u32, u64),
    value: Mutex<T>,
}

impl<T> PerProcess<T> {
    /// Nothing yet: the first use in each process makes its value with `make`.
    pub(crate) const fn new(make: fn() -> T) -> PerProcess<T> {
        PerProcess {
            current: AtomicPtr::new(std::ptr::null_mut()),
            make,
            _value: PhantomData,
        }
    }

    /// This process's value is `value` (a forked child makes its own with `make`).
    pub(crate) fn with(value: T, make: fn() -> T) -> PerProcess<T> {
        let slot = Box::new(Slot {
            process: process_key(),
            value: Mutex::new(value),
        });
        PerProcess {
            current: AtomicPtr::new(Box::into_raw(slot)),
            make,
            _value: PhantomData,
        }
    }

    /// Locks this process's value, making it first if this process has none yet (it is new,
    /// or a forked child).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        let process = process_key();
        loop {
            let seen = self.current.load(Ordering::Acquire);
            // SAFETY: a non-null pointer here came from `Box::into_raw`, and a slot is freed
            // only by `drop`, which has `&mut self`: it lives as long as the borrow of `self`.
            if let Some(slot) = unsafe { seen.as_ref() } {
                if slot.process == process {
                    return slot.value.lock().unwrap_or_else(|e| e.into_inner());
                }
            }
            let fresh = Box::into_raw(Box::new(Slot {
                process,
                value: Mutex::new((self.make)()),
            }));
            if self
                .current
                .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread of this process was first: use its slot.
                // SAFETY: `fresh` was never shared.
                drop(unsafe { Box::from_raw(fresh) });
            }
            // A parent's slot replaced here is leaked, never locked nor dropped: a thread of
            // the parent may have held it at the fork, or been changing its value.
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let slot = *self.current.get_mut();
        if slot.is_null() {
            return;
        }
        // SAFETY: the pointer came from `Box::into_raw` and nothing else can reach it now.
        let slot = unsafe { Box::from_raw(slot) };
        if slot.process != process_key() {
            // A parent's, in a forked child: left alone (see `lock`).
            std::mem::forget(slot);
        }
    }
}

/// This process's identity facts, read once per process.
static IDENTITY: PerProcess<Option<Identity>> = PerProcess::new(none);

/// The tokens this process wrote and is not done with (a forked child has none of its
/// parent's).
static TOKENS: PerProcess<HashSet<String>> = PerProcess::new(HashSet::new);

fn none<T>() -> Option<T> {
    None
}

/// This process's identity: `read` once, then remembered.
pub(crate) fn identity(read: impl FnOnce() -> Identity) -> Identity {
    IDENTITY.lock().get_or_insert_with(read).clone()
}

/// See [`System::own_token`](super::System::own_token).
pub(crate) fn own_token(token: &str, own: bool) {
    let mut set = TOKENS.lock();
    if own {
        set.insert(token.to_owned());
    } else {
        set.remove(token);
    }
}

/// See [`System::wrote`](super::System::wrote).
pub(crate) fn wrote(token: &str) -> bool {
    TOKENS.lock().contains(token)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A forked child makes its own value, never waiting for the lock of its parent's, which
    /// a thread of the parent held at the fork; the parent's value stays as it was.
    #[test]
    fn a_forked_child_never_takes_its_parents_lock() {
        static COUNT: PerProcess<u32> = PerProcess::new(u32::default);
        *COUNT.lock() = 7;
        let held = COUNT.lock();
        let finished = crate::sys::finishes_in_a_fork(Duration::from_secs(5), || {
            let fresh = *COUNT.lock();
            if fresh != 0 {
                // The parent sees only whether the child finished: a wrong value keeps it
                // from finishing.
                std::thread::sleep(Duration::from_secs(60));
            }
        });
        drop(held);
        assert!(
            finished,
            "the child waited for its parent's lock, or saw its value"
        );
        assert_eq!(*COUNT.lock(), 7);
    }
}
