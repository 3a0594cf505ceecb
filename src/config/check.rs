//! The cross-field rules of each section, checked after `${NAME}` expansion. Every error names
//! the key it is about (`server.max_connections`, `route[0].auth`, `backend.b.url`, ...); a rule
//! on two keys at once names the first and both in its message (`held_ttl and round_wait`).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::keys::decode_keys;
use super::{
    invalid, BackendConfig, Config, ConfigError, LegacyConfig, MrtrConfig, RouteConfig,
    ServerConfig, TransportKind,
};
use super::{AuthConfig, BearerToken, JwtConfig, JWT_ALGORITHMS, MAX_LEEWAY};

/// `[server]`.
pub(super) fn check_server(server: &ServerConfig) -> Result<(), ConfigError> {
    if server.max_body_bytes < 1024 {
        return Err(invalid("server.max_body_bytes", "must be at least 1024"));
    }
    if server.body_read_timeout.is_zero() {
        return Err(invalid(
            "server.body_read_timeout",
            "must be greater than 0",
        ));
    }
    if server.max_connections == 0 {
        return Err(invalid("server.max_connections", "must be at least 1"));
    }
    if server.stream_after < Duration::from_millis(100) {
        return Err(invalid("server.stream_after", "must be at least 100ms"));
    }
    if server.first_byte_timeout.is_zero() {
        return Err(invalid(
            "server.first_byte_timeout",
            "must be greater than 0",
        ));
    }
    if server.sse_keep_alive.is_zero() {
        return Err(invalid("server.sse_keep_alive", "must be greater than 0"));
    }
    if server.max_listens == 0 {
        return Err(invalid("server.max_listens", "must be at least 1"));
    }
    if server.max_listens_per_principal == 0 {
        return Err(invalid(
            "server.max_listens_per_principal",
            "must be at least 1",
        ));
    }
    Ok(())
}

/// `[[route]]` apart from the details of `auth`: paths, the backend named, and who may reach an
/// unauthenticated route.
pub(super) fn check_routes(config: &Config) -> Result<(), ConfigError> {
    if config.routes.is_empty() {
        return Err(invalid("route", "at least one [[route]] is required"));
    }
    let mut paths = HashSet::new();
    for (i, route) in config.routes.iter().enumerate() {
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
        if matches!(route.auth, AuthConfig::None)
            && !config.server.listen.ip().is_loopback()
            && !config.server.allow_unauthenticated
        {
            return Err(invalid(
                format!("{key}.auth"),
                "mode = \"none\" needs a loopback server.listen (or server.allow_unauthenticated = true)",
            ));
        }
        if route.eras.is_empty() {
            return Err(invalid(
                format!("{key}.eras"),
                "must name at least one of \"2026-07-28\" and \"2025-11-25\"",
            ));
        }
        if !config.backends.contains_key(&route.backend) {
            return Err(invalid(
                format!("{key}.backend"),
                format!("no [backend.{}] is defined", route.backend),
            ));
        }
    }
    Ok(())
}

/// `[legacy]`: limits that admit at least one session, and a stream that keeps something.
pub(super) fn check_legacy(legacy: &LegacyConfig) -> Result<(), ConfigError> {
    if legacy.max_sessions == 0 {
        return Err(invalid("legacy.max_sessions", "must be at least 1"));
    }
    if legacy.max_sessions_per_principal == 0 {
        return Err(invalid(
            "legacy.max_sessions_per_principal",
            "must be at least 1",
        ));
    }
    if legacy.idle_timeout < Duration::from_secs(1) {
        return Err(invalid("legacy.idle_timeout", "must be at least 1s"));
    }
    if legacy.initialize_timeout.is_zero() {
        return Err(invalid(
            "legacy.initialize_timeout",
            "must be greater than 0",
        ));
    }
    if legacy.replay_events == 0 {
        return Err(invalid("legacy.replay_events", "must be at least 1"));
    }
    Ok(())
}

/// `route[i].auth` of every route: bearer tokens and JWT settings.
pub(super) fn check_auth(routes: &[RouteConfig]) -> Result<(), ConfigError> {
    for (i, route) in routes.iter().enumerate() {
        match &route.auth {
            AuthConfig::Bearer { tokens } => check_bearer(i, tokens)?,
            AuthConfig::Jwt(jwt) => check_jwt(i, jwt)?,
            AuthConfig::None => {}
        }
    }
    Ok(())
}

