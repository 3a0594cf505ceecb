//! Command line: `serve` (the default), `check-config`, `keygen`, `demo-backend`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mrtr_gateway::config::Config;
use mrtr_gateway::telemetry::{self, LogFormat};
use tokio::signal::unix::{signal, Signal, SignalKind};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "mrtr-gateway",
    version,
    about = "MCP 2026-07-28 gateway in front of 2025-11-25 servers"
)]
struct Cli {
    /// Configuration file (TOML). Without one, the built-in demo backend is served on
    /// 127.0.0.1:8080/mcp.
    #[arg(long, short, global = true, env = "MRTR_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Listen on this address instead of the configured `server.listen`.
    #[arg(long, global = true, env = "MRTR_GATEWAY_LISTEN")]
    listen: Option<std::net::SocketAddr>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "MRTR_GATEWAY_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (default).
    Serve,
    /// Validate a configuration file and exit.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Run the built-in demo legacy (2025-11-25) MCP server on stdin/stdout.
    DemoBackend,
    /// Print a new random `requestState` key (base64, 32 bytes) for `[mrtr] keys`.
    Keygen,
}

/// SIGTERM and SIGINT, listened for from the start: one that arrives while the gateway is still
/// starting stops it gracefully too, instead of killing it.
struct StopSignals {
    term: Option<Signal>,
    interrupt: Option<Signal>,
}

impl StopSignals {
    fn listen() -> Self {
        Self {
            term: signal(SignalKind::terminate()).ok(),
            interrupt: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next stop signal.
    async fn next(&mut self) {
        async fn on(source: &mut Option<Signal>) {
            match source {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        if self.term.is_none() && self.interrupt.is_none() {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
        tokio::select! {
            () = on(&mut self.term) => {}
            () = on(&mut self.interrupt) => {}
        }
    }
}

async fn serve(config_path: Option<PathBuf>, listen: Option<std::net::SocketAddr>) -> ExitCode {
    let mut stop = StopSignals::listen();
    // Likewise from the start: SIGHUP's default action would end the process.
    let hangups = signal(SignalKind::hangup()).ok();
    let mut config = match config_path {
        Some(path) => match Config::read(&path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("mrtr-gateway: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => match std::env::current_exe() {
            Ok(exe) => Config::embedded_default(&exe),
            Err(e) => {
                eprintln!("mrtr-gateway: cannot locate own executable for the demo backend: {e}");
                return ExitCode::from(2);
            }
        },
    };
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    // Validated after the override: rules such as "no unauthenticated route off loopback"
    // depend on the address actually used.
    if let Err(e) = config.validate() {
        eprintln!("mrtr-gateway: {e}");
        return ExitCode::from(2);
    }
    let running = match mrtr_gateway::start(&config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mrtr-gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(admin) = running.admin_addr() {
        eprintln!(
            "mrtr-gateway: admin endpoints on http://{admin} (/healthz /readyz /metrics /status)"
        );
    }
    for route in &config.routes {
        eprintln!(
            "mrtr-gateway: serving http://{}{} -> backend {}",
            running.local_addr(),
            route.path,
            route.members().join(", ")
        );
    }
    let gateway = running.gateway().clone();
    let reloads = tokio::spawn(async move {
        let Some(mut hangups) = hangups else {
            return;
        };
        while hangups.recv().await.is_some() {
            if let Err(e) = gateway.reload_keys() {
                tracing::warn!(error = %e, "SIGHUP: requestState keys not reloaded");
            }
        }
    });
    stop.next().await;
    reloads.abort();
    tracing::info!("shutting down");
    // A second signal cuts the lame-duck period short.
    running.shutdown_or_sooner(stop.next()).await;
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo backend's stderr ends up in the gateway's log: keep it to what matters.
    let default_level = match cli.command {
        Some(Command::DemoBackend) => "warn",
        _ => "info",
    };
    let serving = matches!(cli.command, None | Some(Command::Serve));
    let telemetry = telemetry::init(cli.log_format, default_level, serving);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mrtr-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            if telemetry::exporting() {
                tracing::info!("request spans are exported over OTLP");
            }
            let code = runtime.block_on(serve(cli.config, cli.listen));
            // After the runtime: the exporter's blocking HTTP client must not run inside it.
            drop(runtime);
            telemetry.shutdown();
            code
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(config) => {
                println!(
                    "{}: ok ({} route(s), {} backend(s))",
                    file.display(),
                    config.routes.len(),
                    config.backends.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::from(2)
            }
        },
        Command::Keygen => {
            println!("{}", mrtr_gateway::state::generate_key());
            ExitCode::SUCCESS
        }
        Command::DemoBackend => match runtime.block_on(mrtr_gateway::demo::run_stdio()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo-backend: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
