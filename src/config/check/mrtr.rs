//! `[mrtr]` and `[fleet]`: the bounds and waits of multi-round calls, the `requestState` keys, and
//! the replicas that must share those keys to open each other's state.

use std::time::Duration;

use crate::config::keys::decode_keys;
use crate::config::{invalid, Config, ConfigError, MrtrConfig};

/// `[mrtr]`: bounds, waits, and the `requestState` keys (inline, then `keys_file`).
pub(crate) fn check_mrtr(mrtr: &MrtrConfig) -> Result<(), ConfigError> {
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
pub(crate) fn check_fleet(config: &Config) -> Result<(), ConfigError> {
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
    if let Some(listen) = fleet.listen {
        if listen == config.server.listen || Some(listen) == config.server.admin_listen {
            return Err(invalid(
                "fleet.listen",
                "must differ from server.listen and server.admin_listen",
            ));
        }
        if authority.port_u16() != Some(listen.port()) {
            // A port mapping between replicas is possible, but rare enough to mention.
            tracing::warn!(advertise = %fleet.advertise, %listen, "fleet.advertise names another port than fleet.listen: peers must reach the peer listener there");
        }
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
