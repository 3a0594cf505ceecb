//! The fast backend: a minimal dual-era Streamable HTTP server written on hyper 1. It speaks
//! 2025-11-25 on sessions and answers stateless 2026-07-28 requests on the same endpoint.
//!
//! It runs in a child process (the bench binary started again with [`SERVE_BACKEND_FLAG`]) so
//! that its CPU time and memory are measured apart from the gateway's and the load client's.
//! It prints its bound address on stdout, then serves until it is killed or its stdin closes.
//!
//! This file owns the wire behaviour of that server and its two tables: the initialized
//! sessions and the pending elicitations. It does as little as possible per request, so that
//! the gateway in front of it is what the benchmark measures.
//!
//! - `initialize` returns protocol `2025-11-25`, the `tools` capability and an `Mcp-Session-Id`.
//! - Notifications and JSON-RPC responses get 202.
//! - `tools/list` lists `echo`, `large` and `elicit`.
//! - `tools/call echo` answers with one JSON body; so does `tools/call large`, whose text is
//!   [`large_text`] ([`LARGE_TEXT_BYTES`], built once).
//! - `tools/call elicit` answers with an SSE stream: first an `elicitation/create` request, then,
//!   once the client has POSTed the response to it on the same session, the tool result.
//! - GET is 405 (no standalone stream to keep open), DELETE ends the session.
//!
//! A POST without `Mcp-Session-Id` whose `params._meta` names protocol `2026-07-28` is a
//! 2026-07-28 request, answered statelessly ([`modern_post`]):
//! - `MCP-Protocol-Version`, `Mcp-Method` and (for `tools/call`) `Mcp-Name` must match the
//!   body, else 400 with `-32020`;
//! - `server/discover` names `2026-07-28` and the `tools` capability; `tools/list` lists the
//!   same tools; both with `ttlMs: 0` and `cacheScope: "public"`;
//! - `tools/call echo` and `large` answer as on a session, plus `resultType: "complete"`;
//! - `tools/call elicit` answers `input_required` with one `elicitation/create` under the key
//!   `name` and the fixed `requestState` [`ELICIT_STATE`] (a client without the `elicitation`
//!   capability gets 400 with `-32021`); its retry, with `inputResponses.name` and that state,
//!   gets the same greeting as the session's exchange. Nothing is kept between the two.
//! - Any other method gets 404 with `-32601`.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use dashmap::{DashMap, DashSet};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::wire::{LEGACY_VERSION, MODERN_VERSION};
use crate::BenchResult;

/// The hidden argument that turns the bench binary into the backend.
pub const SERVE_BACKEND_FLAG: &str = "--serve-backend";

/// The `requestState` of the 2026-07-28 `elicit` round: the round carries nothing the retry
/// needs besides the answer, so the state only proves the retry came back through the client.
pub const ELICIT_STATE: &str = "fast-elicit-v1";
/// The request `_meta` keys of 2026-07-28.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The request-metadata error codes of 2026-07-28.
const HEADER_MISMATCH: i64 = -32020;
const MISSING_CLIENT_CAPABILITY: i64 = -32021;

const SESSION_HEADER: &str = "mcp-session-id";
/// The length of the `large` tool's text: 256 KiB.
pub const LARGE_TEXT_BYTES: usize = 256 * 1024;

/// The `large` tool's text: [`LARGE_TEXT_BYTES`] of printable ASCII in a fixed pattern, so a
/// client can check that every byte arrived.
pub fn large_text() -> String {
    const PATTERN: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..LARGE_TEXT_BYTES)
        .map(|i| char::from(PATTERN[i % PATTERN.len()]))
        .collect()
}

/// Larger request bodies are refused; the benchmark never sends one.
const MAX_REQUEST_BODY: usize = 1024 * 1024;

/// The sessions and the elicitations waiting for their answer.
#[derive(Default)]
struct BackendState {
    sessions: DashSet<String>,
    /// The whole `tools/call large` answer minus its id: `{"jsonrpc":"2.0","id":` goes before
    /// it, so the 256 KiB text is serialized once per process, not per call.
    large_result_tail: std::sync::OnceLock<Bytes>,
    /// The same for the 2026-07-28 answer (with `resultType`).
    modern_large_result_tail: std::sync::OnceLock<Bytes>,
    /// Elicitation request id → the SSE response waiting for the answer. The ids come from one
    /// counter, so they are unique across sessions.
    pending_elicitations: DashMap<u64, oneshot::Sender<Value>>,
    next_session: AtomicU64,
    next_elicitation: AtomicU64,
}

