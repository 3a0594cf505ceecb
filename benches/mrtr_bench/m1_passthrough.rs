//! M1, passthrough: `tools/call echo` at fixed concurrency against three targets in one run:
//! the backend directly (2025-11-25 on an initialized session), the gateway (2026-07-28), and
//! nginx proxying to the same backend (2025-11-25). What the gateway adds over a plain reverse
//! proxy is the interesting number.

use std::time::Duration;

use http::{HeaderValue, Uri};
use serde_json::{json, Value};

use crate::load::{run_timed, LoadStats};
use crate::procs::cpu_time_us;
use crate::wire::{
    first_text, json_exchange, legacy_post, legacy_tool_call, modern_post, modern_tool_call,
    new_client, open_legacy_session, result_of,
};
use crate::BenchResult;

/// Who the load client talks to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    Direct,
    Gateway,
    Nginx,
}

impl Target {
    pub fn label(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Gateway => "gateway",
            Target::Nginx => "nginx",
        }
    }
}

pub struct Settings {
    pub concurrencies: Vec<usize>,
    pub warmup: Duration,
    pub measure: Duration,
}

/// One measured point.
pub struct Point {
    pub target: Target,
    pub concurrency: usize,
    pub stats: LoadStats,
    /// CPU time per request of the gateway or nginx (workers included), in µs.
    pub proxy_cpu_us: Option<f64>,
    /// CPU time per request of the backend, in µs.
    pub backend_cpu_us: Option<f64>,
}

/// The URLs of the three targets (nginx may be missing) and the processes behind them.
pub struct Targets {
    pub direct: String,
    pub gateway: String,
    pub nginx: Option<String>,
    pub backend_pid: u32,
    pub gateway_pid: u32,
    pub nginx_pid: Option<u32>,
}

const ECHO_TEXT: &str = "hello";

fn check_echo(message: &Value) -> BenchResult<()> {
    let result = result_of(message)?;
    if first_text(result) != ECHO_TEXT {
        return Err(format!("unexpected echo result {result}").into());
    }
    Ok(())
}

pub async fn run(settings: &Settings, targets: &Targets) -> BenchResult<Vec<Point>> {
    let mut points = Vec::new();
    for &concurrency in &settings.concurrencies {
        let mut order = vec![(Target::Direct, targets.direct.as_str())];
        order.push((Target::Gateway, targets.gateway.as_str()));
        if let Some(nginx) = &targets.nginx {
            order.push((Target::Nginx, nginx.as_str()));
        }
        for (target, url) in order {
            let proxy_pid = match target {
                Target::Direct => None,
                Target::Gateway => Some(targets.gateway_pid),
                Target::Nginx => targets.nginx_pid,
            };
            // CPU is sampled over the measured window only, like the requests.
            let cpu = tokio::spawn(cpu_in_window(
                [proxy_pid, Some(targets.backend_pid)],
                settings.warmup,
                settings.measure,
            ));
            let stats = match target {
                Target::Gateway => gateway_load(url, concurrency, settings).await?,
                Target::Direct | Target::Nginx => legacy_load(url, concurrency, settings).await?,
            };
            let [proxy_cpu, backend_cpu] = cpu.await.unwrap_or([None, None]);
            let per_request = |micros: Option<u64>| {
                micros
                    .filter(|_| stats.completed > 0)
                    .map(|micros| micros as f64 / stats.completed as f64)
            };
            let (proxy_cpu_us, backend_cpu_us) = (per_request(proxy_cpu), per_request(backend_cpu));
            eprintln!(
                "mrtr-bench: M1 {:<7} c={concurrency:<3} {:>9.0} req/s  p50 {:>6} µs  p99 {:>6} µs  errors {}  proxy CPU/req {:.0} µs",
                target.label(),
                stats.per_second(),
                stats.p50_us(),
                stats.p99_us(),
                stats.errors,
                proxy_cpu_us.unwrap_or(0.0)
            );
            points.push(Point {
                target,
                concurrency,
                stats,
                proxy_cpu_us,
                backend_cpu_us,
            });
        }
    }
    Ok(points)
}

/// CPU time each process used between `warmup` and `warmup + measure` from now, in µs.
async fn cpu_in_window(
    pids: [Option<u32>; 2],
    warmup: Duration,
    measure: Duration,
) -> [Option<u64>; 2] {
    let read = |pids: [Option<u32>; 2]| pids.map(|pid| pid.and_then(|pid| cpu_time_us(pid).ok()));
    tokio::time::sleep(warmup).await;
    let before = read(pids);
    tokio::time::sleep(measure).await;
    let after = read(pids);
    [0, 1].map(|i| match (before[i], after[i]) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    })
}

/// 2025-11-25 `tools/call echo` on one session opened through `url` (direct or via nginx).
async fn legacy_load(url: &str, concurrency: usize, settings: &Settings) -> BenchResult<LoadStats> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let session: HeaderValue = open_legacy_session(&client, &uri).await?;
    Ok(
        run_timed(concurrency, settings.warmup, settings.measure, move |id| {
            let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
            async move {
                let body = legacy_tool_call(id, "echo", json!({"text": ECHO_TEXT})).to_string();
                let message =
                    json_exchange(&client, legacy_post(&uri, Some(&session), body)?).await?;
                check_echo(&message)
            }
        })
        .await,
    )
}

/// 2026-07-28 `tools/call echo` through the gateway.
async fn gateway_load(
    url: &str,
    concurrency: usize,
    settings: &Settings,
) -> BenchResult<LoadStats> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    Ok(
        run_timed(concurrency, settings.warmup, settings.measure, move |id| {
            let (client, uri) = (client.clone(), uri.clone());
            async move {
                let body =
                    modern_tool_call(id, "echo", json!({"text": ECHO_TEXT}), json!({})).to_string();
                let message = json_exchange(
                    &client,
                    modern_post(&uri, "tools/call", Some("echo"), body)?,
                )
                .await?;
                check_echo(&message)
            }
        })
        .await,
    )
}
