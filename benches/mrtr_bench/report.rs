//! The report: Markdown tables of every scenario (printed on stdout and written to
//! `results.md` after a description of the machine) and the machine facts themselves.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::alternatives::{node_version, Tool};
use crate::backend::LARGE_TEXT_BYTES;
use crate::load::LoadStats;
use crate::m1_passthrough::{Point, Target};
use crate::m2_elicitation::{self as m2, Row as M2Row};
use crate::m3_capacity::Row as M3Row;
use crate::m4_stdio_pool::{median, Results as M4Results};
use crate::m5_roots::{Row as M5Row, CONFIGURED_ROOT, STATIC_ROOT};
use crate::m6_forwarded::{Results as M6Results, GOAL_P50_ADDED_US};
use crate::m7_bursts::Results as M7Results;
use crate::m9_aggregate::{era_label, size_label, Row as M9Row};
use crate::procs::{gateway_version, nginx_version, NGINX_WORKERS};

/// Everything measured in one run.
#[derive(Default)]
pub struct Findings {
    pub smoke: bool,
    pub m1: Vec<Point>,
    /// M1 with `tools/call large` (256 KiB of text).
    pub m1_large: Vec<Point>,
    pub m1_seconds: (f64, f64),
    pub m2: Vec<M2Row>,
    pub m3: Vec<M3Row>,
    pub m4: Option<M4Results>,
    pub m5: Vec<M5Row>,
    pub m6: Option<M6Results>,
    pub m7: Option<M7Results>,
    pub m8: Vec<Point>,
    pub m9: Vec<M9Row>,
    /// Remarks worth reading next to the numbers (skipped targets, settings).
    pub notes: Vec<String>,
    /// What failed: scenarios that could not run, and request errors.
    pub failures: Vec<String>,
}

/// The machine the numbers come from.
pub fn machine_section(nginx: Option<&Path>, open_files: u64, load_at_start: &str) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned()))
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let nginx = nginx.map_or_else(|| "not installed".to_owned(), nginx_version);
    let mut text = String::from("## Machine\n\n| | |\n|---|---|\n");
    for (what, value) in [
        ("CPU", cpu),
        ("cores", cores.to_string()),
        ("Linux", kernel),
        ("rustc", rustc),
        ("gateway", gateway_version()),
        ("nginx", nginx),
        (
            "M8 tools",
            Tool::ALL.map(Tool::version).join(", ") + &format!("; Node {}", node_version()),
        ),
        ("open files (soft limit)", open_files.to_string()),
        (
            "load average at start (1, 5, 15 min)",
            load_at_start.to_owned(),
        ),
        ("load average at end (1, 5, 15 min)", load_average()),
    ] {
        let _ = writeln!(text, "| {what} | {value} |");
    }
    text.push_str(
        "\nThe load client, the gateway, the backend and nginx all share these cores, so every \
         number includes their competition for the CPU.\n",
    );
    text
}

/// All scenario tables.
pub fn tables(findings: &Findings) -> String {
    let mut out = String::new();
    let mode = if findings.smoke { "smoke" } else { "full" };
    let _ = writeln!(out, "# mrtr-bench ({mode} run)\n");
    m1_tables(&mut out, findings);
    m1_large_table(&mut out, findings);
    m2_table(&mut out, &findings.m2);
    m3_tables(&mut out, &findings.m3);
    if let Some(m4) = &findings.m4 {
        m4_table(&mut out, m4);
    }
    m5_table(&mut out, &findings.m5);
    if let Some(m6) = &findings.m6 {
        m6_table(&mut out, m6);
    }
    if let Some(m7) = &findings.m7 {
        m7_table(&mut out, m7);
    }
    m8_table(&mut out, findings);
    m9_tables(&mut out, findings);
    if !findings.notes.is_empty() {
        out.push_str("## Notes\n\n");
        for note in &findings.notes {
            let _ = writeln!(out, "- {note}");
        }
        out.push('\n');
    }
    if findings.failures.is_empty() {
        out.push_str("No request failed.\n");
    } else {
        out.push_str("## Failures\n\n");
        for failure in &findings.failures {
            let _ = writeln!(out, "- {failure}");
        }
    }
    out
}

