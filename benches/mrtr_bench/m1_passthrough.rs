//! M1, passthrough: `tools/call echo` at fixed concurrency against five targets in one run, all
//! in front of the same dual-era backend:
//! - `direct`: the backend directly, 2025-11-25 on an initialized session;
//! - `gateway`: a 2026-07-28 client through the gateway whose backend is fixed to 2025-11-25
//!   (the legacy path: each call leases a backend session and is translated);
//! - `nginx`: nginx proxying to the backend, 2025-11-25 as direct;
//! - `direct (2026-07-28)`: the backend directly, stateless 2026-07-28 requests;
//! - `gateway relay`: a 2026-07-28 client through a gateway whose backend is fixed to
//!   2026-07-28 (each request relayed as it came).
//!
//! What the gateway adds over a plain reverse proxy, and what the relay adds over the modern
//! backend reached directly, next to the legacy path's cost, are the interesting numbers. Then
//! the same targets with a large result: `tools/call large`, whose 256 KiB text is checked
//! byte for byte.
//!
//! This file also owns one measured point ([`measure`]: the load, its check, and the CPU
//! sampled over the measured window), which M8 reuses for the stdio-to-HTTP tools.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Uri};
use serde_json::{json, Value};

use crate::alternatives::Tool;
use crate::backend::{large_text, LARGE_TEXT_BYTES};
use crate::load::{run_timed, LoadStats};
use crate::procs::{cpu_time_us, own_and_descendants_cpu_us};
use crate::wire::{
    close_legacy_session, first_text, json_exchange, legacy_post, legacy_tool_call, modern_post,
    modern_tool_call, new_client, open_legacy_session, response_exchange, result_of,
};
use crate::BenchResult;

/// Who the load client talks to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// The backend directly, 2025-11-25 on a session.
    Direct,
    /// The gateway in front of the backend fixed to 2025-11-25, 2026-07-28 client.
    Gateway,
    /// nginx in front of the backend, 2025-11-25 client.
    Nginx,
    /// The backend directly, stateless 2026-07-28 requests.
    DirectModern,
    /// The gateway in front of the backend fixed to 2026-07-28, 2026-07-28 client: the relay.
    GatewayRelay,
    /// M8: the gateway in front of the stdio echo backend, 2026-07-28 client.
    GatewayStdio,
    /// M8: the same gateway, a 2025-11-25 client on a session of its own.
    GatewayStdioLegacy,
    /// M8: a stdio-to-HTTP tool in front of the stdio echo backend, 2025-11-25 client.
    Tool(Tool),
}

impl Target {
    pub fn label(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Gateway => "gateway",
            Target::Nginx => "nginx",
            Target::DirectModern => "direct (2026-07-28)",
            Target::GatewayRelay => "gateway relay",
            Target::GatewayStdio => "gateway (stdio)",
            Target::GatewayStdioLegacy => "gateway (stdio, 2025-11-25 client)",
            Target::Tool(tool) => tool.label(),
        }
    }

    /// Whether the load client speaks 2026-07-28 (else 2025-11-25 on an initialized session).
    fn modern(self) -> bool {
        matches!(
            self,
            Target::Gateway | Target::GatewayStdio | Target::DirectModern | Target::GatewayRelay
        )
    }
}

/// The tool every request calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Call {
    /// `echo {"text": "hello"}`, answered `hello`.
    Echo,
    /// `large {}`, answered with [`large_text`].
    Large,
}

impl Call {
    fn tool(self) -> &'static str {
        match self {
            Call::Echo => "echo",
            Call::Large => "large",
        }
    }

    fn arguments(self) -> Value {
        match self {
            Call::Echo => json!({"text": ECHO_TEXT}),
            Call::Large => json!({}),
        }
    }
}

pub struct Settings {
    pub concurrencies: Vec<usize>,
    /// The concurrencies of the large-result points.
    pub large_concurrencies: Vec<usize>,
    pub warmup: Duration,
    pub measure: Duration,
}

