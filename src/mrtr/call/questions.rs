//! The backend's questions to the client, as the driver handles them: a server request is
//! gated against the current request's capabilities, answered from its preanswers or surfaced
//! as an input of the round, and each answer is delivered once; a -32042's URLs become URL-mode
//! inputs; questions of a call that ends unseen are answered as abandoned.
//!
//! A question asked before the call (its session's prelude) holds the call back: the call is
//! sent once they are answered, after a `ping` barrier when roots were among the answers.

use serde_json::{json, Value};
use tokio::time::Instant;

use super::{BackendCall, CallDriver, Ending, Step};
use crate::backend::session::answer_locally;
use crate::error::GatewayError;
use crate::jsonrpc::{self, JsonRpcError};
use crate::mrtr::clock::Clock;
use crate::mrtr::inputs::{assign_key, gate, validate_answer, Gate, InputKind, PendingInput};

/// Merges `from` into `into`, objects member by member (the capabilities refused so far).
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert_with(|| json!({})), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

impl<C: BackendCall, K: Clock> CallDriver<C, K> {
    /// Gives the backend a client's answer to one of its questions; false when it could not be
    /// written (the session is gone, or the answer is larger than the backend takes).
    pub(super) fn deliver(&mut self, input: &PendingInput, result: Value) -> bool {
        if let Err(e) = self.call.respond(input.backend_id.clone(), Ok(result)) {
            tracing::debug!(error = %e, "delivering an answer failed");
            return false;
        }
        if input.kind == InputKind::Roots {
            self.call.note_client_roots();
            if self.call.is_unsent() {
                self.prelude_gave_roots = true;
                self.roots_to_settle = true;
            }
        }
        true
    }

    /// Sends the call once its prelude is over: every question the backend asked before it is
    /// answered (or there were none left to ask). Roots given meanwhile must apply first.
    pub(super) async fn send_after_prelude(&mut self) -> Option<Step> {
        // The prelude's questions were queued before the driver ran.
        if let Some(wait) = self.prelude_waits() {
            return wait;
        }
        if self.prelude_asked_roots && !self.prelude_gave_roots {
            // The backend withdrew its roots question before this client's answer reached it
            // (the TypeScript SDK gives up after 60 s): it still holds the roots it had.
            return Some(Step::End(Ending::Failed(GatewayError::Busy(
                "the backend withdrew its roots question before the answer reached it; send the request again"
                    .into(),
            ))));
        }
        if std::mem::take(&mut self.roots_to_settle) {
            self.call.roots_barrier().await;
            // What the backend asked meanwhile comes before the call too.
            if let Some(wait) = self.prelude_waits() {
                return wait;
            }
        }
        match self.call.send() {
            Ok(()) => None,
            Err(e) => Some(Step::End(Ending::Failed(e.into()))),
        }
    }

    /// Handles what the backend has queued; `Some` while the call cannot be sent yet: with the
    /// step to show, or with `None` when questions wait for their answers.
    fn prelude_waits(&mut self) -> Option<Option<Step>> {
        if let Some(step) = self.take_queued_events() {
            return Some(Some(step));
        }
        (!self.outstanding.is_empty() || !self.backlog.is_empty()).then_some(None)
    }

    /// Answers every outstanding input as abandoned: elicitations are cancelled, other kinds
    /// get an error. The call itself is cancelled when the driver is dropped.
    pub fn abandon(&mut self, reason: &str) {
        let abandoned = std::mem::take(self.outstanding_mut());
        for input in abandoned {
            if input.deferred {
                // Not this call's question: the session's policy decides, as when it arrived.
                let (method, params) = input.original;
                self.call.release(input.backend_id, method, params);
                continue;
            }
            let outcome = match input.kind {
                InputKind::Elicitation => Ok(json!({ "action": "cancel" })),
                _ => Err(JsonRpcError::new(
                    jsonrpc::codes::INTERNAL_ERROR,
                    format!("The client did not answer: {reason}"),
                )),
            };
            let _ = self.call.respond(input.backend_id, outcome);
        }
    }

    pub(super) fn on_server_request(
        &mut self,
        id: Value,
        method: String,
        params: Option<Value>,
        deferred: bool,
    ) {
        if !self.interruptible {
            // This method cannot carry input_required, so the request is not its question:
            // the session's unsolicited policy answers or keeps it.
            self.call.release(id, method, params);
            return;
        }
        match gate(&method, params.as_ref(), &self.scope.client_capabilities) {
            None => {
                let _ = self.call.respond(id, answer_locally(&method));
            }
            Some(Gate::Refuse { error, required }) => {
                tracing::debug!(%method, "server request needs a capability the client did not declare");
                let _ = self.call.respond(id, Err(error));
                merge(self.refused.get_or_insert_with(|| json!({})), required);
            }
            Some(Gate::Surface { kind, request }) => {
                if kind == InputKind::Roots && self.call.is_unsent() {
                    self.prelude_asked_roots = true;
                }
                let key = assign_key(
                    params.as_ref(),
                    kind,
                    &self.keys_used,
                    &mut self.key_counter,
                );
                self.keys_used.insert(key.clone());
                let input = PendingInput {
                    key,
                    backend_id: id,
                    kind,
                    request,
                    original: (method, params),
                    deferred,
                };
                // A preanswer that does not hold, or cannot be written, leaves the question to
                // the client.
                if let Some(answer) = self.scope.preanswers.remove(&input.key) {
                    if let Ok(result) = validate_answer(&input, &answer) {
                        if self.deliver(&input, result) {
                            return;
                        }
                    }
                }
                self.outstanding_mut().push(input);
                if self.settle_deadline.is_none() {
                    self.start_gathering(Instant::now());
                }
            }
        }
    }

    /// Turns a 2025-11-25 URLElicitationRequiredError into URL-mode input requests.
    pub(super) fn url_required(&mut self, error: JsonRpcError) -> Step {
        let elicitations = error
            .data
            .as_ref()
            .and_then(|d| d.get("elicitations"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut inputs = Vec::new();
        for elicitation in elicitations {
            let Value::Object(mut params) = elicitation else {
                continue;
            };
            params.insert("mode".into(), json!("url"));
            let params = Value::Object(params);
            match gate(
                "elicitation/create",
                Some(&params),
                &self.scope.client_capabilities,
            ) {
                Some(Gate::Surface { kind, request }) => {
                    let key =
                        assign_key(Some(&params), kind, &self.keys_used, &mut self.key_counter);
                    self.keys_used.insert(key.clone());
                    inputs.push(PendingInput {
                        key,
                        backend_id: Value::Null,
                        kind,
                        request,
                        original: ("elicitation/create".into(), Some(params)),
                        deferred: false,
                    });
                }
                Some(Gate::Refuse { required, .. }) => {
                    return Step::End(Ending::Failed(GatewayError::MissingCapability { required }))
                }
                None => {}
            }
        }
        if inputs.is_empty() {
            return Step::End(Ending::Final(Err(error)));
        }
        Step::End(Ending::UrlRequired { inputs, error })
    }
}
