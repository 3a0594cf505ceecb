//! M9, one endpoint over several backends: a merged 2026-07-28 `tools/list` (the first page, no
//! cursor) through the gateway, against the same list from a route over one backend.
//!
//! Rows, each for both backend eras (`era = "2025-11-25"`: each backend's part leases a session
//! and goes the gateway's own path; `era = "2026-07-28"`: each part is relayed):
//! - `1 backend`: an ordinary route, `backend = "fast"` ([`HttpGatewayConfig`]): the baseline;
//! - `3 backends` and `10 backends`: a route with `backends = ["b1", ...]`
//!   ([`AggregateGatewayConfig`]), which asks every backend at once and merges their pages
//!   under `bN__NAME`.
//!
//! Every backend is a fast backend process of its own, so the fan-out reaches that many
//! processes; each size starts its own, and stops them by PID once both eras are measured. Each
//! gateway is stopped before the next one starts.
//!
//! Per row, with M1's warm-up and measured window: latency at concurrency 1, then throughput at
//! [`Settings::throughput_concurrency`], with the CPU time of the gateway and of all the
//! backends over that window. Every answer must be a result whose `tools` are exactly the 3×N
//! expected names, with no `nextCursor`; any other answer is an error of its row.

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use serde_json::{json, Value};

use crate::backend::tools_list;
use crate::gateway_config::{AggregateGatewayConfig, BackendEra, HttpGatewayConfig};
use crate::load::{run_timed, LoadStats};
use crate::procs::{cpu_time_us, BackendProcess, GatewayProcess};
use crate::wire::{json_exchange, modern_post, modern_tools_list, new_client, result_of};
use crate::BenchResult;

/// The sizes of the route, in backends; 1 is the ordinary route.
pub const BACKEND_COUNTS: [usize; 3] = [1, 3, 10];
/// The eras of the backends, in the order their rows run.
const ERAS: [BackendEra; 2] = [BackendEra::Legacy, BackendEra::Modern];

pub struct Settings {
    /// The concurrency of the throughput point (the latency point runs at 1).
    pub throughput_concurrency: usize,
    pub warmup: Duration,
    pub measure: Duration,
}

/// One route size with one backend era.
pub struct Row {
    pub backends: usize,
    pub era: BackendEra,
    /// Concurrency 1.
    pub latency: LoadStats,
    pub throughput_concurrency: usize,
    pub throughput: LoadStats,
    /// CPU time of the gateway per list over the throughput window, in µs.
    pub gateway_cpu_us: Option<f64>,
    /// CPU time of all the backends together per list over the throughput window, in µs.
    pub backends_cpu_us: Option<f64>,
}

impl Row {
    pub fn label(&self) -> String {
        size_label(self.backends)
    }

    /// The tools each answer lists: three per backend.
    pub fn tools(&self) -> usize {
        expected_names(self.backends).len()
    }
}

/// `1 backend`, `3 backends`.
pub fn size_label(backends: usize) -> String {
    if backends == 1 {
        "1 backend".to_owned()
    } else {
        format!("{backends} backends")
    }
}

/// What the rows call a backend era.
pub fn era_label(era: BackendEra) -> &'static str {
    match era {
        BackendEra::Legacy => "2025-11-25 (gateway's own path)",
        BackendEra::Modern => "2026-07-28 (relay)",
    }
}

/// Every row that ran, and why the others did not.
pub async fn run(settings: &Settings) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for count in BACKEND_COUNTS {
        if let Err(error) = run_size(settings, count, &mut rows).await {
            failures.push(format!(
                "M9 {} did not complete: {error}",
                size_label(count)
            ));
        }
    }
    (rows, failures)
}

