//! The session's reader task: takes what the transport reports, in arrival order, and hands
//! each message to the routing; when the transport ends, the session is marked dead.
//! One per session, aborted when the session is dropped or closed. It waits for the transport
//! only: routing never waits on a call (see `queue`), so the session keeps reading whatever its
//! calls do.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::shared::SessionCore;
use crate::backend::TransportEvent;
use crate::jsonrpc::Message;

pub(super) async fn read_loop(core: Arc<SessionCore>, mut inbound: mpsc::Receiver<TransportEvent>) {
    let reason = loop {
        match inbound.recv().await {
            Some(TransportEvent::Message(value)) => dispatch(&core, value),
            Some(TransportEvent::Answer { id, result }) => core.answered(id, Ok(result)),
            Some(TransportEvent::RequestFailed { id, reason }) => core.failed_request(&id, reason),
            Some(TransportEvent::AnswerUndelivered { id, reason }) => {
                core.answer_undelivered(&id, reason)
            }
            Some(TransportEvent::ForRequest { message, .. }) => dispatch(&core, message),
            Some(TransportEvent::Closed(reason)) => break reason,
            None => break "transport stopped".to_string(),
        }
    };
    core.mark_dead(reason);
}

/// One JSON-RPC message from the backend, by kind: an answer, a request, a notification.
fn dispatch(core: &SessionCore, value: Value) {
    let message = match Message::classify(value) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(backend = %core.backend, error = %e, "backend sent an invalid JSON-RPC message; ignored");
            return;
        }
    };
    match message {
        Message::Response { id, outcome } => {
            let outcome = outcome.map(|result| crate::jsonrpc::raw(&result));
            core.answered(id, outcome);
        }
        Message::Request { id, method, params } => {
            core.server_request(id, method, params);
        }
        Message::Notification { method, params } => core.notification(method, params),
    }
}
