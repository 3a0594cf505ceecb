//! M2, one elicitation round at concurrency 1: the whole exchange (ask, answer, result) through
//! the gateway as an `input_required` round and its retry, against the native 2025-11-25
//! exchange on the backend's SSE stream.

use http::Uri;

use crate::load::{run_jobs, LoadStats};
use crate::rounds::{gateway_round, native_round};
use crate::wire::{new_client, open_legacy_session};
use crate::BenchResult;

pub struct Settings {
    pub warmup: usize,
    pub exchanges: usize,
}

pub struct Row {
    pub label: String,
    pub stats: LoadStats,
}

pub async fn run_native(settings: &Settings, backend_url: &str) -> BenchResult<Row> {
    let uri: Uri = backend_url.parse()?;
    let client = new_client();
    let session = open_legacy_session(&client, &uri).await?;
    let exchange = move |id: u64| {
        let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
        async move { native_round(&client, &uri, &session, id).await }
    };
    let stats = counted(settings, exchange).await;
    Ok(report("native 2025-11-25 (direct)".to_owned(), stats))
}

pub async fn run_gateway(settings: &Settings, label: String, url: &str) -> BenchResult<Row> {
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
    // Ids step by 2: a gateway exchange uses id and id + 1.
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