/// One measured point.
pub struct Point {
    pub target: Target,
    pub concurrency: usize,
    pub stats: LoadStats,
    /// CPU time per request of the proxy (the gateway, nginx with its workers, or a tool's own
    /// process), in µs.
    pub proxy_cpu_us: Option<f64>,
    /// CPU time per request of the backend (for a stdio proxy: the processes it spawned), in µs.
    pub backend_cpu_us: Option<f64>,
}

/// The URLs of the targets (nginx may be missing) and the processes behind them. `direct`
/// serves both `direct` targets.
pub struct Targets {
    pub direct: String,
    pub gateway: String,
    pub nginx: Option<String>,
    /// The gateway whose backend is fixed to 2026-07-28.
    pub relay: String,
    pub backend_pid: u32,
    pub gateway_pid: u32,
    pub nginx_pid: Option<u32>,
    pub relay_pid: u32,
}

/// Where the CPU time of a point comes from.
#[derive(Clone, Copy)]
pub enum CpuSource {
    /// The proxy (with its direct children: nginx's workers) and the backend are apart.
    Apart { proxy: Option<u32>, backend: u32 },
    /// A stdio proxy: its own process, and the backends it spawned (its descendants).
    Tree { proxy: u32 },
}

const ECHO_TEXT: &str = "hello";

/// Checks a `tools/call` answer: `hello` for echo, every byte of [`large_text`] for large.
fn check(message: &Value, expected: &str) -> BenchResult<()> {
    let result = result_of(message)?;
    let text = first_text(result);
    if text == expected {
        return Ok(());
    }
    if expected.len() > ECHO_TEXT.len() {
        return Err(format!(
            "the large result has {} bytes of text, {} expected{}",
            text.len(),
            expected.len(),
            if text.len() == expected.len() {
                " (different bytes)"
            } else {
                ""
            }
        )
        .into());
    }
    Err(format!("unexpected echo result {result}").into())
}

/// M1's points: echo at each concurrency on every target, then the large result.
pub async fn run(settings: &Settings, targets: &Targets) -> BenchResult<(Vec<Point>, Vec<Point>)> {
    let mut order = vec![(Target::Direct, targets.direct.as_str(), None)];
    order.push((
        Target::Gateway,
        targets.gateway.as_str(),
        Some(targets.gateway_pid),
    ));
    if let Some(nginx) = &targets.nginx {
        order.push((Target::Nginx, nginx.as_str(), targets.nginx_pid));
    }
    order.push((Target::DirectModern, targets.direct.as_str(), None));
    order.push((
        Target::GatewayRelay,
        targets.relay.as_str(),
        Some(targets.relay_pid),
    ));
    let mut points = (Vec::new(), Vec::new());
    for (call, concurrencies, into) in [
        (Call::Echo, &settings.concurrencies, &mut points.0),
        (Call::Large, &settings.large_concurrencies, &mut points.1),
    ] {
        for &concurrency in concurrencies {
            for &(target, url, proxy) in &order {
                let cpu = CpuSource::Apart {
                    proxy,
                    backend: targets.backend_pid,
                };
                into.push(measure("M1", target, url, call, concurrency, settings, cpu).await?);
            }
        }
    }
    Ok(points)
}

