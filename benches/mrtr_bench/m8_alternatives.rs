//! M8, the alternatives: what a user would otherwise deploy to put a stdio MCP server on HTTP,
//! against the gateway, all in front of the same stdio echo backend (`stdio_backend.rs`),
//! `tools/call echo` at fixed concurrency with M1's warm-up and measured window.
//!
//! - the gateway (release binary, `stdio_echo_config`): a 2026-07-28 client, and a 2025-11-25
//!   client on a session of its own (the gateway's legacy path);
//! - supergateway, mcp-proxy (npm) and mcp-proxy (PyPI) (`alternatives.rs`): 2025-11-25 on both
//!   sides; the load client initializes one session and every client shares it, as M1's direct
//!   and nginx targets do.
//!
//! Every tool runs for the whole scenario; at each concurrency the targets take their turn in
//! one fixed order. CPU per request is the proxy's own process (its threads), apart from the
//! backends it spawned, which make the backend column. A tool that is not installed is skipped
//! with a note (a failure in a smoke run, which must exercise them all).

use std::time::Duration;

use crate::alternatives::{Tool, ToolProcess};
use crate::gateway_config::stdio_echo_config;
use crate::m1_passthrough::{measure, Call, CpuSource, Point, Settings, Target};
use crate::procs::GatewayProcess;
use crate::BenchResult;

/// What M8 measured, and what it could not.
#[derive(Default)]
pub struct Results {
    pub points: Vec<Point>,
    /// Tools that are not installed.
    pub skipped: Vec<String>,
    /// Targets that could not be started or measured.
    pub failures: Vec<String>,
}

pub async fn run(settings: &Settings, smoke: bool) -> BenchResult<Results> {
    let mut results = Results::default();
    let top = settings.concurrencies.iter().copied().max().unwrap_or(1);
    // One child per concurrent call, plus the legacy client's session.
    let gateway = GatewayProcess::start(&stdio_echo_config(top + 4), Duration::from_secs(10))?;
    let mut tools = Vec::new();
    for tool in Tool::ALL {
        if let Some(missing) = tool.missing() {
            if smoke {
                results.failures.push(format!(
                    "M8: {missing}; the smoke run compares against every tool"
                ));
            } else {
                eprintln!("mrtr-bench: warning: {missing}; M8 runs without it");
                results.skipped.push(missing);
            }
            continue;
        }
        match ToolProcess::start(tool) {
            Ok(process) => tools.push(process),
            Err(error) => results
                .failures
                .push(format!("M8: {} did not start: {error}", tool.label())),
        }
    }
    let gateway_url = gateway.url();
    let gateway_pid = gateway.guard.pid();
    let mut order: Vec<(Target, String, u32)> = vec![
        (Target::GatewayStdio, gateway_url.clone(), gateway_pid),
        (Target::GatewayStdioLegacy, gateway_url, gateway_pid),
    ];
    for process in &tools {
        order.push((
            Target::Tool(process.tool),
            process.url(),
            process.guard.pid(),
        ));
    }
    for &concurrency in &settings.concurrencies {
        for (target, url, pid) in &order {
            let cpu = CpuSource::Tree { proxy: *pid };
            match measure("M8", *target, url, Call::Echo, concurrency, settings, cpu).await {
                Ok(point) => results.points.push(point),
                Err(error) => {
                    let log = match target {
                        Target::Tool(tool) => tools
                            .iter()
                            .find(|process| process.tool == *tool)
                            .map(ToolProcess::log_tail),
                        _ => Some(gateway.log_tail()),
                    };
                    results.failures.push(format!(
                        "M8 {} c={concurrency} did not run: {error}; its log:\n{}",
                        target.label(),
                        log.unwrap_or_default()
                    ));
                }
            }
        }
    }
    Ok(results)
}
