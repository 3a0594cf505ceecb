//! What the driver needs from one backend call and the session it runs on ([`BackendCall`]),
//! and the production one: a call on a leased session ([`LeasedCall`]). The unit tests drive
//! the same driver against a scripted double.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use crate::backend::pool::Lease;
use crate::backend::session::{ActiveCall, CallEvent};
use crate::backend::{BackendError, MessageLimit};
use crate::jsonrpc::JsonRpcError;

/// What the driver needs from one backend call and the session it runs on.
pub trait BackendCall: Send {
    /// The call waits for its prelude's questions to be answered.
    fn is_unsent(&self) -> bool;
    /// Sends the call a prelude held back (nothing happens if it was sent).
    fn send(&mut self) -> Result<(), BackendError>;
    /// The next event for the call; a closed session yields `CallEvent::Failed`. Must be
    /// cancel-safe: the driver races it against its timers.
    fn next_event(&mut self) -> impl Future<Output = CallEvent> + Send;
    /// An event that already arrived, without waiting.
    fn try_next_event(&mut self) -> Option<CallEvent>;
    /// No event is buffered and none can come.
    fn events_closed(&self) -> bool;
    /// Answers a server request of this call.
    fn respond(
        &self,
        server_request_id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError>;
    /// Hands a server request back to the session's unsolicited policy.
    fn release(&self, id: Value, method: String, params: Option<Value>);
    fn session_alive(&self) -> bool;
    /// The largest message the call's backend takes, if it has a limit: what an answer is
    /// checked against before it is accepted.
    fn message_limit(&self) -> Option<MessageLimit>;
    /// A client's roots reached the backend on this session.
    fn note_client_roots(&self);
    /// Returns once roots given before apply to what is sent next.
    fn roots_barrier(&self) -> impl Future<Output = ()> + Send;
    /// Sets the backend's log level, when it logs and the level differs from the session's.
    fn apply_log_level(
        &self,
        level: Option<&str>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// A call on a leased session: the production [`BackendCall`].
pub struct LeasedCall {
    // Declared before `lease`, so dropped first: an unfinished call is cancelled before its
    // session is returned to the pool (a session lent again must not carry the old call).
    call: ActiveCall,
    lease: Lease,
}

impl LeasedCall {
    pub fn new(call: ActiveCall, lease: Lease) -> Self {
        Self { call, lease }
    }
}

impl BackendCall for LeasedCall {
    #[inline]
    fn is_unsent(&self) -> bool {
        self.call.is_unsent()
    }

    #[inline]
    fn send(&mut self) -> Result<(), BackendError> {
        self.call.send()
    }

    #[inline]
    async fn next_event(&mut self) -> CallEvent {
        self.call.next_event().await
    }

    #[inline]
    fn try_next_event(&mut self) -> Option<CallEvent> {
        self.call.try_next_event()
    }

    #[inline]
    fn events_closed(&self) -> bool {
        self.call.events_closed()
    }

    #[inline]
    fn respond(
        &self,
        server_request_id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError> {
        self.call.respond(server_request_id, outcome)
    }

    #[inline]
    fn release(&self, id: Value, method: String, params: Option<Value>) {
        self.call.release(id, method, params);
    }

    fn session_alive(&self) -> bool {
        self.lease.is_alive()
    }

    fn message_limit(&self) -> Option<MessageLimit> {
        self.lease.message_limit()
    }

    fn note_client_roots(&self) {
        self.lease.note_client_roots();
    }

    async fn roots_barrier(&self) {
        self.lease.roots_barrier().await;
    }

    async fn apply_log_level(
        &self,
        level: Option<&str>,
        timeout: Duration,
    ) -> Result<(), BackendError> {
        self.lease.apply_log_level(level, timeout).await
    }
}
