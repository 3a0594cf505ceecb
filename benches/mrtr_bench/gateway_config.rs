//! The gateway configurations the scenarios run with, written as TOML.
//!
//! Every gateway listens on a loopback port 0 (the chosen address is read from its log) and
//! drains for at most one second on SIGTERM, so stopping it is quick. Everything else stays at
//! its default unless a scenario needs more (pool size, held-call limits, settle window).

use crate::procs::GATEWAY_EXE;

/// A gateway in front of the fast backend over Streamable HTTP.
pub struct HttpGatewayConfig {
    pub backend_url: String,
    /// `pool.max_sessions`: each concurrent or held call keeps one backend session.
    pub max_sessions: usize,
    /// `mrtr.settle_window` in ms; `None` keeps the default (50 ms).
    pub settle_window_ms: Option<u64>,
    /// `mrtr.max_held` and `mrtr.max_held_per_principal` (everyone is `anonymous` here).
    pub max_held: usize,
    /// `mrtr.held_ttl` in seconds: longer than opening and retrying the rounds takes.
    pub held_ttl_s: u64,
    /// Open the admin listener (for `/status` and `/readyz`).
    pub admin: bool,
}

impl HttpGatewayConfig {
    pub fn new(backend_url: String) -> Self {
        Self {
            backend_url,
            max_sessions: 256,
            settle_window_ms: None,
            max_held: 10_000,
            held_ttl_s: 50,
            admin: false,
        }
    }

    pub fn to_toml(&self) -> String {
        let settle = self
            .settle_window_ms
            .map(|ms| format!("settle_window = \"{ms}ms\"\n"))
            .unwrap_or_default();
        format!(
            "{server}\
             [[route]]\npath = \"/mcp\"\nbackend = \"fast\"\n\n\
             [backend.fast]\ntransport = \"http\"\nurl = {url}\n\n\
             [backend.fast.pool]\nmax_sessions = {max_sessions}\nqueue_wait = \"30s\"\n\n\
             [mrtr]\nheld_ttl = \"{ttl}s\"\n{settle}max_held = {held}\nmax_held_per_principal = {held}\n",
            server = server_table(self.admin),
            url = toml_string(&self.backend_url),
            max_sessions = self.max_sessions,
            ttl = self.held_ttl_s,
            held = self.max_held,
        )
    }
}

/// A gateway in front of its own demo backend over stdio (`mrtr-gateway demo-backend`).
pub fn stdio_demo_config(min_idle: usize, admin: bool) -> String {
    format!(
        "{server}\
         [[route]]\npath = \"/mcp\"\nbackend = \"demo\"\n\n\
         [backend.demo]\ntransport = \"stdio\"\ncommand = {command}\nargs = [\"demo-backend\"]\n\n\
         [backend.demo.pool]\nmin_idle = {min_idle}\nmax_sessions = 4\n",
        server = server_table(admin),
        command = toml_string(GATEWAY_EXE),
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
        server = server_table(false),
        command = toml_string(&command),
        flag = toml_string(crate::roots_backend::SERVE_ROOTS_BACKEND_FLAG),
        root = toml_string(configured_root),
    )
}

fn server_table(admin: bool) -> String {
    let admin = if admin {
        "admin_listen = \"127.0.0.1:0\"\n"
    } else {
        ""
    };
    format!("[server]\nlisten = \"127.0.0.1:0\"\n{admin}drain_timeout = \"1s\"\n\n")
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
