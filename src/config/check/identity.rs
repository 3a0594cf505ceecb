//! What a backend is told about the caller: `identity_headers` (HTTP), `identity_env` (stdio)
//! and `token_exchange` (HTTP). Expressions must compile; a header may neither carry a
//! credential nor shadow what the transport itself sends; the exchanged token is the only
//! `Authorization` a backend with `token_exchange` gets; and a route whose backend exchanges
//! tokens must authenticate its callers (an anonymous caller has no token to exchange).

use std::collections::BTreeMap;

use super::policy::valid_scope;
use crate::config::{invalid, AuthConfig, BackendConfig, ConfigError, RouteConfig, TransportKind};
use crate::expr::Expr;

/// Headers the transport sets itself, or that would pass a credential by another name.
const RESERVED_HEADERS: [&str; 14] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
    "content-type",
    "content-length",
    "accept",
    "connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

pub(crate) fn check_identity(
    backends: &BTreeMap<String, BackendConfig>,
    routes: &[RouteConfig],
) -> Result<(), ConfigError> {
    for (name, backend) in backends {
        let key = format!("backend.{name}");
        if backend.tells_identity() && !backend.pool.warm_profiles.is_empty() {
            return Err(invalid(
                format!("{key}.pool.warm_profiles"),
                "a backend told who calls has no sessions for nobody: leave warm_profiles out",
            ));
        }
        check_identity_headers(&key, backend)?;
        check_identity_env(&key, backend)?;
        check_token_exchange(&key, backend)?;
    }
    for (i, route) in routes.iter().enumerate() {
        let exchanging = route.members().iter().find(|name| {
            backends
                .get(name.as_str())
                .is_some_and(|b| b.token_exchange.is_some())
        });
        // Only an issuer's token goes to the authorization server: a static token is the
        // gateway's own secret.
        if let Some(backend) = exchanging.filter(|_| !matches!(route.auth, AuthConfig::Jwt(_))) {
            return Err(invalid(
                format!("route[{i}].auth"),
                format!(
                    "backend {backend} exchanges the caller's token (token_exchange): the route must take JWTs (mode = \"jwt\")"
                ),
            ));
        }
    }
    Ok(())
}

fn compiles(key: &str, source: &str) -> Result<(), ConfigError> {
    Expr::compile(source)
        .map(|_| ())
        .map_err(|problem| invalid(key, problem))
}

fn check_identity_headers(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    if backend.identity_headers.is_empty() {
        return Ok(());
    }
    if backend.transport != TransportKind::Http {
        return Err(invalid(
            format!("{key}.identity_headers"),
            "applies to transport = \"http\" only (identity_env is stdio's)",
        ));
    }
    for (name, source) in &backend.identity_headers {
        let hkey = format!("{key}.identity_headers.{name}");
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(&hkey, "not a valid header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(invalid(
                &hkey,
                "the gateway sets this header itself (a credential for the backend comes from token_exchange)",
            ));
        }
        if backend.headers.keys().any(|h| h.eq_ignore_ascii_case(name)) {
            return Err(invalid(&hkey, "also set in headers"));
        }
        compiles(&hkey, source)?;
    }
    Ok(())
}

fn check_identity_env(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    if backend.identity_env.is_empty() {
        return Ok(());
    }
    if backend.transport != TransportKind::Stdio {
        return Err(invalid(
            format!("{key}.identity_env"),
            "applies to transport = \"stdio\" only (identity_headers is HTTP's)",
        ));
    }
    for (name, source) in &backend.identity_env {
        let ekey = format!("{key}.identity_env.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(invalid(&ekey, "not a valid environment variable name"));
        }
        if backend.env.contains_key(name) {
            return Err(invalid(&ekey, "also set in env"));
        }
        compiles(&ekey, source)?;
    }
    Ok(())
}

fn check_token_exchange(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    let Some(exchange) = &backend.token_exchange else {
        return Ok(());
    };
    let xkey = format!("{key}.token_exchange");
    if backend.transport != TransportKind::Http {
        return Err(invalid(&xkey, "applies to transport = \"http\" only"));
    }
    if backend
        .headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("authorization"))
    {
        return Err(invalid(
            format!("{key}.headers.Authorization"),
            "cannot be combined with token_exchange, which sets Authorization",
        ));
    }
    let endpoint: http::Uri = exchange
        .endpoint
        .parse()
        .map_err(|e| invalid(format!("{xkey}.endpoint"), format!("not a URL: {e}")))?;
    // The client secret and the caller's token travel in the request: plain HTTP only to a
    // token endpoint on loopback, as for a JWKS URL.
    let loopback = endpoint
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .is_some_and(|h| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
    match endpoint.scheme_str() {
        Some("https") if endpoint.host().is_some() => {}
        Some("http") if loopback => {}
        _ => {
            return Err(invalid(
                format!("{xkey}.endpoint"),
                "must be an https:// URL (plain http:// only on loopback)",
            ))
        }
    }
    for (field, value) in [
        ("client_id", &exchange.client_id),
        ("client_secret", &exchange.client_secret),
    ] {
        if value.is_empty() {
            return Err(invalid(format!("{xkey}.{field}"), "must not be empty"));
        }
    }
    if exchange.timeout.is_zero() {
        return Err(invalid(format!("{xkey}.timeout"), "must be greater than 0"));
    }
    if let Some(i) = exchange.scopes.iter().position(|s| !valid_scope(s)) {
        return Err(invalid(
            format!("{xkey}.scopes[{i}]"),
            "must be a non-empty scope without spaces, '\"' or '\\'",
        ));
    }
    Ok(())
}
