//! Where what the backend sends goes. An answer goes to the request it answers; a server
//! request or a call's notification goes to the call active on the session (the pool lends a
//! session to one caller at a time, so "active" is unambiguous: on stdio there is no other way
//! to know which call a server request belongs to); a list change or resource update goes to the
//! principal's feed. `ping` is answered here; a server request with no call to belong to
//! follows the backend's unsolicited policy (kept for the next call, or answered with
//! [`answer_locally`]).

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::queue::CallEvent;
use super::shared::SessionCore;
use crate::backend::changes::Change;
use crate::backend::BackendError;
use crate::config::UnsolicitedPolicy;
use crate::jsonrpc::{codes, JsonRpcError};

/// Server requests kept for the next call of an idle session, at most.
const MAX_DEFERRED: usize = 32;

/// The answer the gateway gives itself to a server request no client can see.
pub(crate) fn answer_locally(method: &str) -> Result<Value, JsonRpcError> {
    match method {
        "ping" => Ok(json!({})),
        "roots/list" => Ok(json!({ "roots": [] })),
        // Never an invented accept: the user did not see the question.
        "elicitation/create" => Ok(json!({ "action": "cancel" })),
        "sampling/createMessage" => Err(JsonRpcError::new(
            -1,
            "Sampling is not available for this request",
        )),
        other => Err(JsonRpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

impl SessionCore {
    /// The backend answered one of the gateway's requests.
    pub(super) fn answered(&self, id: Value, outcome: Result<Box<RawValue>, JsonRpcError>) {
        let Some(num) = id.as_u64() else {
            tracing::debug!(backend = %self.backend, %id, "answer to an unknown request id; ignored");
            return;
        };
        let sink = {
            let mut routing = self.routing();
            let sink = routing.pending.remove(&num);
            if routing.active.as_ref().is_some_and(|(a, _)| *a == num) {
                routing.active = None;
            }
            sink
        };
        if let Some(sink) = sink {
            let _ = sink.deliver(CallEvent::Final(outcome));
        }
    }

    /// A request from the backend: answered here (`ping`, static roots), given to the active
    /// call, or handled as unsolicited.
    pub(super) fn server_request(&self, id: Value, method: String, params: Option<Value>) {
        if method == "ping" {
            let _ = self.respond(id, Ok(json!({})));
            return;
        }
        if method == "roots/list" && self.unsolicited == UnsolicitedPolicy::Static {
            // The operator's roots, in and outside calls: no client is asked.
            let _ = self.respond(id, Ok(json!({ "roots": self.static_roots })));
            self.roots_question_handled();
            return;
        }
        let active = self.routing().active.as_ref().map(|(_, s)| s.clone());
        match active {
            Some(sink) => {
                let event = CallEvent::ServerRequest {
                    id: id.clone(),
                    method: method.clone(),
                    params,
                    deferred: false,
                };
                if sink.deliver(event).is_err() {
                    let _ = self.respond(id, answer_locally(&method));
                }
            }
            None => self.unsolicited(id, method, params),
        }
    }

    /// A notification from the backend: a call's (progress, log, a withdrawn question, a
    /// completed elicitation) goes to the active call; a list change or resource update to the
    /// principal's feed; anything else is not relayed.
    pub(super) fn notification(&self, method: String, params: Option<Value>) {
        let params = params.unwrap_or_else(|| json!({}));
        let event = match method.as_str() {
            "notifications/progress" => CallEvent::Progress(params),
            "notifications/message" => CallEvent::Log(params),
            "notifications/cancelled" => match params.get("requestId") {
                Some(id) => CallEvent::ServerRequestCancelled { id: id.clone() },
                None => return,
            },
            "notifications/elicitation/complete" => CallEvent::ElicitationComplete(params),
            other => {
                // Not a call's: the principal's listeners hear it.
                if let (Some(change), Some(feed)) =
                    (Change::from_notification(other, &params), &self.changes)
                {
                    feed.publish(change);
                    return;
                }
                tracing::debug!(backend = %self.backend, method = other, "backend notification not relayed");
                return;
            }
        };
        let (active, roots_withdrawn) = {
            let mut routing = self.routing();
            let waiting = routing.roots_question_waiting();
            if let CallEvent::ServerRequestCancelled { id } = &event {
                routing.deferred.retain(|(deferred, _, _)| deferred != id);
            }
            let withdrawn = waiting && !routing.roots_question_waiting();
            (routing.active.as_ref().map(|(_, s)| s.clone()), withdrawn)
        };
        if roots_withdrawn && self.reasks_roots {
            // A backend gives up on a question nobody answered (the TypeScript SDK after
            // 60 s): have it ask again, so the next call's client is asked first.
            tracing::debug!(backend = %self.backend, session = self.number, "backend withdrew its roots question; asking it to ask again");
            let _ = self.tell_roots_changed();
        }
        if let Some(sink) = active {
            let _ = sink.deliver(event);
        }
    }

    /// A server request with no call to belong to, e.g. `roots/list` right after `initialized`.
    pub(super) fn unsolicited(&self, id: Value, method: String, params: Option<Value>) {
        let surfaceable = matches!(
            method.as_str(),
            "elicitation/create" | "sampling/createMessage" | "roots/list"
        );
        tracing::debug!(backend = %self.backend, session = self.number, %method, policy = ?self.unsolicited, "server request outside any call");
        let outcome = match self.unsolicited {
            UnsolicitedPolicy::Defer if surfaceable => {
                let mut routing = self.routing();
                if routing.deferred.len() < MAX_DEFERRED && !routing.tainted {
                    if method == "roots/list" {
                        routing.roots_asked = true;
                        routing.note_roots_question(&self.init_roots);
                    }
                    routing.deferred.push((id, method, params));
                    drop(routing);
                    self.asked.notify_waiters();
                    return;
                }
                drop(routing);
                answer_locally(&method)
            }
            UnsolicitedPolicy::Static if method == "roots/list" => {
                Ok(json!({ "roots": self.static_roots }))
            }
            UnsolicitedPolicy::Error => Err(JsonRpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("{method} is not available outside a client request"),
            )),
            _ => answer_locally(&method),
        };
        let _ = self.respond(id, outcome);
        if method == "roots/list" {
            self.roots_question_handled();
        }
    }

    /// A `roots/list` outside any call was answered here.
    fn roots_question_handled(&self) {
        self.routing().note_roots_question(&self.init_roots);
        self.asked.notify_waiters();
    }

    /// The transport could not deliver or get answered one of the gateway's requests.
    pub(super) fn failed_request(&self, id: &Value, reason: String) {
        let Some(num) = id.as_u64() else { return };
        let sink = self.routing().pending.remove(&num);
        if let Some(sink) = sink {
            let _ = sink.deliver(CallEvent::Failed(BackendError::Connect(reason)));
        }
    }

    /// The answer to the backend's request `answered` was not delivered. The active call waits
    /// on it (a session serves one call at a time): it fails now and is withdrawn on the
    /// backend, rather than wait for the backend's own timeout with nothing to show.
    pub(super) fn answer_undelivered(&self, answered: &Value, reason: String) {
        let active = self
            .routing()
            .active
            .as_ref()
            .map(|(id, sink)| (*id, sink.clone()));
        let Some((id, sink)) = active else {
            tracing::debug!(backend = %self.backend, session = self.number, request = %answered, "undelivered answer belonged to no call");
            return;
        };
        self.cancel(id, "the gateway could not deliver an answer");
        let _ = sink.deliver(CallEvent::Failed(BackendError::Connect(format!(
            "the answer to the backend's request {answered} could not be delivered: {reason}"
        ))));
    }

    /// The transport ended: every request waiting here fails, and nothing is routed again.
    pub(super) fn mark_dead(&self, reason: String) {
        let sinks: Vec<_> = {
            let mut routing = self.routing();
            if routing.dead.is_none() {
                routing.dead = Some(reason.clone());
            }
            routing.active = None;
            routing.pending.drain().map(|(_, s)| s).collect()
        };
        self.asked.notify_waiters();
        tracing::debug!(backend = %self.backend, session = self.number, %reason, "backend session closed");
        for sink in sinks {
            let _ = sink.deliver(CallEvent::Failed(BackendError::Closed(reason.clone())));
        }
    }
}
