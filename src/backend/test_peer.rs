//! A scripted 2025-11-25 Streamable HTTP server on loopback, the real peer of the backend's unit
//! tests. It answers `initialize` (with a session id) and `ping` itself, and takes what carries
//! no request (notifications, answers to its own requests) with 202, handing it to the test in
//! order. Every other request becomes a [`PeerCall`]: the test writes what the backend would
//! send on that request's SSE stream, its answer last. The standalone GET stream carries what
//! the test sends outside any call ([`TestPeer::send_outside`]). [`TestPeer::lose_one_way`] has
//! it close the connection of the next one-way POSTs without answering, as a server does when it
//! shuts an idle keep-alive connection at the moment it is reused.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use super::BackendSpec;
use crate::config::BackendConfig;
use crate::protocol::BACKEND_PROTOCOL_VERSION;

/// How long a test waits for what must happen.
pub(super) const WAIT: Duration = Duration::from_secs(5);

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A request the gateway sent, waiting for what the test has the backend send on its stream.
pub(super) struct PeerCall {
    pub id: Value,
    pub method: String,
    pub params: Option<Value>,
    stream: mpsc::UnboundedSender<Value>,
}

impl PeerCall {
    /// Writes one message on this request's SSE stream.
    pub(super) fn send(&self, message: Value) {
        let _ = self.stream.send(message);
    }

    /// Answers the request; its stream ends.
    pub(super) fn answer(self, result: Value) {
        self.send(json!({ "jsonrpc": "2.0", "id": self.id, "result": result }));
    }
}

struct Shared {
    calls: mpsc::UnboundedSender<PeerCall>,
    posted: mpsc::UnboundedSender<Value>,
    /// The standalone stream's messages, taken by the first GET.
    outside: Mutex<Option<mpsc::UnboundedReceiver<Value>>>,
    /// How many of the next one-way POSTs get their connection closed instead of an answer.
    to_lose: AtomicUsize,
}

/// What makes hyper close a connection without writing a response.
#[derive(Debug)]
struct ConnectionDropped;

impl std::fmt::Display for ConnectionDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the test peer dropped the connection")
    }
}

impl std::error::Error for ConnectionDropped {}

pub(super) struct TestPeer {
    pub url: String,
    calls: mpsc::UnboundedReceiver<PeerCall>,
    posted: mpsc::UnboundedReceiver<Value>,
    outside: mpsc::UnboundedSender<Value>,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for TestPeer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestPeer {
    pub(super) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let (calls_tx, calls) = mpsc::unbounded_channel();
        let (posted_tx, posted) = mpsc::unbounded_channel();
        let (outside, outside_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            calls: calls_tx,
            posted: posted_tx,
            outside: Mutex::new(Some(outside_rx)),
            to_lose: AtomicUsize::new(0),
        });
        let serving = shared.clone();
        let server = tokio::spawn(async move {
            let shared = serving;
            // Dropped with the accept loop: every connection ends with the peer.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request| serve(shared.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url,
            calls,
            posted,
            outside,
            shared,
            server,
        }
    }

    /// The next `count` notifications or answers the gateway posts are read and dropped with
    /// their connection, no response written.
    pub(super) fn lose_one_way(&self, count: usize) {
        self.shared.to_lose.store(count, Ordering::SeqCst);
    }

    /// What a session needs to reach this peer; `extra` is more of the backend's TOML table.
    pub(super) fn spec(&self, extra: &str) -> Arc<BackendSpec> {
        let config: BackendConfig = toml::from_str(&format!(
            "transport = \"http\"\nera = \"2025-11-25\"\nurl = \"{}\"\n{extra}",
            self.url
        ))
        .unwrap();
        BackendSpec::new("peer", config).unwrap()
    }

    /// The next request the gateway sent that the peer does not answer itself.
    pub(super) async fn next_call(&mut self) -> PeerCall {
        tokio::time::timeout(WAIT, self.calls.recv())
            .await
            .expect("no request reached the backend in time")
            .expect("the peer stopped")
    }

    /// The next message without a request the gateway posted that satisfies `wanted`; the
    /// others before it are skipped.
    pub(super) async fn posted(
        &mut self,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(message) = self.posted.recv().await {
                if wanted(&message) {
                    return Some(message);
                }
            }
            None
        });
        match found.await {
            Ok(Some(message)) => Ok(message),
            Ok(None) => Err("the peer stopped".into()),
            Err(_) => Err(format!("nothing wanted was posted within {WAIT:?}")),
        }
    }

    /// The answer the gateway posted to the peer's request `id`.
    pub(super) async fn answer_to(&mut self, id: &str) -> Result<Value, String> {
        self.posted(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
            .await
    }

    /// Writes one message on the standalone GET stream, outside any call.
    pub(super) fn send_outside(&self, message: Value) {
        let _ = self.outside.send(message);
    }
}

pub(super) fn request(id: &str, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

pub(super) fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

pub(super) fn progress(token: &str, progress: u64) -> Value {
    notification(
        "notifications/progress",
        json!({ "progressToken": token, "progress": progress }),
    )
}

fn status(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed_unsync());
    *response.status_mut() = status;
    response
}

fn json_response(id: Value, result: Value) -> Response<Body> {
    let body = json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string();
    Response::builder()
        .header("content-type", "application/json")
        .header("mcp-session-id", "peer-session")
        .body(Full::new(Bytes::from(body)).boxed_unsync())
        .unwrap()
}

/// An SSE stream of what `messages` yields, until every sender is gone.
fn event_stream(messages: mpsc::UnboundedReceiver<Value>) -> Response<Body> {
    let frames = futures_util::stream::unfold(messages, |mut messages| async move {
        let message = messages.recv().await?;
        let event = Frame::data(Bytes::from(format!("data: {message}\n\n")));
        Some((Ok::<_, Infallible>(event), messages))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(frames).boxed_unsync())
        .unwrap()
}

async fn serve(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ConnectionDropped> {
    match *request.method() {
        Method::POST => {}
        Method::GET => {
            let outside = shared.outside.lock().unwrap().take();
            return Ok(match outside {
                Some(messages) => event_stream(messages),
                None => status(StatusCode::METHOD_NOT_ALLOWED),
            });
        }
        _ => return Ok(status(StatusCode::OK)),
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).unwrap();
    let (Some(id), Some(method)) = (
        message.get("id").cloned(),
        message.get("method").and_then(Value::as_str),
    ) else {
        let lose = shared
            .to_lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lose {
            return Err(ConnectionDropped);
        }
        let _ = shared.posted.send(message);
        return Ok(status(StatusCode::ACCEPTED));
    };
    Ok(match method {
        "initialize" => json_response(
            id,
            json!({
                "protocolVersion": BACKEND_PROTOCOL_VERSION,
                "capabilities": { "tools": {}, "logging": {} },
                "serverInfo": { "name": "test-peer", "version": "0" },
            }),
        ),
        "ping" => json_response(id, json!({})),
        _ => {
            let (stream, messages) = mpsc::unbounded_channel();
            let _ = shared.calls.send(PeerCall {
                id,
                method: method.to_string(),
                params: message.get("params").cloned(),
                stream,
            });
            event_stream(messages)
        }
    })
}
