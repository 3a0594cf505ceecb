//! Configuration: the TOML file format and the embedded default (the built-in demo backend
//! behind `127.0.0.1:8080/mcp`). Loading parses, expands `${NAME}` (`expand`), then checks each
//! section (`check`) with errors that name the key; the defaults are all in `defaults`, the
//! `requestState` key format in `keys`.
//!
//! Secrets never need to live in the file: values of backend `headers` and `env`, `mrtr.keys`
//! and bearer tokens may contain `${NAME}`, replaced by the environment variable `NAME` when the
//! configuration is loaded.

mod access;
mod auth;
mod check;
mod defaults;
mod expand;
mod keys;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use crate::protocol::Era;
pub use access::{AuditConfig, Effect, PolicyRule, TokenExchangeConfig};
pub use auth::{AuthConfig, BearerToken, JwtConfig, ANONYMOUS, JWT_ALGORITHMS, MAX_LEEWAY};
pub use keys::{decode_keys, KeyError};

/// The longest line the gateway reads from a stdio backend's stdout, and the longest the demo
/// backend reads from its stdin (the embedded configuration sets its `max_message_bytes` to
/// this; a stdio backend's default is 16 MiB, rmcp's line limit).
pub const STDIO_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Parse(#[from] toml::de::Error),
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
}

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        problem: problem.into(),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    #[serde(default, rename = "backend")]
    pub backends: BTreeMap<String, BackendConfig>,
    #[serde(default)]
    pub mrtr: MrtrConfig,
    /// Replicas that finish each other's held calls; none by default (one process).
    #[serde(default)]
    pub fleet: Option<FleetConfig>,
    /// 2025-11-25 clients served as sessions at the same endpoints.
    #[serde(default)]
    pub legacy: LegacyConfig,
    /// The audit log; none by default.
    #[serde(default)]
    pub audit: Option<AuditConfig>,
}

/// `[legacy]`: limits and lifetime of the sessions 2025-11-25 clients open.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyConfig {
    /// Sessions open at once, gateway-wide; past it `initialize` gets HTTP 429.
    #[serde(default = "defaults::legacy_max_sessions")]
    pub max_sessions: usize,
    /// Sessions one principal may hold at once (not counted with `auth.mode = "none"`).
    #[serde(default = "defaults::legacy_max_sessions_per_principal")]
    pub max_sessions_per_principal: usize,
    /// A session with no request and no open stream for this long ends, and its backend
    /// session with it.
    #[serde(default = "defaults::legacy_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest wait for the backend's answer to `initialize`.
    #[serde(
        default = "defaults::legacy_initialize_timeout",
        with = "humantime_serde"
    )]
    pub initialize_timeout: Duration,
    /// Events kept per SSE stream for a client resuming with `Last-Event-ID`.
    #[serde(default = "defaults::legacy_replay_events")]
    pub replay_events: usize,
}

/// `[fleet]`: how this replica is reached by the others, so a retry that lands anywhere is
/// forwarded to the replica holding its call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// `HOST:PORT` at which other replicas reach this one (in Kubernetes `"${POD_IP}:8081"`):
    /// its peer listener (`listen`), else its MCP listener. Sealed into every `requestState`
    /// this replica issues.
    pub advertise: String,
    /// The peer listener: where other replicas forward retries and session requests. It stays
    /// open until the process exits, so the MCP listener can close when the drain starts and
    /// a refused connection proves the owner gone. Without it the MCP listener serves peers
    /// and stays open through the drain.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// CIDRs a replica forwards to; empty: any address a state names (the state opened, so a
    /// replica of the fleet sealed it).
    #[serde(default)]
    pub allowed_peers: Vec<ipnet::IpNet>,
    /// Longest wait to reach the owner of a call: connecting, and its response head (a slow
    /// owner starts its answer as an SSE stream after half of it).
    #[serde(default = "defaults::peer_timeout", with = "humantime_serde")]
    pub peer_timeout: Duration,
}

