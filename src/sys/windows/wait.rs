//! Waiting on Windows: a waiter sleeps in `WaitForMultipleObjects` on its cancel event, a
//! change notification on the directory that holds the lock (a release renames the lock, a
//! reclaim removes it: both change the names there), and the holder's process, whose handle
//! is signalled when it exits (a holder that dies without releasing).

use super::{open_process, Dir, Handle};
use crate::sys::Wake;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windows_sys::Win32::Foundation::{
    HANDLE, INVALID_HANDLE_VALUE, WAIT_FAILED, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::{
    FindCloseChangeNotification, FindFirstChangeNotificationW, FindNextChangeNotification,
    FILE_NOTIFY_CHANGE_DIR_NAME, FILE_NOTIFY_CHANGE_FILE_NAME,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, SetEvent, WaitForMultipleObjects, INFINITE, PROCESS_SYNCHRONIZE,
};

/// A cancellation signal shared between a waiter and whoever may cancel it (a manual-reset
/// event): once fired, it stays fired.
#[derive(Debug)]
pub struct CancelHandle {
    pub(super) event: Handle,
    fired: AtomicBool,
    /// Wakes asynchronous waiters that wait for the cancel alone (a task queued behind
    /// another), without a registered wait each.
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

impl CancelHandle {
    /// Makes a new, unfired handle.
    pub fn new() -> io::Result<Arc<CancelHandle>> {
        // SAFETY: no security attributes, manual reset, unsignalled, unnamed.
        let event = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
        if event.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(CancelHandle {
            event: Handle(event),
            fired: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }))
    }

    /// Fires the handle, waking every sleeper waiting on it.
    pub fn fire(&self) {
        if !self.fired.swap(true, Ordering::SeqCst) {
            #[cfg(feature = "tokio")]
            self.notify.notify_waiters();
            // SAFETY: the event is open; a failure would only lose a wake-up that `fired`
            // still records.
            unsafe { SetEvent(self.event.0) };
        }
    }

    /// Whether the handle has fired.
    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Notified when the handle fires (a `Notified` made before [`CancelHandle::is_fired`]
    /// is checked sees a fire after it).
    #[cfg(feature = "tokio")]
    pub fn notify(&self) -> &tokio::sync::Notify {
        &self.notify
    }
}

/// A change notification handle (closed with `FindCloseChangeNotification`).
#[derive(Debug)]
pub(super) struct Notification(pub(super) HANDLE);

// SAFETY: a change notification handle may be used and closed from any thread.
unsafe impl Send for Notification {}
// SAFETY: as above; the waiter alone waits on it.
unsafe impl Sync for Notification {}

impl Drop for Notification {
    fn drop(&mut self) {
        // SAFETY: opened by FindFirstChangeNotificationW, closed once.
        unsafe { FindCloseChangeNotification(self.0) };
    }
}

/// A waiter's registrations: the notification on the lock's parent directory and the
/// holder's process.
#[derive(Debug)]
pub struct Watch {
    pub(super) names: Option<Notification>,
    pub(super) process: Option<Handle>,
    /// A holder whose process could not be watched: nothing signals its beacon's release by
    /// death, or (judged by pid) its exit, so the sleeper looks again every [`RECHECK`].
    pub(super) recheck: bool,
}

/// How often a waiter looks again at a holder it cannot be woken for.
pub(super) const RECHECK: Duration = Duration::from_millis(100);

/// Registers a waiter on `lock` (its parent's names) and, when given, on `pid`'s exit.
pub(crate) fn watch(lock: &Dir, pid: Option<u32>, beacon: bool) -> io::Result<Option<Watch>> {
    let parent = lock.current_path()?.parent().map(Path::to_path_buf);
    let names = parent.and_then(|p| {
        let wide = super::wide(&p);
        let names = FILE_NOTIFY_CHANGE_DIR_NAME | FILE_NOTIFY_CHANGE_FILE_NAME;
        // SAFETY: `wide` is NUL-terminated; not the subtree, only names in it.
        let h = unsafe { FindFirstChangeNotificationW(wide.as_ptr(), 0, names) };
        (h != INVALID_HANDLE_VALUE && !h.is_null()).then_some(Notification(h))
    });
    // None: no such process (the caller's next look sees it), or not ours to wait on (the
    // directory's changes still come).
    let process = pid.and_then(|pid| open_process(PROCESS_SYNCHRONIZE, pid).ok());
    if names.is_none() && process.is_none() {
        return Ok(None);
    }
    // Without the holder's process, nothing reports a beacon's release by death, nor the
    // exit of a holder judged by pid.
    let recheck = process.is_none() && (beacon || pid.is_some());
    Ok(Some(Watch {
        names,
        process,
        recheck,
    }))
}

/// The handles a sleeper waits on, each with its slot: 0 the cancel event, 1 the change
/// notification, 2 the holder's process.
pub(super) fn slots(watch: Option<&Watch>, cancel: Option<&CancelHandle>) -> Vec<(usize, HANDLE)> {
    let names = watch.and_then(|w| w.names.as_ref()).map(|n| n.0);
    let process = watch.and_then(|w| w.process.as_ref()).map(|p| p.0);
    [cancel.map(|c| c.event.0), names, process]
        .into_iter()
        .enumerate()
        .filter_map(|(slot, h)| Some((slot, h?)))
        .collect()
}

fn ms(left: Option<Duration>) -> u32 {
    match left {
        None => INFINITE,
        // Round up so that a sleep never returns before its deadline; INFINITE is u32::MAX.
        Some(d) => d.as_micros().div_ceil(1000).min(u128::from(INFINITE - 1)) as u32,
    }
}

/// Sleeps until `watch` fires, `timeout` passes or `cancel` is fired.
pub(crate) fn sleep(
    watch: Option<&Watch>,
    timeout: Option<Duration>,
    cancel: Option<&CancelHandle>,
) -> io::Result<Wake> {
    if cancel.is_some_and(|c| c.is_fired()) {
        return Ok(Wake::Cancelled);
    }
    let (kinds, handles): (Vec<usize>, Vec<HANDLE>) = slots(watch, cancel).into_iter().unzip();
    // A deadline beyond what the clock can count (`Duration::MAX`) is no deadline.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    if handles.is_empty() {
        std::thread::sleep(timeout.unwrap_or(Duration::from_millis(250)));
        return Ok(Wake::TimedOut);
    }
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let capped = watch.is_some_and(|w| w.recheck) && left.is_none_or(|l| l > RECHECK);
    let wait = if capped { Some(RECHECK) } else { left };
    // SAFETY: `handles` holds 1 to 3 open handles for the duration of the call.
    let rc = unsafe { WaitForMultipleObjects(handles.len() as u32, handles.as_ptr(), 0, ms(wait)) };
    if rc == WAIT_TIMEOUT {
        // Capped: not the caller's deadline, but time to look at the beacon again.
        return Ok(if capped {
            Wake::Changed
        } else {
            Wake::TimedOut
        });
    }
    if rc == WAIT_FAILED {
        return Err(io::Error::last_os_error());
    }
    let i = rc.wrapping_sub(WAIT_OBJECT_0) as usize;
    match kinds.get(i) {
        Some(0) => Ok(Wake::Cancelled),
        Some(1) => {
            // Re-arm it for the next sleep; the change may be another lock's: look again.
            // SAFETY: the notification handle is open.
            unsafe { FindNextChangeNotification(handles[i]) };
            Ok(Wake::Changed)
        }
        // The holder exited, or an abandoned wait (WAIT_ABANDONED_0 + i): look again.
        _ => Ok(Wake::Changed),
    }
}
