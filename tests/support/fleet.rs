//! A fleet of gateway replicas for the tests of fleet forwarding: three `mrtr-gateway`
//! processes (the real binary, each with its own TOML file, listener, admin listener, advertised
//! address and `instance_id`, all sharing the `requestState` key [`TEST_STATE_KEY`]) in front of
//! the legacy test backend, and [`RoundRobin`], a small HTTP reverse proxy that spreads requests
//! over them one by one, as a load balancer without affinity does.
//!
//! Over Streamable HTTP the three replicas share one [`HttpBackend`], so its log holds all that
//! the backend heard from any of them; over stdio each replica spawns its own backends, each
//! logging to that replica's file, and [`Fleet::backend_messages`] reads all of them.
//!
//! The owner of a held call is read from its sealed state ([`Fleet::owner_of`]); what the
//! replicas did is read from their admin `/metrics`. Every process is stopped by PID: by
//! [`Fleet::stop`] (SIGTERM, bounded wait), or by SIGKILL when the fleet is dropped, e.g. after a
//! failed assertion, in which case each replica's stderr is printed for the test's output.
//!
//! The state's `owner_address` is read and written by its serde name (`"a"`) rather than as a
//! field, so these helpers build whether or not `StatePayload` has that field yet.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mrtr_gateway::state::{KeyRing, StatePayload};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::support::gateway::{
    fixture_path, Backend, GatewayProcess, HttpBackend, BACKEND_NAME, TEST_SETTLE_QUIET,
    TEST_STATE_KEY,
};
use crate::support::modern_client::{post_raw_with_headers, standard_headers, RawExchange};

/// How many replicas a [`Fleet`] runs.
pub const REPLICAS: usize = 3;

/// The `peer_timeout` of the replicas: how long a forwarder waits to reach an owner.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest any single request of these tests may take before the test fails instead of
/// hanging.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A reverse proxy on `127.0.0.1:0` sending each HTTP request to the next upstream in turn
/// (per-request round robin, no affinity). Requests go on with their method, path, headers
/// (`Host` included) and body unchanged; responses come back as they arrive, so an SSE stream
/// passes through unbuffered. An upstream that cannot be reached gives 502. The accept task
/// and every connection it serves end when the proxy is dropped.
pub struct RoundRobin {
    url: String,
    shared: Arc<ProxyShared>,
    accept: JoinHandle<()>,
}

struct ProxyShared {
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
    /// The upstream index each request was sent to, in the order the requests arrived.
    picks: Mutex<Vec<usize>>,
    client: Client<HttpConnector, Incoming>,
}

