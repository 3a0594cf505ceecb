//! M2, one elicitation round at concurrency 1: the whole exchange (ask, answer, result), each
//! way a client can go through it, on the same dual-era backend:
//! - the native 2025-11-25 exchange on the backend's SSE stream (the baseline of the table);
//! - the 2026-07-28 exchange directly on the backend: `input_required`, then the retry;
//! - the 2026-07-28 exchange through the gateway whose backend is fixed to 2025-11-25 (the
//!   gateway's own round over the backend's SSE exchange), with the settle settings of each row;
//! - the 2026-07-28 exchange through the gateway whose backend is fixed to 2026-07-28 (the
//!   relay: the backend's round passes through, its `requestState` sealed in the gateway's);
//! - the native 2025-11-25 exchange through that same gateway (the reverse bridge: the
//!   backend's round becomes `elicitation/create` on the client's request stream).

use http::Uri;

use crate::load::{run_jobs, LoadStats};
use crate::rounds::{gateway_round, native_round};
use crate::wire::{close_legacy_session, new_client, open_legacy_session};
use crate::BenchResult;

/// The baseline row: the native exchange directly on the backend.
pub const NATIVE: &str = "native 2025-11-25 (direct)";
/// The 2026-07-28 exchange directly on the backend.
pub const DIRECT_MODERN: &str = "direct 2026-07-28 round";
/// The gateway's own round, default settings (backend fixed to 2025-11-25).
pub const GATEWAY_DEFAULT: &str = "gateway, default (settle_quiet 1 ms, settle_window 50 ms)";
/// The relayed round.
pub const RELAY: &str = "relay round (2026-07-28 client → gateway → 2026-07-28 backend)";
/// The reverse bridge's round.
pub const REVERSE_BRIDGE: &str =
    "reverse bridge round (2025-11-25 client → gateway → 2026-07-28 backend)";

pub struct Settings {
    pub warmup: usize,
    pub exchanges: usize,
}

pub struct Row {
    pub label: String,
    pub stats: LoadStats,
}

/// The native 2025-11-25 exchange on one session opened at `url`: directly on the backend, or
/// through a gateway (the reverse bridge when its backend is fixed to 2026-07-28).
pub async fn run_legacy(settings: &Settings, label: String, url: &str) -> BenchResult<Row> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let session = open_legacy_session(&client, &uri).await?;
    let exchange = {
        let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
        move |id: u64| {
            let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
            async move { native_round(&client, &uri, &session, id).await }
        }
    };
    let stats = counted(settings, exchange).await;
    // Best effort: the session is not measured.
    let _ = close_legacy_session(&client, &uri, &session).await;
    Ok(report(label, stats))
}

/// The 2026-07-28 exchange (`input_required`, then the retry) at `url`: through a gateway, or
/// directly on the backend.
pub async fn run_modern(settings: &Settings, label: String, url: &str) -> BenchResult<Row> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let exchange = move |id: u64| {
        let (client, uri) = (client.clone(), uri.clone());
        async move { gateway_round(&client, &uri, id).await }
    };
    let stats = counted(settings, exchange).await;
    Ok(report(label, stats))
}

/// A warm-up pass, then the measured pass, one exchange at a time.
async fn counted<F, Fut>(settings: &Settings, exchange: F) -> LoadStats
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = BenchResult<()>> + Send,
{
    // Ids step by 2: a 2026-07-28 exchange uses id and id + 1.
    let ids = |from: u64, count: usize| (0..count as u64).map(|n| from + 2 * n).collect::<Vec<_>>();
    let (warmup, _) = run_jobs(1, ids(1, settings.warmup), exchange.clone()).await;
    let (mut stats, _) = run_jobs(1, ids(1_000_001, settings.exchanges), exchange).await;
    // Failures during the warm-up count too: they are failures.
    stats.errors += warmup.errors;
    if stats.first_error.is_none() {
        stats.first_error = warmup.first_error;
    }
    stats
}

fn report(label: String, stats: LoadStats) -> Row {
    eprintln!(
        "mrtr-bench: M2 {label}: {} exchanges  p50 {} µs  p99 {} µs  errors {}",
        stats.completed,
        stats.p50_us(),
        stats.p99_us(),
        stats.errors
    );
    Row { label, stats }
}
