//! A call's side of a session: [`ActiveCall`], the request the pool's borrower started, with
//! the queue of what the session's reader routes to it. Dropping a call that was sent and not
//! answered cancels it on the backend.

use std::sync::Arc;

use serde_json::Value;

use super::queue::{CallEvent, CallEvents};
use super::shared::SessionCore;
use crate::backend::BackendError;
use crate::jsonrpc::JsonRpcError;

/// A request in flight on a session, and the stream of what the backend sends for it. Dropping
/// it before its answer arrived cancels it on the backend.
pub struct ActiveCall {
    pub(super) core: Arc<SessionCore>,
    pub(super) id: u64,
    pub(super) events: CallEvents,
    /// Sent and not answered yet.
    pub(super) open: bool,
    /// The request itself, while its prelude runs (not sent yet).
    pub(super) unsent: Option<(String, Option<Value>)>,
}

impl ActiveCall {
    pub fn backend_id(&self) -> u64 {
        self.id
    }

    /// The request waits for its prelude's questions to be answered.
    pub fn is_unsent(&self) -> bool {
        self.unsent.is_some()
    }

    /// Sends the request a prelude held back (nothing happens if it was sent).
    pub fn send(&mut self) -> Result<(), BackendError> {
        let Some((method, params)) = self.unsent.take() else {
            return Ok(());
        };
        self.core.send_registered(self.id, &method, params)?;
        self.open = true;
        Ok(())
    }

    pub async fn next_event(&mut self) -> CallEvent {
        let event =
            self.events.recv().await.unwrap_or_else(|| {
                CallEvent::Failed(BackendError::Closed("session closed".into()))
            });
        if matches!(event, CallEvent::Final(_) | CallEvent::Failed(_)) {
            self.open = false;
        }
        event
    }

    /// The session stopped delivering: no event is buffered and none can come.
    pub fn events_closed(&self) -> bool {
        self.events.is_finished()
    }

    /// An event that already arrived, without waiting.
    pub fn try_next_event(&mut self) -> Option<CallEvent> {
        let event = self.events.try_recv()?;
        if matches!(event, CallEvent::Final(_) | CallEvent::Failed(_)) {
            self.open = false;
        }
        Some(event)
    }

    /// Hands a server request back to the session, as if it had arrived outside any call
    /// (the backend's unsolicited policy applies).
    pub fn release(&self, id: Value, method: String, params: Option<Value>) {
        self.core.unsolicited(id, method, params);
    }

    /// Answers a server request of this call.
    pub fn respond(
        &self,
        server_request_id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError> {
        self.core.respond(server_request_id, outcome)
    }

    pub fn cancel(mut self, reason: &str) {
        if self.open {
            self.core.cancel(self.id, reason);
            self.open = false;
        }
    }
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        if self.open {
            self.core.cancel(self.id, "request cancelled by the client");
        } else {
            self.core.forget(self.id);
        }
    }
}
