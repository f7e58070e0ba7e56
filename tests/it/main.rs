//! Integration tests: one binary, one module per concern.
#![allow(clippy::disallowed_methods)] // tests build and tear down fixtures with std::fs

mod chaos;
mod cli;
mod common;
mod contention;
mod crash;
mod faults;
mod hardening;
mod hostile;
mod interop;
mod names;
mod reclaim;
mod release;
mod safety;
mod waiting;
