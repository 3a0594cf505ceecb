//! `[backend.NAME]`: the keys of its transport, headers that can be sent, the session pool, the
//! message limit, what only a 2025-11-25 backend has, static roots and timeouts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{
    invalid, BackendConfig, BackendEra, ConfigError, TransportKind, UnsolicitedPolicy,
};

/// `[backend.NAME]` of every backend.
pub(crate) fn check_backends(
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    for (name, backend) in backends {
        let key = format!("backend.{name}");
        check_transport(&key, backend)?;
        check_headers(&key, backend)?;
        check_pool(&key, backend)?;
        check_message_limit(&key, backend)?;
        check_era(&key, backend)?;
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
        for (name, timeout) in [
            ("request_timeout", backend.request_timeout),
            ("init_timeout", backend.init_timeout),
        ] {
            if timeout.is_zero() {
                return Err(invalid(format!("{key}.{name}"), "must be greater than 0"));
            }
        }
    }
    Ok(())
}

/// What only a 2025-11-25 backend has: sessions to warm, server requests outside calls to
/// answer. Set on a backend fixed to 2026-07-28, they would silently do nothing.
fn check_era(key: &str, backend: &BackendConfig) -> Result<(), ConfigError> {
    if backend.era != BackendEra::Modern {
        return Ok(());
    }
    let sessions_only = [
        ("pool.warm_profiles", !backend.pool.warm_profiles.is_empty()),
        ("pool.min_idle", backend.pool.min_idle > 0),
        (
            "unsolicited",
            backend.unsolicited != UnsolicitedPolicy::Defer,
        ),
        ("static_roots", !backend.static_roots.is_empty()),
    ];
    for (name, given) in sessions_only {
        if given {
            return Err(invalid(
                format!("{key}.{name}"),
                "a 2026-07-28 backend has no sessions: applies to era \"2025-11-25\" or \"auto\" only",
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
            for (name, given) in [
                ("url", backend.url.is_some()),
                ("headers", !backend.headers.is_empty()),
            ] {
                if given {
                    return Err(invalid(
                        format!("{key}.{name}"),
                        "applies to transport = \"http\" only",
                    ));
                }
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