impl RoundRobin {
    /// A proxy over `upstreams`; the first request goes to `upstreams[0]`.
    pub async fn start(upstreams: Vec<SocketAddr>) -> RoundRobin {
        assert!(!upstreams.is_empty(), "a proxy needs an upstream");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the round-robin proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(ProxyShared {
            upstreams,
            next: AtomicUsize::new(0),
            picks: Mutex::new(Vec::new()),
            client: Client::builder(TokioExecutor::new()).build_http(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        RoundRobin {
            url: format!("http://{addr}/mcp"),
            shared,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The upstream index of every request so far, in arrival order.
    pub fn picks(&self) -> Vec<usize> {
        self.shared
            .picks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The upstream the latest request went to.
    #[track_caller]
    pub fn last_pick(&self) -> usize {
        *self.picks().last().expect("the proxy forwarded a request")
    }
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Accepts until aborted; the connections live in the loop's `JoinSet`, so they end with it.
async fn accept_loop(listener: TcpListener, shared: Arc<ProxyShared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(shared.forward(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

impl ProxyShared {
    async fn forward(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let index = self.next.fetch_add(1, Ordering::SeqCst) % self.upstreams.len();
        self.picks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(index);
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("http://{}{path}", self.upstreams[index])
            .parse()
            .expect("upstream URI");
        // The client keeps a Host header that is already there.
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => response.map(BodyExt::boxed),
            Err(_) => {
                let mut response =
                    Response::new(Empty::<Bytes>::new().map_err(|e| match e {}).boxed());
                *response.status_mut() = StatusCode::BAD_GATEWAY;
                response
            }
        }
    }
}

/// One gateway process of a [`Fleet`].
pub struct Replica {
    process: Option<GatewayProcess>,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// `127.0.0.1:PORT`: its `[fleet] advertise`, the address other replicas forward to.
    pub advertise: String,
    /// `http://127.0.0.1:PORT` of its admin listener.
    pub admin: String,
    /// Its `[mrtr] instance_id`.
    pub instance_id: String,
    /// Its configuration file.
    pub config: PathBuf,
}

/// Sets the value at a dotted `path` of a TOML table (`"fleet.allowed_peers"`), creating the
/// tables on the way.
pub fn set(config: &mut toml::Table, path: &str, value: impl Into<toml::Value>) {
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys.pop().expect("a key");
    let mut table = config;
    for key in keys {
        table = table
            .entry(key)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap_or_else(|| panic!("{key} in {path} is not a table"));
    }
    table.insert(last.to_string(), value.into());
}

/// Changes replica `index`'s configuration before it is written.
type Configure = Box<dyn Fn(usize, &mut toml::Table)>;

/// Starts a [`Fleet`]; [`FleetBuilder::configure`] adjusts each replica's TOML first.
pub struct FleetBuilder {
    kind: Backend,
    configure: Vec<Configure>,
}

impl FleetBuilder {
    /// Runs `configure(index, &mut toml)` on each replica's configuration before it is written,
    /// e.g. `|_, c| set(c, "server.drain_timeout", "20s")`.
    pub fn configure(mut self, configure: impl Fn(usize, &mut toml::Table) + 'static) -> Self {
        self.configure.push(Box::new(configure));
        self
    }

    pub async fn start(self) -> Fleet {
        let dir = tempfile::tempdir().expect("temp dir");
        let http_backend = match self.kind {
            Backend::Stdio => None,
            Backend::Http | Backend::HttpJson => {
                let log = dir.path().join("backend.jsonl");
                std::fs::write(&log, "").expect("create backend log");
                Some((
                    HttpBackend::start("127.0.0.1:0", self.kind == Backend::HttpJson, &log).await,
                    log,
                ))
            }
        };
        let ports = free_ports(2 * REPLICAS);
        let mut configs = Vec::new();
        let mut logs = Vec::new();
        for index in 0..REPLICAS {
            let (port, admin_port) = (ports[2 * index], ports[2 * index + 1]);
            let advertise = format!("127.0.0.1:{port}");
            let instance_id = format!("replica-{index}");
            let mut config: toml::Table = format!(
                "[server]\n\
                 listen = \"{advertise}\"\n\
                 admin_listen = \"127.0.0.1:{admin_port}\"\n\
                 drain_timeout = \"2s\"\n\
                 shutdown_delay = \"0s\"\n\
                 \n\
                 [fleet]\n\
                 advertise = \"{advertise}\"\n\
                 peer_timeout = \"{}s\"\n\
                 \n\
                 [mrtr]\n\
                 keys = [\"{TEST_STATE_KEY}\"]\n\
                 instance_id = \"{instance_id}\"\n\
                 settle_quiet = \"{}ms\"\n\
                 \n\
                 [[route]]\n\
                 path = \"/mcp\"\n\
                 backend = \"{BACKEND_NAME}\"\n\
                 auth = {{ mode = \"none\" }}\n",
                PEER_TIMEOUT.as_secs(),
                TEST_SETTLE_QUIET.as_millis()
            )
            .parse()
            .expect("base fleet configuration");
            let backend = format!("backend.{BACKEND_NAME}");
            match &http_backend {
                Some((backend_process, log)) => {
                    set(&mut config, &format!("{backend}.transport"), "http");
                    set(
                        &mut config,
                        &format!("{backend}.url"),
                        backend_process.url.clone(),
                    );
                    if index == 0 {
                        logs.push(log.clone());
                    }
                }
                None => {
                    let log = dir.path().join(format!("backend-{index}.jsonl"));
                    std::fs::write(&log, "").expect("create backend log");
                    set(&mut config, &format!("{backend}.transport"), "stdio");
                    set(
                        &mut config,
                        &format!("{backend}.command"),
                        fixture_path().display().to_string(),
                    );
                    set(
                        &mut config,
                        &format!("{backend}.args"),
                        vec![toml::Value::from("--stdio")],
                    );
                    set(
                        &mut config,
                        &format!("{backend}.env.LEGACY_BACKEND_LOG"),
                        log.display().to_string(),
                    );
                    logs.push(log);
                }
            }
            for configure in &self.configure {
                configure(index, &mut config);
            }
            let path = dir.path().join(format!("replica-{index}.toml"));
            std::fs::write(
                &path,
                toml::to_string(&config).expect("fleet configuration as TOML"),
            )
            .expect("write replica configuration");
            configs.push((path, advertise, admin_port, instance_id));
        }
        let processes =
            futures_util::future::join_all(configs.iter().map(|(path, _, _, _)| async move {
                let path = path.display().to_string();
                GatewayProcess::start(&["--config", &path], &[]).await
            }))
            .await;
        let replicas: Vec<Replica> = processes
            .into_iter()
            .zip(configs)
            .map(
                |(process, (config, advertise, admin_port, instance_id))| Replica {
                    url: format!("http://{advertise}/mcp"),
                    process: Some(process),
                    advertise,
                    admin: format!("http://127.0.0.1:{admin_port}"),
                    instance_id,
                    config,
                },
            )
            .collect();
        let proxy = RoundRobin::start(
            replicas
                .iter()
                .map(|r| r.advertise.parse().expect("replica address"))
                .collect(),
        )
        .await;
        let fleet = Fleet {
            replicas,
            proxy,
            http_backend: http_backend.map(|(backend, _)| backend),
            logs,
            dir,
        };
        for (index, replica) in fleet.replicas.iter().enumerate() {
            assert_eq!(
                fleet.process(index).url,
                replica.url,
                "replica {index} serves where it was told to"
            );
            fleet.wait_ready(index).await;
        }
        fleet
    }
}

/// Free loopback ports, all picked while the others are still bound so none repeats.
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("port").port())
        .collect()
}

/// Three gateway replicas behind a [`RoundRobin`] proxy (see the module docs).
pub struct Fleet {
    pub replicas: Vec<Replica>,
    pub proxy: RoundRobin,
    http_backend: Option<HttpBackend>,
    /// Every backend log: the shared one over HTTP, one per replica over stdio.
    logs: Vec<PathBuf>,
    dir: tempfile::TempDir,
}

impl Fleet {
    /// Three replicas with the default fleet configuration.
    pub async fn start(kind: Backend) -> Fleet {
        Self::builder(kind).start().await
    }

    pub fn builder(kind: Backend) -> FleetBuilder {
        FleetBuilder {
            kind,
            configure: Vec::new(),
        }
    }

    /// The proxy's MCP endpoint.
    pub fn proxy_url(&self) -> &str {
        self.proxy.url()
    }

    /// Replica `index`'s own MCP endpoint.
    pub fn url(&self, index: usize) -> &str {
        &self.replicas[index].url
    }

    /// The replicas other than `owner`, in index order.
    pub fn non_owners(&self, owner: usize) -> [usize; REPLICAS - 1] {
        let others: Vec<usize> = (0..REPLICAS).filter(|i| *i != owner).collect();
        others.try_into().expect("two other replicas")
    }

    #[track_caller]
    fn process(&self, index: usize) -> &GatewayProcess {
        self.replicas[index]
            .process
            .as_ref()
            .unwrap_or_else(|| panic!("replica {index} was stopped"))
    }

    #[track_caller]
    fn process_mut(&mut self, index: usize) -> &mut GatewayProcess {
        self.replicas[index]
            .process
            .as_mut()
            .unwrap_or_else(|| panic!("replica {index} was stopped"))
    }

    /// Replica `index`'s process id, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.process(index).pid()
    }

    /// Sends `signal` to replica `index` by PID.
    pub fn signal(&self, index: usize, signal: libc::c_int) {
        self.process(index).signal(signal);
    }

    /// Kills replica `index` (SIGKILL by PID) and waits until it is gone.
    pub async fn kill(&mut self, index: usize) {
        let status = self.process_mut(index).kill().await;
        assert!(status.is_some(), "replica {index} ended after SIGKILL");
    }

    /// Sends SIGTERM to replica `index`, which starts its drain; does not wait.
    pub fn terminate(&self, index: usize) {
        self.signal(index, libc::SIGTERM);
    }

    /// Waits at most `within` for replica `index` to exit by itself.
    pub async fn wait_exit(&mut self, index: usize, within: Duration) -> Option<ExitStatus> {
        self.process_mut(index).wait_exit(within).await
    }

    /// What replica `index` wrote on stderr so far.
    pub fn stderr(&self, index: usize) -> String {
        self.replicas[index]
            .process
            .as_ref()
            .map(GatewayProcess::stderr)
            .unwrap_or_default()
    }

    /// Which replica holds the call of `state`: the replica whose advertised address is the
    /// state's `owner_address`, checked against the state's owner instance as well.
    #[track_caller]
    pub fn owner_of(&self, state: &str) -> usize {
        let payload = open_state(state);
        let address = payload
            .owner_address
            .as_deref()
            .unwrap_or_else(|| panic!("the state names no owner address: {payload:?}"));
        let index = self
            .replicas
            .iter()
            .position(|replica| replica.advertise == address)
            .unwrap_or_else(|| panic!("the state's owner address {address} is no replica's"));
        assert_eq!(
            payload.owner, self.replicas[index].instance_id,
            "the state's owner instance is the replica at its owner address"
        );
        index
    }

    /// Every message the backend (every backend, over stdio) received so far; each log is in
    /// order, the logs one after the other.
    pub fn backend_messages(&self) -> Vec<Value> {
        self.logs
            .iter()
            .flat_map(|log| {
                std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str(l).expect("backend log line is JSON"))
                    .collect::<Vec<Value>>()
            })
            .collect()
    }

    /// The answers the backend received to its own requests.
    pub fn answers(&self) -> Vec<Value> {
        self.backend_messages()
            .into_iter()
            .filter(is_answer)
            .collect()
    }

    /// Waits (5 s at most) until the backend received a message matching `pred`.
    pub async fn wait_for_backend(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        crate::support::gateway::wait_for_message(what, || self.backend_messages(), pred).await
    }

    /// A GET of `path` on replica `index`'s admin listener, which must answer 200 in time.
    async fn admin_get(&self, index: usize, path: &str) -> reqwest::Response {
        let url = format!("{}{path}", self.replicas[index].admin);
        let response = tokio::time::timeout(REQUEST_LIMIT, reqwest::get(&url))
            .await
            .unwrap_or_else(|_| panic!("{url} answers in time"))
            .unwrap_or_else(|e| panic!("{url} answers: {e}"));
        assert_eq!(response.status().as_u16(), 200, "{url}");
        response
    }

    /// Replica `index`'s admin `/metrics` text.
    pub async fn metrics(&self, index: usize) -> String {
        let response = self.admin_get(index, "/metrics").await;
        response.text().await.expect("metrics text")
    }

    /// Replica `index`'s admin `/status` document.
    pub async fn status(&self, index: usize) -> Value {
        let response = self.admin_get(index, "/status").await;
        response.json().await.expect("status JSON")
    }

    /// The sum of the samples of metric `name` on replica `index` whose labels include every
    /// `labels` pair (0 when there is none).
    pub async fn metric(&self, index: usize, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics(index).await, name, labels)
    }

    /// [`Fleet::metric`] summed over the replicas still running.
    pub async fn metric_total(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut total = 0.0;
        for index in self.running() {
            total += self.metric(index, name, labels).await;
        }
        total
    }

    /// The replicas whose process has not exited.
    fn running(&self) -> Vec<usize> {
        (0..REPLICAS)
            .filter(|i| {
                self.replicas[*i]
                    .process
                    .as_ref()
                    .is_some_and(|p| p.pid().is_some())
            })
            .collect()
    }

    /// Waits (5 s at most) until no running replica holds a call.
    pub async fn wait_no_held(&self) {
        let mut held = 0.0;
        for _ in 0..100 {
            held = self.metric_total("mrtr_held_calls", &[]).await;
            if held == 0.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{held} calls are still held in the fleet");
    }

    /// Waits (20 s at most) until replica `index` reports ready on its admin listener.
    async fn wait_ready(&self, index: usize) {
        let url = format!("{}/readyz", self.replicas[index].admin);
        let mut status = None;
        for _ in 0..200 {
            status = match tokio::time::timeout(Duration::from_secs(2), reqwest::get(&url)).await {
                Ok(Ok(response)) => Some(response.status().as_u16()),
                _ => None,
            };
            if status == Some(200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "replica {index} never became ready ({status:?}); it said:\n{}",
            self.stderr(index)
        );
    }

    /// Stops every replica still running with SIGTERM (each waited for, bounded), then the
    /// HTTP backend.
    pub async fn stop(mut self) {
        let processes: Vec<GatewayProcess> = self
            .replicas
            .iter_mut()
            .filter_map(|r| r.process.take())
            .collect();
        futures_util::future::join_all(processes.into_iter().map(GatewayProcess::stop)).await;
        if let Some(backend) = self.http_backend.take() {
            backend.stop().await;
        }
    }
}

impl Drop for Fleet {
    /// Kills what is left by PID; after a failure, shows what each replica said.
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for (index, replica) in self.replicas.iter().enumerate() {
            if let Some(process) = &replica.process {
                if panicking {
                    eprintln!(
                        "--- replica {index} ({}) stderr:\n{}",
                        replica.advertise,
                        process.stderr()
                    );
                }
                process.signal(libc::SIGKILL);
            }
        }
        if let Some(pid) = self.http_backend.as_ref().and_then(HttpBackend::pid) {
            crate::support::signal::send(pid as i32, libc::SIGKILL);
        }
    }
}

/// Whether a backend log line is an answer to one of the backend's own requests.
pub fn is_answer(message: &Value) -> bool {
    message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Opens `state` with [`TEST_STATE_KEY`].
#[track_caller]
pub fn open_state(state: &str) -> StatePayload {
    KeyRing::from_base64(&[TEST_STATE_KEY])
        .expect("test key")
        .open(state)
        .unwrap_or_else(|e| panic!("the state opens with the test key: {e:?}"))
}

/// `template` naming another owner, instance `owner` at `owner_address`, sealed with `key`.
pub fn seal_naming(template: &StatePayload, owner: &str, owner_address: &str, key: &str) -> String {
    let payload = StatePayload {
        owner: owner.into(),
        owner_address: Some(owner_address.into()),
        ..template.clone()
    };
    KeyRing::from_base64(&[key])
        .expect("sealing key")
        .seal(&payload)
}

/// The sum of the samples of `name` whose labels include every `labels` pair, in Prometheus
/// text format.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let matches = series_name == name
                && labels.iter().all(|(k, v)| {
                    series_labels
                        .split(',')
                        .any(|l| l == format!("{k}=\"{v}\""))
                });
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// POSTs `body` with the standard headers, failing the test if no answer comes within 30 s.
pub async fn post(url: &str, body: &Value) -> RawExchange {
    post_with_headers(url, body, standard_headers(body)).await
}

/// Like [`post`], with exactly `headers`.
pub async fn post_with_headers(
    url: &str,
    body: &Value,
    headers: reqwest::header::HeaderMap,
) -> RawExchange {
    tokio::time::timeout(REQUEST_LIMIT, post_raw_with_headers(url, body, headers))
        .await
        .unwrap_or_else(|_| panic!("{url} answered within {REQUEST_LIMIT:?}"))
}