/// Multi round-trip bridging: how held calls are sealed, batched, waited for and bounded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MrtrConfig {
    /// How long a held call waits for the client's retry before it is abandoned. Keep it below
    /// the backends' own timeout for their requests (60 s in the TypeScript SDK).
    #[serde(default = "defaults::held_ttl", with = "humantime_serde")]
    pub held_ttl: Duration,
    /// After a backend's first request of a round, the longest wait to gather more into the
    /// same round.
    #[serde(default = "defaults::settle_window", with = "humantime_serde")]
    pub settle_window: Duration,
    /// The round closes sooner, once the backend has sent nothing for this long: legacy SDKs
    /// send concurrent requests back to back. No longer than `settle_window` in effect.
    #[serde(default = "defaults::settle_quiet", with = "humantime_serde")]
    pub settle_quiet: Duration,
    /// After answers are delivered, how long to wait for the backend's next event before
    /// returning a round with `requestState` only.
    #[serde(default = "defaults::round_wait", with = "humantime_serde")]
    pub round_wait: Duration,
    /// Rounds one call may take.
    #[serde(default = "defaults::max_rounds")]
    pub max_rounds: u32,
    /// Calls held at once, gateway-wide; past it new rounds get HTTP 429.
    #[serde(default = "defaults::max_held")]
    pub max_held: usize,
    /// Calls held at once for one principal; past it that client's new rounds get HTTP 429.
    #[serde(default = "defaults::max_held_per_principal")]
    pub max_held_per_principal: usize,
    /// AES-256-GCM keys (base64, 32 bytes) for `requestState`; the first seals, all open.
    /// Empty: a random key per process (held calls live in one process anyway).
    #[serde(default)]
    pub keys: Vec<String>,
    /// A file with one base64 key per line, read after `keys`.
    #[serde(default)]
    pub keys_file: Option<PathBuf>,
    /// This instance's id in `requestState` (default: random per process).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// After a retry is refused for invalid answers, how long the held call still waits for a
    /// corrected retry before it is abandoned (its backend call cancelled, its session reset).
    #[serde(default = "defaults::refused_retry_grace", with = "humantime_serde")]
    pub refused_retry_grace: Duration,
    /// How long a finished round's outcome is kept for a re-sent retry (same state, principal
    /// and answers), so a client that lost the response learns the result; the backend hears
    /// nothing new. Of the outcomes that reached a client, at most `max_held` are kept, and
    /// `max_held_per_principal` per principal; one whose client was gone stays for the retry
    /// anyway (it was never seen).
    #[serde(default = "defaults::outcome_ttl", with = "humantime_serde")]
    pub outcome_ttl: Duration,
}

impl MrtrConfig {
    /// The configured keys, then those of `keys_file`.
    pub fn key_list(&self) -> Result<Vec<String>, ConfigError> {
        let mut keys = self.keys.clone();
        if let Some(path) = &self.keys_file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        Ok(keys)
    }
}

