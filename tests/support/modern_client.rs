//! The 2026-07-28 test client for the gateway's front side.
//!
//! This module owns four things:
//! - [`connect_modern`]: an `rmcp` client over Streamable HTTP pinned to protocol
//!   `2026-07-28`. It starts with `server/discover` and never falls back to the
//!   legacy `initialize` handshake, so a server that does not speak 2026-07-28
//!   makes the connect fail.
//! - [`TestClientHandler`]: a scripted client that answers MRTR input requests
//!   (elicitation, sampling, roots), records each one it is asked, and declares
//!   only the client capabilities its builder enables.
//! - [`connect_legacy`]: the same client in 2025-11-25 mode (`initialize`, a session), for
//!   the gateway's legacy path.
//! - [`post_raw`] and friends: hand-built JSON-RPC POSTs for wire-level checks
//!   that `rmcp` hides, such as HTTP status codes, headers and the exact
//!   `resultType` on the wire.
//!
//! `rmcp`'s `RunningService::call_tool`, `get_prompt` and `read_resource` drive
//! MRTR rounds themselves through the handler. Use `call_tool_once` (and the
//! other `*_once` methods) to see an `input_required` result without retrying.
//!
//! ```ignore
//! let handler = TestClientHandler::builder()
//!     .elicitation_form()
//!     .elicit_accept(json!({"name": "Ferris"}))
//!     .build();
//! let client = connect_modern(&url, handler.clone()).await?;
//! let result = client.call_tool(CallToolRequestParams::new("greet")).await?;
//! assert_eq!(handler.recorded().len(), 1);
//! client.cancel().await?;
//! ```

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]
// Sampling and roots are deprecated in 2026-07-28 but remain MRTR input kinds
// the gateway has to bridge, so the client must still answer them.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rmcp::{
    model::{
        ClientCapabilities, ClientConfig, ClientRequest, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction,
        ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
        ListRootsResult, ProtocolVersion, RequestMetaObject, Root, RootsCapabilities,
        SamplingCapability, SamplingMessage, ServerResult, UrlElicitationCapability,
    },
    service::{
        ClientCacheConfig, ClientInitializeError, PeerRequestOptions, RequestContext,
        RunningService,
    },
    transport::{
        streamable_http_client::StreamableHttpClientTransportConfig, StreamableHttpClientTransport,
    },
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError,
};
use serde_json::{json, Value};

/// The only protocol revision the modern client speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// A running 2026-07-28 client.
pub type ModernClient<H = TestClientHandler> = RunningService<RoleClient, H>;

/// The lifecycle used by [`connect_modern`]: probe with `server/discover` at
/// 2026-07-28 only.
///
/// `Discover` mode never sends `initialize`. A legacy answer to the probe, a
/// discover result without 2026-07-28, or a transport failure all end the
/// connect with an error. (`Auto` is the mode that falls back.)
pub fn pinned_lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// Connects `handler` as a 2025-11-25 client: the `initialize` handshake and a session, as a
/// legacy client at the gateway's endpoint does. The handler answers the backend's elicitation,
/// sampling and roots requests itself.
pub async fn connect_legacy<H: ClientHandler>(
    url: &str,
    handler: H,
) -> Result<ModernClient<H>, ClientInitializeError> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    handler
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
}

/// Connects `handler` to the Streamable HTTP endpoint at `url`, pinned to
/// 2026-07-28.
///
/// Every later request carries `_meta` with the protocol version, the
/// handler's `clientInfo` and its `clientCapabilities`. The client's response
/// cache is off, so every call reaches the server and an error is never
/// masked by a stale cached result.
pub async fn connect_modern<H: ClientHandler>(
    url: &str,
    handler: H,
) -> Result<ModernClient<H>, ClientInitializeError> {
    connect_modern_with_config(StreamableHttpClientTransportConfig::with_uri(url), handler).await
}

/// Like [`connect_modern`], with a caller-built transport config (custom
/// headers, auth header, limits).
pub async fn connect_modern_with_config<H: ClientHandler>(
    config: StreamableHttpClientTransportConfig,
    handler: H,
) -> Result<ModernClient<H>, ClientInitializeError> {
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = handler
        .serve_with_lifecycle(transport, pinned_lifecycle())
        .await?;
    client
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(client)
}

/// [`connect_modern`] to `url`, bounded to 20 s, panicking when the client cannot connect.
pub async fn connect_in_time<H: ClientHandler>(url: &str, handler: H) -> ModernClient<H> {
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        connect_modern(url, handler),
    )
    .await
    .expect("connect in time")
    .expect("the pinned 2026-07-28 client connects")
}

