//! `mrtr-bench`, the gateway's macro benchmark:
//! `cargo bench --bench mrtr-bench -- [--smoke] [--out DIR] [--only m1,m2,m3,m4,m5,m6,m7,m8,m9]`.
//!
//! Everything runs on loopback, every loop is bounded by a duration or a count, and every
//! process the benchmark starts is stopped by its PID when its guard is dropped.
//!
//! This file owns the command line, the sizes of each mode, the order of the scenarios and the
//! output files. The other files:
//! - `backend.rs`: the fast backend (this binary run with `--serve-backend ADDR`): 2025-11-25
//!   on sessions and stateless 2026-07-28 on the same endpoint;
//! - `roots_backend.rs`: a stdio backend that uses roots like server-filesystem (this binary run
//!   with `--serve-roots-backend ROOT`);
//! - `stdio_backend.rs`: the stdio echo backend of M8 (this binary run with
//!   `--serve-stdio-backend`);
//! - `alternatives.rs`: the stdio-to-HTTP tools M8 compares, installed by
//!   `scripts/bench-alternatives.sh`;
//! - `procs.rs`: starting and stopping the backend, the gateway and nginx; RSS; limits;
//! - `gateway_config.rs`: the gateway configurations, as TOML (each names its backend's era:
//!   2025-11-25 for the legacy path, 2026-07-28 for the relay and the reverse bridge);
//! - `wire.rs`: the HTTP client and both protocol revisions' request shapes;
//! - `rounds.rs`: one elicitation exchange, 2026-07-28 (`input_required` and the retry) and
//!   2025-11-25 (the SSE stream and the POSTed answer), at a gateway or at the backend;
//! - `load.rs`: the load drivers and their latency histograms;
//! - `m1_passthrough.rs`, `m2_elicitation.rs`, `m3_capacity.rs`, `m4_stdio_pool.rs`,
//!   `m5_roots.rs`, `m6_forwarded.rs`, `m7_bursts.rs`, `m8_alternatives.rs`,
//!   `m9_aggregate.rs`: the scenarios;
//! - `report.rs` and `chart.rs`: the Markdown tables, `m1.svg` and `m1-large.svg`.
//!
//! M1 and M2 run against one backend, which speaks both revisions, and two gateways in front
//! of it: one with the backend fixed to 2025-11-25 (the legacy path, where the gateway holds
//! rounds of its own) and one with it fixed to 2026-07-28 (2026-07-28 clients relayed,
//! 2025-11-25 clients through the reverse bridge). M1's targets: `direct` (2025-11-25),
//! `gateway` (the legacy path), `nginx`, `direct (2026-07-28)` and `gateway relay`. M2's rows:
//! the native 2025-11-25 round, the direct 2026-07-28 round, the gateway's own round (three
//! settle settings), the relayed round and the reverse bridge's round.
//!
//! M9 starts backends of its own: one fast backend process per backend of a route over 1, 3
//! and 10 backends, with a gateway fixed to each era in turn in front of them.
//!
//! `--smoke` runs every scenario with tiny sizes (well under a minute) and exits non-zero if any
//! request failed or any process did not start; it requires nginx when it includes M1, and the
//! tools of `scripts/bench-alternatives.sh` when it includes M8. The full run skips nginx or a
//! tool with a warning when it is not installed.

mod alternatives;
mod backend;
mod chart;
mod gateway_config;
mod load;
mod m1_passthrough;
mod m2_elicitation;
mod m3_capacity;
mod m4_stdio_pool;
mod m5_roots;
mod m6_forwarded;
mod m7_bursts;
mod m8_alternatives;
mod m9_aggregate;
mod procs;
mod report;
mod roots_backend;
mod rounds;
mod stdio_backend;
mod wire;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gateway_config::HttpGatewayConfig;
use load::LoadStats;
use procs::{BackendProcess, GatewayProcess, NginxProcess};
use report::Findings;

/// Errors of the harness: anything that can be shown to a person.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const USAGE: &str =
    "usage: cargo bench --bench mrtr-bench -- [--smoke] [--out DIR] [--only m1,m2,m3,m4,m5,m6,m7,m8,m9]";
