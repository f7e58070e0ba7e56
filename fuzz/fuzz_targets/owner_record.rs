//! The owner-record parser: never panics, refuses more than 4 KiB, and whatever it accepts
//! serializes back to a record it parses to the same value.
#![no_main]

use dirlock::Owner;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(owner) = Owner::parse(data) else {
        return;
    };
    assert!(data.len() <= 4096, "accepted an oversized record");
    assert!(owner.pid > 0 && owner.pid <= i32::MAX as u32 && !owner.token.is_empty());
    // A shared lock's record is judged by its readers' flocks, whatever its `beacon` says.
    assert!(!owner.is_shared() || owner.has_beacon());
    // A record near the limit may not re-serialize within it (escaping grows); otherwise it
    // must round-trip.
    if let Ok(bytes) = owner.to_bytes() {
        assert_eq!(Owner::parse(&bytes).expect("our own output parses"), owner);
    }
});