fn m1_tables(out: &mut String, findings: &Findings) {
    if findings.m1.is_empty() {
        return;
    }
    let (warmup, measure) = findings.m1_seconds;
    let _ = writeln!(
        out,
        "## M1: passthrough `tools/call echo`\n\n{warmup} s warm-up, then {measure} s measured per point, \
         one dual-era backend behind every target. direct: 2025-11-25 on one initialized session; \
         gateway: a 2026-07-28 client, the backend fixed to `era = \"2025-11-25\"` (the legacy \
         path); nginx: 2025-11-25, `proxy_pass` with an upstream keepalive pool of 128, \
         `worker_processes {NGINX_WORKERS}`; direct (2026-07-28): stateless 2026-07-28 requests \
         to the backend; gateway relay: a 2026-07-28 client, the backend fixed to \
         `era = \"2026-07-28\"` (each request relayed as it came).\n\n\
         CPU columns: CPU time (user + system) of the proxy (gateway, or nginx with its workers) \
         and of the backend during the measured window, divided by the requests completed in it.\n"
    );
    point_rows(out, &findings.m1);
    let find = |target: Target, concurrency: usize| {
        findings
            .m1
            .iter()
            .find(|p| p.target == target && p.concurrency == concurrency)
            .map(|p| &p.stats)
    };
    let top = findings.m1.iter().map(|p| p.concurrency).max().unwrap_or(0);
    let low = findings.m1.iter().map(|p| p.concurrency).min().unwrap_or(0);
    out.push_str("| comparison | value |\n|---|---:|\n");
    let throughput_ratio = |a: Option<&LoadStats>, b: Option<&LoadStats>| match (a, b) {
        (Some(a), Some(b)) if b.per_second() > 0.0 => {
            format!("{:.2}", a.per_second() / b.per_second())
        }
        _ => "n/a".to_owned(),
    };
    let added = |a: Option<&LoadStats>, b: Option<&LoadStats>| match (a, b) {
        (Some(a), Some(b)) => format!("{:+} µs", a.p50_us() as i64 - b.p50_us() as i64),
        _ => "n/a".to_owned(),
    };
    let gateway_top = find(Target::Gateway, top);
    let _ = writeln!(
        out,
        "| throughput gateway / direct at c={top} | {} |",
        throughput_ratio(gateway_top, find(Target::Direct, top))
    );
    let _ = writeln!(
        out,
        "| throughput gateway / nginx at c={top} | {} |",
        throughput_ratio(gateway_top, find(Target::Nginx, top))
    );
    let _ = writeln!(
        out,
        "| median added latency, gateway vs direct at c={low} | {} |",
        added(find(Target::Gateway, low), find(Target::Direct, low))
    );
    let _ = writeln!(
        out,
        "| median added latency, nginx vs direct at c={low} | {} |",
        added(find(Target::Nginx, low), find(Target::Direct, low))
    );
    let relay_top = find(Target::GatewayRelay, top);
    let _ = writeln!(
        out,
        "| median added latency, gateway relay vs direct (2026-07-28) at c={low} | {} |",
        added(
            find(Target::GatewayRelay, low),
            find(Target::DirectModern, low)
        )
    );
    let _ = writeln!(
        out,
        "| throughput gateway relay / direct (2026-07-28) at c={top} | {} |",
        throughput_ratio(relay_top, find(Target::DirectModern, top))
    );
    let _ = writeln!(
        out,
        "| throughput gateway relay / gateway (legacy path) at c={top} | {} |",
        throughput_ratio(relay_top, gateway_top)
    );
    let proxy_cpu = |target: Target| {
        findings
            .m1
            .iter()
            .find(|p| p.target == target && p.concurrency == top)
            .and_then(|p| p.proxy_cpu_us)
            .map_or_else(|| "n/a".to_owned(), |cpu| format!("{cpu:.0} µs"))
    };
    let _ = writeln!(
        out,
        "| gateway CPU per call at c={top}: relay / legacy path | {} / {} |\n",
        proxy_cpu(Target::GatewayRelay),
        proxy_cpu(Target::Gateway)
    );
}