/// Sends one request with extra request `_meta` merged over the connection's
/// defaults, and returns the raw `ServerResult` without driving MRTR.
///
/// Keys in `meta` win, so this can send different `clientCapabilities` (or a
/// different protocol version) than the ones the connection declares.
pub async fn send_with_meta<H: ClientHandler>(
    client: &ModernClient<H>,
    request: ClientRequest,
    meta: RequestMetaObject,
) -> Result<ServerResult, ServiceError> {
    client
        .send_request_with_option(request, PeerRequestOptions::no_options().with_meta(meta))
        .await?
        .await_response()
        .await
}

/// Request `_meta` that declares `capabilities` in place of the connection's.
pub fn capabilities_meta(capabilities: ClientCapabilities) -> RequestMetaObject {
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(capabilities);
    meta
}

/// The `ErrorData` of a failed request: the server's JSON-RPC error (code,
/// message and data as sent), or an error the local handler returned while
/// fulfilling an MRTR input request, which `rmcp` reports the same way.
pub fn jsonrpc_error(error: &ServiceError) -> Option<&ErrorData> {
    match error {
        ServiceError::McpError(data) => Some(data),
        _ => None,
    }
}

/// One input request the handler was asked to fulfil.
#[derive(Debug, Clone, PartialEq)]
pub enum InputRecord {
    Elicitation {
        /// The `inputRequests` key the server chose.
        key: String,
        params: ElicitRequestParams,
    },
    Sampling {
        key: String,
        params: CreateMessageRequestParams,
    },
    Roots {
        key: String,
    },
}

impl InputRecord {
    /// The `inputRequests` key the server chose for this request.
    pub fn key(&self) -> &str {
        match self {
            Self::Elicitation { key, .. } | Self::Sampling { key, .. } | Self::Roots { key } => key,
        }
    }

    /// The JSON-RPC method of the embedded request.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Elicitation { .. } => "elicitation/create",
            Self::Sampling { .. } => "sampling/createMessage",
            Self::Roots { .. } => "roots/list",
        }
    }
}

/// A scripted MRTR client.
///
/// Clones share the script and the record, so keep a clone to assert on after
/// handing one to [`connect_modern`]. The handler answers whatever it is asked,
/// whether or not it declared the capability, so a test can detect a server
/// that asks for an undeclared kind of input.
#[derive(Debug, Clone)]
pub struct TestClientHandler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    elicit_replies: Vec<ElicitResult>,
    sampling_text: String,
    sampling_model: String,
    roots: Vec<Root>,
    recorded: Mutex<Vec<InputRecord>>,
    elicitations_answered: Mutex<usize>,
}

impl Default for TestClientHandler {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl TestClientHandler {
    pub fn builder() -> TestClientHandlerBuilder {
        TestClientHandlerBuilder::default()
    }

    /// Every input request asked so far, in the order the handler saw them.
    /// Within one round `rmcp` fulfils the requests in key order.
    pub fn recorded(&self) -> Vec<InputRecord> {
        self.inner.recorded.lock().unwrap().clone()
    }

    /// Returns the record and starts a new one.
    pub fn take_recorded(&self) -> Vec<InputRecord> {
        std::mem::take(&mut *self.inner.recorded.lock().unwrap())
    }

    /// The capabilities this handler declares on every request.
    pub fn capabilities(&self) -> &ClientCapabilities {
        &self.inner.config.capabilities
    }

    fn record(&self, record: InputRecord) {
        self.inner.recorded.lock().unwrap().push(record);
    }

    fn next_elicit_reply(&self) -> ElicitResult {
        let mut answered = self.inner.elicitations_answered.lock().unwrap();
        let replies = &self.inner.elicit_replies;
        // The last scripted reply repeats once the script runs out.
        let reply = replies
            .get(*answered)
            .or(replies.last())
            .cloned()
            .unwrap_or_else(|| ElicitResult::new(ElicitationAction::Decline));
        *answered += 1;
        reply
    }
}

impl ClientHandler for TestClientHandler {
    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        // For MRTR input requests rmcp puts the `inputRequests` key in the id.
        self.record(InputRecord::Elicitation {
            key: context.id.to_string(),
            params,
        });
        Ok(self.next_elicit_reply())
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.record(InputRecord::Sampling {
            key: context.id.to_string(),
            params,
        });
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(self.inner.sampling_text.clone()),
            self.inner.sampling_model.clone(),
        )
        .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN))
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.record(InputRecord::Roots {
            key: context.id.to_string(),
        });
        Ok(ListRootsResult::new(self.inner.roots.clone()))
    }

    fn get_info(&self) -> ClientConfig {
        self.inner.config.clone()
    }
}

/// Builds a [`TestClientHandler`]. By default it declares no capabilities
/// (`clientCapabilities: {}`), declines every elicitation, answers sampling
/// with a fixed text and lists no roots.
#[derive(Debug, Clone)]
pub struct TestClientHandlerBuilder {
    capabilities: ClientCapabilities,
    client_info: Implementation,
    elicit_replies: Vec<ElicitResult>,
    sampling_text: String,
    sampling_model: String,
    roots: Vec<Root>,
}

