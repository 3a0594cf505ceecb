//! `[[route]]`: paths, the backend each names, who may reach an unauthenticated route, and the
//! details of each route's `auth` (bearer tokens, JWT settings).

use std::collections::HashSet;

use super::policy::valid_scope;
use crate::config::{
    invalid, AuthConfig, BearerToken, Config, ConfigError, JwtConfig, RouteConfig, JWT_ALGORITHMS,
    MAX_LEEWAY,
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
        if !config.backends.contains_key(&route.backend) {
            return Err(invalid(
                format!("{key}.backend"),
                format!("no [backend.{}] is defined", route.backend),
            ));
        }
    }
    Ok(())
}

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