/// What to do with a server request that arrives while no call is active on the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnsolicitedPolicy {
    /// Keep it and surface it in the first round of the session's next interruptible call.
    #[default]
    Defer,
    /// Answer roots from `static_roots`; decline to elicit or sample.
    Static,
    /// Answer with an error.
    Error,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the MCP listener.
    #[serde(default = "defaults::listen")]
    pub listen: SocketAddr,
    /// Address of the admin listener (/healthz, /readyz, /metrics, /status); none by default.
    #[serde(default)]
    pub admin_listen: Option<SocketAddr>,
    /// Largest accepted request body.
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// Accepted `Host` header names (without port). `["*"]` accepts any. Default: the loopback
    /// names when listening on loopback, any host otherwise.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// Accepted `Origin` values (`scheme://host[:port]`); a request without `Origin` is not
    /// checked. Default: http(s) origins on the loopback names, any port.
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
    /// Interval of SSE keep-alive comments on long responses.
    #[serde(default = "defaults::sse_keep_alive", with = "humantime_serde")]
    pub sse_keep_alive: Duration,
    /// Allow routes without authentication on a non-loopback listener (e.g. behind a proxy
    /// that authenticates).
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Longest wait for a request body once its headers arrived (slow senders get 408).
    #[serde(default = "defaults::body_read_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Client connections open at once. At the limit the one idle the longest is closed for a
    /// new one; with none idle the new one is closed at once.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// A call with no answer yet after this long is answered as an SSE stream: keep-alive
    /// comments, then the answer, so that proxies with idle timeouts do not cut it.
    #[serde(default = "defaults::stream_after", with = "humantime_serde")]
    pub stream_after: Duration,
    /// Longest a new connection may stay silent before its first byte; then it is closed.
    #[serde(default = "defaults::first_byte_timeout", with = "humantime_serde")]
    pub first_byte_timeout: Duration,
    /// The lame-duck period at SIGTERM: `/readyz` answers 503 and everything is still served,
    /// so balancers take the replica out before its listener closes. A second signal ends it.
    #[serde(default = "defaults::shutdown_delay", with = "humantime_serde")]
    pub shutdown_delay: Duration,
    /// After the lame-duck period, the longest wait for what was accepted to finish (calls
    /// running or waiting for a session, held rounds' retries) before the rest is cut.
    #[serde(default = "defaults::drain_timeout", with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// `subscriptions/listen` streams open at once, gateway-wide; past it a listen gets 429.
    #[serde(default = "defaults::max_listens")]
    pub max_listens: usize,
    /// `subscriptions/listen` streams open at once for one principal; past it, 429.
    #[serde(default = "defaults::max_listens_per_principal")]
    pub max_listens_per_principal: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// URL path of the MCP endpoint, e.g. `/mcp`.
    pub path: String,
    /// Name of a `[backend.NAME]` table; or leave it out and name several in `backends`.
    #[serde(default)]
    pub backend: String,
    /// Names of `[backend.NAME]` tables served together at this one endpoint, their tools and
    /// prompts under names that say which backend serves them (`prefixes`).
    #[serde(default)]
    pub backends: Vec<String>,
    /// With `backends`: the prefix of each backend's tool and prompt names (default: the
    /// backend's name), followed by `__`.
    #[serde(default)]
    pub prefixes: BTreeMap<String, String>,
    /// With `backends`: resource URIs starting with one of these go to that backend, without
    /// looking at which backend lists them.
    #[serde(default)]
    pub resource_prefixes: BTreeMap<String, String>,
    /// With `backends`: what a backend that is down or slow does to a merged answer.
    #[serde(default)]
    pub on_backend_error: OnBackendError,
    /// With `backends`: longest one backend may take to answer its part of a merged answer
    /// (a list, `server/discover`); past it the backend counts as failed.
    #[serde(default = "defaults::list_timeout", with = "humantime_serde")]
    pub list_timeout: Duration,
    /// `ttlMs` stamped on cacheable results.
    #[serde(default)]
    pub ttl_ms: u64,
    /// `cacheScope` stamped on cacheable results.
    #[serde(default = "defaults::cache_scope")]
    pub cache_scope: CacheScope,
    /// Who may call this route.
    #[serde(default)]
    pub auth: AuthConfig,
    /// This endpoint's canonical URL, for its protected resource metadata (RFC 9728). Default:
    /// derived from the request's Host.
    #[serde(default)]
    pub resource: Option<String>,
    /// Authorization servers named in the protected resource metadata.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// The protocol eras this endpoint serves; drop `"2025-11-25"` to close the legacy door.
    #[serde(default = "defaults::eras")]
    pub eras: Vec<Era>,
    /// Who may use which tools, prompts and resources; the first rule that matches an item
    /// decides, and an item no rule matches is hidden. None: everything is allowed.
    #[serde(default)]
    pub policy: Vec<PolicyRule>,
}

