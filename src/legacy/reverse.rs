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
//! Tasks: one per request in flight and the listen, on a tracker the bridge owns; all end when
//! the bridge shuts down (the session ended).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::identity::SessionIdentity;
use crate::backend::modern::{ModernBackend, ModernEvent, ModernRequest, MODERN_VERSION};
use crate::backend::{BackendError, TransportEvent};
use crate::jsonrpc::{codes, JsonRpcError};
use crate::mrtr::inputs::{validate_answer, InputKind, PendingInput};
use crate::protocol::{
    BACKEND_PROTOCOL_VERSION, LEGACY_VERSIONS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL,
    META_PROTOCOL_VERSION, META_SERVER_INFO,
};
use crate::sync::LockRecovered;

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
    backend: Arc<ModernBackend>,
    identity: Arc<SessionIdentity>,
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
        backend: Arc<ModernBackend>,
        identity: Arc<SessionIdentity>,
        events: mpsc::Sender<TransportEvent>,
        limits: ReverseLimits,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                backend,
                identity,
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
                        .map(|r| list_changes(&r["capabilities"]));
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

/// The outcome of one client request: a result, or an error object.
type Answer = Result<Value, JsonRpcError>;

impl Inner {
    fn answer(&self, id: &Value, result: Value) {
        let _ = self
            .events
            .try_send(TransportEvent::Message(crate::jsonrpc::result_response(
                id.clone(),
                result,
            )));
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
            .unwrap_or_else(
                || json!({"name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION")}),
            );
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

    /// One request through its rounds, to the backend's final answer.
    async fn run(&self, method: &str, id: &Value, params: Map<String, Value>) -> Answer {
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            _ => None,
        }
        .and_then(Value::as_str)
        .map(String::from);
        let base = self.modern_params(params);
        let mut continuation: Option<(Map<String, Value>, Option<Value>)> = None;
        for round in 0..=self.limits.max_rounds {
            let mut params = base.clone();
            if let (Some((answers, state)), Value::Object(params)) =
                (continuation.take(), &mut params)
            {
                params.insert("inputResponses".into(), Value::Object(answers));
                if let Some(state) = state {
                    params.insert("requestState".into(), state);
                }
            }
            let mut result = self.exchange(method, params, name.clone(), id).await?;
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                if let Value::Object(result) = &mut result {
                    result.remove("resultType");
                }
                return Ok(result);
            }
            if round == self.limits.max_rounds {
                break;
            }
            let state = result.get("requestState").cloned();
            let answers = match result.get("inputRequests") {
                Some(Value::Object(requests)) => self.ask(id, requests).await?,
                // A round without questions: the backend asks to be called again.
                _ => Map::new(),
            };
            continuation = Some((answers, state));
        }
        Err(JsonRpcError::new(
            codes::INTERNAL_ERROR,
            format!(
                "the backend asked for input more than {} times",
                self.limits.max_rounds
            ),
        ))
    }

    /// Sends one request and reads it to its answer; its notifications go to the client's
    /// request (`client_id`) as they come.
    async fn exchange(
        &self,
        method: &str,
        params: Value,
        name: Option<String>,
        client_id: &Value,
    ) -> Answer {
        let request = ModernRequest {
            method: method.to_string(),
            params,
            name,
            headers: Vec::new(),
        };
        let timeout = self.limits.request_timeout;
        let run = async {
            let mut exchange = self.backend.send(&self.identity, &request).await?;
            loop {
                match exchange.next().await {
                    Some(Ok(ModernEvent::Notify(notice))) => {
                        let _ = self
                            .events
                            .send(TransportEvent::ForRequest {
                                request: client_id.clone(),
                                message: notice,
                            })
                            .await;
                    }
                    Some(Ok(ModernEvent::Result(result))) => {
                        return Ok(Ok(serde_json::from_str(result.get()).unwrap_or(Value::Null)))
                    }
                    Some(Ok(ModernEvent::Error { error })) => {
                        return Ok(Err(legacy_error(method, error)))
                    }
                    Some(Err(error)) => return Err(error),
                    None => return Err(BackendError::Closed("no answer".into())),
                }
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                if matches!(error, BackendError::Connect(_) | BackendError::Closed(_)) {
                    self.backend.forget_era();
                }
                Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("Backend unavailable: {error}"),
                ))
            }
            Err(_) => Err(JsonRpcError::new(
                codes::INTERNAL_ERROR,
                format!("the backend did not answer within {timeout:?}"),
            )),
        }
    }

    /// Puts a round's questions to the client, all at once, on its request's stream; their
    /// answers, checked, keyed as the backend asked.
    async fn ask(
        &self,
        client_id: &Value,
        requests: &Map<String, Value>,
    ) -> Result<Map<String, Value>, JsonRpcError> {
        let mut asked = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(kind) = InputKind::from_method(method) else {
                return Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("the backend asked for {method:?}, which is no input request"),
                ));
            };
            let question_id = json!(format!(
                "mrtr-q-{}",
                self.next_question.fetch_add(1, Ordering::Relaxed)
            ));
            let (answered, answer) = oneshot::channel();
            self.state
                .lock_recovered()
                .questions
                .insert(question_id.to_string(), answered);
            let params = request.get("params").cloned();
            let mut question = crate::jsonrpc::request(question_id.clone(), method, params.clone());
            if question.get("params").is_none() {
                question["params"] = json!({});
            }
            let _ = self
                .events
                .send(TransportEvent::ForRequest {
                    request: client_id.clone(),
                    message: question,
                })
                .await;
            let input = PendingInput {
                key: key.clone(),
                backend_id: Value::Null,
                kind,
                request: request.clone(),
                original: (method.to_string(), params),
                deferred: false,
            };
            asked.push((question_id, input, answer));
        }
        let timeout = self.limits.request_timeout;
        let waits = asked
            .into_iter()
            .map(|(question_id, input, answer)| async move {
                let answer = tokio::time::timeout(timeout, answer).await;
                (question_id, input, answer)
            });
        let mut answers = Map::new();
        for (question_id, input, answer) in join_all(waits).await {
            let message = match answer {
                Ok(Ok(message)) => message,
                _ => {
                    self.state
                        .lock_recovered()
                        .questions
                        .remove(&question_id.to_string());
                    return Err(JsonRpcError::new(
                        codes::INTERNAL_ERROR,
                        format!(
                            "the client did not answer {} within {timeout:?}",
                            input.kind.as_str()
                        ),
                    ));
                }
            };
            if let Some(error) = message.get("error") {
                let error = JsonRpcError::from_value(error);
                return Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "the client could not answer {}: {}",
                        input.original.0, error.message
                    ),
                ));
            }
            let result = message.get("result").cloned().unwrap_or(Value::Null);
            let checked = validate_answer(&input, &result).map_err(|problem| {
                JsonRpcError::new(
                    codes::INVALID_PARAMS,
                    format!("the answer to {} {problem}", input.original.0),
                )
            })?;
            answers.insert(input.key, checked);
        }
        Ok(answers)
    }

    /// Keeps one listen open for the resources subscribed to and the list changes the backend
    /// announces (nothing to follow: no listen).
    fn follow_subscriptions(self: Arc<Self>) {
        let (filter, previous, listen) = {
            let mut state = self.state.lock_recovered();
            let mut filter = state.list_changes.clone();
            if !state.subscribed.is_empty() {
                filter.insert("resourceSubscriptions".into(), json!(state.subscribed));
            }
            let listen = (!filter.is_empty()).then(|| self.ended.child_token());
            let previous = std::mem::replace(&mut state.listen, listen.clone());
            (filter, previous, listen)
        };
        if let Some(previous) = previous {
            previous.cancel();
        }
        let Some(listen) = listen else {
            return;
        };
        let inner = self.clone();
        self.tasks.spawn(async move {
            let params = inner.modern_params(Map::from_iter([(
                "notifications".to_string(),
                Value::Object(filter),
            )]));
            let request = ModernRequest {
                method: "subscriptions/listen".into(),
                params,
                name: None,
                headers: Vec::new(),
            };
            let follow = async {
                let Ok(mut exchange) = inner.backend.send(&inner.identity, &request).await else {
                    return;
                };
                while let Some(Ok(ModernEvent::Notify(mut notice))) = exchange.next().await {
                    let method = notice.get("method").and_then(Value::as_str);
                    if !method.is_some_and(|m| FOLLOWED.contains(&m)) {
                        continue;
                    }
                    // The subscription is the gateway's; the client knows none.
                    if let Some(params) = notice.get_mut("params").and_then(Value::as_object_mut) {
                        params.remove("_meta");
                    }
                    let _ = inner.events.send(TransportEvent::Message(notice)).await;
                }
            };
            tokio::select! {
                () = follow => {}
                () = listen.cancelled() => {}
            }
        });
    }
}