/// The rows of `points` as M1's table: target, concurrency, throughput, latency, errors, CPU.
fn point_rows(out: &mut String, points: &[Point]) {
    out.push_str(
        "| target | concurrency | requests/s | p50 (µs) | p99 (µs) | errors | proxy CPU per request (µs) | backend CPU per request (µs) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cpu = |value: Option<f64>| value.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"));
    for point in points {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            point.target.label(),
            point.concurrency,
            point.stats.per_second(),
            point.stats.p50_us(),
            point.stats.p99_us(),
            point.stats.errors,
            cpu(point.proxy_cpu_us),
            cpu(point.backend_cpu_us),
        );
    }
    out.push('\n');
}

fn m1_large_table(out: &mut String, findings: &Findings) {
    if findings.m1_large.is_empty() {
        return;
    }
    let (warmup, measure) = findings.m1_seconds;
    let _ = writeln!(
        out,
        "## M1 large: `tools/call large`, a {} KiB text result\n\n\
         The same backend and targets as M1, {warmup} s warm-up, then {measure} s measured \
         per point. The backend serializes its answer once and sends it as one JSON body; the \
         load client parses every answer and compares all {LARGE_TEXT_BYTES} bytes of the text \
         (a short or different text is an error). CPU columns as in M1.\n",
        LARGE_TEXT_BYTES / 1024
    );
    point_rows(out, &findings.m1_large);
}

fn m8_table(out: &mut String, findings: &Findings) {
    if findings.m8.is_empty() {
        return;
    }
    let (warmup, measure) = findings.m1_seconds;
    let _ = writeln!(
        out,
        "## M8: stdio-to-HTTP alternatives, `tools/call echo`\n\n\
         Every proxy in front of the same stdio echo backend (this bench binary, \
         newline-delimited JSON-RPC, 2025-11-25), {warmup} s warm-up, then {measure} s measured per \
         point, all proxies running throughout. gateway (stdio): the release gateway with a \
         2026-07-28 client, one backend child per concurrent call; gateway (stdio, 2025-11-25 \
         client): the same gateway's legacy path, one session. supergateway 4.0.0 \
         (`--outputTransport streamableHttp --stateful`, one backend child per session), \
         mcp-proxy 6.7.19 from npm (`--server stream`) and mcp-proxy 0.13.0 from PyPI (both: one \
         backend child shared by every session): 2025-11-25 on both sides, one initialized \
         session that every client shares. supergateway and the npm mcp-proxy answer every POST \
         with an SSE stream (the npm one opens it with an empty priming event), the PyPI \
         mcp-proxy and the gateway with a JSON body; the load client reads the whole answer \
         either way.\n\n\
         CPU columns: the proxy's own process (all its threads; the Node and Python tools run in \
         one process), and the backend children it spawned, during the measured window, divided \
         by the requests completed in it.\n"
    );
    point_rows(out, &findings.m8);
}

