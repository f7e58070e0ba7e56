//! The asynchronous sleep on Windows (feature `tokio`): the handles of [`super::wait`]'s
//! sleep (the cancel event, the change notification, the holder's process), each waited on by
//! the system's wait threads (`RegisterWaitForSingleObject`), whose callback wakes the task.
//! A waiting task holds no thread of its own.

use super::wait::{slots, CancelHandle, Watch, RECHECK};
use crate::sys::Wake;
use std::ffi::c_void;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use windows_sys::Win32::Foundation::{HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Storage::FileSystem::FindNextChangeNotification;
use windows_sys::Win32::System::Threading::{
    RegisterWaitForSingleObject, UnregisterWaitEx, INFINITE, WT_EXECUTEONLYONCE,
};

/// What the callbacks tell the task: which handle was signalled (the cancel event, the
/// notification, the process), and a wake-up.
struct Signal {
    fired: [AtomicBool; 3],
    notify: tokio::sync::Notify,
}

/// One handle waited on by the system's wait threads for `signal`'s slot `slot`.
struct Registration {
    wait: HANDLE,
    context: *mut (Arc<Signal>, usize),
}

// SAFETY: the wait handle and the context may be used and released from any thread.
unsafe impl Send for Registration {}
// SAFETY: as above; nothing is shared through a `&Registration`.
unsafe impl Sync for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: `wait` came from RegisterWaitForSingleObject; with INVALID_HANDLE_VALUE the
        // call returns once a callback that is running has returned, so no callback uses the
        // context after it is freed here, once.
        unsafe {
            UnregisterWaitEx(self.wait, INVALID_HANDLE_VALUE);
            drop(Box::from_raw(self.context));
        }
    }
}

/// The callback of a registration: marks its slot and wakes the task.
unsafe extern "system" fn on_signal(context: *mut c_void, _timed_out: bool) {
    // SAFETY: `context` is the registration's boxed pair, alive until it is unregistered.
    let (signal, slot) = unsafe { &*(context as *const (Arc<Signal>, usize)) };
    signal.fired[*slot].store(true, Ordering::SeqCst);
    signal.notify.notify_one();
}

fn register(handle: HANDLE, signal: &Arc<Signal>, slot: usize) -> io::Result<Registration> {
    let context = Box::into_raw(Box::new((signal.clone(), slot)));
    let mut wait: HANDLE = std::ptr::null_mut();
    // SAFETY: `handle` is open for the registration's life (the caller's watch or cancel
    // handle outlives the sleep); `context` stays valid until the registration is dropped.
    let ok = unsafe {
        RegisterWaitForSingleObject(
            &mut wait,
            handle,
            Some(on_signal),
            context.cast(),
            INFINITE,
            WT_EXECUTEONLYONCE,
        )
    };
    if ok == 0 {
        let e = io::Error::last_os_error();
        // SAFETY: not registered: the context is ours to free, once.
        drop(unsafe { Box::from_raw(context) });
        return Err(e);
    }
    Ok(Registration { wait, context })
}

/// Nothing to check: a wait here needs no I/O driver (the system's wait threads wake it).
pub(crate) fn check_reactor() {}

/// Sleeps until `watch` fires or `cancel` is fired (with neither, forever: the caller bounds
/// it); a watch that cannot see its holder's end asks to be looked at again after
/// [`RECHECK`]. Dropping the future unregisters every wait.
///
/// # Errors
///
/// When a wait cannot be registered.
pub(crate) async fn sleep_async(
    watch: Option<&Watch>,
    cancel: Option<&CancelHandle>,
) -> io::Result<Wake> {
    if cancel.is_some_and(|c| c.is_fired()) {
        return Ok(Wake::Cancelled);
    }
    let signal = Arc::new(Signal {
        fired: Default::default(),
        notify: tokio::sync::Notify::new(),
    });
    let names = watch.and_then(|w| w.names.as_ref());
    let _registrations = slots(watch, cancel)
        .into_iter()
        .map(|(slot, h)| register(h, &signal, slot))
        .collect::<io::Result<Vec<_>>>()?;
    let mut recheck = pin!(async {
        match watch.is_some_and(|w| w.recheck) {
            true => tokio::time::sleep(RECHECK).await,
            false => std::future::pending().await,
        }
    });
    loop {
        if signal.fired[0].load(Ordering::SeqCst) {
            return Ok(Wake::Cancelled);
        }
        if signal.fired[1].load(Ordering::SeqCst) {
            if let Some(n) = names {
                // Re-arm it for the next sleep; the change may be another lock's: look again.
                // SAFETY: the notification handle is open (the watch outlives the sleep).
                unsafe { FindNextChangeNotification(n.0) };
            }
            return Ok(Wake::Changed);
        }
        if signal.fired[2].load(Ordering::SeqCst) {
            return Ok(Wake::Changed); // the holder exited
        }
        // A wake-up between the checks above and this wait is kept by `Notify` as a permit.
        let mut notified = pin!(signal.notify.notified());
        let recheck_done = std::future::poll_fn(|cx| {
            use std::future::Future;
            use std::task::Poll;
            if notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            recheck.as_mut().poll(cx).map(|()| true)
        })
        .await;
        if recheck_done {
            return Ok(Wake::Changed);
        }
    }
}