const DEFAULT_OUT_DIR: &str = "target/mrtr-bench";

struct Options {
    smoke: bool,
    out_dir: PathBuf,
    scenarios: Scenarios,
}

/// The scenarios a run includes (all unless `--only` names some).
#[derive(Clone, Copy)]
struct Scenarios {
    m1: bool,
    m2: bool,
    m3: bool,
    m4: bool,
    m5: bool,
    m6: bool,
    m7: bool,
    m8: bool,
    m9: bool,
}

impl Scenarios {
    const ALL: Self = Self {
        m1: true,
        m2: true,
        m3: true,
        m4: true,
        m5: true,
        m6: true,
        m7: true,
        m8: true,
        m9: true,
    };

    fn parse(list: &str) -> Result<Self, String> {
        let mut chosen = Self {
            m1: false,
            m2: false,
            m3: false,
            m4: false,
            m5: false,
            m6: false,
            m7: false,
            m8: false,
            m9: false,
        };
        for name in list.split(',').map(str::trim) {
            match name.to_ascii_lowercase().as_str() {
                "m1" => chosen.m1 = true,
                "m2" => chosen.m2 = true,
                "m3" => chosen.m3 = true,
                "m4" => chosen.m4 = true,
                "m5" => chosen.m5 = true,
                "m6" => chosen.m6 = true,
                "m7" => chosen.m7 = true,
                "m8" => chosen.m8 = true,
                "m9" => chosen.m9 = true,
                other => return Err(format!("--only: unknown scenario {other:?}\n{USAGE}")),
            }
        }
        Ok(chosen)
    }
}

enum Invocation {
    Bench(Options),
    /// The hidden child-process mode: serve the fast backend on this address.
    ServeBackend(String),
    /// The hidden child-process mode: serve the roots backend on stdio with this root.
    ServeRootsBackend(String),
    /// The hidden child-process mode: serve the stdio echo backend.
    ServeStdioBackend,
    Help,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Invocation, String> {
    let mut options = Options {
        smoke: false,
        out_dir: PathBuf::from(DEFAULT_OUT_DIR),
        scenarios: Scenarios::ALL,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            backend::SERVE_BACKEND_FLAG => {
                let addr = args.next().ok_or("--serve-backend needs an address")?;
                return Ok(Invocation::ServeBackend(addr));
            }
            roots_backend::SERVE_ROOTS_BACKEND_FLAG => {
                let root = args.next().ok_or("--serve-roots-backend needs a root")?;
                return Ok(Invocation::ServeRootsBackend(root));
            }
            stdio_backend::SERVE_STDIO_BACKEND_FLAG => return Ok(Invocation::ServeStdioBackend),
            "--smoke" => options.smoke = true,
            "--out" => options.out_dir = args.next().ok_or("--out needs a directory")?.into(),
            "--only" => {
                options.scenarios = Scenarios::parse(&args.next().ok_or("--only needs a list")?)?
            }
            // `cargo bench` passes this to every bench binary.
            "--bench" => {}
            "-h" | "--help" => return Ok(Invocation::Help),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Invocation::Bench(options))
}

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
        Ok(Invocation::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Invocation::ServeBackend(addr)) => match backend::serve_child(&addr) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("backend: {error}");
                ExitCode::FAILURE
            }
        },
        Ok(Invocation::ServeRootsBackend(root)) => match roots_backend::serve_child(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("roots backend: {error}");
                ExitCode::FAILURE
            }
        },
        Ok(Invocation::ServeStdioBackend) => match stdio_backend::serve_child() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("stdio backend: {error}");
                ExitCode::FAILURE
            }
        },
        Ok(Invocation::Bench(options)) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("mrtr-bench: cannot start the runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(run(options))
        }
        Err(message) => {
            eprintln!("mrtr-bench: {message}");
            ExitCode::from(2)
        }
    }
}

/// The sizes of one run.
struct Plan {
    m1: m1_passthrough::Settings,
    m2: m2_elicitation::Settings,
    m3: m3_capacity::Settings,
    m4: m4_stdio_pool::Settings,
    m5: m5_roots::Settings,
    m6: m6_forwarded::Settings,
    m7: m7_bursts::Settings,
    m8: m1_passthrough::Settings,
    m9: m9_aggregate::Settings,
}