impl Default for TestClientHandlerBuilder {
    fn default() -> Self {
        Self {
            capabilities: ClientCapabilities::default(),
            client_info: Implementation::new("mrtr-gateway-test-client", "0.0.0"),
            elicit_replies: Vec::new(),
            sampling_text: "sampled text".into(),
            sampling_model: "test-model".into(),
            roots: Vec::new(),
        }
    }
}

impl TestClientHandlerBuilder {
    /// Declares `elicitation.form`.
    pub fn elicitation_form(mut self) -> Self {
        let elicitation = self.capabilities.elicitation.take().unwrap_or_default();
        self.capabilities.elicitation =
            Some(elicitation.with_form(FormElicitationCapability::new()));
        self
    }

    /// Declares `elicitation.url`.
    pub fn elicitation_url(mut self) -> Self {
        let elicitation = self.capabilities.elicitation.take().unwrap_or_default();
        self.capabilities.elicitation = Some(elicitation.with_url(UrlElicitationCapability::new()));
        self
    }

    /// Declares a bare `elicitation: {}`, which the spec reads as form only.
    pub fn elicitation_bare(mut self) -> Self {
        self.capabilities.elicitation = Some(ElicitationCapability::new());
        self
    }

    /// Declares `sampling: {}`.
    pub fn sampling(mut self) -> Self {
        self.capabilities.sampling = Some(SamplingCapability::default());
        self
    }

    /// Declares `roots: {}`.
    pub fn roots(mut self) -> Self {
        self.capabilities.roots = Some(RootsCapabilities::default());
        self
    }

    /// Replaces the declared capabilities outright.
    pub fn capabilities(mut self, capabilities: ClientCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    pub fn client_info(mut self, client_info: Implementation) -> Self {
        self.client_info = client_info;
        self
    }

    /// Answers every elicitation with `accept` and `content`.
    pub fn elicit_accept(self, content: Value) -> Self {
        self.elicit_reply(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }

    /// Answers every elicitation with `decline`.
    pub fn elicit_decline(self) -> Self {
        self.elicit_reply(ElicitResult::new(ElicitationAction::Decline))
    }

    /// Answers every elicitation with `cancel`.
    pub fn elicit_cancel(self) -> Self {
        self.elicit_reply(ElicitResult::new(ElicitationAction::Cancel))
    }

    /// Answers every elicitation with `reply`.
    pub fn elicit_reply(mut self, reply: ElicitResult) -> Self {
        self.elicit_replies = vec![reply];
        self
    }

    /// Answers the n-th elicitation with the n-th reply; the last one repeats.
    pub fn elicit_replies(mut self, replies: Vec<ElicitResult>) -> Self {
        self.elicit_replies = replies;
        self
    }

    /// The assistant text every sampling request gets back.
    pub fn sampling_text(mut self, text: impl Into<String>) -> Self {
        self.sampling_text = text.into();
        self
    }

    pub fn sampling_model(mut self, model: impl Into<String>) -> Self {
        self.sampling_model = model.into();
        self
    }

    /// The roots every `roots/list` request gets back.
    pub fn roots_list(mut self, roots: Vec<Root>) -> Self {
        self.roots = roots;
        self
    }

    pub fn build(self) -> TestClientHandler {
        TestClientHandler {
            inner: Arc::new(Inner {
                config: ClientConfig::new(self.capabilities, self.client_info),
                elicit_replies: self.elicit_replies,
                sampling_text: self.sampling_text,
                sampling_model: self.sampling_model,
                roots: self.roots,
                recorded: Mutex::new(Vec::new()),
                elicitations_answered: Mutex::new(0),
            }),
        }
    }
}

/// The reserved request `_meta` a 2026-07-28 request must carry.
pub fn request_meta(capabilities: &ClientCapabilities) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mrtr-gateway-raw-client", "version": "0.0.0"},
    })
}

