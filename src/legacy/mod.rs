//! The legacy path: 2025-11-25 clients served at the same endpoints as 2026-07-28 ones, each
//! client session proxied to a backend session of its own.
//!
//! - [`LegacySessions`] owns every open session: the limits (`[legacy]`, gateway-wide and per
//!   principal), idle expiry, and the end of each (the backend session closed with it).
//! - A client's `Mcp-Session-Id` is the gateway's own, sealed with the `requestState` keys:
//!   the session's table key, the owner replica, the route and the principal ([`SessionId`]).
//!   The backend's id never leaves the gateway. A session id that does not open, names another
//!   route or principal, or names a session that ended is "not found" (404), which tells a
//!   legacy client to initialize again.
//! - [`session`] is one session's pipe; [`streams`] its SSE streams and their replay; [`serve`]
//!   the HTTP side (POST, GET, DELETE).
//!
//! Sessions never come from, or go to, the 2026-07-28 pool: a legacy client's backend session
//! carries its own initialize, capabilities and roots, and nobody else's calls.
//!
//! Task: the sweeper, owned here, ends with the gateway.

mod reverse;
pub(crate) mod serve;

pub(crate) use self::reverse::LocalServer;
mod session;
mod streams;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::reverse::{ModernUpstream, ReverseLimits};
use self::serve::EndpointBackend;
use self::session::{CallerCell, LegacySession, UpstreamOf};
use crate::access::CallerAccess;
use crate::backend::modern::detect::ResolvedEra;
use crate::config::{LegacyConfig, ANONYMOUS};
use crate::error::{GatewayError, HeldError};
use crate::metrics::Metrics;
use crate::mrtr::quota::Quota;
use crate::mrtr::state::{principal_digest, random_id};
use crate::mrtr::Bridge;

/// What a client's `Mcp-Session-Id` seals.
#[derive(Debug, Serialize, Deserialize)]
struct SessionId {
    /// The session's table key (128-bit random, hex).
    #[serde(rename = "s")]
    key: String,
    /// Instance that holds the session.
    #[serde(rename = "o")]
    owner: String,
    /// With `[fleet]`: where the other replicas reach that instance.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    owner_address: Option<String>,
    #[serde(rename = "b")]
    route: String,
    /// SHA-256 of the principal (hex, 128 bits).
    #[serde(rename = "p")]
    principal: String,
}

/// Where the session a client names lives.
pub enum Located {
    Here(Arc<LegacySession>),
    /// Another replica of the fleet holds it: the request is forwarded there.
    Replica(String),
    NotFound,
}

/// Why a session ended, for the metric.
#[derive(Clone, Copy, Debug)]
pub enum EndReason {
    Deleted,
    Expired,
    BackendClosed,
    Shutdown,
    /// The client's claims no longer tell the backend what its session was told.
    IdentityChanged,
}

impl EndReason {
    fn label(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Expired => "expired",
            Self::IdentityChanged => "identity_changed",
            Self::BackendClosed => "backend_closed",
            Self::Shutdown => "shutdown",
        }
    }

    /// What a request still in flight is answered with.
    fn why(self) -> &'static str {
        match self {
            Self::Deleted => "The session was deleted",
            Self::Expired => "The session expired",
            Self::BackendClosed => "The backend session closed",
            Self::Shutdown => "The gateway shut down; initialize a new session",
            Self::IdentityChanged => {
                "The caller's identity changed since the session started; initialize a new session"
            }
        }
    }
}

pub struct LegacySessions {
    config: LegacyConfig,
    sessions: DashMap<String, Arc<LegacySession>>,
    quota: Arc<Quota>,
    bridge: Arc<Bridge>,
    metrics: Arc<Metrics>,
    /// Between SSE keep-alive comments of an idle stream.
    pub keep_alive: Duration,
    upkeep: TaskTracker,
    stop: CancellationToken,
}

impl LegacySessions {
    pub fn new(
        config: LegacyConfig,
        bridge: Arc<Bridge>,
        metrics: Arc<Metrics>,
        keep_alive: Duration,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let quota = Arc::new(Quota::new(
            config.max_sessions,
            config.max_sessions_per_principal,
        ));
        let sessions = Arc::new(Self {
            config,
            sessions: DashMap::new(),
            quota,
            bridge,
            metrics,
            keep_alive,
            upkeep: TaskTracker::new(),
            stop,
        });
        sessions.upkeep.spawn(sweep(
            Arc::downgrade(&sessions),
            sessions.stop.clone(),
            (sessions.config.idle_timeout / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(5)),
        ));
        sessions.upkeep.close();
        sessions
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.sessions.len()
    }

    pub fn max(&self) -> usize {
        self.config.max_sessions
    }

    /// Client requests still waiting for their response, across sessions (a draining gateway
    /// waits for them).
    pub fn requests_in_flight(&self) -> usize {
        self.sessions
            .iter()
            .map(|s| s.value().requests_in_flight())
            .sum()
    }