impl Plan {
    fn new(smoke: bool) -> Self {
        let concurrencies = vec![1, 16, 64];
        // The large result and the alternatives: one client, and a busy 16.
        let fewer = vec![1, 16];
        let (warmup, measure) = if smoke {
            (Duration::from_millis(100), Duration::from_millis(300))
        } else {
            (Duration::from_secs(1), Duration::from_secs(5))
        };
        let m1 = m1_passthrough::Settings {
            concurrencies,
            large_concurrencies: fewer.clone(),
            warmup,
            measure,
        };
        let m8 = m1_passthrough::Settings {
            concurrencies: fewer,
            large_concurrencies: Vec::new(),
            warmup,
            measure,
        };
        // Latency at 1 and throughput at M1's busy 16, with M1's windows.
        let m9 = m9_aggregate::Settings {
            throughput_concurrency: 16,
            warmup,
            measure,
        };
        if smoke {
            Self {
                m1,
                m8,
                m9,
                m2: m2_elicitation::Settings {
                    warmup: 2,
                    exchanges: 20,
                },
                m3: m3_capacity::Settings {
                    sizes: vec![100],
                    open_concurrency: 64,
                    retry_sample: 50,
                    retry_concurrency: 16,
                },
                m4: m4_stdio_pool::Settings { runs: 1 },
                m5: m5_roots::Settings {
                    warmup: 2,
                    flows: 10,
                },
                m6: m6_forwarded::Settings {
                    warmup: 2,
                    exchanges: 20,
                },
                m7: m7_bursts::Settings {
                    waves: 1,
                    rounds: 100,
                    open_concurrency: 32,
                    held_ttl_s: 1,
                    settle: Duration::from_secs(2),
                    sample_every: Duration::from_secs(1),
                },
            }
        } else {
            Self {
                m1,
                m8,
                m9,
                m2: m2_elicitation::Settings {
                    warmup: 20,
                    exchanges: 500,
                },
                m3: m3_capacity::Settings {
                    sizes: vec![1_000, 10_000],
                    open_concurrency: 64,
                    retry_sample: 500,
                    retry_concurrency: 16,
                },
                m4: m4_stdio_pool::Settings { runs: 5 },
                m5: m5_roots::Settings {
                    warmup: 10,
                    flows: 200,
                },
                m6: m6_forwarded::Settings {
                    warmup: 50,
                    exchanges: 2_000,
                },
                m7: m7_bursts::Settings {
                    waves: 3,
                    rounds: 5_000,
                    open_concurrency: 64,
                    held_ttl_s: 5,
                    settle: Duration::from_secs(60),
                    sample_every: Duration::from_secs(5),
                },
            }
        }
    }
}