fn m9_tables(out: &mut String, findings: &Findings) {
    let rows = &findings.m9;
    let Some(c) = rows.first().map(|row| row.throughput_concurrency) else {
        return;
    };
    let (warmup, measure) = findings.m1_seconds;
    let _ = writeln!(
        out,
        "## M9: one endpoint over several backends, a merged `tools/list`\n\n\
         A 2026-07-28 client lists the tools of one route (the first page, no cursor), \
         {warmup} s warm-up, then {measure} s measured per point. 1 backend: an ordinary route \
         (`backend = \"fast\"`); 3 and 10 backends: a route with `backends = [...]`, each a fast \
         backend process of its own listing 3 tools, which the gateway asks at once and whose \
         pages it merges under `bN__NAME`. The backends are fixed to `era = \"2025-11-25\"` (each \
         part leases a backend session: the gateway's own path) or to `era = \"2026-07-28\"` \
         (each part relayed). Every answer must list exactly the 3×N expected tools without a \
         `nextCursor`, or it counts as an error.\n\n\
         CPU columns: CPU time (user + system) of the gateway, and of all the backends together, \
         during the measured window at c={c}, divided by the lists completed in it.\n\n\
         | route | backend era | tools | c=1 p50 (µs) | c=1 p99 (µs) | c={c} requests/s | c={c} p50 (µs) | c={c} p99 (µs) | gateway CPU per list (µs) | backends' CPU per list (µs) | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let cpu = |value: Option<f64>| value.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"));
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            row.label(),
            era_label(row.era),
            row.tools(),
            row.latency.p50_us(),
            row.latency.p99_us(),
            row.throughput.per_second(),
            row.throughput.p50_us(),
            row.throughput.p99_us(),
            cpu(row.gateway_cpu_us),
            cpu(row.backends_cpu_us),
            row.latency.errors + row.throughput.errors,
        );
    }
    // Each route over several backends against the 1-backend route of the same era.
    let _ = writeln!(
        out,
        "\n| route | backend era | c=1 p50 added per extra backend (µs) | c={c} throughput / 1 backend | gateway CPU per list added per extra backend (µs) |\n\
         |---|---|---:|---:|---:|"
    );
    for row in rows.iter().filter(|row| row.backends > 1) {
        let Some(base) = rows
            .iter()
            .find(|base| base.backends == 1 && base.era == row.era)
        else {
            continue;
        };
        let extra = (row.backends - 1) as f64;
        let added_p50 = (row.latency.p50_us() as f64 - base.latency.p50_us() as f64) / extra;
        let ratio = if base.throughput.per_second() > 0.0 {
            format!(
                "{:.2}",
                row.throughput.per_second() / base.throughput.per_second()
            )
        } else {
            "n/a".to_owned()
        };
        let added_cpu = match (row.gateway_cpu_us, base.gateway_cpu_us) {
            (Some(cpu), Some(base)) => format!("{:+.0}", (cpu - base) / extra),
            _ => "n/a".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {added_p50:+.0} | {ratio} | {added_cpu} |",
            size_label(row.backends),
            era_label(row.era),
        );
    }
    out.push('\n');
}

