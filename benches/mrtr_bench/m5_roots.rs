//! M5, roots per flow: what the roots rules cost a backend that uses roots.
//!
//! The gateway runs in front of the roots backend ([`crate::roots_backend`]) over stdio with one
//! session (`max_sessions = 1`), so every flow lands on the session the previous flow used: the
//! case where one flow's roots could reach another's call. A flow is one `tools/call open` at
//! concurrency 1, with every round it gets answered (a roots round with the flow's own root,
//! `file:///flows/<n>`), until its result. Each flow opens a file under the roots it should run
//! under; "under the expected roots" counts the flows whose call the backend ran under them.
//!
//! Rows: a client that declares no roots (the backend never asks), the default
//! (`unsolicited = "defer"`), the same with `roots_settle = "0ms"`, and `unsolicited =
//! "static"`.

use std::time::Duration;

use http::Uri;
use serde_json::{json, Map, Value};

use crate::gateway_config::{stdio_roots_config, RootsPolicy};
use crate::load::{run_jobs, LoadStats};
use crate::procs::GatewayProcess;
use crate::roots_backend::OPEN_TOOL;
use crate::wire::{
    json_exchange, modern_post, modern_tool_call, new_client, result_of, HttpClient,
};
use crate::BenchResult;

/// The root the backend is configured with (server-filesystem's command-line directory).
pub const CONFIGURED_ROOT: &str = "file:///configured";
/// The gateway's `static_roots` in the static row.
pub const STATIC_ROOT: &str = "file:///static";
/// A flow never needs more front requests than this.
const MAX_CALLS_PER_FLOW: u64 = 4;

pub struct Settings {
    pub warmup: usize,
    pub flows: usize,
}

pub struct Row {
    pub label: String,
    pub stats: LoadStats,
    /// Front requests (the first call, and each retry) of the measured flows.
    pub calls: u64,
    pub flows_under_expected_roots: u64,
}

impl Row {
    pub fn calls_per_flow(&self) -> f64 {
        if self.stats.completed == 0 {
            0.0
        } else {
            self.calls as f64 / self.stats.completed as f64
        }
    }
}

struct Case {
    label: &'static str,
    policy: RootsPolicy,
    /// The client declares `roots` (and answers roots rounds).
    client_roots: bool,
}

/// Every row that ran, and why the others did not.
pub async fn run(settings: &Settings) -> (Vec<Row>, Vec<String>) {
    let cases = [
        Case {
            label: "client without roots (the backend never asks)",
            policy: RootsPolicy::Defer { settle_ms: None },
            client_roots: false,
        },
        Case {
            label: "roots, `defer` (default, roots_settle 20 ms)",
            policy: RootsPolicy::Defer { settle_ms: None },
            client_roots: true,
        },
        Case {
            label: "roots, `defer`, roots_settle 0 ms",
            policy: RootsPolicy::Defer { settle_ms: Some(0) },
            client_roots: true,
        },
        Case {
            label: "roots, `static`",
            policy: RootsPolicy::Static,
            client_roots: true,
        },
    ];
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for case in cases {
        match run_case(settings, &case).await {
            Ok(row) => rows.push(row),
            Err(error) => failures.push(format!("M5 {} did not complete: {error}", case.label)),
        }
    }
    (rows, failures)
}

async fn run_case(settings: &Settings, case: &Case) -> BenchResult<Row> {
    let config = stdio_roots_config(CONFIGURED_ROOT, STATIC_ROOT, &case.policy);
    let gateway = GatewayProcess::start(&config, Duration::from_secs(10))?;
    let row = measure(settings, case, &gateway.url()).await;
    let row = row.map_err(|error| format!("{error}; gateway log:\n{}", gateway.log_tail()))?;
    eprintln!(
        "mrtr-bench: M5 {}: {} flows  {:.2} calls per flow  p50 {} µs  under the expected roots {}",
        row.label,
        row.stats.completed,
        row.calls_per_flow(),
        row.stats.p50_us(),
        row.flows_under_expected_roots
    );
    Ok(row)
}

async fn measure(settings: &Settings, case: &Case, url: &str) -> BenchResult<Row> {
    let uri: Uri = url.parse()?;
    let client = new_client();
    let client_roots = case.client_roots;
    let static_roots = matches!(case.policy, RootsPolicy::Static);
    let expected = move |flow: u64| match (static_roots, client_roots) {
        (_, false) => CONFIGURED_ROOT.to_owned(),
        (true, true) => STATIC_ROOT.to_owned(),
        (false, true) => flow_root(flow),
    };
    let flow = move |n: u64| {
        let (client, uri) = (client.clone(), uri.clone());
        let target = format!("{}/data-{n}", expected(n));
        async move { one_flow(&client, &uri, n, client_roots, &target).await }
    };
    let (warmup, _) = run_jobs(1, (0..settings.warmup as u64).collect(), flow.clone()).await;
    let first = 1_000_000;
    let jobs = (first..first + settings.flows as u64).collect();
    let (mut stats, outcomes) = run_jobs(1, jobs, flow).await;
    stats.errors += warmup.errors;
    if stats.first_error.is_none() {
        stats.first_error = warmup.first_error;
    }
    Ok(Row {
        label: case.label.to_owned(),
        stats,
        calls: outcomes.iter().map(|(calls, _)| calls).sum(),
        flows_under_expected_roots: outcomes.iter().filter(|(_, opened)| *opened).count() as u64,
    })
}

fn flow_root(flow: u64) -> String {
    format!("file:///flows/{flow}")
}

/// One flow: the call, then a retry per round, answering roots rounds with the flow's root.
/// Returns the front requests it took and whether the backend opened `target` (it ran under the
/// expected roots).
async fn one_flow(
    client: &HttpClient,
    uri: &Uri,
    flow: u64,
    client_roots: bool,
    target: &str,
) -> BenchResult<(u64, bool)> {
    let capabilities = if client_roots {
        json!({"roots": {}})
    } else {
        json!({})
    };
    let first = modern_tool_call(flow * 8, OPEN_TOOL, json!({ "uri": target }), capabilities);
    let mut request = first.clone();
    for calls in 1..=MAX_CALLS_PER_FLOW {
        let post = modern_post(uri, "tools/call", Some(OPEN_TOOL), request.to_string())?;
        let message = json_exchange(client, post).await?;
        let result = result_of(&message)?;
        if result["resultType"] != "input_required" {
            let text = result["content"][0]["text"].as_str().unwrap_or_default();
            return Ok((calls, text == format!("opened {target}")));
        }
        let mut answers = Map::new();
        for (key, asked) in result["inputRequests"].as_object().into_iter().flatten() {
            if asked["method"] != "roots/list" {
                return Err(format!("unexpected input request {asked}").into());
            }
            answers.insert(
                key.clone(),
                json!({"roots": [{"uri": flow_root(flow), "name": "flow"}]}),
            );
        }
        request = first.clone();
        request["id"] = json!(flow * 8 + calls);
        request["params"]["inputResponses"] = Value::Object(answers);
        request["params"]["requestState"] = result["requestState"].clone();
    }
    Err(format!("no result after {MAX_CALLS_PER_FLOW} calls").into())
}