async fn run(options: Options) -> ExitCode {
    let started = Instant::now();
    let load_at_start = report::load_average();
    let plan = Plan::new(options.smoke);
    let mut findings = Findings {
        smoke: options.smoke,
        m1_seconds: (plan.m1.warmup.as_secs_f64(), plan.m1.measure.as_secs_f64()),
        ..Findings::default()
    };
    let open_files = match procs::raise_open_files_limit() {
        Ok(limit) => limit,
        Err(error) => {
            eprintln!("mrtr-bench: cannot raise the open-files limit: {error}");
            0
        }
    };
    let largest_m3 = plan.m3.sizes.iter().copied().max().unwrap_or(0) as u64;
    // Each held round costs the backend and the gateway one connection each, plus slack.
    if open_files < largest_m3 + 1_000 {
        findings.notes.push(format!(
            "the open-files limit is {open_files}: M3 with {largest_m3} held rounds may run out of descriptors"
        ));
    }
    let scenarios = options.scenarios;
    let nginx = procs::nginx_path();
    // Only M1 runs nginx.
    if nginx.is_none() && scenarios.m1 {
        if options.smoke {
            eprintln!(
                "mrtr-bench: nginx is not installed (looked for /usr/sbin/nginx and nginx on PATH); \
                 the smoke run compares against it, so install it first (apt-get install nginx)"
            );
            return ExitCode::FAILURE;
        }
        eprintln!("mrtr-bench: warning: nginx is not installed; M1 runs without the nginx target");
        findings
            .notes
            .push("nginx is not installed: M1 ran without the nginx target".to_owned());
    }

    if scenarios.m1 || scenarios.m2 {
        let nginx = nginx.as_deref().filter(|_| scenarios.m1);
        if let Err(error) = passthrough_and_rounds(&plan, scenarios, nginx, &mut findings).await {
            findings
                .failures
                .push(format!("M1/M2 did not complete: {error}"));
        }
    }
    let m3_sizes = if scenarios.m3 {
        &plan.m3.sizes[..]
    } else {
        &[]
    };
    for &size in m3_sizes {
        eprintln!("mrtr-bench: M3 with {size} held rounds");
        match m3_capacity::run_one(&plan.m3, size).await {
            Ok(row) => findings.m3.push(row),
            Err(error) => findings.failures.push(format!(
                "M3 with {size} held rounds did not complete: {error}"
            )),
        }
    }
    if scenarios.m4 {
        eprintln!("mrtr-bench: M4 stdio pool");
        match m4_stdio_pool::run(&plan.m4).await {
            Ok(results) => findings.m4 = Some(results),
            Err(error) => findings
                .failures
                .push(format!("M4 did not complete: {error}")),
        }
    }
    if scenarios.m5 {
        eprintln!("mrtr-bench: M5 roots per flow");
        let (rows, failures) = m5_roots::run(&plan.m5).await;
        findings.m5 = rows;
        findings.failures.extend(failures);
    }
    if scenarios.m6 {
        eprintln!("mrtr-bench: M6 forwarded retry");
        match m6_forwarded::run(&plan.m6).await {
            Ok(results) => findings.m6 = Some(results),
            Err(error) => findings
                .failures
                .push(format!("M6 did not complete: {error}")),
        }
    }
    if scenarios.m7 {
        eprintln!("mrtr-bench: M7 memory after bursts");
        match m7_bursts::run(&plan.m7).await {
            Ok(results) => findings.m7 = Some(results),
            Err(error) => findings
                .failures
                .push(format!("M7 did not complete: {error}")),
        }
    }
    if scenarios.m8 {
        eprintln!("mrtr-bench: M8 stdio-to-HTTP alternatives");
        match m8_alternatives::run(&plan.m8, options.smoke).await {
            Ok(mut results) => {
                findings.failures.append(&mut results.failures);
                findings.notes.append(&mut results.skipped);
                findings.m8 = results.points;
            }
            Err(error) => findings
                .failures
                .push(format!("M8 did not complete: {error}")),
        }
    }
    if scenarios.m9 {
        eprintln!("mrtr-bench: M9 one endpoint over several backends");
        let (rows, failures) = m9_aggregate::run(&plan.m9).await;
        findings.m9 = rows;
        findings.failures.extend(failures);
        findings.notes.push(
            "M9's routes over several backends: `backends = [\"b1\", ...]`, one `[backend.bN]` table \
             per fast backend process (its own process each), with the pool of M1's gateway \
             (`max_sessions = 256`, `queue_wait = \"30s\"`), `on_backend_error = \"fail\"` and \
             `list_timeout = \"5000ms\"` (the default, 5 s)."
                .to_owned(),
        );
    }
    findings.notes.push(format!(
        "nginx runs `worker_processes {}` (one worker per core), like the gateway's Tokio runtime (one worker thread per core).",
        procs::NGINX_WORKERS
    ));
    findings.notes.push(
        "the gateway runs with its defaults except: loopback port 0, `drain_timeout = \"1s\"`, \
         the fast backend's `era` fixed (`\"2025-11-25\"`, and `\"2026-07-28\"` for M1's relay and M2's relay and reverse bridge), \
         `pool.max_sessions` sized for the scenario (256 for M1/M2; held rounds + 64 for M3; M8's largest concurrency + 4 for its stdio backend), \
         `queue_wait = \"30s\"`, for M3 `held_ttl = \"600s\"` and `max_held`/`max_held_per_principal` = held rounds + 64, \
         and for M6 loopback ports chosen beforehand, `[fleet]` with `advertise` naming them, one shared `mrtr.keys` entry and `settle_window = \"0ms\"`."
            .to_owned(),
    );
    collect_request_errors(&mut findings);

    let tables = report::tables(&findings);
    let machine = report::machine_section(nginx.as_deref(), open_files, &load_at_start);
    println!("{tables}\n{machine}");
    if let Err(error) = write_outputs(&options.out_dir, &tables, &machine, &findings) {
        eprintln!("mrtr-bench: cannot write the results: {error}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "mrtr-bench: done in {:.1} s; results in {}",
        started.elapsed().as_secs_f64(),
        options.out_dir.display()
    );
    if findings.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "mrtr-bench: {} failure(s), see the report",
            findings.failures.len()
        );
        ExitCode::FAILURE
    }
}

