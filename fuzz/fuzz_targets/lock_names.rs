//! Lock-name derivation and the classification of lock-directory entries: derived names have
//! the reference's shape and classify back to what they are; classifying arbitrary names never
//! panics; a name the checker accepts is a lock whose derived names classify back to it; an
//! entry inside a shared lock classifies to a token that is a safe name, or to nothing.
#![no_main]

use dirlock::paths::{classify, global_setup_lock_name, repository_lock_name, Entry};
use libfuzzer_sys::fuzz_target;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new(std::ffi::OsStr::from_bytes(data));
    for (name, prefix) in [
        (repository_lock_name(path), "repository-"),
        (global_setup_lock_name(path), "global-setup-"),
    ] {
        let hex = name
            .strip_prefix(prefix)
            .and_then(|n| n.strip_suffix(".lock"))
            .expect("shape");
        assert!(
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(classify(&name), Entry::Lock(name.clone()));
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = classify(s);
        dirlock::__sim::check_names(s);
    }
});
