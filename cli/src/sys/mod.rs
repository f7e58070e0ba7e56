//! The one place where the command meets the operating system beyond the library: receiving
//! the signals (Unix) or console events (Windows) that `dirlock run` acts on, passing them on
//! to its command, and tying the command's life to ours. All `unsafe`, `libc` and
//! `windows-sys` of the command live in this module's children, one per platform, which offer
//! the same functions.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;