/// A JSON-RPC request body with [`request_meta`] added to `params._meta`.
/// Keys already in `params._meta` are kept.
pub fn modern_request(
    id: impl Into<Value>,
    method: &str,
    params: Value,
    capabilities: &ClientCapabilities,
) -> Value {
    let mut params = match params {
        Value::Object(map) => map,
        Value::Null => Default::default(),
        other => panic!("params must be an object, got {other}"),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("params._meta must be an object");
    if let Value::Object(defaults) = request_meta(capabilities) {
        for (key, value) in defaults {
            meta.entry(key).or_insert(value);
        }
    }
    json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

/// The headers a 2026-07-28 client sends for `body`: `Accept`, `Content-Type`,
/// `MCP-Protocol-Version`, `Mcp-Method` and, where the method has one,
/// `Mcp-Name`.
pub fn standard_headers(body: &Value) -> reqwest::header::HeaderMap {
    use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};

    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let version = body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .unwrap_or(PROTOCOL_VERSION);
    headers.insert("mcp-protocol-version", header_value(version));
    if let Some(method) = body["method"].as_str() {
        headers.insert("mcp-method", header_value(method));
        let name = match method {
            "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
            "resources/read" => body["params"]["uri"].as_str(),
            _ => None,
        };
        if let Some(name) = name {
            headers.insert("mcp-name", header_value(name));
        }
    }
    headers
}

/// A header value, in the `=?base64?…?=` form when the plain form is not allowed.
fn header_value(value: &str) -> reqwest::header::HeaderValue {
    let plain = !value.is_empty()
        && value.bytes().all(|byte| (0x20..0x7f).contains(&byte))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    let text = if plain {
        value.to_owned()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        format!("=?base64?{encoded}?=")
    };
    reqwest::header::HeaderValue::from_str(&text).expect("header value is visible ASCII")
}

/// The next notification of a `subscriptions/listen` subscription, within 10 s.
pub async fn next_notification(
    subscription: &mut rmcp::service::Subscription,
) -> rmcp::model::ServerNotification {
    tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next())
        .await
        .expect("a notification in time")
        .expect("a notification, not an error")
        .expect("the subscription is open")
}

/// One HTTP exchange as it was on the wire.
#[derive(Debug, Clone)]
pub struct RawExchange {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    /// The JSON-RPC messages in the body: the one JSON object, or every SSE
    /// `data` payload in order.
    pub messages: Vec<Value>,
}

impl RawExchange {
    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
    }

    /// The final JSON-RPC response: the last message with a `result` or `error`.
    pub fn response(&self) -> Option<&Value> {
        self.messages
            .iter()
            .rev()
            .find(|message| message.get("result").is_some() || message.get("error").is_some())
    }

    pub fn result(&self) -> Option<&Value> {
        self.response().and_then(|response| response.get("result"))
    }

    /// `result.resultType` exactly as sent, if the server sent one.
    pub fn result_type(&self) -> Option<&str> {
        self.result()?.get("resultType")?.as_str()
    }

    pub fn error(&self) -> Option<&Value> {
        self.response().and_then(|response| response.get("error"))
    }

    pub fn error_code(&self) -> Option<i64> {
        self.error()?.get("code")?.as_i64()
    }

    /// Every message in the body that is a notification.
    pub fn notifications(&self) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|message| message.get("id").is_none() && message.get("method").is_some())
            .collect()
    }
}

/// POSTs `body` to `url` with [`standard_headers`].
pub async fn post_raw(url: &str, body: &Value) -> RawExchange {
    post_raw_with_headers(url, body, standard_headers(body)).await
}

/// POSTs `body` with exactly `headers`, for tests that need a header missing or
/// wrong.
pub async fn post_raw_with_headers(
    url: &str,
    body: &Value,
    headers: reqwest::header::HeaderMap,
) -> RawExchange {
    send_raw(
        reqwest::Method::POST,
        url,
        headers,
        body.to_string().into_bytes(),
    )
    .await
}

/// Sends exactly these bytes with exactly these headers, for malformed-input tests.
pub async fn send_raw(
    method: reqwest::Method,
    url: &str,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
) -> RawExchange {
    let response = reqwest::Client::new()
        .request(method, url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .expect("raw request reaches the server");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("raw response body");
    let is_sse = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let messages = if is_sse {
        sse_data(&body)
            .iter()
            .filter_map(|data| serde_json::from_str(data).ok())
            .collect()
    } else {
        serde_json::from_str(&body).into_iter().collect()
    };
    RawExchange {
        status,
        headers,
        body,
        messages,
    }
}

/// The `data` payloads of an SSE body, one per event that has any.
fn sse_data(body: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in body.lines().chain(std::iter::once("")) {
        if line.is_empty() {
            if !data.is_empty() {
                events.push(data.join("\n"));
                data.clear();
            }
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    events
}

/// The retry of `first`: a new id, `inputResponses` and the echoed `requestState`.
pub fn retry_of(first: &Value, id: Value, responses: Value, state: &str) -> Value {
    let mut retry = first.clone();
    retry["id"] = id;
    retry["params"]["inputResponses"] = responses;
    retry["params"]["requestState"] = json!(state);
    retry
}

/// The retry of `first` answering the only input request of `round` (an `input_required` result)
/// with `answer`.
pub fn answer_only_input(first: &Value, id: Value, round: &Value, answer: Value) -> Value {
    let key = round["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .expect("one input request");
    let state = round["requestState"].as_str().expect("requestState");
    retry_of(first, id, json!({ key: answer }), state)
}