    /// Starts a session for a client's `initialize`: a backend session of its own, the
    /// `initialize` sent on it as is. Returns the backend's response, and the client's session
    /// id when the backend accepted.
    pub(crate) async fn initialize(
        self: &Arc<Self>,
        endpoint: &serve::Endpoint,
        caller: &Arc<CallerAccess>,
        message: Value,
    ) -> Result<(Value, Option<String>), GatewayError> {
        let principal = caller.principal();
        let identity = caller.session_identity().await?;
        let key = random_id();
        // With `auth.mode = "none"` every caller is one principal: only the total counts.
        let counted_as = if principal == ANONYMOUS {
            format!("{ANONYMOUS}/{key}")
        } else {
            principal_digest(principal)
        };
        let place = self.quota.place(counted_as).map_err(|e| match e {
            HeldError::Full(n) => {
                GatewayError::SessionLimit(format!("{n} sessions are open, the gateway's limit"))
            }
            HeldError::PrincipalFull(n) => {
                GatewayError::SessionLimit(format!("this client has {n} sessions open"))
            }
        })?;
        let max_rounds = self.bridge.max_rounds();
        let caller_cell: CallerCell = Arc::new(Mutex::new(caller.clone()));
        let upstream = match &endpoint.backend {
            EndpointBackend::Local(server) => UpstreamOf::Reversed(
                ModernUpstream::Local {
                    server: server.clone(),
                    caller: caller_cell.clone(),
                },
                ReverseLimits {
                    max_rounds,
                    request_timeout: server.request_timeout(),
                },
            ),
            EndpointBackend::One(pool) => {
                let modern = pool.modern();
                match modern.era(&identity).await? {
                    ResolvedEra::Legacy => UpstreamOf::Session(pool.spec()),
                    ResolvedEra::Modern => UpstreamOf::Reversed(
                        ModernUpstream::Backend {
                            backend: modern.clone(),
                            identity: identity.clone(),
                        },
                        ReverseLimits {
                            max_rounds,
                            request_timeout: pool.request_timeout(),
                        },
                    ),
                }
            }
        };
        let session = LegacySession::connect(
            key.clone(),
            self,
            upstream,
            &identity,
            caller_cell,
            self.config.replay_events,
            place,
        )
        .await?;
        let response = match session
            .initialize(message, self.config.initialize_timeout)
            .await
        {
            Ok(response) => response,
            Err(error) => {
                session.close("initialize failed").await;
                return Err(error);
            }
        };
        if response.get("result").is_none() {
            // The server may have moved to 2026-07-28 since it was probed.
            if let EndpointBackend::One(pool) = &endpoint.backend {
                pool.modern().forget_era();
            }
            session.close("initialize refused").await;
            return Ok((response, None));
        }
        let id = SessionId {
            key: key.clone(),
            owner: self.bridge.instance().to_string(),
            owner_address: self.bridge.owner_address().map(str::to_string),
            route: endpoint.path.clone(),
            principal: principal_digest(principal),
        };
        let sealed = self
            .bridge
            .seal_session_id(&serde_json::to_vec(&id).unwrap_or_default());
        self.sessions.insert(key, session);
        tracing::info!(route = %endpoint.path, "legacy session started");
        Ok((response, Some(sealed)))
    }

    /// Whether this fleet sealed `token` as a session id (whether or not the session lives).
    pub fn issued(&self, token: &str) -> bool {
        self.bridge.open_session_id(token).is_some()
    }

    /// The session a client's `Mcp-Session-Id` names, if it is this principal's on this route.
    pub fn locate(&self, token: &str, principal: &str, route: &str) -> Located {
        let Some(id) = self
            .bridge
            .open_session_id(token)
            .and_then(|plaintext| serde_json::from_slice::<SessionId>(&plaintext).ok())
        else {
            return Located::NotFound;
        };
        if id.route != route || id.principal != principal_digest(principal) {
            return Located::NotFound;
        }
        if id.owner != self.bridge.instance() {
            return match id.owner_address {
                // This replica's address, another instance: it was restarted, the session is gone.
                Some(address) if Some(address.as_str()) != self.bridge.owner_address() => {
                    Located::Replica(address)
                }
                _ => Located::NotFound,
            };
        }
        match self.sessions.get(&id.key) {
            Some(session) => Located::Here(session.value().clone()),
            None => Located::NotFound,
        }
    }

    /// Ends a session and closes its backend session; a session already ended is left alone.
    pub async fn end(&self, key: &str, reason: EndReason) {
        let Some((_, session)) = self.sessions.remove(key) else {
            return;
        };
        self.metrics
            .legacy_session_ends
            .with_label_values(&[reason.label()])
            .inc();
        tracing::info!(reason = reason.label(), "legacy session ended");
        session.close(reason.why()).await;
    }

    /// Ends every session (the gateway stops).
    pub async fn close_all(&self) {
        self.stop.cancel();
        let keys: Vec<String> = self.sessions.iter().map(|s| s.key().clone()).collect();
        for key in keys {
            self.end(&key, EndReason::Shutdown).await;
        }
    }
}

/// Ends sessions idle past `legacy.idle_timeout`, until the gateway stops.
async fn sweep(
    sessions: std::sync::Weak<LegacySessions>,
    stop: CancellationToken,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        let idle = sessions.config.idle_timeout;
        let expired: Vec<String> = sessions
            .sessions
            .iter()
            .filter(|s| s.value().idle_for(idle))
            .map(|s| s.key().clone())
            .collect();
        for key in expired {
            sessions.end(&key, EndReason::Expired).await;
        }
    }
}
