//! What a session's handles ([`Session`](super::Session), [`ActiveCall`](super::ActiveCall))
//! share with its reader task: the transport, the request-id counter (ids are never reused),
//! the routing table; and what the gateway sends the backend on it: requests, answers to its
//! requests, cancellations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::init_roots::InitRoots;
use super::queue::{CallSink, DroppedNotices};
use super::table::Routing;
use crate::backend::changes::Feed;
use crate::backend::{BackendError, Transport};
use crate::config::UnsolicitedPolicy;
use crate::jsonrpc::{self, JsonRpcError};
use crate::sync::LockRecovered;

pub(super) struct SessionCore {
    pub(super) number: u64,
    pub(super) backend: String,
    pub(super) transport: Transport,
    pub(super) next_id: AtomicU64,
    pub(super) routing: Mutex<Routing>,
    pub(super) init: OnceLock<Arc<Value>>,
    pub(super) log_level: Mutex<Option<String>>,
    pub(super) unsolicited: UnsolicitedPolicy,
    pub(super) static_roots: Value,
    /// After roots reach the backend, how long before a call may rely on them.
    pub(super) roots_settle: Duration,
    /// The session declared `roots.listChanged`: the backend may be told to ask again.
    pub(super) reasks_roots: bool,
    /// What this backend's sessions showed about asking for roots at initialization.
    pub(super) init_roots: Arc<InitRoots>,
    /// Woken when the backend asks something outside a call (deferred) or asks for roots, and
    /// when the session ends or is tainted.
    pub(super) asked: Notify,
    /// Where the list changes and resource updates this session hears go: its principal's feed.
    pub(super) changes: Option<Arc<Feed>>,
    /// Counts the notifications its calls had no room for.
    pub(super) dropped: DroppedNotices,
}

impl SessionCore {
    pub(super) fn routing(&self) -> std::sync::MutexGuard<'_, Routing> {
        // A poisoned lock only means another thread panicked mid-update; the map is still usable.
        self.routing.lock_recovered()
    }

    pub(super) fn register(&self, sink: CallSink, active: bool) -> Result<u64, BackendError> {
        let mut routing = self.routing();
        if let Some(reason) = &routing.dead {
            return Err(BackendError::Closed(reason.clone()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if active {
            routing.active = Some((id, sink.clone()));
            routing.lent = true;
        }
        routing.pending.insert(id, sink);
        Ok(id)
    }

    pub(super) fn send_request(
        &self,
        method: &str,
        params: Option<Value>,
        sink: CallSink,
        active: bool,
    ) -> Result<u64, BackendError> {
        let id = self.register(sink, active)?;
        self.send_registered(id, method, params)?;
        Ok(id)
    }

    /// Sends a request under an id registered before.
    pub(super) fn send_registered(
        &self,
        id: u64,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), BackendError> {
        if let Err(e) = self
            .transport
            .send(jsonrpc::request(json!(id), method, params))
        {
            self.forget(id);
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn forget(&self, id: u64) {
        let mut routing = self.routing();
        routing.pending.remove(&id);
        if routing.active.as_ref().is_some_and(|(a, _)| *a == id) {
            routing.active = None;
        }
    }

    /// Withdraws a request the gateway no longer wants answered (2025-11-25: a closed stream is
    /// not a cancellation, so it is said explicitly).
    pub(super) fn cancel(&self, id: u64, reason: &str) {
        {
            let mut routing = self.routing();
            if routing.pending.remove(&id).is_none() {
                return;
            }
            if routing.active.as_ref().is_some_and(|(a, _)| *a == id) {
                routing.active = None;
            }
            routing.tainted = true;
        }
        self.asked.notify_waiters();
        tracing::debug!(backend = %self.backend, session = self.number, request = id, reason, "cancelling backend request");
        let _ = self.transport.send(jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({ "requestId": id, "reason": reason })),
        ));
    }

    /// `notifications/roots/list_changed`: the backend is to ask for roots again.
    pub(super) fn tell_roots_changed(&self) -> Result<(), BackendError> {
        self.transport.send(jsonrpc::notification(
            "notifications/roots/list_changed",
            None,
        ))
    }

    pub(super) fn respond(
        &self,
        id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError> {
        let message = match outcome {
            Ok(result) => jsonrpc::result_response(id, result),
            Err(error) => jsonrpc::error_response(Some(id), &error),
        };
        self.transport.send(message)
    }
}

/// Forgets a request id when dropped; a no-op once the answer arrived or the request was
/// cancelled.
pub(super) struct ForgetOnDrop<'a> {
    pub(super) core: &'a SessionCore,
    pub(super) id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.core.forget(self.id);
    }
}
