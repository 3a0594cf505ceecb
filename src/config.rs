//! Configuration: the TOML file format, its defaults, validation with errors that name the key,
//! and the embedded default (the built-in demo backend behind `127.0.0.1:8080/mcp`).
//!
//! Secrets never need to live in the file: values of backend `headers` and `env`, `mrtr.keys`
//! and bearer tokens may contain `${NAME}`, replaced by the environment variable `NAME` when the
//! configuration is loaded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
}

/// Multi round-trip bridging: how held calls are sealed, batched, waited for and bounded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MrtrConfig {
    /// How long a held call waits for the client's retry before it is abandoned. Keep it below
    /// the backends' own timeout for their requests (60 s in the TypeScript SDK).
    #[serde(default = "default_held_ttl", with = "humantime_serde")]
    pub held_ttl: Duration,
    /// After a backend's first request of a round, how long to gather more into the same round.
    #[serde(default = "default_settle", with = "humantime_serde")]
    pub settle_window: Duration,
    /// After answers are delivered, how long to wait for the backend's next event before
    /// returning a round with `requestState` only.
    #[serde(default = "default_round_wait", with = "humantime_serde")]
    pub round_wait: Duration,
    /// Rounds one call may take.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Calls held at once, gateway-wide; past it new rounds get HTTP 429.
    #[serde(default = "default_max_held")]
    pub max_held: usize,
    /// Calls held at once for one principal; past it that client's new rounds get HTTP 429.
    #[serde(default = "default_max_held_per_principal")]
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
    #[serde(default = "default_refused_retry_grace", with = "humantime_serde")]
    pub refused_retry_grace: Duration,
}

impl Default for MrtrConfig {
    fn default() -> Self {
        Self {
            held_ttl: default_held_ttl(),
            settle_window: default_settle(),
            round_wait: default_round_wait(),
            max_rounds: default_max_rounds(),
            max_held: default_max_held(),
            max_held_per_principal: default_max_held_per_principal(),
            keys: Vec::new(),
            keys_file: None,
            instance_id: None,
            refused_retry_grace: default_refused_retry_grace(),
        }
    }
}

