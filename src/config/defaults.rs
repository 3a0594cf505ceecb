//! Every non-trivial default of the configuration, by section. Each value is one function, used
//! both by serde (`#[serde(default = "defaults::...")]`) for a key left out of the file and by
//! the `Default` impls below for a section left out entirely. Keys whose default is the type's
//! own (0, false, empty, none) are not listed; `unsolicited` defaults to `defer`, marked
//! `#[default]` on [`UnsolicitedPolicy`](super::UnsolicitedPolicy).

use std::net::SocketAddr;
use std::time::Duration;

use super::{CacheScope, Era, LegacyConfig, MrtrConfig, PoolConfig, ServerConfig};

// [server]

pub(super) fn listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
pub(super) fn max_body_bytes() -> usize {
    4 * 1024 * 1024
}
pub(super) fn sse_keep_alive() -> Duration {
    Duration::from_secs(15)
}
pub(super) fn max_listens() -> usize {
    1000
}
pub(super) fn max_listens_per_principal() -> usize {
    16
}
pub(super) fn body_read_timeout() -> Duration {
    Duration::from_secs(30)
}
pub(super) fn max_connections() -> usize {
    4096
}
/// The line limit of common SDKs' stdio transports (rmcp's, for one).
pub(super) const STDIO_MESSAGE_LIMIT: usize = 16 * 1024 * 1024;
pub(super) fn stream_after() -> Duration {
    Duration::from_secs(5)
}
pub(super) fn first_byte_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(super) fn shutdown_delay() -> Duration {
    Duration::from_secs(5)
}
pub(super) fn drain_timeout() -> Duration {
    Duration::from_secs(20)
}

// [[route]]

pub(super) fn list_timeout() -> Duration {
    Duration::from_secs(5)
}

pub(super) fn cache_scope() -> CacheScope {
    CacheScope::Private
}

// [backend.NAME]

pub(super) fn request_timeout() -> Duration {
    Duration::from_secs(300)
}
pub(super) fn init_timeout() -> Duration {
    Duration::from_secs(15)
}
pub(super) fn roots_settle() -> Duration {
    Duration::from_millis(20)
}

// [backend.NAME.pool]

pub(super) fn max_sessions() -> usize {
    32
}
pub(super) fn idle_timeout() -> Duration {
    Duration::from_secs(300)
}
pub(super) fn queue_wait() -> Duration {
    Duration::from_secs(10)
}

// [mrtr]

pub(super) fn held_ttl() -> Duration {
    Duration::from_secs(50)
}
pub(super) fn settle_window() -> Duration {
    Duration::from_millis(50)
}
pub(super) fn settle_quiet() -> Duration {
    Duration::from_millis(1)
}
pub(super) fn round_wait() -> Duration {
    Duration::from_secs(20)
}
pub(super) fn max_rounds() -> u32 {
    16
}
pub(super) fn max_held() -> usize {
    10_000
}
pub(super) fn max_held_per_principal() -> usize {
    1_000
}
pub(super) fn refused_retry_grace() -> Duration {
    Duration::from_secs(5)
}
pub(super) fn outcome_ttl() -> Duration {
    Duration::from_secs(30)
}

// [fleet]
pub(super) fn peer_timeout() -> Duration {
    Duration::from_secs(2)
}

// [route.auth] (mode = "jwt")

pub(super) fn jwt_leeway() -> Duration {
    Duration::from_secs(30)
}
pub(super) fn jwks_refresh() -> Duration {
    Duration::from_secs(300)
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: listen(),
            admin_listen: None,
            max_body_bytes: max_body_bytes(),
            allowed_hosts: None,
            allowed_origins: None,
            sse_keep_alive: sse_keep_alive(),
            allow_unauthenticated: false,
            body_read_timeout: body_read_timeout(),
            max_listens: max_listens(),
            max_listens_per_principal: max_listens_per_principal(),
            max_connections: max_connections(),
            first_byte_timeout: first_byte_timeout(),
            stream_after: stream_after(),
            shutdown_delay: shutdown_delay(),
            drain_timeout: drain_timeout(),
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min_idle: 0,
            max_sessions: max_sessions(),
            idle_timeout: idle_timeout(),
            queue_wait: queue_wait(),
            max_sessions_per_principal: None,
            warm_profiles: Vec::new(),
        }
    }
}

impl Default for MrtrConfig {
    fn default() -> Self {
        Self {
            held_ttl: held_ttl(),
            settle_window: settle_window(),
            settle_quiet: settle_quiet(),
            round_wait: round_wait(),
            max_rounds: max_rounds(),
            max_held: max_held(),
            max_held_per_principal: max_held_per_principal(),
            keys: Vec::new(),
            keys_file: None,
            instance_id: None,
            refused_retry_grace: refused_retry_grace(),
            outcome_ttl: outcome_ttl(),
        }
    }
}

// [route]

pub(super) fn eras() -> Vec<Era> {
    vec![Era::Modern, Era::Legacy]
}

pub(super) fn token_exchange_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Audit records waiting for the writer before new ones are dropped.
pub(super) fn audit_queue() -> usize {
    4096
}

// [legacy]

pub(super) fn legacy_max_sessions() -> usize {
    1000
}
pub(super) fn legacy_max_sessions_per_principal() -> usize {
    16
}
pub(super) fn legacy_idle_timeout() -> Duration {
    Duration::from_secs(600)
}
pub(super) fn legacy_initialize_timeout() -> Duration {
    Duration::from_secs(30)
}
pub(super) fn legacy_replay_events() -> usize {
    256
}

impl Default for LegacyConfig {
    fn default() -> Self {
        Self {
            max_sessions: legacy_max_sessions(),
            max_sessions_per_principal: legacy_max_sessions_per_principal(),
            idle_timeout: legacy_idle_timeout(),
            initialize_timeout: legacy_initialize_timeout(),
            replay_events: legacy_replay_events(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    /// A file that leaves a section out gets the same values as one that leaves out its keys.
    #[test]
    fn serde_and_default_agree() {
        let text = "[[route]]\npath = \"/mcp\"\nbackend = \"b\"\n\
                    [backend.b]\ntransport = \"stdio\"\ncommand = \"server\"\n";
        let omitted = Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        let empty = Config::from_toml_str(&format!("[server]\n[mrtr]\n{text}[backend.b.pool]\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        for config in [&omitted, &empty] {
            assert_eq!(
                format!("{:?}", config.server),
                format!("{:?}", ServerConfig::default())
            );
            assert_eq!(
                format!("{:?}", config.mrtr),
                format!("{:?}", MrtrConfig::default())
            );
            assert_eq!(
                format!("{:?}", config.backends["b"].pool),
                format!("{:?}", PoolConfig::default())
            );
        }
        assert_eq!(omitted.server.listen, listen());
        assert_eq!(omitted.mrtr.max_held_per_principal, 1_000);
    }
}