fn check_bearer(route: usize, tokens: &[BearerToken]) -> Result<(), ConfigError> {
    if tokens.is_empty() {
        return Err(invalid(
            format!("route[{route}].auth.tokens"),
            "at least one token is required",
        ));
    }
    for (t, token) in tokens.iter().enumerate() {
        let tkey = format!("route[{route}].auth.tokens[{t}]");
        if let Some(digest) = &token.sha256 {
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(format!("{tkey}.sha256"), "must be 64 hex digits"));
            }
        }
        if token.sha256.is_some() == token.token.is_some() {
            return Err(invalid(tkey, "needs exactly one of sha256 and token"));
        }
    }
    Ok(())
}

fn check_jwt(route: usize, jwt: &JwtConfig) -> Result<(), ConfigError> {
    let jkey = format!("route[{route}].auth");
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
    if jwt.leeway > MAX_LEEWAY {
        return Err(invalid(format!("{jkey}.leeway"), "must be at most 5m"));
    }
    for a in &jwt.algorithms {
        if !JWT_ALGORITHMS.contains(&a.as_str()) {
            return Err(invalid(
                format!("{jkey}.algorithms"),
                format!("{a:?} is not one of RS256, ES256, EdDSA"),
            ));
        }
    }
    Ok(())
}

/// `[backend.NAME]` of every backend.
pub(super) fn check_backends(
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    for (name, backend) in backends {
        let key = format!("backend.{name}");
        check_transport(&key, backend)?;
        check_headers(&key, backend)?;
        check_pool(&key, backend)?;
        check_message_limit(&key, backend)?;
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
    Ok(())
}

/// The keys each transport needs, and none of the other's.
fn check_transport(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
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
    Ok(())
}

/// Header names and (expanded) values must be sendable.
fn check_headers(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    for (h, v) in &backend.headers {
        let hkey = format!("{key}.headers.{h}");
        http::HeaderName::from_bytes(h.as_bytes())
            .map_err(|_| invalid(&hkey, "not a valid header name"))?;
        http::HeaderValue::from_str(v).map_err(|_| invalid(&hkey, "not a valid header value"))?;
    }
    Ok(())
}

fn check_message_limit(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    match backend.max_message_bytes {
        Some(limit) if limit < 1024 => Err(invalid(
            format!("{key}.max_message_bytes"),
            "must be at least 1024",
        )),
        _ => Ok(()),
    }
}

fn check_pool(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    let pool = &backend.pool;
    if pool.max_sessions == 0 {
        return Err(invalid(
            format!("{key}.pool.max_sessions"),
            "must be at least 1",
        ));
    }
    if pool.warm_profiles.iter().any(|p| !p.is_object()) {
        return Err(invalid(
            format!("{key}.pool.warm_profiles"),
            "each entry is a table of client capabilities, e.g. { elicitation = {} }",
        ));
    }
    if pool.warm_profiles.len() > pool.max_sessions {
        return Err(invalid(
            format!("{key}.pool.warm_profiles"),
            "more profiles than pool.max_sessions",
        ));
    }
    if pool.min_idle > pool.max_sessions {
        return Err(invalid(
            format!("{key}.pool.min_idle"),
            "must not exceed pool.max_sessions",
        ));
    }
    if let Some(share) = pool.max_sessions_per_principal {
        if share == 0 || share > pool.max_sessions {
            return Err(invalid(
                format!("{key}.pool.max_sessions_per_principal"),
                "must be between 1 and pool.max_sessions",
            ));
        }
    }
    Ok(())
}

/// `[mrtr]`: bounds, waits, and the `requestState` keys (inline, then `keys_file`).
pub(super) fn check_mrtr(mrtr: &MrtrConfig) -> Result<(), ConfigError> {
    // Each bound on its own, so the error names the key that is 0.
    let bounds = [
        ("mrtr.max_rounds", mrtr.max_rounds == 0),
        ("mrtr.max_held", mrtr.max_held == 0),
        (
            "mrtr.max_held_per_principal",
            mrtr.max_held_per_principal == 0,
        ),
    ];
    if let Some((key, _)) = bounds.iter().find(|(_, zero)| *zero) {
        return Err(invalid(*key, "must be at least 1"));
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
    // Kept outcomes hold memory: short by design.
    if mrtr.outcome_ttl > Duration::from_secs(600) {
        return Err(invalid("mrtr.outcome_ttl", "must be at most 10m"));
    }
    let keys = mrtr.key_list()?;
    // No keys is allowed: the gateway then seals with a random key per process.
    if !keys.is_empty() {
        decode_keys(&keys).map_err(|e| invalid("mrtr.keys", e.to_string()))?;
    }
    Ok(())
}

/// `[fleet]`: an address other replicas can reach, a sane peer timeout, and keys every replica
/// shares (a per-process key cannot open another replica's state).
pub(super) fn check_fleet(config: &Config) -> Result<(), ConfigError> {
    let Some(fleet) = &config.fleet else {
        return Ok(());
    };
    let authority: http::uri::Authority = fleet
        .advertise
        .parse()
        .map_err(|_| invalid("fleet.advertise", "must be HOST:PORT"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let unspecified = host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if host.is_empty()
        || authority.as_str().contains('@')
        || authority.port_u16().is_none_or(|port| port == 0)
    {
        return Err(invalid("fleet.advertise", "must be HOST:PORT"));
    }
    if unspecified {
        return Err(invalid(
            "fleet.advertise",
            "must be an address other replicas can reach, not a wildcard",
        ));
    }
    if fleet.peer_timeout < Duration::from_millis(100)
        || fleet.peer_timeout > Duration::from_secs(60)
    {
        return Err(invalid(
            "fleet.peer_timeout",
            "must be between 100ms and 60s",
        ));
    }
    if config.mrtr.key_list()?.is_empty() {
        return Err(invalid(
            "fleet",
            "needs keys every replica shares (mrtr.keys or mrtr.keys_file): a per-process key \
             cannot open another replica's requestState",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::tests::STDIO as BASE;

    fn parse(text: &str) -> Config {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn message(result: Result<(), ConfigError>) -> String {
        match result {
            Ok(()) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_base_passes_every_check() {
        let c = parse(BASE);
        check_server(&c.server).unwrap();
        check_routes(&c).unwrap();
        check_auth(&c.routes).unwrap();
        check_backends(&c.backends).unwrap();
        check_mrtr(&c.mrtr).unwrap();
    }

    #[test]
    fn server_check_names_the_key() {
        let c = parse(&format!("[server]\nmax_connections = 0\n{BASE}"));
        assert_eq!(
            message(check_server(&c.server)),
            "server.max_connections: must be at least 1"
        );
        let c = parse(&format!("[server]\nmax_body_bytes = 10\n{BASE}"));
        assert_eq!(
            message(check_server(&c.server)),
            "server.max_body_bytes: must be at least 1024"
        );
    }

    #[test]
    fn routes_check_names_the_key() {
        let c = parse(&BASE.replace("path = \"/mcp\"", "path = \"mcp\""));
        assert_eq!(
            message(check_routes(&c)),
            "route[0].path: must be an absolute URL path like \"/mcp\""
        );
        let c = parse(&format!("[server]\nlisten = \"0.0.0.0:8080\"\n{BASE}"));
        assert_eq!(
            message(check_routes(&c)),
            "route[0].auth: mode = \"none\" needs a loopback server.listen (or server.allow_unauthenticated = true)"
        );
    }

    #[test]
    fn auth_check_names_the_key() {
        let bearer = |token: &str| {
            parse(&BASE.replace(
                "backend = \"b\"",
                &format!("backend = \"b\"\nauth = {{ mode = \"bearer\", tokens = [{token}] }}"),
            ))
        };
        let c = bearer("{ principal = \"p\", sha256 = \"abc\" }");
        assert_eq!(
            message(check_auth(&c.routes)),
            "route[0].auth.tokens[0].sha256: must be 64 hex digits"
        );
        let c = bearer("{ principal = \"p\" }");
        assert_eq!(
            message(check_auth(&c.routes)),
            "route[0].auth.tokens[0]: needs exactly one of sha256 and token"
        );
        let c = parse(&BASE.replace(
            "backend = \"b\"",
            "backend = \"b\"\nauth = { mode = \"jwt\", issuer = \"i\", audience = \"a\", jwks_url = \"http://example.com/jwks\" }",
        ));
        assert_eq!(
            message(check_auth(&c.routes)),
            "route[0].auth.jwks_url: must be an https:// URL (http:// only on loopback)"
        );
    }

    #[test]
    fn backends_check_names_the_key() {
        let c = parse(&format!(
            "{BASE}\npool = {{ max_sessions = 2, min_idle = 3 }}"
        ));
        assert_eq!(
            message(check_backends(&c.backends)),
            "backend.b.pool.min_idle: must not exceed pool.max_sessions"
        );
        let c = parse(&BASE.replace(
            "transport = \"stdio\"\n        command = \"server\"",
            "transport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { X = \"a\\nb\" }",
        ));
        assert_eq!(
            message(check_backends(&c.backends)),
            "backend.b.headers.X: not a valid header value"
        );
        let c = parse(&format!(
            "{BASE}\nstatic_roots = [{{ uri = \"https://example.com\" }}]"
        ));
        assert_eq!(
            message(check_backends(&c.backends)),
            "backend.b.static_roots[0].uri: must be a file:// URI"
        );
    }

    #[test]
    fn zero_max_rounds_names_max_rounds() {
        let c = parse(&format!("{BASE}\n[mrtr]\nmax_rounds = 0"));
        assert_eq!(
            message(check_mrtr(&c.mrtr)),
            "mrtr.max_rounds: must be at least 1"
        );
    }

    #[test]
    fn the_principal_share_is_within_the_pool() {
        for share in [0, 3] {
            let c = parse(&format!(
                "{BASE}\npool = {{ max_sessions = 2, max_sessions_per_principal = {share} }}"
            ));
            assert_eq!(
                message(check_backends(&c.backends)),
                "backend.b.pool.max_sessions_per_principal: must be between 1 and pool.max_sessions",
                "{share}"
            );
        }
        let defaulted = parse(&format!("{BASE}\npool = {{ max_sessions = 32 }}"));
        assert_eq!(defaulted.backends["b"].pool.principal_share(), 8);
        let small = parse(&format!("{BASE}\npool = {{ max_sessions = 2 }}"));
        assert_eq!(small.backends["b"].pool.principal_share(), 1);
    }

    #[test]
    fn zero_max_held_names_max_held() {
        let c = parse(&format!("{BASE}\n[mrtr]\nmax_held = 0"));
        assert_eq!(
            message(check_mrtr(&c.mrtr)),
            "mrtr.max_held: must be at least 1"
        );
    }

    #[test]
    fn zero_max_held_per_principal_names_max_held_per_principal() {
        let c = parse(&format!("{BASE}\n[mrtr]\nmax_held_per_principal = 0"));
        assert_eq!(
            message(check_mrtr(&c.mrtr)),
            "mrtr.max_held_per_principal: must be at least 1"
        );
    }

    #[test]
    fn mrtr_check_names_the_key() {
        let c = parse(&format!("{BASE}\n[mrtr]\nsettle_window = \"500ms\""));
        assert_eq!(
            message(check_mrtr(&c.mrtr)),
            "mrtr.settle_window: must be below 500ms"
        );
        let c = parse(&format!("{BASE}\n[mrtr]\nkeys = [\"c2hvcnQ=\"]"));
        assert_eq!(
            message(check_mrtr(&c.mrtr)),
            "mrtr.keys: key 0: must be exactly 32 bytes (got 5)"
        );
    }

    #[test]
    fn fleet_check_names_the_key_and_wants_shared_keys() {
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let fleet = |table: &str| {
            parse(&format!(
                "{BASE}\n[mrtr]\nkeys = [\"{key}\"]\n[fleet]\n{table}"
            ))
        };
        assert!(check_fleet(&fleet("advertise = \"10.0.0.7:8080\"")).is_ok());
        assert!(check_fleet(&fleet(
            "advertise = \"[::1]:8080\"\nallowed_peers = [\"::1/128\"]"
        ))
        .is_ok());
        assert!(check_fleet(&fleet("advertise = \"gw-0.gw:8080\"")).is_ok());
        for bad in ["10.0.0.7", "10.0.0.7:0", ":8080", "u@h:1", "a b:1"] {
            assert_eq!(
                message(check_fleet(&fleet(&format!("advertise = \"{bad}\"")))),
                "fleet.advertise: must be HOST:PORT",
                "{bad}"
            );
        }
        assert!(message(check_fleet(&fleet("advertise = \"0.0.0.0:8080\""))).contains("wildcard"));
        assert_eq!(
            message(check_fleet(&fleet(
                "advertise = \"h:1\"\npeer_timeout = \"10ms\""
            ))),
            "fleet.peer_timeout: must be between 100ms and 60s"
        );
        let without_keys = parse(&format!("{BASE}\n[fleet]\nadvertise = \"h:1\""));
        assert!(message(check_fleet(&without_keys))
            .starts_with("fleet: needs keys every replica shares"));
        assert!(toml::from_str::<Config>(&format!(
            "{BASE}\n[fleet]\nadvertise = \"h:1\"\nallowed_peers = [\"10.0.0.0/33\"]"
        ))
        .is_err());
    }
}
