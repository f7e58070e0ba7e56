//! Asynchronous acquisition (feature `tokio`): exclusion between tasks and between processes,
//! timeouts, cancellation, a killed holder reclaimed at once, a future dropped at every point
//! it can be dropped, and the refusals in async form. Portable: run on Linux with the rest of
//! the suite (`cargo test --features tokio`) and on Windows under Wine in CI.

#[cfg(feature = "tokio")]
#[path = "async/edges.rs"]
mod edges;
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
    let need = "skipped the async tests: they need `--features tokio`\n";
    if std::env::var_os("DIRLOCK_TEST_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("{need}");
    }
    // Straight to the stream, past the harness's capture: a skip is news.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), need.as_bytes());
}
