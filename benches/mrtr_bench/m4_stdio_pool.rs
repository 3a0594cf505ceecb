//! M4, the stdio pool: the first `tools/call` after the gateway starts, in front of its own
//! demo backend (`mrtr-gateway demo-backend`, one child process per session).
//!
//! - Cold: `min_idle = 0` and no admin listener (whose readiness probe would start a session),
//!   so the first call waits for a child process to start and initialize.
//! - Warm: `min_idle = 1` with the admin listener; `/readyz` turns 200 once the probe's session
//!   is initialized, and that session waits idle for the first call.
//!
//! Each run starts a fresh gateway; the medians over the runs are reported.

use std::time::{Duration, Instant};

use http::Uri;
use serde_json::json;

use crate::gateway_config::stdio_demo_config;
use crate::procs::GatewayProcess;
use crate::rounds::wait_ready;
use crate::wire::{
    first_text, json_exchange, modern_post, modern_tool_call, new_client, result_of, HttpClient,
};
use crate::BenchResult;

pub struct Settings {
    pub runs: usize,
}

/// Microseconds of each run's first and second call.
#[derive(Default)]
pub struct Results {
    pub cold_first_us: Vec<u64>,
    pub cold_second_us: Vec<u64>,
    pub warm_first_us: Vec<u64>,
    pub warm_second_us: Vec<u64>,
}

pub async fn run(settings: &Settings) -> BenchResult<Results> {
    let mut results = Results::default();
    for run in 0..settings.runs {
        let (first, second) = first_calls(false).await?;
        results.cold_first_us.push(first);
        results.cold_second_us.push(second);
        let (first, second) = first_calls(true).await?;
        results.warm_first_us.push(first);
        results.warm_second_us.push(second);
        eprintln!(
            "mrtr-bench: M4 run {}: cold first call {} µs, warm first call {} µs",
            run + 1,
            results.cold_first_us[run],
            results.warm_first_us[run]
        );
    }
    Ok(results)
}

/// Starts a gateway, times its first two `tools/call echo`, stops it.
async fn first_calls(warm: bool) -> BenchResult<(u64, u64)> {
    let config = stdio_demo_config(usize::from(warm), warm);
    let gateway = GatewayProcess::start(&config, Duration::from_secs(10))?;
    let uri: Uri = gateway.url().parse()?;
    let client = new_client();
    if warm {
        let admin = gateway
            .admin
            .ok_or("the gateway did not report its admin address")?;
        wait_ready(&client, admin, Duration::from_secs(20)).await?;
    }
    let first = timed_echo(&client, &uri, 1).await;
    let second = timed_echo(&client, &uri, 2).await;
    match (first, second) {
        (Ok(first), Ok(second)) => Ok((first, second)),
        (Err(error), _) | (_, Err(error)) => {
            Err(format!("{error}; gateway log:\n{}", gateway.log_tail()).into())
        }
    }
}

async fn timed_echo(client: &HttpClient, uri: &Uri, id: u64) -> BenchResult<u64> {
    let body = modern_tool_call(id, "echo", json!({"text": "warm?"}), json!({})).to_string();
    let started = Instant::now();
    let message =
        json_exchange(client, modern_post(uri, "tools/call", Some("echo"), body)?).await?;
    let elapsed = started.elapsed();
    if first_text(result_of(&message)?) != "warm?" {
        return Err(format!("unexpected echo result {message}").into());
    }
    Ok(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
}

/// The median of `values` (the lower middle for an even count); 0 when empty.
pub fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}
