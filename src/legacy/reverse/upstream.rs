//! Where a reverse bridge sends its 2026-07-28 requests: a 2026-07-28 backend, told about the
//! caller as its sessions are, or the gateway's own route over several backends
//! ([`LocalServer`]), which answers as a 2026-07-28 server would.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::access::CallerAccess;
use crate::backend::identity::SessionIdentity;
use crate::backend::modern::{Exchange, ModernBackend, ModernRequest};
use crate::backend::BackendError;
use crate::legacy::session::CallerCell;
use crate::sync::LockRecovered;

/// A 2026-07-28 server the gateway is itself: a route over several backends. A 2025-11-25
/// session on that route reaches it through the reverse bridge, as it would a 2026-07-28
/// backend.
pub(crate) trait LocalServer: Send + Sync {
    /// One request, as a 2026-07-28 client would send it, for this caller: its notifications
    /// and answer. Dropping the exchange cancels it.
    fn exchange(
        &self,
        caller: Arc<CallerAccess>,
        request: ModernRequest,
    ) -> BoxFuture<'static, Result<Exchange, BackendError>>;

    /// Longest one request may take.
    fn request_timeout(&self) -> Duration;
}

/// What a reverse bridge's requests go to.
pub(crate) enum ModernUpstream {
    /// A 2026-07-28 backend, and what it is told about the session's caller.
    Backend {
        backend: Arc<ModernBackend>,
        identity: Arc<SessionIdentity>,
    },
    /// The gateway's own route over several backends, for the session's latest caller.
    Local {
        server: Arc<dyn LocalServer>,
        caller: CallerCell,
    },
}

impl ModernUpstream {
    /// Sends one request; its notifications and answer follow on the exchange.
    pub(crate) async fn send(&self, request: ModernRequest) -> Result<Exchange, BackendError> {
        match self {
            Self::Backend { backend, identity } => backend.send(identity, &request).await,
            Self::Local { server, caller } => {
                let caller = caller.lock_recovered().clone();
                server.exchange(caller, request).await
            }
        }
    }

    /// A request failed: a backend may have restarted as another revision.
    pub(crate) fn failed(&self, error: &BackendError) {
        if let Self::Backend { backend, .. } = self {
            backend.failed(error);
        }
    }
}