fn m2_table(out: &mut String, rows: &[M2Row]) {
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "## M2: one elicitation round, concurrency 1\n\n\
         The whole exchange: the call, the question, the answer and the result. A 2026-07-28 \
         client makes two HTTP requests (`input_required`, then the retry with \
         `inputResponses` and `requestState`); a 2025-11-25 client reads the call's SSE stream \
         and POSTs its answer on the session. One dual-era backend: native and direct \
         2026-07-28 reach it directly; the gateway rows have it fixed to 2025-11-25 (the \
         gateway's own round over the backend's SSE exchange); the relay and the reverse \
         bridge have it fixed to 2026-07-28 (the backend's round relayed to a 2026-07-28 \
         client, or asked of a 2025-11-25 client as `elicitation/create` on its stream).\n\n\
         | path | exchanges | p50 (µs) | p99 (µs) | p50 / native | p99 / native | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    let native = rows.first().map(|row| &row.stats);
    for row in rows {
        let ratio = |value: u64, base: Option<u64>| match base {
            Some(base) if base > 0 => format!("{:.2}", value as f64 / base as f64),
            _ => "n/a".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.label,
            row.stats.completed,
            row.stats.p50_us(),
            row.stats.p99_us(),
            ratio(row.stats.p50_us(), native.map(LoadStats::p50_us)),
            ratio(row.stats.p99_us(), native.map(LoadStats::p99_us)),
            row.stats.errors
        );
    }
    out.push('\n');
    let p50 = |label: &str| {
        rows.iter()
            .find(|row| row.label == label)
            .map(|row| row.stats.p50_us())
    };
    let comparisons = [
        (
            "relay round − direct 2026-07-28 round",
            p50(m2::RELAY),
            p50(m2::DIRECT_MODERN),
        ),
        (
            "reverse bridge round − native 2025-11-25 round",
            p50(m2::REVERSE_BRIDGE),
            p50(m2::NATIVE),
        ),
        (
            "reverse bridge round − gateway round (default)",
            p50(m2::REVERSE_BRIDGE),
            p50(m2::GATEWAY_DEFAULT),
        ),
    ];
    if comparisons
        .iter()
        .any(|(_, a, b)| a.is_some() && b.is_some())
    {
        out.push_str("| comparison (p50) | value |\n|---|---:|\n");
        for (what, a, b) in comparisons {
            if let (Some(a), Some(b)) = (a, b) {
                let _ = writeln!(out, "| {what} | {:+} µs |", a as i64 - b as i64);
            }
        }
        out.push('\n');
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn m3_tables(out: &mut String, rows: &[M3Row]) {
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "## M3: held rounds\n\n\
         Each size runs on a fresh backend and gateway. Rounds are opened 64 at a time and stay \
         held; each holds one backend session and one open SSE response on the backend.\n\n\
         | held rounds | /status held_calls | opened in (s) | open p50 (µs) | open p99 (µs) | gateway RSS before (MiB) | gateway RSS held (MiB) | gateway KiB per held round | backend RSS before (MiB) | backend RSS held (MiB) | backend KiB per held round |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {:.1} | {} | {} | {:.1} |",
            row.held,
            row.confirmed_held
                .map_or_else(|| "n/a".to_owned(), |n| n.to_string()),
            row.opened.elapsed.as_secs_f64(),
            row.opened.p50_us(),
            row.opened.p99_us(),
            mib(row.gateway_rss_before_kib),
            mib(row.gateway_rss_after_kib),
            row.gateway_kib_per_round(),
            mib(row.backend_rss_before_kib),
            mib(row.backend_rss_after_kib),
            row.backend_kib_per_round(),
        );
    }
    out.push_str(
        "\n| held rounds | retried (sample) | retry concurrency | retry p50 (µs) | retry p99 (µs) | open errors | retry errors | gateway exit after SIGTERM (s) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.held,
            row.retries.completed,
            row.retry_concurrency,
            row.retries.p50_us(),
            row.retries.p99_us(),
            row.opened.errors,
            row.retries.errors,
            row.gateway_exit.map_or_else(
                || "killed".to_owned(),
                |d| format!("{:.2}", d.as_secs_f64())
            ),
        );
    }
    out.push('\n');
}

fn m4_table(out: &mut String, m4: &M4Results) {
    let range = |values: &[u64]| {
        format!(
            "{}–{}",
            values.iter().min().copied().unwrap_or(0),
            values.iter().max().copied().unwrap_or(0)
        )
    };
    let _ = writeln!(
        out,
        "## M4: stdio pool, first `tools/call` after start\n\n\
         The gateway's own demo backend over stdio, a fresh gateway per run. Cold: `min_idle = 0`, \
         no admin listener, so the first call starts the child. Warm: `min_idle = 1`, first call \
         after `/readyz` is 200.\n\n\
         | pool | runs | first call median (µs) | first call range (µs) | second call median (µs) |\n\
         |---|---:|---:|---:|---:|\n\
         | cold (min_idle = 0) | {} | {} | {} | {} |\n\
         | warm (min_idle = 1) | {} | {} | {} | {} |\n",
        m4.cold_first_us.len(),
        median(&m4.cold_first_us),
        range(&m4.cold_first_us),
        median(&m4.cold_second_us),
        m4.warm_first_us.len(),
        median(&m4.warm_first_us),
        range(&m4.warm_first_us),
        median(&m4.warm_second_us),
    );
}

fn m5_table(out: &mut String, rows: &[M5Row]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## M5: roots per flow\n\n\
         The roots backend over stdio (it asks `roots/list` after `initialized` and after \
         `notifications/roots/list_changed`; the client's roots replace its configured \
         `{CONFIGURED_ROOT}`), one session for every flow, concurrency 1. A flow is a \
         `tools/call` and a retry per round, its roots rounds answered with the flow's own root; \
         it counts as under the expected roots when the backend opened a file under them (the \
         flow's own root; `{STATIC_ROOT}` for `static`; the configured root for a client without \
         roots).\n\n\
         | gateway | flows | calls per flow | flow p50 (µs) | flow p99 (µs) | under the expected roots | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {} | {} | {} of {} | {} |",
            row.label,
            row.stats.completed,
            row.calls_per_flow(),
            row.stats.p50_us(),
            row.stats.p99_us(),
            row.flows_under_expected_roots,
            row.stats.completed,
            row.stats.errors,
        );
    }
    out.push('\n');
}

