//! Listing a directory through the C library's directory stream, where the system has no
//! call of its own for it here (all but Linux).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The names in the directory open at `fresh` (a descriptor of the caller's own: its offset
/// moves), each passed to `each`, through the C library's directory stream (`fdopendir`).
pub(super) fn list(fresh: OwnedFd, each: &mut dyn FnMut(&[u8])) -> io::Result<()> {
    // SAFETY: fdopendir takes ownership of the descriptor on success.
    let stream = unsafe { libc::fdopendir(fresh.as_raw_fd()) };
    if stream.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fresh); // now owned by `stream`, closed by closedir below
    let result = loop {
        clear_errno();
        // SAFETY: `stream` is a valid open directory stream.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated; it stays
        // valid until the next readdir on this stream.
        each(unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes());
    };
    // SAFETY: `stream` is valid and closed exactly once.
    unsafe { libc::closedir(stream) };
    result
}

/// Resets the thread's `errno`, so that a null `readdir` can tell end-of-stream from error.
fn clear_errno() {
    // SAFETY: the platform's errno location is the calling thread's `errno`, always addressable.
    unsafe { *super::platform::errno() = 0 };
}