/// Entry point of the child process: serves on `addr` until killed or stdin closes.
pub fn serve_child(addr: &str) -> BenchResult<()> {
    let addr: SocketAddr = addr.parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(addr))
}

async fn serve(addr: SocketAddr) -> BenchResult<()> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{bound}")?;
        stdout.flush()?;
    }
    // The parent holds our stdin open; when it goes away (even killed), so do we.
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    let state = Arc::new(BackendState::default());
    // Runs for the life of the process, which the parent bounds.
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Typically EMFILE under extreme load: back off instead of spinning.
                eprintln!("backend: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(state.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    state: Arc<BackendState>,
    request: Request<Incoming>,
) -> Result<Response<BackendBody>, Infallible> {
    Ok(match *request.method() {
        Method::POST => handle_post(&state, request).await,
        Method::DELETE => {
            if let Some(session) = session_of(request.headers()) {
                state.sessions.remove(&session);
            }
            plain(StatusCode::NO_CONTENT)
        }
        // No standalone SSE stream: a client that asks for one gives up at once.
        _ => plain(StatusCode::METHOD_NOT_ALLOWED),
    })
}

fn session_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

async fn handle_post(
    state: &Arc<BackendState>,
    request: Request<Incoming>,
) -> Response<BackendBody> {
    let (head, body) = request.into_parts();
    let session = session_of(&head.headers);
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return plain(StatusCode::BAD_REQUEST),
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return plain(StatusCode::BAD_REQUEST);
    };
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").cloned();
    if method == Some("initialize") {
        return initialize(state, id.unwrap_or(Value::Null));
    }
    if session.is_none() && message["params"]["_meta"][META_PROTOCOL_VERSION] == MODERN_VERSION {
        return modern_post(state, &head.headers, id, &message);
    }
    match &session {
        Some(session) if state.sessions.contains(session) => {}
        Some(_) => return plain(StatusCode::NOT_FOUND),
        None => return plain(StatusCode::BAD_REQUEST),
    }
    let (Some(method), Some(id)) = (method, id.clone()) else {
        // A notification, or the client's answer to one of our requests.
        if method.is_none() {
            deliver_answer(state, &message);
        }
        return plain(StatusCode::ACCEPTED);
    };
    match method {
        "tools/list" => json_response(&result(id, tools_list())),
        "tools/call" => call_tool(state, id, &message),
        "ping" => json_response(&result(id, json!({}))),
        _ => json_response(&json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32601, "message": format!("Method not found: {method}")},
        })),
    }
}

fn initialize(state: &BackendState, id: Value) -> Response<BackendBody> {
    let number = state.next_session.fetch_add(1, Ordering::Relaxed);
    let session = format!("fast-{number:x}");
    state.sessions.insert(session.clone());
    let mut response = json_response(&result(
        id,
        json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mrtr-bench-fast-backend", "version": "0.1.0"},
        }),
    ));
    if let Ok(value) = HeaderValue::from_str(&session) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

/// The tools both benchmark backends answer: `echo` and the 256 KiB `large`.
pub fn passthrough_tools() -> Vec<Value> {
    vec![
        json!({
            "name": "echo",
            "description": "Repeat the text.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        }),
        json!({
            "name": "large",
            "description": "Return a 256 KiB text.",
            "inputSchema": {"type": "object"},
        }),
    ]
}

/// `{"tools": [...]}`: `echo`, `large` and `elicit`, in this order (M9 checks merged lists
/// against it).
pub fn tools_list() -> Value {
    let mut tools = passthrough_tools();
    tools.push(json!({
        "name": "elicit",
        "description": "Ask the user for a name, then greet them.",
        "inputSchema": {"type": "object"},
    }));
    json!({ "tools": tools })
}

fn call_tool(state: &Arc<BackendState>, id: Value, message: &Value) -> Response<BackendBody> {
    let params = &message["params"];
    match params["name"].as_str() {
        Some("echo") => {
            let text = params["arguments"]["text"].as_str().unwrap_or_default();
            json_response(&result(id, text_result(text)))
        }
        Some("large") => large_response(state, &id, false),
        Some("elicit") => start_elicitation(state, id),
        _ => json_response(&json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32602, "message": "Unknown tool"},
        })),
    }
}

