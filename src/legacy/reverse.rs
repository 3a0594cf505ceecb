//! The reverse bridge: a 2025-11-25 client's session on a route whose backend speaks only
//! 2026-07-28. To the session's pipe it is one more backend session (it takes the client's
//! messages and answers with [`TransportEvent`]s); behind it, every request is a 2026-07-28
//! request of its own.
//!
//! - `initialize` is answered from the backend's `server/discover`; the capabilities the client
//!   declared travel in every request's `_meta`, with its `clientInfo` and the level of
//!   `logging/setLevel`.
//! - A round the backend opens (`input_required`) becomes the backend's questions put to the
//!   client on that request's stream, as 2025-11-25 server requests (`elicitation/create`,
//!   `sampling/createMessage`, `roots/list`), all at once; their answers, checked against what
//!   was asked (form content against its `requestedSchema`), go back as `inputResponses` with
//!   the backend's `requestState`, until the backend answers or `mrtr.max_rounds` is reached.
//!   The client sees only its questions and the final answer.
//! - An error answer to a question ends the request with an error: 2026-07-28 has no way to
//!   tell the backend. `notifications/cancelled`, or the session ending, drops the request,
//!   which cancels it on the backend.
//! - `ping` and `logging/setLevel` are answered here. One `subscriptions/listen` per session
//!   follows the list changes the backend announces and the resources subscribed to
//!   (`resources/subscribe`), its notifications passed on as 2025-11-25 ones.
//!
//! Here: the bridge, a session's state and the client's messages by kind; apart: `flow` (one
//! request through its rounds) and `follow` (the session's listen).
//!
//! Tasks: one per request in flight and the listen, on a tracker the bridge owns; all end when
//! the bridge shuts down (the session ended) or is dropped.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::modern::MODERN_VERSION;
use crate::backend::{BackendError, TransportEvent};
use crate::jsonrpc::JsonRpcError;
use crate::protocol::{
    BACKEND_PROTOCOL_VERSION, LEGACY_VERSIONS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL,
    META_PROTOCOL_VERSION, META_SERVER_INFO,
};
use crate::sync::LockRecovered;

mod flow;
mod follow;
mod upstream;

pub(crate) use self::upstream::{LocalServer, ModernUpstream};

const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// What bounds a session's flows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReverseLimits {
    /// Rounds one request may go through.
    pub max_rounds: u32,
    /// Longest the backend may take to answer one round, and the client its questions.
    pub request_timeout: Duration,
}

pub(crate) struct ReverseBridge {
    inner: Arc<Inner>,
}

struct Inner {
    upstream: ModernUpstream,
    /// To the session's reader, as a backend session's transport would.
    events: mpsc::Sender<TransportEvent>,
    limits: ReverseLimits,
    state: Mutex<SessionState>,
    next_question: AtomicU64,
    tasks: TaskTracker,
    /// Cancelled when the session ends: every flow and the listen stop.
    ended: CancellationToken,
}

#[derive(Default)]
struct SessionState {
    /// The client's `initialize`: what its requests declare to the backend.
    client_capabilities: Value,
    client_info: Option<Value>,
    log_level: Option<String>,
    /// Requests in flight by their id (as JSON text): cancelling the token drops the request.
    flows: HashMap<String, CancellationToken>,
    /// Questions put to the client, by the id they went with.
    questions: HashMap<String, oneshot::Sender<Value>>,
    /// Resources the client subscribed to, the list changes the backend announces, and the
    /// listen that follows them.
    subscribed: BTreeSet<String>,
    list_changes: Map<String, Value>,
    listen: Option<CancellationToken>,
}

