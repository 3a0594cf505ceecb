//! M3, capacity: many rounds held at once. A fresh backend and gateway per size, so that the
//! memory baseline is clean. Rounds are opened with bounded concurrency; the gateway's
//! resident memory is read before and after, and a sample of the held rounds is retried while
//! the rest stay held. Both processes are stopped at the end, which releases everything.

use std::time::Duration;

use crate::load::{run_jobs, LoadStats};
use crate::procs::rss_kib;
use crate::rounds::{finish_round, held_calls, open_round, start_for_held_rounds, HeldSetup};
use crate::BenchResult;

pub struct Settings {
    pub sizes: Vec<usize>,
    pub open_concurrency: usize,
    pub retry_sample: usize,
    pub retry_concurrency: usize,
}

pub struct Row {
    pub held: usize,
    /// Opening the rounds (latency of the first request, errors, time taken).
    pub opened: LoadStats,
    /// `held_calls` from the gateway's `/status` once they were open.
    pub confirmed_held: Option<u64>,
    pub gateway_rss_before_kib: u64,
    pub gateway_rss_after_kib: u64,
    pub backend_rss_before_kib: u64,
    pub backend_rss_after_kib: u64,
    /// The retries of the sample, made while the other rounds stay held.
    pub retries: LoadStats,
    pub retry_concurrency: usize,
    /// How long the gateway took to exit on SIGTERM with the rest still held.
    pub gateway_exit: Option<Duration>,
}

impl Row {
    pub fn gateway_kib_per_round(&self) -> f64 {
        self.gateway_rss_after_kib
            .saturating_sub(self.gateway_rss_before_kib) as f64
            / self.held.max(1) as f64
    }

    pub fn backend_kib_per_round(&self) -> f64 {
        self.backend_rss_after_kib
            .saturating_sub(self.backend_rss_before_kib) as f64
            / self.held.max(1) as f64
    }
}

pub async fn run_one(settings: &Settings, held: usize) -> BenchResult<Row> {
    // A `held_ttl` longer than opening and retrying take, so no round expires while measured.
    let HeldSetup {
        backend,
        mut gateway,
        admin,
        uri,
        client,
    } = start_for_held_rounds(held, 600).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gateway_rss_before_kib = rss_kib(gateway.guard.pid())?;
    let backend_rss_before_kib = rss_kib(backend.guard.pid())?;

    let ids: Vec<u64> = (0..held as u64).map(|n| 1_000_001 + 2 * n).collect();
    let open_client = client.clone();
    let open_uri = uri.clone();
    let (opened, rounds) = run_jobs(settings.open_concurrency, ids, move |id: u64| {
        let (client, uri, id) = (open_client.clone(), open_uri.clone(), id);
        async move { open_round(&client, &uri, id).await }
    })
    .await;
    eprintln!(
        "mrtr-bench: M3 opened {} of {held} rounds in {:.1} s ({} errors{})",
        rounds.len(),
        opened.elapsed.as_secs_f64(),
        opened.errors,
        opened
            .first_error
            .as_deref()
            .map(|e| format!(", first: {e}"))
            .unwrap_or_default()
    );
    // Let the last responses and the backend's writes settle before reading memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Err(error) = gateway.guard.check_running() {
        return Err(format!("{error}; its log:\n{}", gateway.log_tail()).into());
    }
    let confirmed_held = held_calls(&client, admin).await.ok();
    let gateway_rss_after_kib = rss_kib(gateway.guard.pid())?;
    let backend_rss_after_kib = rss_kib(backend.guard.pid())?;

    let sample: Vec<_> = rounds.into_iter().take(settings.retry_sample).collect();
    let retry_client = client.clone();
    let retry_uri = uri.clone();
    let (retries, _) = run_jobs(settings.retry_concurrency, sample, move |round| {
        let (client, uri) = (retry_client.clone(), retry_uri.clone());
        async move { finish_round(&client, &uri, &round).await }
    })
    .await;
    eprintln!(
        "mrtr-bench: M3 held {held}: gateway RSS {gateway_rss_before_kib} → {gateway_rss_after_kib} KiB, retries p50 {} µs p99 {} µs, errors {}",
        retries.p50_us(),
        retries.p99_us(),
        retries.errors
    );
    drop(client);
    let gateway_exit = gateway.guard.stop();
    drop(gateway);
    drop(backend);
    Ok(Row {
        held,
        opened,
        confirmed_held,
        gateway_rss_before_kib,
        gateway_rss_after_kib,
        backend_rss_before_kib,
        backend_rss_after_kib,
        retries,
        retry_concurrency: settings.retry_concurrency,
        gateway_exit,
    })
}