fn m6_table(out: &mut String, m6: &M6Results) {
    let _ = writeln!(
        out,
        "## M6: forwarded retry, concurrency 1\n\n\
         Two gateways, A and B, are replicas of one fleet in front of the fast backend: `[fleet]` \
         with `advertise` naming each one's loopback port, the same `mrtr.keys`, \
         `settle_window = \"0ms\"`. Each exchange opens its round on A, untimed, and only the \
         retry is timed. Sent to A, which holds the call, the retry is local. Sent to B, it is \
         forwarded: B opens the sealed `requestState`, finds that A owns the call, relays the \
         request to A over a pooled HTTP/1.1 connection and streams A's answer back. A wrong \
         answer counts as an error. One retry at a time; after {} warm-up exchanges on each \
         path, the paths alternate exchange by exchange (A B, B A, ...) so that drift on the \
         machine weighs on both alike. The difference is the cost of forwarding: B's parsing \
         and opening of the state, one more loopback hop, and relaying the answer.\n\n\
         | retry sent to | retries | p50 (µs) | p99 (µs) | errors |\n\
         |---|---:|---:|---:|---:|",
        m6.warmup
    );
    for (label, stats) in [
        ("A, which holds the call (local)", &m6.local),
        ("B, forwarded to A", &m6.forwarded),
    ] {
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} |",
            stats.completed,
            stats.p50_us(),
            stats.p99_us(),
            stats.errors
        );
    }
    let _ = writeln!(
        out,
        "\n| comparison | value |\n|---|---:|\n\
         | p50 forwarded − local (goal ≤ +{GOAL_P50_ADDED_US} µs) | {:+} µs ({}) |\n\
         | p99 forwarded − local | {:+} µs |\n\
         | retries B forwarded (`mrtr_forwarded_retries_total{{result=\"ok\"}}`, warm-up included) | {} of {} that succeeded through B |\n",
        m6.p50_added_us(),
        if m6.goal_met() { "met" } else { "not met" },
        m6.p99_added_us(),
        m6.forwarded_by_b
            .map_or_else(|| "n/a".to_owned(), |n| n.to_string()),
        m6.forwarded_succeeded,
    );
}

fn m7_table(out: &mut String, m7: &M7Results) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let _ = writeln!(
        out,
        "## M7: memory after bursts\n\n\
         One gateway in front of the fast backend, `held_ttl = \"{}s\"`. Each wave opens {} \
         elicitation rounds (64 at a time) that nobody retries, and waits until all of them have \
         expired. Resident memory (VmRSS) of the gateway, baseline {:.1} MiB before the first \
         wave:\n\n\
         | wave | rounds opened | errors | peak (MiB) | once expired (MiB) |\n\
         |---:|---:|---:|---:|---:|",
        m7.held_ttl_s,
        m7.rounds,
        mib(m7.baseline_kib)
    );
    for (n, wave) in m7.waves.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} |",
            n + 1,
            wave.opened.completed,
            wave.opened.errors,
            mib(wave.peak_kib),
            mib(wave.expired_kib)
        );
    }
    let _ = writeln!(
        out,
        "\nAfter the last wave expired:\n\n| after | RSS (MiB) |\n|---:|---:|"
    );
    for (after, kib) in &m7.settling {
        let _ = writeln!(out, "| {:.0} s | {:.1} |", after.as_secs_f64(), mib(*kib));
    }
    let _ = writeln!(
        out,
        "\nSettled at {:.2}× the baseline (goal: within 2× a minute after the last expiry). \
         The gateway's `/status` then: `{}`.\n",
        m7.settled_ratio(),
        m7.status_at_end.trim()
    );
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every number.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