/// What a session's listen passes on to its client.
const FOLLOWED: [&str; 4] = [
    "notifications/resources/updated",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// The list changes a backend's capabilities announce, as a listen's filter asks for them.
fn list_changes(capabilities: &Value) -> Map<String, Value> {
    [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ]
    .into_iter()
    .filter(|(kind, _)| capabilities[kind]["listChanged"] == json!(true))
    .map(|(_, flag)| (flag.to_string(), json!(true)))
    .collect()
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

/// A 2026-07-28 error as a 2025-11-25 client knows it: a missing resource is `-32002`.
fn legacy_error(method: &str, error: JsonRpcError) -> JsonRpcError {
    if method == "resources/read"
        && error.code == codes::INVALID_PARAMS
        && error.data.as_ref().and_then(|d| d.get("uri")).is_some()
    {
        return JsonRpcError {
            code: codes::LEGACY_RESOURCE_NOT_FOUND,
            ..error
        };
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_errors_change_era() {
        assert_eq!(
            modern_capabilities(Some(
                &json!({"roots": {"listChanged": true}, "tasks": {}, "elicitation": {"form": {}}})
            )),
            json!({"roots": {}, "elicitation": {"form": {}}})
        );
        assert_eq!(modern_capabilities(None), json!({}));
        let missing = JsonRpcError::new(codes::INVALID_PARAMS, "Resource not found")
            .with_data(json!({"uri": "test://x"}));
        assert_eq!(legacy_error("resources/read", missing.clone()).code, -32002);
        assert_eq!(
            legacy_error("tools/call", missing).code,
            codes::INVALID_PARAMS
        );
    }
}
