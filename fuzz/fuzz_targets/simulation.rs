//! The stateful target: the bytes choose two to four simulated processes (workers that fail
//! fast, wait or time out, readers, the reference implementation, sweepers, unlockers, an
//! intruder) and drive every scheduling decision and crash of the real protocol code over the
//! in-memory system; every invariant is checked after every step.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = dirlock::__sim::fuzz(data) {
        panic!("{violation}");
    }
});
