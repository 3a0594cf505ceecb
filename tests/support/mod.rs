//! Shared test support: the in-process gateway harness, a fleet of gateway processes behind a
//! round-robin proxy, the 2026-07-28 client and the JSON-RPC request builders and checks the
//! tests share.

pub mod fleet;
pub mod gateway;
pub mod issuer;
pub mod modern_client;
pub mod rpc;
pub mod signal;

/// Runs a test function `async fn NAME(kind: Backend)` once per backend transport.
macro_rules! over_both_transports {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::support::gateway::Backend;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stdio() {
                super::$name(Backend::Stdio).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http() {
                super::$name(Backend::Http).await
            }
        }
    )*};
}