impl ReverseBridge {
    pub(crate) fn new(
        upstream: ModernUpstream,
        events: mpsc::Sender<TransportEvent>,
        limits: ReverseLimits,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                upstream,
                events,
                limits,
                state: Mutex::new(SessionState::default()),
                next_question: AtomicU64::new(1),
                tasks: TaskTracker::new(),
                ended: CancellationToken::new(),
            }),
        }
    }

    /// Takes one message of the client's, as a backend session's transport would.
    pub(crate) fn send(&self, message: Value) -> Result<(), BackendError> {
        if self.inner.ended.is_cancelled() {
            return Err(BackendError::Closed("the session ended".into()));
        }
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            (Some(method), Some(id)) => return self.request(method.to_string(), id, message),
            (Some("notifications/cancelled"), None) => {
                if let Some(request) = message.pointer("/params/requestId") {
                    let flow = self
                        .inner
                        .state
                        .lock_recovered()
                        .flows
                        .remove(&request.to_string());
                    if let Some(flow) = flow {
                        flow.cancel();
                    }
                }
            }
            // `initialized`, roots changes (roots are asked for each round): nothing to do.
            (Some(_), None) => {}
            // The client's answer to one of the questions.
            (None, Some(id)) => {
                let waiting = self
                    .inner
                    .state
                    .lock_recovered()
                    .questions
                    .remove(&id.to_string());
                if let Some(waiting) = waiting {
                    let _ = waiting.send(message);
                }
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn request(&self, method: String, id: Value, message: Value) -> Result<(), BackendError> {
        let inner = &self.inner;
        let params = match message.get("params") {
            Some(Value::Object(params)) => params.clone(),
            _ => Map::new(),
        };
        match method.as_str() {
            "ping" => inner.answer(&id, json!({})),
            "logging/setLevel" => {
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .map(String::from);
                inner.state.lock_recovered().log_level = level;
                inner.answer(&id, json!({}));
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                {
                    let mut state = inner.state.lock_recovered();
                    if method == "resources/subscribe" {
                        state.subscribed.insert(uri.to_string());
                    } else {
                        state.subscribed.remove(uri);
                    }
                }
                inner.clone().follow_subscriptions();
                inner.answer(&id, json!({}));
            }
            "initialize" => {
                {
                    let mut state = inner.state.lock_recovered();
                    state.client_capabilities = modern_capabilities(params.get("capabilities"));
                    state.client_info = params.get("clientInfo").cloned();
                }
                let version = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .filter(|v| LEGACY_VERSIONS.contains(v))
                    .unwrap_or(BACKEND_PROTOCOL_VERSION)
                    .to_string();
                let inner = inner.clone();
                self.inner.tasks.spawn(async move {
                    let answer = inner.discover(&version).await;
                    let announces = answer
                        .as_ref()
                        .ok()
                        .map(|r| follow::list_changes(&r["capabilities"]));
                    inner.deliver(&id, answer).await;
                    // The list changes it announces reach the client as they would from a
                    // session of its own.
                    if let Some(announces) = announces.filter(|a| !a.is_empty()) {
                        inner.state.lock_recovered().list_changes = announces;
                        inner.clone().follow_subscriptions();
                    }
                });
            }
            _ => {
                let flow = inner.ended.child_token();
                inner
                    .state
                    .lock_recovered()
                    .flows
                    .insert(id.to_string(), flow.clone());
                let inner = inner.clone();
                self.inner.tasks.spawn(async move {
                    let answer = tokio::select! {
                        answer = inner.run(&method, &id, params) => answer,
                        () = flow.cancelled() => return,
                    };
                    inner.state.lock_recovered().flows.remove(&id.to_string());
                    inner.deliver(&id, answer).await;
                });
            }
        }
        Ok(())
    }

    /// The session ended: every request and the listen stop (dropping their exchanges cancels
    /// them on the backend).
    pub(crate) async fn shutdown(&self) {
        self.inner.ended.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

impl Drop for ReverseBridge {
    /// A session dropped without `shutdown` ends its requests and its listen all the same.
    fn drop(&mut self) {
        self.inner.ended.cancel();
    }
}

/// The outcome of one client request: a result, or an error object.
type Answer = Result<Value, JsonRpcError>;

impl Inner {
    /// Answers a request the bridge answers itself (`ping`, `logging/setLevel`, subscriptions).
    fn answer(self: &Arc<Self>, id: &Value, result: Value) {
        let (inner, id) = (self.clone(), id.clone());
        self.tasks
            .spawn(async move { inner.deliver(&id, Ok(result)).await });
    }

    async fn deliver(&self, id: &Value, answer: Answer) {
        let message = match answer {
            Ok(result) => crate::jsonrpc::result_response(id.clone(), result),
            Err(error) => crate::jsonrpc::error_response(Some(id.clone()), &error),
        };
        let _ = self.events.send(TransportEvent::Message(message)).await;
    }

    /// `initialize`, answered from the backend's `server/discover`.
    async fn discover(&self, version: &str) -> Answer {
        let params = self.modern_params(Map::new());
        let discovered = self
            .exchange("server/discover", params, None, &Value::Null)
            .await?;
        let server_info = discovered
            .pointer(&format!("/_meta/{}", META_SERVER_INFO.replace('/', "~1")))
            .cloned()
            .unwrap_or_else(crate::protocol::gateway_implementation);
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": discovered.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "serverInfo": server_info,
        });
        if let Some(instructions) = discovered.get("instructions") {
            result["instructions"] = instructions.clone();
        }
        Ok(result)
    }

    /// The client's params with the `_meta` a 2026-07-28 request carries.
    fn modern_params(&self, mut params: Map<String, Value>) -> Value {
        let state = self.state.lock_recovered();
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_PROTOCOL_VERSION.into(), json!(MODERN_VERSION));
            meta.insert(
                META_CLIENT_CAPABILITIES.into(),
                state.client_capabilities.clone(),
            );
            if let Some(info) = &state.client_info {
                meta.insert(META_CLIENT_INFO.into(), info.clone());
            }
            if let Some(level) = &state.log_level {
                meta.insert(META_LOG_LEVEL.into(), json!(level));
            }
        }
        Value::Object(params)
    }
}

/// 2025-11-25 client capabilities as 2026-07-28 declares them: `roots` without `listChanged`,
/// no `tasks`.
fn modern_capabilities(legacy: Option<&Value>) -> Value {
    let mut capabilities = match legacy {
        Some(Value::Object(capabilities)) => capabilities.clone(),
        _ => Map::new(),
    };
    capabilities.remove("tasks");
    if capabilities.contains_key("roots") {
        capabilities.insert("roots".into(), json!({}));
    }
    Value::Object(capabilities)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_change_era() {
        assert_eq!(
            modern_capabilities(Some(
                &json!({"roots": {"listChanged": true}, "tasks": {}, "elicitation": {"form": {}}})
            )),
            json!({"roots": {}, "elicitation": {"form": {}}})
        );
        assert_eq!(modern_capabilities(None), json!({}));
    }
}