/// `tools/call large`: the id, then the cached rest of the message (with `resultType` for a
/// 2026-07-28 request).
fn large_response(state: &BackendState, id: &Value, modern: bool) -> Response<BackendBody> {
    let cell = if modern {
        &state.modern_large_result_tail
    } else {
        &state.large_result_tail
    };
    let tail = cell.get_or_init(|| {
        let mut result = text_result(&large_text());
        if modern {
            result["resultType"] = json!("complete");
        }
        let message = json!({ "result": result }).to_string();
        // `{"result":...}` → `,"result":...}`, to follow `{"jsonrpc":"2.0","id":ID`.
        Bytes::from(format!(",{}", &message[1..]))
    });
    let mut body = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id}").into_bytes();
    body.extend_from_slice(tail);
    let mut response = Response::new(BackendBody::Full(Some(Bytes::from(body))));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn start_elicitation(state: &Arc<BackendState>, call_id: Value) -> Response<BackendBody> {
    let elicitation_id = state.next_elicitation.fetch_add(1, Ordering::Relaxed);
    let (sender, answer) = oneshot::channel();
    state.pending_elicitations.insert(elicitation_id, sender);
    let request = json!({
        "jsonrpc": "2.0",
        "id": elicitation_id,
        "method": "elicitation/create",
        "params": elicitation_params(),
    });
    let stream = ElicitationStream {
        opening: Some(sse_event(&request)),
        call_id,
        elicitation_id,
        answer: Some(answer),
        state: state.clone(),
    };
    let mut response = Response::new(BackendBody::Elicitation(Box::new(stream)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    response
}

/// What `elicit` asks, in both eras.
fn elicitation_params() -> Value {
    json!({
        "mode": "form",
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    })
}

/// `elicit`'s final text from the client's `ElicitResult`, in both eras.
fn greeting(answer: &Value) -> String {
    match answer["action"].as_str() {
        Some("accept") => {
            let name = answer["content"]["name"].as_str().unwrap_or("?");
            format!("Hello, {name}!")
        }
        Some(other) => format!("No name ({other})."),
        None => "No answer.".to_owned(),
    }
}

/// Hands the client's answer to the SSE response that asked for it.
fn deliver_answer(state: &BackendState, message: &Value) {
    let Some(id) = message.get("id").and_then(Value::as_u64) else {
        return;
    };
    if let Some((_, waiting)) = state.pending_elicitations.remove(&id) {
        let _ = waiting.send(message.clone());
    }
}

/// A stateless 2026-07-28 request: its request-metadata headers checked against the body, then
/// answered in one JSON body.
fn modern_post(
    state: &BackendState,
    headers: &HeaderMap,
    id: Option<Value>,
    message: &Value,
) -> Response<BackendBody> {
    // 2026-07-28 defines no client notification over HTTP, and clients POST no responses.
    let (Some(id), Some(method)) = (id, message.get("method").and_then(Value::as_str)) else {
        return plain(StatusCode::ACCEPTED);
    };
    let params = &message["params"];
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let name = (method == "tools/call")
        .then(|| params["name"].as_str())
        .flatten();
    let mismatch = if header("mcp-protocol-version") != Some(MODERN_VERSION) {
        Some("MCP-Protocol-Version")
    } else if header("mcp-method") != Some(method) {
        Some("Mcp-Method")
    } else if name.is_some() && header("mcp-name") != name {
        Some("Mcp-Name")
    } else {
        None
    };
    if let Some(which) = mismatch {
        let message = format!("Header mismatch: {which} does not match the body");
        return error_response(StatusCode::BAD_REQUEST, id, HEADER_MISMATCH, &message, None);
    }
    match method {
        "server/discover" => json_response(&result(
            id,
            json!({
                "resultType": "complete",
                "supportedVersions": [MODERN_VERSION],
                "capabilities": {"tools": {}},
                "ttlMs": 0,
                "cacheScope": "public",
            }),
        )),
        "tools/list" => {
            let mut list = tools_list();
            list["resultType"] = json!("complete");
            list["ttlMs"] = json!(0);
            list["cacheScope"] = json!("public");
            json_response(&result(id, list))
        }
        "tools/call" => match name {
            Some("echo") => {
                let text = params["arguments"]["text"].as_str().unwrap_or_default();
                json_response(&result(id, complete(text_result(text))))
            }
            Some("large") => large_response(state, &id, true),
            Some("elicit") => modern_elicit(id, params),
            _ => error_response(StatusCode::OK, id, -32602, "Unknown tool", None),
        },
        _ => error_response(
            StatusCode::NOT_FOUND,
            id,
            -32601,
            &format!("Method not found: {method}"),
            None,
        ),
    }
}

/// 2026-07-28 `tools/call elicit`: `input_required` until the retry brings the answer under
/// `name` with [`ELICIT_STATE`], then the greeting.
fn modern_elicit(id: Value, params: &Value) -> Response<BackendBody> {
    if params["_meta"][META_CLIENT_CAPABILITIES]
        .get("elicitation")
        .is_none()
    {
        return error_response(
            StatusCode::BAD_REQUEST,
            id,
            MISSING_CLIENT_CAPABILITY,
            "Server requires the elicitation capability for this request",
            Some(json!({"requiredCapabilities": {"elicitation": {}}})),
        );
    }
    let state = params.get("requestState");
    if state.is_some_and(|state| state != ELICIT_STATE) {
        return error_response(StatusCode::OK, id, -32602, "Invalid requestState", None);
    }
    match params["inputResponses"].get("name") {
        Some(answer) if state.is_some() => {
            json_response(&result(id, complete(text_result(&greeting(answer)))))
        }
        // First call, or a retry without the answer: ask (again).
        _ => json_response(&result(
            id,
            json!({
                "resultType": "input_required",
                "inputRequests": {
                    "name": {"method": "elicitation/create", "params": elicitation_params()},
                },
                "requestState": ELICIT_STATE,
            }),
        )),
    }
}

/// `result` marked as a complete 2026-07-28 result.
fn complete(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}

fn error_response(
    status: StatusCode,
    id: Value,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response<BackendBody> {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let mut response = json_response(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
    *response.status_mut() = status;
    response
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

fn sse_event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

fn plain(status: StatusCode) -> Response<BackendBody> {
    let mut response = Response::new(BackendBody::Full(None));
    *response.status_mut() = status;
    response
}

fn json_response(message: &Value) -> Response<BackendBody> {
    let mut response = Response::new(BackendBody::Full(Some(Bytes::from(message.to_string()))));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A response body: a whole JSON body (or none), or an elicitation's SSE stream.
enum BackendBody {
    Full(Option<Bytes>),
    Elicitation(Box<ElicitationStream>),
}

/// The SSE answer to `tools/call elicit`: the `elicitation/create` event, then the tool
/// result once the answer arrives. No task runs per stream; the connection polls it.
struct ElicitationStream {
    opening: Option<Bytes>,
    call_id: Value,
    elicitation_id: u64,
    answer: Option<oneshot::Receiver<Value>>,
    state: Arc<BackendState>,
}

impl ElicitationStream {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(opening) = self.opening.take() {
            return Poll::Ready(Some(opening));
        }
        let Some(answer) = self.answer.as_mut() else {
            return Poll::Ready(None);
        };
        let outcome = match Pin::new(answer).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(outcome) => outcome,
        };
        self.answer = None;
        let Ok(answer) = outcome else {
            return Poll::Ready(None);
        };
        let text = greeting(&answer["result"]);
        let message = result(self.call_id.clone(), text_result(&text));
        Poll::Ready(Some(sse_event(&message)))
    }
}

impl Drop for ElicitationStream {
    fn drop(&mut self) {
        // The client went away before answering: forget the request.
        if self.answer.is_some() {
            self.state.pending_elicitations.remove(&self.elicitation_id);
        }
    }
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.get_mut() {
            BackendBody::Full(bytes) => Poll::Ready(bytes.take()),
            BackendBody::Elicitation(stream) => stream.poll_next(cx),
        };
        next.map(|bytes| bytes.map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            BackendBody::Full(bytes) => bytes.is_none(),
            BackendBody::Elicitation(stream) => stream.opening.is_none() && stream.answer.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            BackendBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            BackendBody::Full(None) => SizeHint::with_exact(0),
            BackendBody::Elicitation(_) => SizeHint::default(),
        }
    }
}
