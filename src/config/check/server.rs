//! `[server]`, `[legacy]` and `[audit]`: the limits of what the listener accepts, of the legacy
//! sessions it keeps, and of the audit queue.

use std::time::Duration;

use crate::config::{invalid, AuditConfig, ConfigError, LegacyConfig, ServerConfig};

/// `[server]`.
pub(crate) fn check_server(server: &ServerConfig) -> Result<(), ConfigError> {
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
    if server.shutdown_delay > Duration::from_secs(300) {
        return Err(invalid("server.shutdown_delay", "must be at most 5m"));
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

/// `[legacy]`: limits that admit at least one session, and a stream that keeps something.
pub(crate) fn check_legacy(legacy: &LegacyConfig) -> Result<(), ConfigError> {
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

/// `[audit]`: where records go, and room for them.
pub(crate) fn check_audit(audit: Option<&AuditConfig>) -> Result<(), ConfigError> {
    let Some(audit) = audit else {
        return Ok(());
    };
    if audit.file.trim().is_empty() {
        return Err(invalid(
            "audit.file",
            "a path, or \"-\" for standard output",
        ));
    }
    if !(1..=1_000_000).contains(&audit.queue) {
        return Err(invalid("audit.queue", "must be between 1 and 1000000"));
    }
    Ok(())
}
