//! What the load client puts on the wire and reads back: the hyper 1 client (HTTP/1.1,
//! keep-alive), the 2025-11-25 and 2026-07-28 request shapes, whole-body reads (a JSON body, or
//! a whole SSE body carrying the response, as some 2025-11-25 servers answer) and an SSE event
//! reader. Every exchange here is bounded by [`REQUEST_TIMEOUT`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::BenchResult;

/// The revision backends speak on sessions (2025-11-25).
pub const LEGACY_VERSION: &str = "2025-11-25";
/// The revision the gateway serves in front.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Longest any single HTTP exchange of the benchmark may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A keep-alive HTTP/1.1 client; connections are opened as concurrency needs them and reused.
pub fn new_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    // Same as the gateway's own front: small request/response pairs must not wait on Nagle.
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector)
}

/// Sends `request` and waits for the response head, within [`REQUEST_TIMEOUT`].
pub async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> BenchResult<Response<Incoming>> {
    match tokio::time::timeout(REQUEST_TIMEOUT, client.request(request)).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(error)) => Err(format!("request failed: {error}").into()),
        Err(_) => Err("request timed out".into()),
    }
}

/// Sends `request` and reads the whole body, within [`REQUEST_TIMEOUT`].
pub async fn exchange(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> BenchResult<(StatusCode, http::HeaderMap, Bytes)> {
    let work = async {
        let response = client.request(request).await?;
        let (head, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((head.status, head.headers, body))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
        Ok(outcome) => outcome,
        Err(_) => Err("request timed out".into()),
    }
}

/// Sends `request` and parses a 200 JSON body.
pub async fn json_exchange(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> BenchResult<Value> {
    let (status, _, body) = exchange(client, request).await?;
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok(serde_json::from_slice(&body)?)
}

/// Sends `request` and returns the JSON-RPC response of a 200 answer, whether the body is JSON
/// or an SSE stream (the first event that is a response; the stream ends after it).
pub async fn response_exchange(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> BenchResult<Value> {
    let (status, headers, body) = exchange(client, request).await?;
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    response_in_body(&headers, &body)
}

/// The JSON-RPC response in a 200 body: the body itself, or an SSE event of it.
fn response_in_body(headers: &http::HeaderMap, body: &[u8]) -> BenchResult<Value> {
    let is_sse = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if !is_sse {
        return Ok(serde_json::from_slice(body)?);
    }
    let mut rest = body;
    // Bounded by the body: each pass consumes one event.
    while let Some((length, blank)) = find_event_end(rest) {
        let data = event_data(&rest[..length]);
        rest = &rest[length + blank..];
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data)?;
        if message.get("method").is_none() && message.get("id").is_some() {
            return Ok(message);
        }
    }
    Err(format!(
        "no JSON-RPC response in the SSE body ({} bytes)",
        body.len()
    )
    .into())
}

fn post(uri: &Uri) -> http::request::Builder {
    Request::post(uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
}

/// A 2025-11-25 POST on an initialized session (or without one, for `initialize`).
pub fn legacy_post(
    uri: &Uri,
    session: Option<&HeaderValue>,
    body: String,
) -> BenchResult<Request<Full<Bytes>>> {
    let mut builder = post(uri);
    if let Some(session) = session {
        builder = builder
            .header("mcp-session-id", session.clone())
            .header("mcp-protocol-version", LEGACY_VERSION);
    }
    Ok(builder.body(Full::new(Bytes::from(body)))?)
}

/// A 2026-07-28 POST: the request-metadata headers the gateway checks against the body.
pub fn modern_post(
    uri: &Uri,
    method: &str,
    name: Option<&str>,
    body: String,
) -> BenchResult<Request<Full<Bytes>>> {
    let mut builder = post(uri)
        .header("mcp-protocol-version", MODERN_VERSION)
        .header("mcp-method", method);
    if let Some(name) = name {
        builder = builder.header("mcp-name", name);
    }
    Ok(builder.body(Full::new(Bytes::from(body)))?)
}

/// The request `_meta` every 2026-07-28 request carries.
pub fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// `tools/call` as a 2026-07-28 request.
pub fn modern_tool_call(id: u64, tool: &str, arguments: Value, capabilities: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": modern_meta(capabilities)},
    })
}

/// `tools/list` as a 2026-07-28 request: the first page (no cursor).
pub fn modern_tools_list(id: u64, capabilities: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/list",
        "params": {"_meta": modern_meta(capabilities)},
    })
}

/// `tools/call` as a 2025-11-25 request.
pub fn legacy_tool_call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    })
}

/// `result` of a JSON-RPC response, or the error it carries.
pub fn result_of(message: &Value) -> BenchResult<&Value> {
    if let Some(error) = message.get("error") {
        return Err(format!("JSON-RPC error: {error}").into());
    }
    message
        .get("result")
        .ok_or_else(|| format!("no result in {message}").into())
}

/// The text of a tool result's first content block.
pub fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Initializes a 2025-11-25 session at `uri` and returns its `Mcp-Session-Id`.
pub async fn open_legacy_session(client: &HttpClient, uri: &Uri) -> BenchResult<HeaderValue> {
    let initialize = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "mrtr-bench", "version": "0.1.0"},
        },
    });
    let (status, headers, body) =
        exchange(client, legacy_post(uri, None, initialize.to_string())?).await?;
    if status != StatusCode::OK {
        return Err(format!(
            "initialize: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    result_of(&response_in_body(&headers, &body)?)?;
    let session = headers
        .get("mcp-session-id")
        .cloned()
        .ok_or("initialize: no Mcp-Session-Id")?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = exchange(
        client,
        legacy_post(uri, Some(&session), initialized.to_string())?,
    )
    .await?;
    if status != StatusCode::ACCEPTED {
        return Err(format!("notifications/initialized: HTTP {status}").into());
    }
    Ok(session)
}

/// Ends a 2025-11-25 session with DELETE.
pub async fn close_legacy_session(
    client: &HttpClient,
    uri: &Uri,
    session: &HeaderValue,
) -> BenchResult<StatusCode> {
    let request = Request::delete(uri.clone())
        .header("mcp-session-id", session.clone())
        .header("mcp-protocol-version", LEGACY_VERSION)
        .body(Full::new(Bytes::new()))?;
    Ok(exchange(client, request).await?.0)
}

/// Reads the `data` of SSE events one at a time from a response body.
pub struct SseReader {
    body: Incoming,
    buffer: BytesMut,
}

impl SseReader {
    pub fn new(body: Incoming) -> Self {
        Self {
            body,
            buffer: BytesMut::new(),
        }
    }

    /// The next event's data parsed as JSON, or `None` at the end of the stream. Comment-only
    /// events (keep-alives) are skipped.
    pub async fn next_message(&mut self) -> BenchResult<Option<Value>> {
        let work = async {
            loop {
                if let Some(end) = find_event_end(&self.buffer) {
                    let event = self.buffer.split_to(end.0 + end.1);
                    let data = event_data(&event[..end.0]);
                    if data.is_empty() {
                        continue;
                    }
                    return Ok(Some(serde_json::from_str(&data)?));
                }
                match self.body.frame().await {
                    None => return Ok(None),
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            self.buffer.extend_from_slice(&data);
                        }
                    }
                }
            }
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
            Ok(outcome) => outcome,
            Err(_) => Err("SSE read timed out".into()),
        }
    }
}

/// Where the first event of `buffer` ends: (length of the event, length of the blank line).
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn event_data(event: &[u8]) -> String {
    String::from_utf8_lossy(event)
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect::<Vec<_>>()
        .join("\n")
}