/// What a route over several backends does when one of them fails its part of a merged answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnBackendError {
    /// The answer leaves the backend out (counted, logged); its own items' uses get an error.
    #[default]
    Omit,
    /// The whole answer is an error naming the backend.
    Fail,
}

/// What a route over several backends puts between a backend's prefix and an item's name.
pub const NAME_SEPARATOR: &str = "__";

impl RouteConfig {
    /// The backends this endpoint serves, in the order their items are merged.
    pub fn members(&self) -> &[String] {
        if self.backends.is_empty() {
            std::slice::from_ref(&self.backend)
        } else {
            &self.backends
        }
    }

    /// Whether this endpoint serves several backends together, their names mapped.
    pub fn is_aggregate(&self) -> bool {
        !self.backends.is_empty()
    }

    /// The prefix of a member backend's tool and prompt names.
    pub fn prefix_of<'a>(&'a self, backend: &'a str) -> &'a str {
        self.prefixes.get(backend).map_or(backend, String::as_str)
    }

    /// Whether 2025-11-25 clients are served here.
    pub fn serves_legacy(&self) -> bool {
        self.eras.contains(&Era::Legacy)
    }

    /// Whether 2026-07-28 clients are served here.
    pub fn serves_modern(&self) -> bool {
        self.eras.contains(&Era::Modern)
    }
}

/// The revision a backend speaks: detected (`auto`), or fixed by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum BackendEra {
    /// Probed with `server/discover` at first use (and again after the backend restarts or
    /// fails): a 2026-07-28 answer, or a 2026-07-28 error naming it, means modern; anything
    /// else legacy. A dual-era server is used as modern.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Stateless 2026-07-28: each request relayed as it came, rounds included.
    #[serde(rename = "2026-07-28")]
    Modern,
    /// `initialize` and sessions: server requests bridged into rounds.
    #[serde(rename = "2025-11-25")]
    Legacy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Stdio,
    Http,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub transport: TransportKind,
    /// `"auto"` (default), `"2026-07-28"` or `"2025-11-25"`.
    #[serde(default)]
    pub era: BackendEra,
    /// stdio: program to spawn.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// http: the server's MCP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// http: extra request headers (e.g. the gateway's own credentials for this backend).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// http: headers whose values are CEL expressions over the caller (`principal`, `claims`,
    /// `scopes`), sent on every message of the caller's sessions.
    #[serde(default)]
    pub identity_headers: BTreeMap<String, String>,
    /// stdio: environment variables whose values are CEL expressions over the caller, set when
    /// a session for that caller starts.
    #[serde(default)]
    pub identity_env: BTreeMap<String, String>,
    /// http: the caller's token exchanged for one this backend accepts (RFC 8693).
    #[serde(default)]
    pub token_exchange: Option<TokenExchangeConfig>,
    #[serde(default)]
    pub pool: PoolConfig,
    /// Server requests that arrive outside any call.
    #[serde(default)]
    pub unsolicited: UnsolicitedPolicy,
    /// Roots given by `unsolicited = "static"`: `[{ uri = "file:///...", name = "..." }]`.
    #[serde(default)]
    pub static_roots: Vec<StaticRoot>,
    /// Longest a forwarded request may run.
    #[serde(default = "defaults::request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Longest a new session may take to start and initialize.
    #[serde(default = "defaults::init_timeout", with = "humantime_serde")]
    pub init_timeout: Duration,
    /// After roots reach the backend (and a `ping` says it read them), how long before a call is
    /// sent that relies on them: servers may apply roots asynchronously.
    #[serde(default = "defaults::roots_settle", with = "humantime_serde")]
    pub roots_settle: Duration,
    /// The largest message the backend takes. A request larger than this is refused (413)
    /// before anything reaches the backend, which would otherwise drop it and leave the call
    /// waiting for `request_timeout`. Unset: 16 MiB over stdio (the line limit of common SDKs),
    /// no limit over HTTP (the server answers for itself).
    #[serde(default)]
    pub max_message_bytes: Option<usize>,
}

