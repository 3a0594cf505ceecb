//! Starts the gateway in-process in front of the legacy test backend (`legacy_backend` example,
//! a 2025-11-25 rmcp server) over stdio or Streamable HTTP, and reads what the backend received;
//! [`GatewayProcess`] runs the gateway binary itself, as a user does, and can signal, kill and
//! wait for it by PID.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mrtr_gateway::config::{
    BackendConfig, BackendEra, Config, RouteConfig, StaticRoot, UnsolicitedPolicy,
};
use mrtr_gateway::PoolStats;
use mrtr_gateway::RunningGateway;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The legacy backend binary.
pub fn fixture_path() -> PathBuf {
    example_path("legacy_backend")
}

/// The 2026-07-28-only test backend (an example, like the legacy one).
pub const MODERN_FIXTURE: &str = "modern_backend";

/// The binary of the example `name`: cargo builds examples next to the test binaries' `deps`
/// folder.
pub fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile directory");
    profile_dir.join("examples").join(name)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Stdio,
    Http,
    /// Streamable HTTP answering every request with application/json.
    HttpJson,
}

impl Backend {
    pub const ALL: [Backend; 2] = [Backend::Stdio, Backend::Http];
}

/// A legacy backend serving Streamable HTTP in its own process, stopped by PID on drop.
pub struct HttpBackend {
    child: Child,
    pub url: String,
}

impl HttpBackend {
    pub async fn start(addr: &str, json_response: bool, log: &Path) -> HttpBackend {
        Self::start_with_env(addr, json_response, log, &[]).await
    }

    pub async fn start_with_env(
        addr: &str,
        json_response: bool,
        log: &Path,
        env: &[(&str, &str)],
    ) -> HttpBackend {
        let mut command = Command::new(fixture_path());
        command.envs(env.iter().copied());
        if json_response {
            command.arg("--json-response");
        }
        command.env("LEGACY_BACKEND_LOG", log);
        Self::spawn(command, addr).await
    }

    /// The 2026-07-28 test backend (`modern_backend`) over Streamable HTTP.
    pub async fn start_modern(addr: &str, log: &Path) -> HttpBackend {
        let mut command = Command::new(example_path(MODERN_FIXTURE));
        command.env("MODERN_BACKEND_LOG", log);
        Self::spawn(command, addr).await
    }