/// M1 and M2 share one backend, two gateways (the backend fixed to 2025-11-25 and to
/// 2026-07-28) and nginx; M2 adds a gateway with a zero quiet gap and one with a zero settle
/// window.
async fn passthrough_and_rounds(
    plan: &Plan,
    scenarios: Scenarios,
    nginx: Option<&Path>,
    findings: &mut Findings,
) -> BenchResult<()> {
    let backend = BackendProcess::start()?;
    let gateway = GatewayProcess::start(
        &HttpGatewayConfig::new(backend.url()).to_toml(),
        Duration::from_secs(10),
    )?;
    let relay = GatewayProcess::start(
        &HttpGatewayConfig::relay(backend.url()).to_toml(),
        Duration::from_secs(10),
    )?;
    let nginx = match nginx {
        Some(path) => match NginxProcess::start(path, backend.addr) {
            Ok(process) => Some(process),
            Err(error) if !findings.smoke => {
                findings
                    .failures
                    .push(format!("nginx did not start, M1 ran without it: {error}"));
                None
            }
            Err(error) => return Err(error),
        },
        None => None,
    };
    if scenarios.m1 {
        eprintln!("mrtr-bench: M1 passthrough");
        let targets = m1_passthrough::Targets {
            direct: backend.url(),
            gateway: gateway.url(),
            nginx: nginx.as_ref().map(NginxProcess::url),
            relay: relay.url(),
            backend_pid: backend.guard.pid(),
            gateway_pid: gateway.guard.pid(),
            nginx_pid: nginx.as_ref().map(NginxProcess::pid),
            relay_pid: relay.guard.pid(),
        };
        (findings.m1, findings.m1_large) = m1_passthrough::run(&plan.m1, &targets).await?;
    }
    drop(nginx);
    if !scenarios.m2 {
        return Ok(());
    }

    eprintln!("mrtr-bench: M2 elicitation round");
    let rows = [
        (m2_elicitation::NATIVE, false, backend.url()),
        (m2_elicitation::DIRECT_MODERN, true, backend.url()),
        (m2_elicitation::GATEWAY_DEFAULT, true, gateway.url()),
        (m2_elicitation::RELAY, true, relay.url()),
        (m2_elicitation::REVERSE_BRIDGE, false, relay.url()),
    ];
    for (label, modern, url) in rows {
        let row = if modern {
            m2_elicitation::run_modern(&plan.m2, label.to_owned(), &url).await?
        } else {
            m2_elicitation::run_legacy(&plan.m2, label.to_owned(), &url).await?
        };
        findings.m2.push(row);
    }
    drop(relay);
    drop(gateway);
    let mut no_quiet = HttpGatewayConfig::new(backend.url());
    no_quiet.settle_quiet_ms = Some(0);
    let mut no_window = HttpGatewayConfig::new(backend.url());
    no_window.settle_window_ms = Some(0);
    let variants = [
        ("gateway, settle_quiet 0 ms (settle_window 50 ms)", no_quiet),
        ("gateway, settle_window 0 ms", no_window),
    ];
    // Each variant gets a gateway of its own, stopped before the next one starts.
    for (label, config) in variants {
        let variant = GatewayProcess::start(&config.to_toml(), Duration::from_secs(10))?;
        findings
            .m2
            .push(m2_elicitation::run_modern(&plan.m2, label.to_owned(), &variant.url()).await?);
    }
    findings.notes.push(
        "After a backend's first server request, the gateway closes the round once the backend \
         has been quiet for `mrtr.settle_quiet` (default 1 ms), and after `mrtr.settle_window` \
         (default 50 ms) at the latest; M2 shows the default, a quiet gap of 0 ms (the round closes \
         on what has arrived once the gateway has yielded) and a window of 0 ms. The relay and \
         the reverse bridge have no settle step: the round is the backend's own."
            .to_owned(),
    );
    Ok(())
}