impl BackendConfig {
    /// Whether each caller's sessions tell the backend who calls: then no session is started
    /// for nobody (no readiness probe, no warm profiles), and none without its credential.
    pub fn tells_identity(&self) -> bool {
        !self.identity_headers.is_empty()
            || !self.identity_env.is_empty()
            || self.token_exchange.is_some()
    }

    /// `max_message_bytes`, or its default for the transport.
    pub fn message_limit(&self) -> Option<usize> {
        match (self.max_message_bytes, self.transport) {
            (Some(limit), _) => Some(limit),
            (None, TransportKind::Stdio) => Some(defaults::STDIO_MESSAGE_LIMIT),
            (None, TransportKind::Http) => None,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticRoot {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Idle sessions kept ready per (principal, capability profile) once that pair was used.
    #[serde(default)]
    pub min_idle: usize,
    /// Sessions open at once for this backend.
    #[serde(default = "defaults::max_sessions")]
    pub max_sessions: usize,
    /// An idle session beyond `min_idle` is closed after this long.
    #[serde(default = "defaults::idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest a request waits for a free session before HTTP 503.
    #[serde(default = "defaults::queue_wait", with = "humantime_serde")]
    pub queue_wait: Duration,
    /// Sessions one authenticated principal may use at once (running or held calls); past it
    /// its calls get 429 at once. Unset: a quarter of `max_sessions`, at least 1.
    #[serde(default)]
    pub max_sessions_per_principal: Option<usize>,
    /// Client capability sets (as a request declares them) whose sessions are started when the
    /// gateway starts and kept warm (at least one idle session each), for unauthenticated
    /// callers; e.g. `[{}, { elicitation = {} }]`.
    #[serde(default)]
    pub warm_profiles: Vec<serde_json::Value>,
}

impl PoolConfig {
    /// `max_sessions_per_principal`, or its default: room for at least three others.
    pub fn principal_share(&self) -> usize {
        self.max_sessions_per_principal
            .unwrap_or((self.max_sessions / 4).max(1))
    }
}

impl Config {
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let mut config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let mut config = Self::read(path)?;
        config.validate()?;
        Ok(config)
    }

    /// Parses a file without validating it, for callers that adjust it first (then call
    /// [`Config::validate`]).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(toml::from_str(&text)?)
    }

    /// The configuration used when none is given: the built-in demo backend (this same
    /// executable, `demo-backend` subcommand) behind `/mcp`.
    pub fn embedded_default(self_exe: &Path) -> Self {
        let mut backends = BTreeMap::new();
        backends.insert(
            "demo".to_string(),
            BackendConfig {
                transport: TransportKind::Stdio,
                // The demo is a 2025-11-25 server: nothing to probe.
                era: BackendEra::Legacy,
                command: Some(self_exe.to_string_lossy().into_owned()),
                args: vec!["demo-backend".into()],
                env: BTreeMap::new(),
                cwd: None,
                url: None,
                headers: BTreeMap::new(),
                identity_headers: BTreeMap::new(),
                identity_env: BTreeMap::new(),
                token_exchange: None,
                pool: PoolConfig::default(),
                unsolicited: UnsolicitedPolicy::default(),
                static_roots: Vec::new(),
                request_timeout: defaults::request_timeout(),
                init_timeout: defaults::init_timeout(),
                roots_settle: defaults::roots_settle(),
                // The demo reads lines as long as the gateway writes.
                max_message_bytes: Some(STDIO_MAX_LINE_BYTES),
            },
        );
        Self {
            server: ServerConfig {
                // A demo on a laptop has no balancer to leave: Ctrl-C stops it at once.
                shutdown_delay: Duration::ZERO,
                ..ServerConfig::default()
            },
            routes: vec![RouteConfig {
                path: "/mcp".into(),
                backend: "demo".into(),
                backends: Vec::new(),
                prefixes: BTreeMap::new(),
                resource_prefixes: BTreeMap::new(),
                on_backend_error: OnBackendError::Omit,
                list_timeout: defaults::list_timeout(),
                ttl_ms: 0,
                cache_scope: defaults::cache_scope(),
                auth: AuthConfig::None,
                resource: None,
                authorization_servers: Vec::new(),
                eras: defaults::eras(),
                policy: Vec::new(),
            }],
            backends,
            mrtr: MrtrConfig::default(),
            fleet: None,
            legacy: LegacyConfig::default(),
            audit: None,
        }
    }

    /// Expands `${NAME}` references, then checks the rules of each section in turn; the first
    /// broken rule is the error.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        self.expand_env_vars()?;
        check::check_server(&self.server)?;
        check::check_routes(self)?;
        check::check_legacy(&self.legacy)?;
        check::check_audit(self.audit.as_ref())?;
        check::check_auth(&self.routes)?;
        check::check_policy(&self.routes)?;
        check::check_backends(&self.backends)?;
        check::check_identity(&self.backends, &self.routes)?;
        check::check_mrtr(&self.mrtr)?;
        check::check_fleet(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid configuration (one stdio backend behind `/mcp`) to spoil one value at a time.
    pub(super) const STDIO: &str = r#"
        [[route]]
        path = "/mcp"
        backend = "b"
        [backend.b]
        transport = "stdio"
        command = "server"
    "#;

    #[test]
    fn minimal_stdio_config_gets_defaults() {
        let config = Config::from_toml_str(STDIO).unwrap();
        assert_eq!(config.server.listen, defaults::listen());
        assert_eq!(config.backends["b"].pool.max_sessions, 32);
        assert_eq!(config.routes[0].cache_scope, CacheScope::Private);
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::from_toml_str(&STDIO.replace("command = \"server\"", "")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend.b.command: required when transport = \"stdio\""
        );
        let err = Config::from_toml_str(&STDIO.replace("backend = \"b\"", "backend = \"x\""))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "route[0].backend: no [backend.x] is defined"
        );
        let err = Config::from_toml_str(&format!("{STDIO}\nbogus = 1")).unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        let err = Config::from_toml_str(&format!("{STDIO}\nroots_settle = \"1s\"")).unwrap_err();
        assert_eq!(err.to_string(), "backend.b.roots_settle: must be below 1s");
        let err = Config::from_toml_str(&format!("{STDIO}\n[mrtr]\nmax_held_per_principal = 0"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "mrtr.max_held_per_principal: must be at least 1"
        );
    }

    #[test]
    fn roots_and_refused_retry_defaults() {
        let config = Config::from_toml_str(STDIO).unwrap();
        assert_eq!(config.backends["b"].roots_settle, Duration::from_millis(20));
        assert_eq!(config.mrtr.refused_retry_grace, Duration::from_secs(5));
        let tuned = Config::from_toml_str(&format!(
            "{STDIO}\nroots_settle = \"0ms\"\n[mrtr]\nrefused_retry_grace = \"0s\""
        ))
        .unwrap();
        assert!(tuned.backends["b"].roots_settle.is_zero());
        assert!(tuned.mrtr.refused_retry_grace.is_zero());
    }

    #[test]
    fn header_secrets_come_from_the_environment() {
        let text = r#"
            [[route]]
            path = "/mcp"
            backend = "h"
            [backend.h]
            transport = "http"
            url = "http://127.0.0.1:9/mcp"
            headers = { Authorization = "Bearer ${MRTR_TEST_UNSET_SECRET}" }
        "#;
        let err = Config::from_toml_str(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend.h.headers.Authorization: environment variable MRTR_TEST_UNSET_SECRET is not set"
        );
        let path_var = std::env::var("PATH").unwrap();
        let config =
            Config::from_toml_str(&text.replace("MRTR_TEST_UNSET_SECRET", "PATH")).unwrap();
        assert_eq!(
            config.backends["h"].headers["Authorization"],
            format!("Bearer {path_var}")
        );
    }
}
