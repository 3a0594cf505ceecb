//! `[[route]]`: paths, the backend each names, who may reach an unauthenticated route, and the
//! details of each route's `auth` (bearer tokens, JWT settings).

use std::collections::HashSet;

use super::policy::valid_scope;
use crate::config::{
    invalid, AuthConfig, BearerToken, Config, ConfigError, JwtConfig, RouteConfig, JWT_ALGORITHMS,
    MAX_LEEWAY, NAME_SEPARATOR,
};

/// `[[route]]` apart from the details of `auth`: paths, the backend named, and who may reach an
/// unauthenticated route.
pub(crate) fn check_routes(config: &Config) -> Result<(), ConfigError> {
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
        check_members(config, &key, route)?;
    }
    Ok(())
}

/// Characters a tool or prompt name may hold (the specification's tool names).
fn valid_name_part(part: &str) -> bool {
    part.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The backend a route names, or the several it serves together with their names and URI
/// prefixes.
fn check_members(config: &Config, key: &str, route: &RouteConfig) -> Result<(), ConfigError> {
    if route.backend.is_empty() == route.backends.is_empty() {
        return Err(invalid(key, "needs exactly one of backend and backends"));
    }
    let named = if route.is_aggregate() {
        "backends"
    } else {
        "backend"
    };
    let mut seen = HashSet::new();
    for name in route.members() {
        if !config.backends.contains_key(name) {
            return Err(invalid(
                format!("{key}.{named}"),
                format!("no [backend.{name}] is defined"),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(invalid(
                format!("{key}.backends"),
                format!("\"{name}\" is named twice"),
            ));
        }
    }
    if !route.is_aggregate() {
        let extra = [
            ("prefixes", route.prefixes.is_empty()),
            ("resource_prefixes", route.resource_prefixes.is_empty()),
        ];
        if let Some((field, _)) = extra.iter().find(|(_, empty)| !empty) {
            return Err(invalid(
                format!("{key}.{field}"),
                "applies to a route over several backends (backends = [...])",
            ));
        }
        return Ok(());
    }
    for table in [&route.prefixes, &route.resource_prefixes] {
        if let Some(unknown) = table.keys().find(|name| !seen.contains(name.as_str())) {
            let field = if std::ptr::eq(table, &route.prefixes) {
                "prefixes"
            } else {
                "resource_prefixes"
            };
            return Err(invalid(
                format!("{key}.{field}.{unknown}"),
                "is not one of the route's backends",
            ));
        }
    }
    // Every exposed name is `prefix__name`: prefixes without the separator, distinct, make
    // every name distinct, whatever the backends list.
    let mut prefixes = HashSet::new();
    for name in route.members() {
        let prefix = route.prefix_of(name);
        let field = format!("{key}.prefixes.{name}");
        // A trailing '_' would run into the separator: `a_` + `__x` reads as `a` + `_x`.
        if prefix.is_empty()
            || !valid_name_part(prefix)
            || prefix.contains(NAME_SEPARATOR)
            || prefix.ends_with('_')
        {
            return Err(invalid(
                field,
                format!(
                    "\"{prefix}\" must be letters, digits, '_', '-' or '.', without \"{NAME_SEPARATOR}\" and not ending in '_'"
                ),
            ));
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(invalid(
                field,
                format!("must be at most {MAX_PREFIX_LEN} characters"),
            ));
        }
        if !prefixes.insert(prefix) {
            return Err(invalid(
                field,
                format!("\"{prefix}\" is the prefix of another backend too"),
            ));
        }
    }
    let mut uri_prefixes: Vec<(&str, &str)> = Vec::new();
    for (name, uri_prefix) in &route.resource_prefixes {
        let field = format!("{key}.resource_prefixes.{name}");
        if uri_prefix.is_empty() {
            return Err(invalid(field, "must not be empty"));
        }
        if let Some((other, _)) = uri_prefixes
            .iter()
            .find(|(_, p)| p.starts_with(uri_prefix.as_str()) || uri_prefix.starts_with(p))
        {
            return Err(invalid(
                field,
                format!("overlaps backend {other}'s: a URI could go to either"),
            ));
        }
        uri_prefixes.push((name, uri_prefix));
    }
    if route.list_timeout.is_zero() {
        return Err(invalid(
            format!("{key}.list_timeout"),
            "must be more than 0",
        ));
    }
    Ok(())
}

/// Longest prefix: with the separator it leaves most of the specification's 128 characters
/// of a tool name to the backend's own.
const MAX_PREFIX_LEN: usize = 32;

/// `route[i].auth` of every route: bearer tokens and JWT settings.
pub(crate) fn check_auth(routes: &[RouteConfig]) -> Result<(), ConfigError> {
    for (i, route) in routes.iter().enumerate() {
        match &route.auth {
            AuthConfig::Bearer { tokens, .. } => check_bearer(i, tokens)?,
            AuthConfig::Jwt(jwt) => check_jwt(i, jwt)?,
            AuthConfig::None => {}
        }
        check_scopes(
            &format!("route[{i}].auth.scopes"),
            route.auth.required_scopes(),
        )?;
        if let AuthConfig::Bearer { tokens, .. } = &route.auth {
            for (t, token) in tokens.iter().enumerate() {
                check_scopes(
                    &format!("route[{i}].auth.tokens[{t}].scopes"),
                    &token.scopes,
                )?;
            }
        }
    }
    Ok(())
}

/// Scopes as a token carries them and a challenge names them.
fn check_scopes(key: &str, scopes: &[String]) -> Result<(), ConfigError> {
    match scopes.iter().position(|s| !valid_scope(s)) {
        Some(i) => Err(invalid(
            format!("{key}[{i}]"),
            "must be a non-empty scope without spaces, '\"' or '\\'",
        )),
        None => Ok(()),
    }
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