fn default_held_ttl() -> Duration {
    Duration::from_secs(50)
}
fn default_settle() -> Duration {
    Duration::from_millis(50)
}
fn default_round_wait() -> Duration {
    Duration::from_secs(20)
}
fn default_max_rounds() -> u32 {
    16
}
fn default_max_held() -> usize {
    10_000
}
fn default_max_held_per_principal() -> usize {
    1_000
}
fn default_refused_retry_grace() -> Duration {
    Duration::from_secs(5)
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
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Address of the admin listener (/healthz, /readyz, /metrics, /status); none by default.
    #[serde(default)]
    pub admin_listen: Option<SocketAddr>,
    /// Largest accepted request body.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Accepted `Host` header names (without port). `["*"]` accepts any. Default: the loopback
    /// names when listening on loopback, any host otherwise.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// Accepted `Origin` values (scheme://host[:port]); a request without `Origin` is not
    /// checked. Default: http(s) origins on the loopback names, any port.
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
    /// Interval of SSE keep-alive comments on long responses.
    #[serde(default = "default_keep_alive", with = "humantime_serde")]
    pub sse_keep_alive: Duration,
    /// Allow routes without authentication on a non-loopback listener (e.g. behind a proxy
    /// that authenticates).
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Longest wait for a request body once its headers arrived (slow senders get 408).
    #[serde(default = "default_body_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Client connections open at once; more are closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Grace period for in-flight calls at shutdown.
    #[serde(default = "default_drain", with = "humantime_serde")]
    pub drain_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            admin_listen: None,
            max_body_bytes: default_max_body_bytes(),
            allowed_hosts: None,
            allowed_origins: None,
            sse_keep_alive: default_keep_alive(),
            allow_unauthenticated: false,
            body_read_timeout: default_body_timeout(),
            max_connections: default_max_connections(),
            drain_timeout: default_drain(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_max_body_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_body_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_connections() -> usize {
    4096
}
fn default_keep_alive() -> Duration {
    Duration::from_secs(15)
}
fn default_drain() -> Duration {
    Duration::from_secs(20)
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
    /// Name of a `[backend.NAME]` table.
    pub backend: String,
    /// `ttlMs` stamped on cacheable results.
    #[serde(default)]
    pub ttl_ms: u64,
    /// `cacheScope` stamped on cacheable results.
    #[serde(default = "default_scope")]
    pub cache_scope: CacheScope,
    /// Who may call this route.
    #[serde(default)]
    pub auth: crate::auth::AuthConfig,
    /// This endpoint's canonical URL, for its protected resource metadata (RFC 9728). Default:
    /// derived from the request's Host.
    #[serde(default)]
    pub resource: Option<String>,
    /// Authorization servers named in the protected resource metadata.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
}

fn default_scope() -> CacheScope {
    CacheScope::Private
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
    #[serde(default)]
    pub pool: PoolConfig,
    /// Server requests that arrive outside any call.
    #[serde(default)]
    pub unsolicited: UnsolicitedPolicy,
    /// Roots given by `unsolicited = "static"`: `[{ uri = "file:///...", name = "..." }]`.
    #[serde(default)]
    pub static_roots: Vec<StaticRoot>,
    /// Longest a forwarded request may run.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Longest a new session may take to start and initialize.
    #[serde(default = "default_init_timeout", with = "humantime_serde")]
    pub init_timeout: Duration,
    /// After roots reach the backend (and a `ping` says it read them), how long before a call is
    /// sent that relies on them: servers may apply roots asynchronously.
    #[serde(default = "default_roots_settle", with = "humantime_serde")]
    pub roots_settle: Duration,
}

fn default_roots_settle() -> Duration {
    Duration::from_millis(20)
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_init_timeout() -> Duration {
    Duration::from_secs(15)
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
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// An idle session beyond `min_idle` is closed after this long.
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest a request waits for a free session before HTTP 503.
    #[serde(default = "default_queue_wait", with = "humantime_serde")]
    pub queue_wait: Duration,
    /// Client capability sets (as a request declares them) whose sessions are started when the
    /// gateway starts and kept warm (at least one idle session each), for unauthenticated
    /// callers; e.g. `[{}, { elicitation = {} }]`.
    #[serde(default)]
    pub warm_profiles: Vec<serde_json::Value>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min_idle: 0,
            max_sessions: default_max_sessions(),
            idle_timeout: default_idle_timeout(),
            queue_wait: default_queue_wait(),
            warm_profiles: Vec::new(),
        }
    }
}

fn default_max_sessions() -> usize {
    32
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_queue_wait() -> Duration {
    Duration::from_secs(10)
}

/// Replaces every `${NAME}` with the environment variable `NAME`.
fn expand_env(key: &str, value: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| invalid(key, "unterminated ${...}"))?;
        let name = &after[..end];
        let val = std::env::var(name)
            .map_err(|_| invalid(key, format!("environment variable {name} is not set")))?;
        out.push_str(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
                command: Some(self_exe.to_string_lossy().into_owned()),
                args: vec!["demo-backend".into()],
                env: BTreeMap::new(),
                cwd: None,
                url: None,
                headers: BTreeMap::new(),
                pool: PoolConfig::default(),
                unsolicited: UnsolicitedPolicy::default(),
                static_roots: Vec::new(),
                request_timeout: default_request_timeout(),
                init_timeout: default_init_timeout(),
                roots_settle: default_roots_settle(),
            },
        );
        Self {
            server: ServerConfig::default(),
            routes: vec![RouteConfig {
                path: "/mcp".into(),
                backend: "demo".into(),
                ttl_ms: 0,
                cache_scope: CacheScope::Private,
                auth: crate::auth::AuthConfig::None,
                resource: None,
                authorization_servers: Vec::new(),
            }],
            backends,
            mrtr: MrtrConfig::default(),
        }
    }

    /// Checks cross-field rules and expands `${NAME}` references.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        if self.server.max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        if self.server.body_read_timeout.is_zero() {
            return Err(invalid(
                "server.body_read_timeout",
                "must be greater than 0",
            ));
        }
        if self.server.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        if self.server.sse_keep_alive.is_zero() {
            return Err(invalid("server.sse_keep_alive", "must be greater than 0"));
        }
        if self.routes.is_empty() {
            return Err(invalid("route", "at least one [[route]] is required"));
        }
        let mut paths = std::collections::HashSet::new();
        for (i, route) in self.routes.iter().enumerate() {
            let key = format!("route[{i}]");
            if !route.path.starts_with('/') || route.path.contains(['?', '#', ' ']) {
                return Err(invalid(
                    format!("{key}.path"),
                    "must be an absolute URL path like \"/mcp\"",
                ));
            }
            if !paths.insert(route.path.as_str()) {
                return Err(invalid(
                    format!("{key}.path"),
                    format!("\"{}\" is used by another route", route.path),
                ));
            }
            if matches!(route.auth, crate::auth::AuthConfig::None)
                && !self.server.listen.ip().is_loopback()
                && !self.server.allow_unauthenticated
            {
                return Err(invalid(
                    format!("{key}.auth"),
                    "mode = \"none\" needs a loopback server.listen (or server.allow_unauthenticated = true)",
                ));
            }
            if !self.backends.contains_key(&route.backend) {
                return Err(invalid(
                    format!("{key}.backend"),
                    format!("no [backend.{}] is defined", route.backend),
                ));
            }
        }
        for (i, route) in self.routes.iter_mut().enumerate() {
            match &mut route.auth {
                crate::auth::AuthConfig::Bearer { tokens } => {
                    if tokens.is_empty() {
                        return Err(invalid(
                            format!("route[{i}].auth.tokens"),
                            "at least one token is required",
                        ));
                    }
                    for (t, token) in tokens.iter_mut().enumerate() {
                        let tkey = format!("route[{i}].auth.tokens[{t}]");
                        if let Some(secret) = token.token.as_mut() {
                            *secret = expand_env(&tkey, secret)?;
                        }
                        if let Some(digest) = token.sha256.as_mut() {
                            *digest = expand_env(&tkey, digest)?;
                            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit())
                            {
                                return Err(invalid(
                                    format!("{tkey}.sha256"),
                                    "must be 64 hex digits",
                                ));
                            }
                        }
                        if token.sha256.is_some() == token.token.is_some() {
                            return Err(invalid(tkey, "needs exactly one of sha256 and token"));
                        }
                    }
                }
                crate::auth::AuthConfig::Jwt(jwt) => {
                    let jkey = format!("route[{i}].auth");
                    if jwt.jwks_file.is_some() == jwt.jwks_url.is_some() {
                        return Err(invalid(
                            jkey,
                            "exactly one of jwks_file and jwks_url is required",
                        ));
                    }
                    if let Some(url) = &jwt.jwks_url {
                        // Plain http only to this machine (an issuer's sidecar, a test).
                        let loopback = ["http://127.0.0.1", "http://[::1]", "http://localhost"]
                            .iter()
                            .any(|prefix| {
                                url.strip_prefix(prefix)
                                    .is_some_and(|rest| rest.starts_with([':', '/']))
                            });
                        if !url.starts_with("https://") && !loopback {
                            return Err(invalid(
                                format!("{jkey}.jwks_url"),
                                "must be an https:// URL (http:// only on loopback)",
                            ));
                        }
                    }
                    if jwt.leeway > crate::auth::MAX_LEEWAY {
                        return Err(invalid(format!("{jkey}.leeway"), "must be at most 5m"));
                    }
                    for a in &jwt.algorithms {
                        if crate::auth::parse_algorithm(a).is_none() {
                            return Err(invalid(
                                format!("{jkey}.algorithms"),
                                format!("{a:?} is not one of RS256, ES256, EdDSA"),
                            ));
                        }
                    }
                }
                crate::auth::AuthConfig::None => {}
            }
        }
        for (name, backend) in self.backends.iter_mut() {
            let key = format!("backend.{name}");
            match backend.transport {
                TransportKind::Stdio => {
                    if backend.command.as_deref().is_none_or(str::is_empty) {
                        return Err(invalid(
                            format!("{key}.command"),
                            "required when transport = \"stdio\"",
                        ));
                    }
                    if backend.url.is_some() || !backend.headers.is_empty() {
                        return Err(invalid(
                            format!("{key}.url"),
                            "url and headers apply to transport = \"http\" only",
                        ));
                    }
                }
                TransportKind::Http => {
                    let url = backend.url.as_deref().ok_or_else(|| {
                        invalid(format!("{key}.url"), "required when transport = \"http\"")
                    })?;
                    let uri: http::Uri = url
                        .parse()
                        .map_err(|e| invalid(format!("{key}.url"), format!("not a URL: {e}")))?;
                    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                        return Err(invalid(
                            format!("{key}.url"),
                            "must be an absolute http:// or https:// URL",
                        ));
                    }
                    if backend.command.is_some() || !backend.args.is_empty() {
                        return Err(invalid(
                            format!("{key}.command"),
                            "command and args apply to transport = \"stdio\" only",
                        ));
                    }
                }
            }
            for (h, v) in backend.headers.iter_mut() {
                let hkey = format!("{key}.headers.{h}");
                http::HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| invalid(&hkey, "not a valid header name"))?;
                *v = expand_env(&hkey, v)?;
                http::HeaderValue::from_str(v)
                    .map_err(|_| invalid(&hkey, "not a valid header value"))?;
            }
            for (k, v) in backend.env.iter_mut() {
                *v = expand_env(&format!("{key}.env.{k}"), v)?;
            }
            if backend.pool.max_sessions == 0 {
                return Err(invalid(
                    format!("{key}.pool.max_sessions"),
                    "must be at least 1",
                ));
            }
            if backend.pool.warm_profiles.iter().any(|p| !p.is_object()) {
                return Err(invalid(
                    format!("{key}.pool.warm_profiles"),
                    "each entry is a table of client capabilities, e.g. { elicitation = {} }",
                ));
            }
            if backend.pool.warm_profiles.len() > backend.pool.max_sessions {
                return Err(invalid(
                    format!("{key}.pool.warm_profiles"),
                    "more profiles than pool.max_sessions",
                ));
            }
            if backend.pool.min_idle > backend.pool.max_sessions {
                return Err(invalid(
                    format!("{key}.pool.min_idle"),
                    "must not exceed pool.max_sessions",
                ));
            }
            for (i, root) in backend.static_roots.iter().enumerate() {
                if !root.uri.starts_with("file://") {
                    return Err(invalid(
                        format!("{key}.static_roots[{i}].uri"),
                        "must be a file:// URI",
                    ));
                }
            }
            if backend.roots_settle >= Duration::from_secs(1) {
                return Err(invalid(format!("{key}.roots_settle"), "must be below 1s"));
            }
            if backend.request_timeout.is_zero() || backend.init_timeout.is_zero() {
                return Err(invalid(
                    format!("{key}.request_timeout"),
                    "timeouts must be greater than 0",
                ));
            }
        }
        let mrtr = &mut self.mrtr;
        if mrtr.max_rounds == 0 || mrtr.max_held == 0 || mrtr.max_held_per_principal == 0 {
            return Err(invalid(
                "mrtr.max_rounds",
                "max_rounds and max_held must be at least 1",
            ));
        }
        if mrtr.held_ttl.is_zero() || mrtr.round_wait.is_zero() {
            return Err(invalid(
                "mrtr.held_ttl",
                "held_ttl and round_wait must be greater than 0",
            ));
        }
        if mrtr.settle_window >= Duration::from_millis(500) {
            return Err(invalid("mrtr.settle_window", "must be below 500ms"));
        }
        for (i, k) in mrtr.keys.iter_mut().enumerate() {
            *k = expand_env(&format!("mrtr.keys[{i}]"), k)?;
        }
        let keys = mrtr.key_list()?;
        if !keys.is_empty() {
            crate::mrtr::state::KeyRing::from_base64(&keys)
                .map_err(|e| invalid("mrtr.keys", e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STDIO: &str = r#"
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
        assert_eq!(config.server.listen, default_listen());
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
