//! The gateway configurations the scenarios run with, written as TOML.
//!
//! Every gateway listens on loopback, on port 0 (the chosen address is read from its log) unless
//! it is a replica of a fleet, whose `fleet.advertise` must name its real port, and drains for
//! at most one second on SIGTERM, so stopping it is quick. Everything else stays at its default
//! unless a scenario needs more (pool size, held-call limits, settle window, fleet).
//!
//! The fast backend answers both revisions, so a gateway in front of it names the backend's
//! `era` instead of probing: `2025-11-25` (sessions, the gateway's own rounds) for every
//! scenario but the 2026-07-28 rows of M1, M2 and M9, which fix `2026-07-28` (the relay, and the
//! reverse bridge for 2025-11-25 clients).
//!
//! M9's route over several backends ([`AggregateGatewayConfig`]) names one `[backend.bN]` table
//! per fast backend process, all with the same era and pool as [`HttpGatewayConfig`]'s one.

use crate::procs::GATEWAY_EXE;

/// The revision a gateway is told its backend speaks (`[backend.NAME] era`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BackendEra {
    /// `"2025-11-25"`: sessions; a 2026-07-28 client's rounds are the gateway's own.
    Legacy,
    /// `"2026-07-28"`: a 2026-07-28 client's requests are relayed, a 2025-11-25 client's go
    /// through the reverse bridge.
    Modern,
}

impl BackendEra {
    fn as_str(self) -> &'static str {
        match self {
            BackendEra::Legacy => crate::wire::LEGACY_VERSION,
            BackendEra::Modern => crate::wire::MODERN_VERSION,
        }
    }
}

/// A gateway in front of the fast backend over Streamable HTTP.
pub struct HttpGatewayConfig {
    pub backend_url: String,
    /// `era` of the backend: set, never probed (the fast backend answers both revisions).
    pub era: BackendEra,
    /// `pool.max_sessions`: each concurrent or held call keeps one backend session.
    pub max_sessions: usize,
    /// `mrtr.settle_window` in ms; `None` keeps the default (50 ms).
    pub settle_window_ms: Option<u64>,
    /// `mrtr.settle_quiet` in ms; `None` keeps the default (1 ms).
    pub settle_quiet_ms: Option<u64>,
    /// `mrtr.max_held` and `mrtr.max_held_per_principal` (everyone is `anonymous` here).
    pub max_held: usize,
    /// `mrtr.held_ttl` in seconds: longer than opening and retrying the rounds takes.
    pub held_ttl_s: u64,
    /// Open the admin listener (for `/status`, `/readyz` and `/metrics`).
    pub admin: bool,
    /// `[fleet]`: this gateway is one replica of several.
    pub fleet: Option<FleetSetting>,
}

/// One replica of a fleet on loopback.
pub struct FleetSetting {
    /// The port it listens on, chosen beforehand (`fleet.advertise` names it).
    pub port: u16,
    /// `mrtr.keys`: the one key every replica shares (base64, 32 bytes).
    pub key: String,
    /// `fleet.peer_timeout` in ms.
    pub peer_timeout_ms: u64,
}

/// A fixed key for `requestState`, shared by the replicas of a benchmark fleet.
pub const FLEET_TEST_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

impl HttpGatewayConfig {
    /// The legacy path: the backend fixed to 2025-11-25.
    pub fn new(backend_url: String) -> Self {
        Self {
            backend_url,
            era: BackendEra::Legacy,
            max_sessions: 256,
            settle_window_ms: None,
            settle_quiet_ms: None,
            max_held: 10_000,
            held_ttl_s: 50,
            admin: false,
            fleet: None,
        }
    }

    /// The relay (and the reverse bridge): the backend fixed to 2026-07-28.
    pub fn relay(backend_url: String) -> Self {
        Self {
            era: BackendEra::Modern,
            ..Self::new(backend_url)
        }
    }

    pub fn to_toml(&self) -> String {
        let window = self
            .settle_window_ms
            .map(|ms| format!("settle_window = \"{ms}ms\"\n"));
        let quiet = self
            .settle_quiet_ms
            .map(|ms| format!("settle_quiet = \"{ms}ms\"\n"));
        let settle = [window, quiet].into_iter().flatten().collect::<String>();
        let (port, keys, fleet) = match &self.fleet {
            Some(fleet) => (
                fleet.port,
                format!("keys = [{}]\n", toml_string(&fleet.key)),
                format!(
                    "\n[fleet]\nadvertise = \"127.0.0.1:{port}\"\npeer_timeout = \"{timeout}ms\"\n",
                    port = fleet.port,
                    timeout = fleet.peer_timeout_ms,
                ),
            ),
            None => (0, String::new(), String::new()),
        };
        format!(
            "{server}\
             [[route]]\npath = \"/mcp\"\nbackend = \"fast\"\n\n\
             [backend.fast]\ntransport = \"http\"\nurl = {url}\nera = \"{era}\"\n\n\
             [backend.fast.pool]\nmax_sessions = {max_sessions}\nqueue_wait = \"30s\"\n\n\
             [mrtr]\n{keys}held_ttl = \"{ttl}s\"\n{settle}max_held = {held}\nmax_held_per_principal = {held}\n{fleet}",
            server = server_table(self.admin, port),
            url = toml_string(&self.backend_url),
            era = self.era.as_str(),
            max_sessions = self.max_sessions,
            ttl = self.held_ttl_s,
            held = self.max_held,
        )
    }
}