/// One point: `call` from `concurrency` clients to `url` for the warm-up and the measured
/// window of `settings`, the CPU of `cpu` sampled over the measured window.
pub async fn measure(
    scenario: &str,
    target: Target,
    url: &str,
    call: Call,
    concurrency: usize,
    settings: &Settings,
    cpu: CpuSource,
) -> BenchResult<Point> {
    // CPU is sampled over the measured window only, like the requests.
    let sampler = tokio::spawn(cpu_in_window(cpu, settings.warmup, settings.measure));
    let stats = if target.modern() {
        modern_load(url, call, concurrency, settings).await?
    } else {
        legacy_load(url, call, concurrency, settings).await?
    };
    let [proxy_cpu, backend_cpu] = sampler.await.unwrap_or([None, None]);
    let per_request = |micros: Option<u64>| {
        micros
            .filter(|_| stats.completed > 0)
            .map(|micros| micros as f64 / stats.completed as f64)
    };
    let (proxy_cpu_us, backend_cpu_us) = (per_request(proxy_cpu), per_request(backend_cpu));
    eprintln!(
        "mrtr-bench: {scenario} {:<16} {:<5} c={concurrency:<3} {:>9.0} req/s  p50 {:>6} µs  p99 {:>6} µs  errors {}  proxy CPU/req {:.0} µs",
        target.label(),
        call.tool(),
        stats.per_second(),
        stats.p50_us(),
        stats.p99_us(),
        stats.errors,
        proxy_cpu_us.unwrap_or(0.0)
    );
    Ok(Point {
        target,
        concurrency,
        stats,
        proxy_cpu_us,
        backend_cpu_us,
    })
}

/// CPU time of the proxy and of the backend between `warmup` and `warmup + measure` from now,
/// in µs.
async fn cpu_in_window(source: CpuSource, warmup: Duration, measure: Duration) -> [Option<u64>; 2] {
    let read = move || match source {
        CpuSource::Apart { proxy, backend } => [
            proxy.and_then(|pid| cpu_time_us(pid).ok()),
            cpu_time_us(backend).ok(),
        ],
        CpuSource::Tree { proxy } => match own_and_descendants_cpu_us(proxy) {
            Ok((own, descendants)) => [Some(own), Some(descendants)],
            Err(_) => [None, None],
        },
    };
    tokio::time::sleep(warmup).await;
    let before = read();
    tokio::time::sleep(measure).await;
    let after = read();
    [0, 1].map(|i| match (before[i], after[i]) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    })
}

/// The text `call` must answer.
fn expected_text(call: Call) -> Arc<str> {
    match call {
        Call::Echo => Arc::from(ECHO_TEXT),
        Call::Large => {
            let text = large_text();
            debug_assert_eq!(text.len(), LARGE_TEXT_BYTES);
            Arc::from(text)
        }
    }
}

/// 2025-11-25 `tools/call` on one session opened through `url` (direct, nginx, or a stdio
/// proxy), shared by every client and ended with DELETE afterwards. Answers may be JSON or SSE.
async fn legacy_load(
    url: &str,
    call: Call,
    concurrency: usize,
    settings: &Settings,
) -> BenchResult<LoadStats> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let session: HeaderValue = open_legacy_session(&client, &uri).await?;
    let expected = expected_text(call);
    let stats = {
        let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
        run_timed(concurrency, settings.warmup, settings.measure, move |id| {
            let (client, uri, session) = (client.clone(), uri.clone(), session.clone());
            let expected = expected.clone();
            async move {
                let body = legacy_tool_call(id, call.tool(), call.arguments()).to_string();
                let message =
                    response_exchange(&client, legacy_post(&uri, Some(&session), body)?).await?;
                check(&message, &expected)
            }
        })
        .await
    };
    // Best effort: a proxy that keeps a child per session can let it go.
    let _ = close_legacy_session(&client, &uri, &session).await;
    Ok(stats)
}

/// 2026-07-28 `tools/call`: through the gateway, or directly to the backend.
async fn modern_load(
    url: &str,
    call: Call,
    concurrency: usize,
    settings: &Settings,
) -> BenchResult<LoadStats> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let expected = expected_text(call);
    Ok(
        run_timed(concurrency, settings.warmup, settings.measure, move |id| {
            let (client, uri) = (client.clone(), uri.clone());
            let expected = expected.clone();
            async move {
                let body =
                    modern_tool_call(id, call.tool(), call.arguments(), json!({})).to_string();
                let message = json_exchange(
                    &client,
                    modern_post(&uri, "tools/call", Some(call.tool()), body)?,
                )
                .await?;
                check(&message, &expected)
            }
        })
        .await,
    )
}