    async fn spawn(mut command: Command, addr: &str) -> HttpBackend {
        command.arg("--http").arg(addr);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start legacy HTTP backend");
        let stdout = child.stdout.take().expect("backend stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("backend printed its address in time")
            .expect("read backend stdout")
            .expect("backend printed a line");
        let url = line
            .strip_prefix("LISTENING ")
            .expect("LISTENING line")
            .trim()
            .to_string();
        HttpBackend { child, url }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A gateway started in-process in front of the legacy backend, stopped with [`Harness::stop`].
pub struct Harness {
    pub gateway: Option<RunningGateway>,
    /// The MCP endpoint of the gateway.
    pub url: String,
    pub backend_log: PathBuf,
    pub http_backend: Option<HttpBackend>,
    pub dir: tempfile::TempDir,
}

/// The `requestState` key of test gateways, so tests can forge states the gateway can open.
pub const TEST_STATE_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The name of the test gateway's one backend, behind the route `/mcp`.
pub const BACKEND_NAME: &str = "legacy";

/// Shortcuts to the parts of a test gateway's [`Config`] that tests adjust.
pub trait TestConfig {
    /// The `[backend.legacy]` table: the legacy backend behind `/mcp`.
    fn legacy(&mut self) -> &mut BackendConfig;
    /// The `/mcp` route.
    fn mcp_route(&mut self) -> &mut RouteConfig;
}

impl TestConfig for Config {
    fn legacy(&mut self) -> &mut BackendConfig {
        self.backends
            .get_mut(BACKEND_NAME)
            .expect("the legacy backend")
    }

    fn mcp_route(&mut self) -> &mut RouteConfig {
        self.routes
            .iter_mut()
            .find(|route| route.path == "/mcp")
            .expect("the /mcp route")
    }
}

/// One backend session for everybody.
pub fn one_session(config: &mut Config) {
    config.legacy().pool.max_sessions = 1;
}

/// Answers the backend's requests outside any call from the configuration
/// (`unsolicited = "static"`), with the one root `file:///srv/static`.
pub fn static_roots(config: &mut Config) {
    let backend = config.legacy();
    backend.unsolicited = UnsolicitedPolicy::Static;
    backend.static_roots = vec![StaticRoot {
        uri: "file:///srv/static".into(),
        name: Some("static".into()),
    }];
}

/// Waits (5 s at most) until `messages` holds one matching `pred`, and returns it.
pub async fn wait_for_message(
    what: &str,
    messages: impl Fn() -> Vec<Value>,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..100 {
        if let Some(found) = messages().into_iter().find(|m| pred(m)) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let methods: Vec<Value> = messages()
        .into_iter()
        .filter_map(|m| m.get("method").cloned())
        .collect();
    panic!("the backend never received {what}; it got {methods:?}");
}

/// How the gateway reaches the legacy backend.
enum Transport {
    /// Spawns the fixture with `--stdio` and this environment.
    Stdio(BTreeMap<String, String>),
    /// Spawns the 2026-07-28 fixture with `--stdio` and this environment.
    ModernStdio(BTreeMap<String, String>),
    /// Streamable HTTP at this URL.
    Http(String),
}

impl Harness {
    /// A gateway with the test configuration as it is.
    pub async fn start(kind: Backend) -> Harness {
        Self::start_with(kind, |_| {}).await
    }

    /// A gateway whose test [`Config`] `configure` adjusts before it is validated, e.g.
    /// `Harness::start_with(kind, |c| c.mrtr.round_wait = Duration::from_millis(200))`.
    pub async fn start_with(kind: Backend, configure: impl FnOnce(&mut Config)) -> Harness {
        Self::start_with_env(kind, &[], configure).await
    }

    /// Like [`Harness::start_with`], with extra environment for the legacy backend.
    pub async fn start_with_env(
        kind: Backend,
        backend_env: &[(&str, &str)],
        configure: impl FnOnce(&mut Config),
    ) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend_log = dir.path().join("backend.jsonl");
        std::fs::write(&backend_log, "").expect("create backend log");
        let (transport, http_backend) = match kind {
            Backend::Stdio => {
                let mut env: BTreeMap<String, String> = backend_env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                env.insert(
                    "LEGACY_BACKEND_LOG".into(),
                    backend_log.display().to_string(),
                );
                (Transport::Stdio(env), None)
            }
            Backend::Http | Backend::HttpJson => {
                let backend = HttpBackend::start_with_env(
                    "127.0.0.1:0",
                    kind == Backend::HttpJson,
                    &backend_log,
                    backend_env,
                )
                .await;
                (Transport::Http(backend.url.clone()), Some(backend))
            }
        };
        Self::start_config(dir, backend_log, transport, http_backend, configure).await
    }

    /// A gateway in front of the 2026-07-28 test backend (`modern_backend`), its era left to
    /// detection (`era = "auto"`).
    pub async fn start_modern(kind: Backend, configure: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend_log = dir.path().join("backend.jsonl");
        std::fs::write(&backend_log, "").expect("create backend log");
        let (transport, http_backend) = match kind {
            Backend::Stdio => {
                let env = BTreeMap::from([(
                    "MODERN_BACKEND_LOG".to_string(),
                    backend_log.display().to_string(),
                )]);
                (Transport::ModernStdio(env), None)
            }
            Backend::Http | Backend::HttpJson => {
                let backend = HttpBackend::start_modern("127.0.0.1:0", &backend_log).await;
                (Transport::Http(backend.url.clone()), Some(backend))
            }
        };
        Self::start_config(dir, backend_log, transport, http_backend, |config| {
            config.legacy().era = BackendEra::Auto;
            configure(config);
        })
        .await
    }

    /// A gateway in front of an HTTP URL that nothing (or something else) serves.
    pub async fn start_url(url: &str, configure: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend_log = dir.path().join("backend.jsonl");
        let transport = Transport::Http(url.to_string());
        Self::start_config(dir, backend_log, transport, None, configure).await
    }

    async fn start_config(
        dir: tempfile::TempDir,
        backend_log: PathBuf,
        transport: Transport,
        http_backend: Option<HttpBackend>,
        configure: impl FnOnce(&mut Config),
    ) -> Harness {
        let mut config = test_config(transport);
        configure(&mut config);
        config.validate().expect("valid test configuration");
        let gateway = mrtr_gateway::start(&config).await.expect("gateway starts");
        let url = format!("http://{}/mcp", gateway.local_addr());
        Harness {
            gateway: Some(gateway),
            url,
            backend_log,
            http_backend,
            dir,
        }
    }

    /// The port the gateway listens on.
    pub fn port(&self) -> u16 {
        self.addr()
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .expect("a port in the gateway URL")
    }

    /// `HOST:PORT` of the gateway.
    pub fn addr(&self) -> &str {
        self.url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .expect("an address in the gateway URL")
    }

    /// The gateway's metrics, as `/metrics` renders them (gauges read first).
    pub fn metrics(&self) -> String {
        let gateway = self
            .gateway
            .as_ref()
            .expect("the gateway is running")
            .gateway();
        gateway.refresh_gauges();
        gateway.metrics().render()
    }

    /// Every message the backend received so far, in order. (The modern backend logs each with
    /// its HTTP headers, and its cancellations: [`Harness::backend_log_lines`].)
    pub fn backend_messages(&self) -> Vec<Value> {
        self.backend_log_lines()
            .into_iter()
            .filter(|line| line.get("event").is_none())
            .map(|line| match line.get("message") {
                Some(message) if line.get("headers").is_some() => message.clone(),
                _ => line,
            })
            .collect()
    }

    /// The backend's log as it wrote it, one JSON value per line.
    pub fn backend_log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.backend_log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("backend log line is JSON"))
            .collect()
    }

    /// Methods of the requests and notifications the backend received.
    pub fn backend_methods(&self) -> Vec<String> {
        self.backend_messages()
            .iter()
            .filter_map(|m| m.get("method").and_then(Value::as_str).map(String::from))
            .collect()
    }

    /// How many requests or notifications with this `method` the backend received.
    pub fn backend_method_count(&self, method: &str) -> usize {
        self.backend_methods()
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// The session pool of the legacy backend right now.
    pub fn pool_stats(&self) -> PoolStats {
        self.gateway.as_ref().expect("running").gateway().pools()[0].stats()
    }

    /// Waits (bounded) until the backend received a message matching `pred`.
    pub async fn wait_for_backend(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_for_message(what, || self.backend_messages(), pred).await
    }

    /// Calls held by the gateway right now.
    pub fn held(&self) -> usize {
        self.gateway
            .as_ref()
            .map_or(0, |g| g.gateway().held_calls())
    }

    /// Waits (bounded) until no call is held any more.
    pub async fn wait_no_held(&self) {
        for _ in 0..100 {
            if self.held() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} calls are still held", self.held());
    }

    pub async fn stop(mut self) {
        if let Some(gateway) = self.gateway.take() {
            gateway.shutdown().await;
        }
        if let Some(backend) = self.http_backend.take() {
            backend.stop().await;
        }
    }
}

/// The quiet gap that closes the test gateways' rounds, above the default 1 ms: the fixture's
/// stdio writes each pass through tokio's blocking pool, so on a busy machine (or a session's
/// first call) the questions its `parallel_inputs` asks together can come more than 1 ms apart
/// and land in two rounds. That is still answered, but the tests count rounds.
pub const TEST_SETTLE_QUIET: Duration = Duration::from_millis(10);

/// The configuration of a test gateway before the test adjusts it: `/mcp` in front of the
/// legacy backend on a free loopback port, requestState sealed with [`TEST_STATE_KEY`], rounds
/// closed on [`TEST_SETTLE_QUIET`], and a short drain (tests end with calls still held now and
/// then).
fn test_config(transport: Transport) -> Config {
    let kind = match transport {
        Transport::Stdio(_) | Transport::ModernStdio(_) => "stdio",
        Transport::Http(_) => "http",
    };
    let mut config: Config = toml::from_str(&format!(
        "[[route]]\npath = \"/mcp\"\nbackend = \"{BACKEND_NAME}\"\n\n[backend.{BACKEND_NAME}]\ntransport = \"{kind}\"\nera = \"2025-11-25\"\n"
    ))
    .expect("base test configuration");
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.server.drain_timeout = Duration::from_secs(1);
    // No balancer to leave: a test that stops the gateway drains at once.
    config.server.shutdown_delay = Duration::ZERO;
    config.mrtr.keys = vec![TEST_STATE_KEY.to_string()];
    config.mrtr.instance_id = Some("test-instance".into());
    config.mrtr.settle_quiet = TEST_SETTLE_QUIET;
    let backend = config.legacy();
    match transport {
        Transport::Stdio(env) => {
            backend.command = Some(fixture_path().display().to_string());
            backend.args = vec!["--stdio".into()];
            backend.env = env;
        }
        Transport::ModernStdio(env) => {
            backend.command = Some(example_path(MODERN_FIXTURE).display().to_string());
            backend.args = vec!["--stdio".into()];
            backend.env = env;
        }
        Transport::Http(url) => backend.url = Some(url),
    }
    config
}

/// The gateway binary run as a user runs it, stopped on drop (`kill_on_drop`). Its stderr is
/// read to the end in the background so the process never blocks on a full pipe.
pub struct GatewayProcess {
    pub child: Child,
    /// `http://ADDR/PATH` of the first route, from the `serving` line.
    pub url: String,
    /// Everything the process wrote on stderr so far.
    log: Arc<Mutex<String>>,
    /// Reads stderr into `log` until the process closes it.
    reader: tokio::task::JoinHandle<()>,
}

impl GatewayProcess {
    /// Starts `mrtr-gateway ARGS` with extra environment and waits (20 s at most) for its
    /// `serving` line.
    pub async fn start(args: &[&str], env: &[(&str, &str)]) -> GatewayProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"));
        command.args(args);
        // Only what the test sets: the caller's logging and tracing settings would change
        // what the binary prints and exports.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name == "RUST_LOG" || name.starts_with("OTEL_") || name.starts_with("MRTR_GATEWAY_")
            {
                command.env_remove(name.as_ref());
            }
        }
        command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("gateway starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = String::new();
        let url = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push_str(&line);
                seen.push('\n');
                if let Some(rest) = line.split("serving ").nth(1) {
                    return rest.split_whitespace().next().map(String::from);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("the gateway says where it serves; it said:\n{seen}"));
        let log = Arc::new(Mutex::new(seen));
        let reader = tokio::spawn({
            let log = log.clone();
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        GatewayProcess {
            child,
            url,
            log,
            reader,
        }
    }

    /// The process id, while the process has not been waited for.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `signal` to the process by PID (nothing once it has been waited for).
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.pid() {
            crate::support::signal::send(pid as i32, signal);
        }
    }

    /// Kills the process with SIGKILL by PID and waits (10 s at most) until it is gone.
    pub async fn kill(&mut self) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGKILL);
        self.wait_exit(Duration::from_secs(10)).await
    }

    /// Waits at most `within` for the process to exit by itself; `None` when it is still running.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Everything the process wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops the process with SIGTERM (a clean drain), waits for it (30 s at most, then kills
    /// it) and returns its exit status (`None` when it had to be killed) and all of its stderr.
    pub async fn stop(mut self) -> (Option<std::process::ExitStatus>, String) {
        if let Some(pid) = self.child.id() {
            crate::support::signal::send(pid as i32, libc::SIGTERM);
        }
        let status = match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.reader).await;
        (status, self.stderr())
    }
}