/// A gateway whose one route serves several fast backends at one endpoint: `backends = ["b1",
/// ..., "bN"]`, one `[backend.bN]` table per URL (in order), each backend's tools exposed as
/// `bN__NAME` (the default prefix: the backend's name).
pub struct AggregateGatewayConfig {
    /// One fast backend per URL, named `b1`, `b2`, ... in this order.
    pub backend_urls: Vec<String>,
    /// `era` of every backend: set, never probed.
    pub era: BackendEra,
    /// `pool.max_sessions` of each backend.
    pub max_sessions: usize,
    /// `list_timeout` in ms: longest one backend may take over its part of a merged list.
    pub list_timeout_ms: u64,
}

impl AggregateGatewayConfig {
    /// `backend_urls` behind one route, each backend fixed to `era`, the route's `list_timeout`
    /// at its default (5 s) written out.
    pub fn new(backend_urls: Vec<String>, era: BackendEra) -> Self {
        Self {
            backend_urls,
            era,
            max_sessions: 256,
            list_timeout_ms: 5_000,
        }
    }

    /// The name of the backend at `index` (from 0): its table and its tools' prefix.
    pub fn backend_name(index: usize) -> String {
        format!("b{}", index + 1)
    }

    /// `on_backend_error = "fail"`: a backend that fails its part fails the whole answer, with
    /// its name, instead of leaving its tools out without a trace in the answer.
    pub fn to_toml(&self) -> String {
        let names: Vec<String> = (0..self.backend_urls.len())
            .map(Self::backend_name)
            .collect();
        let mut text = format!(
            "{server}\
             [[route]]\npath = \"/mcp\"\nbackends = [{backends}]\non_backend_error = \"fail\"\n\
             list_timeout = \"{timeout}ms\"\n",
            server = server_table(false, 0),
            backends = names
                .iter()
                .map(|name| toml_string(name))
                .collect::<Vec<_>>()
                .join(", "),
            timeout = self.list_timeout_ms,
        );
        for (name, url) in names.iter().zip(&self.backend_urls) {
            text.push_str(&format!(
                "\n[backend.{name}]\ntransport = \"http\"\nurl = {url}\nera = \"{era}\"\n\n\
                 [backend.{name}.pool]\nmax_sessions = {max_sessions}\nqueue_wait = \"30s\"\n",
                url = toml_string(url),
                era = self.era.as_str(),
                max_sessions = self.max_sessions,
            ));
        }
        text
    }
}

/// A gateway in front of its own demo backend over stdio (`mrtr-gateway demo-backend`).
pub fn stdio_demo_config(min_idle: usize, admin: bool) -> String {
    format!(
        "{server}\
         [[route]]\npath = \"/mcp\"\nbackend = \"demo\"\n\n\
         [backend.demo]\ntransport = \"stdio\"\ncommand = {command}\nargs = [\"demo-backend\"]\n\n\
         [backend.demo.pool]\nmin_idle = {min_idle}\nmax_sessions = 4\n",
        server = server_table(admin, 0),
        command = toml_string(GATEWAY_EXE),
    )
}

/// A gateway in front of the stdio echo backend (this bench binary run with
/// `--serve-stdio-backend`), for M8: `max_sessions` child processes at most, each serving one
/// call at a time, started as calls need them and kept idle for the next.
pub fn stdio_echo_config(max_sessions: usize) -> String {
    let command = std::env::current_exe()
        .map(|exe| exe.display().to_string())
        .unwrap_or_default();
    format!(
        "{server}\
         [[route]]\npath = \"/mcp\"\nbackend = \"echo\"\n\n\
         [backend.echo]\ntransport = \"stdio\"\ncommand = {command}\nargs = [{flag}]\n\n\
         [backend.echo.pool]\nmax_sessions = {max_sessions}\nqueue_wait = \"30s\"\n",
        server = server_table(false, 0),
        command = toml_string(&command),
        flag = toml_string(crate::stdio_backend::SERVE_STDIO_BACKEND_FLAG),
    )
}

/// How the M5 gateway treats the roots its backend asks for.
pub enum RootsPolicy {
    /// `unsolicited = "defer"` (the default); `roots_settle` in ms, `None` for the default.
    Defer { settle_ms: Option<u64> },
    /// `unsolicited = "static"` with one static root.
    Static,
}

/// A gateway in front of the roots backend over stdio (this bench binary run with
/// `--serve-roots-backend`), one session, so consecutive flows share it.
pub fn stdio_roots_config(
    configured_root: &str,
    static_root: &str,
    policy: &RootsPolicy,
) -> String {
    let command = std::env::current_exe()
        .map(|exe| exe.display().to_string())
        .unwrap_or_default();
    let policy = match policy {
        RootsPolicy::Defer { settle_ms: None } => String::new(),
        RootsPolicy::Defer {
            settle_ms: Some(ms),
        } => format!("roots_settle = \"{ms}ms\"\n"),
        RootsPolicy::Static => format!(
            "unsolicited = \"static\"\nstatic_roots = [{{ uri = {} }}]\n",
            toml_string(static_root)
        ),
    };
    format!(
        "{server}\
         [[route]]\npath = \"/mcp\"\nbackend = \"roots\"\n\n\
         [backend.roots]\ntransport = \"stdio\"\ncommand = {command}\nargs = [{flag}, {root}]\n{policy}\n\
         [backend.roots.pool]\nmax_sessions = 1\n",
        server = server_table(false, 0),
        command = toml_string(&command),
        flag = toml_string(crate::roots_backend::SERVE_ROOTS_BACKEND_FLAG),
        root = toml_string(configured_root),
    )
}

/// `[server]` on loopback `port` (0: any free port).
fn server_table(admin: bool, port: u16) -> String {
    let admin = if admin {
        "admin_listen = \"127.0.0.1:0\"\n"
    } else {
        ""
    };
    format!("[server]\nlisten = \"127.0.0.1:{port}\"\n{admin}drain_timeout = \"1s\"\nshutdown_delay = \"0s\"\n\n")
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