/// `count` fresh backend processes, and one gateway in front of them per era.
async fn run_size(settings: &Settings, count: usize, rows: &mut Vec<Row>) -> BenchResult<()> {
    let backends = (0..count)
        .map(|_| BackendProcess::start())
        .collect::<BenchResult<Vec<_>>>()?;
    let urls: Vec<String> = backends.iter().map(BackendProcess::url).collect();
    let backend_pids: Arc<[u32]> = backends.iter().map(|b| b.guard.pid()).collect();
    let expected = Arc::new(expected_names(count));
    for era in ERAS {
        let config = match (count, era) {
            (1, BackendEra::Legacy) => HttpGatewayConfig::new(urls[0].clone()).to_toml(),
            (1, BackendEra::Modern) => HttpGatewayConfig::relay(urls[0].clone()).to_toml(),
            _ => AggregateGatewayConfig::new(urls.clone(), era).to_toml(),
        };
        let gateway = GatewayProcess::start(&config, Duration::from_secs(10))?;
        let url = gateway.url();
        let latency = list_load(&url, 1, settings, expected.clone()).await?;
        let sampler = tokio::spawn(cpu_in_window(
            gateway.guard.pid(),
            backend_pids.clone(),
            settings.warmup,
            settings.measure,
        ));
        let concurrency = settings.throughput_concurrency;
        let throughput = list_load(&url, concurrency, settings, expected.clone()).await?;
        let (gateway_cpu, backends_cpu) = sampler.await.unwrap_or((None, None));
        let per_list = |micros: Option<u64>| {
            micros
                .filter(|_| throughput.completed > 0)
                .map(|micros| micros as f64 / throughput.completed as f64)
        };
        let row = Row {
            backends: count,
            era,
            latency,
            throughput_concurrency: concurrency,
            gateway_cpu_us: per_list(gateway_cpu),
            backends_cpu_us: per_list(backends_cpu),
            throughput,
        };
        eprintln!(
            "mrtr-bench: M9 {:<11} {:<31} c=1 p50 {:>6} µs  p99 {:>6} µs  c={concurrency} {:>7.0} req/s  gateway CPU/list {:.0} µs  errors {}",
            row.label(),
            era_label(era),
            row.latency.p50_us(),
            row.latency.p99_us(),
            row.throughput.per_second(),
            row.gateway_cpu_us.unwrap_or(0.0),
            row.latency.errors + row.throughput.errors,
        );
        if row.latency.errors + row.throughput.errors > 0 {
            eprintln!("mrtr-bench: M9 gateway log:\n{}", gateway.log_tail());
        }
        rows.push(row);
    }
    Ok(())
}

/// The tool names a route over `count` fast backends lists: the backend's own for one, each
/// under `bN__` for several.
fn expected_names(count: usize) -> Vec<String> {
    let list = tools_list();
    let own: Vec<&str> = list["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    if count == 1 {
        return own.into_iter().map(str::to_owned).collect();
    }
    (0..count)
        .flat_map(|i| {
            let prefix = AggregateGatewayConfig::backend_name(i);
            own.iter().map(move |name| format!("{prefix}__{name}"))
        })
        .collect()
}

/// Checks a `tools/list` answer: a result listing exactly `expected` (in any order), no
/// `nextCursor`.
fn check(message: &Value, expected: &[String]) -> BenchResult<()> {
    let result = result_of(message)?;
    let tools = result["tools"]
        .as_array()
        .ok_or_else(|| format!("no tools array in {result}"))?;
    if tools.len() != expected.len() {
        return Err(format!("{} tools listed, {} expected", tools.len(), expected.len()).into());
    }
    let mut names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["name"].as_str().unwrap_or_default())
        .collect();
    names.sort_unstable();
    let mut wanted: Vec<&str> = expected.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    if let Some((got, want)) = names.iter().zip(&wanted).find(|(got, want)| got != want) {
        return Err(format!("tool {got:?} listed where {want:?} was expected").into());
    }
    if let Some(cursor) = result.get("nextCursor") {
        return Err(format!("nextCursor {cursor} after one page of every backend").into());
    }
    Ok(())
}

/// 2026-07-28 `tools/list` to `url` from `concurrency` clients.
async fn list_load(
    url: &str,
    concurrency: usize,
    settings: &Settings,
    expected: Arc<Vec<String>>,
) -> BenchResult<LoadStats> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    Ok(
        run_timed(concurrency, settings.warmup, settings.measure, move |id| {
            let (client, uri, expected) = (client.clone(), uri.clone(), expected.clone());
            async move {
                let body = modern_tools_list(id, json!({})).to_string();
                let message =
                    json_exchange(&client, modern_post(&uri, "tools/list", None, body)?).await?;
                check(&message, &expected)
            }
        })
        .await,
    )
}

/// CPU time of the gateway and of all the backends together between `warmup` and
/// `warmup + measure` from now, in µs.
async fn cpu_in_window(
    gateway: u32,
    backends: Arc<[u32]>,
    warmup: Duration,
    measure: Duration,
) -> (Option<u64>, Option<u64>) {
    let read = || {
        let backends: Option<u64> = backends.iter().map(|&pid| cpu_time_us(pid).ok()).sum();
        (cpu_time_us(gateway).ok(), backends)
    };
    tokio::time::sleep(warmup).await;
    let before = read();
    tokio::time::sleep(measure).await;
    let after = read();
    let spent = |before: Option<u64>, after: Option<u64>| Some(after?.saturating_sub(before?));
    (spent(before.0, after.0), spent(before.1, after.1))
}