/// Every request error becomes a failure line.
fn collect_request_errors(findings: &mut Findings) {
    let mut failed: Vec<(String, &LoadStats)> = Vec::new();
    for (scenario, points) in [
        ("M1", &findings.m1),
        ("M1 large", &findings.m1_large),
        ("M8", &findings.m8),
    ] {
        for point in points {
            failed.push((
                format!(
                    "{scenario} {} c={}",
                    point.target.label(),
                    point.concurrency
                ),
                &point.stats,
            ));
        }
    }
    for row in &findings.m2 {
        failed.push((format!("M2 {}", row.label), &row.stats));
    }
    for row in &findings.m5 {
        failed.push((format!("M5 {}", row.label), &row.stats));
    }
    for row in &findings.m9 {
        let what = format!("M9 {}, {}", row.label(), m9_aggregate::era_label(row.era));
        failed.push((format!("{what}, c=1"), &row.latency));
        let c = row.throughput_concurrency;
        failed.push((format!("{what}, c={c}"), &row.throughput));
    }
    for row in &findings.m3 {
        failed.push((format!("M3 {} held: opening", row.held), &row.opened));
        failed.push((format!("M3 {} held: retries", row.held), &row.retries));
    }
    if let Some(m6) = &findings.m6 {
        failed.push(("M6 local retries".to_owned(), &m6.local));
        failed.push(("M6 forwarded retries".to_owned(), &m6.forwarded));
    }
    if let Some(m7) = &findings.m7 {
        for (n, wave) in m7.waves.iter().enumerate() {
            failed.push((format!("M7 wave {}", n + 1), &wave.opened));
        }
    }
    let lines: Vec<String> = failed
        .into_iter()
        .filter(|(_, stats)| stats.errors > 0)
        .map(|(what, stats)| {
            format!(
                "{what}: {} request(s) failed; first: {}",
                stats.errors,
                stats.first_error.as_deref().unwrap_or("?")
            )
        })
        .collect();
    findings.failures.extend(lines);
    for row in &findings.m5 {
        let astray = row.stats.completed - row.flows_under_expected_roots;
        if astray > 0 {
            findings.failures.push(format!(
                "M5 {}: {astray} of {} flows ran under roots other than their own",
                row.label, row.stats.completed
            ));
        }
    }
    if let Some(m6) = &findings.m6 {
        // B does not hold the calls: each right answer it gave must have come through A.
        if m6
            .forwarded_by_b
            .is_none_or(|forwarded| forwarded < m6.forwarded_succeeded)
        {
            findings.failures.push(format!(
                "M6: {} retries through B succeeded but B's /metrics counted {} forwarded",
                m6.forwarded_succeeded,
                m6.forwarded_by_b
                    .map_or_else(|| "none".to_owned(), |n| n.to_string())
            ));
        }
    }
    for row in &findings.m3 {
        if row
            .confirmed_held
            .is_some_and(|held| held != row.held as u64)
        {
            findings.failures.push(format!(
                "M3 {} held: the gateway's /status reported {} held calls",
                row.held,
                row.confirmed_held.unwrap_or_default()
            ));
        }
    }
}

fn write_outputs(
    out_dir: &Path,
    tables: &str,
    machine: &str,
    findings: &Findings,
) -> BenchResult<()> {
    std::fs::create_dir_all(out_dir)?;
    std::fs::write(out_dir.join("results.md"), format!("{tables}\n{machine}"))?;
    if !findings.m1.is_empty() || !findings.m8.is_empty() {
        chart::draw_m1(&out_dir.join("m1.svg"), &findings.m1, &findings.m8)?;
    }
    if !findings.m1_large.is_empty() {
        chart::draw_m1_large(&out_dir.join("m1-large.svg"), &findings.m1_large)?;
    }
    Ok(())
}
