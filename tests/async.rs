//! Asynchronous acquisition (feature `tokio`): exclusion between tasks and between processes,
//! timeouts, cancellation, a killed holder reclaimed at once, a future dropped at every point
//! it can be dropped, and the refusals in async form. Portable: run on Linux with the rest of
//! the suite (`cargo test --features tokio`) and on Windows under Wine in CI.

#[cfg(feature = "tokio")]
#[path = "async/edges.rs"]
mod edges;
#[path = "common/machine.rs"]
#[allow(dead_code, reason = "without the feature, only the skip rule is used")]
mod machine;
#[cfg(feature = "tokio")]
#[path = "async/order.rs"]
mod order;
#[cfg(feature = "tokio")]
#[path = "async/tasks.rs"]
mod tasks;

/// Without the feature there is nothing to test: one line says so, or, where every layer is
/// required (CI), the test fails.
#[cfg(not(feature = "tokio"))]
#[test]
fn the_async_tests_need_the_tokio_feature() {
    machine::lacks("the async tests", "`--features tokio`", false);
}
