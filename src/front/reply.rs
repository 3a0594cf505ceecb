//! How the front writes what it answers: JSON-RPC errors with their HTTP status, a call's
//! outcome as one JSON body (stamped for 2026-07-28), or an SSE stream when notifications
//! precede it. A call's response says what it was ([`Labels`]) for the metrics layer; the
//! others (errors, 202, a caught panic) are counted as `other`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{stream, StreamExt};
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Frame;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::route::Route;
use super::translate;
use crate::error::GatewayError;
use crate::http_client::is_event_stream;
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::mrtr::inputs::InputKind;
use crate::mrtr::{Event, Outcome, Started};
use crate::protocol::Method;

/// The body of every front response. Boxed with a boxed error, as panic catching needs.
pub type Body = UnsyncBoxBody<Bytes, tower::BoxError>;

/// What a route's stack answers with: its bodies as panic catching wraps them.
pub type RouteBody = tower_http::body::UnsyncBoxBody<Bytes, tower::BoxError>;

/// A response of the MCP listener: a route's stack's, or the router's own (404, metadata).
/// Either way the body is used as it is, not boxed once more.
pub enum ServedBody {
    Route(RouteBody),
    Own(Body),
}

impl http_body::Body for ServedBody {
    type Data = Bytes;
    type Error = tower::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, tower::BoxError>>> {
        // Both bodies are boxed, so `Unpin`.
        match self.get_mut() {
            Self::Route(body) => std::pin::Pin::new(body).poll_frame(cx),
            Self::Own(body) => std::pin::Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Route(body) => body.is_end_stream(),
            Self::Own(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Self::Route(body) => body.size_hint(),
            Self::Own(body) => body.size_hint(),
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Empty::new()
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
}

pub fn not_found() -> Response<Body> {
    let mut response = Response::new(full("not found\n"));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

pub fn json_response(status: StatusCode, message: &(impl Serialize + ?Sized)) -> Response<Body> {
    json_bytes_response(status, serde_json::to_vec(message).unwrap_or_default())
}

/// A JSON response whose body is already written.
pub fn json_bytes_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A message as JSON bytes; serializing a message cannot fail.
fn written(message: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_default()
}

/// A JSON-RPC error with the status [`GatewayError::http_status`] gives it.
pub fn error_response(id: Option<Value>, error: &GatewayError) -> Response<Body> {
    let mut response = json_response(
        error.http_status(),
        &jsonrpc::error_response(id, &error.to_jsonrpc()),
    );
    if matches!(error, GatewayError::MethodNotAllowed) {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
    }
    if let Some(secs) = error.retry_after_secs() {
        response.headers_mut().insert(RETRY_AFTER, secs.into());
    }
    response
}

/// The SSE comment that keeps an idle stream's connection open.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// One JSON-RPC message as an SSE event.
pub fn sse_frame(message: &(impl Serialize + ?Sized)) -> Bytes {
    sse_event(&serde_json::to_vec(message).unwrap_or_default())
}

/// One SSE event whose data is this (single-line JSON) message.
pub fn sse_event(data: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(data.len() + 23);
    event.extend_from_slice(b"event: message\ndata: ");
    event.extend_from_slice(data);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// An SSE response with this body, labelled for the metrics.
pub fn sse_response(body: Body, method: Method, outcome: &'static str) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx and similar proxies would otherwise hold events back.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    labeled(response, method, outcome)
}

/// What a response was, for metrics: set by whoever builds it.
#[derive(Clone, Copy)]
pub struct Labels {
    pub method: Method,
    pub outcome: &'static str,
    /// The protocol era the request was served in.
    pub era: crate::config::Era,
}

pub fn labeled(response: Response<Body>, method: Method, outcome: &'static str) -> Response<Body> {
    labeled_in(response, method, outcome, crate::config::Era::Modern)
}

/// [`labeled`], for a response of the given era.
pub fn labeled_in(
    mut response: Response<Body>,
    method: Method,
    outcome: &'static str,
    era: crate::config::Era,
) -> Response<Body> {
    response.extensions_mut().insert(Labels {
        method,
        outcome,
        era,
    });
    response
}

/// The outcome label of a request answered with `error`: the client's fault, or not.
pub fn error_outcome(error: &GatewayError) -> &'static str {
    if error.http_status().is_client_error() {
        "rejected"
    } else {
        "error"
    }
}

fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Final(_) => "ok",
        Outcome::InputRequired(_) => "input_required",
        Outcome::Error(_) => "error",
    }
}

/// How the answer to one forwarded request is written.
pub struct Reply {
    pub route: Arc<Route>,
    pub id: Value,
    pub method: Method,
    /// A retry's result must not be cached.
    pub retry: bool,
}

impl Reply {
    /// The response to a call's first answer. A stream still open when `calls_end` is
    /// cancelled ends with [`GatewayError::ShutDown`] as its last event.
    pub fn started(
        self,
        started: Started,
        keep_alive: Duration,
        calls_end: Arc<CancellationToken>,
    ) -> Response<Body> {
        match started {
            Started::Outcome(outcome) => self.json(outcome),
            Started::Streaming(first, events) => self.stream(first, events, keep_alive, calls_end),
        }
    }

    /// The JSON-RPC message for an outcome, written.
    fn message(&self, outcome: Outcome) -> (Vec<u8>, StatusCode) {
        // Read when the message is written: the first session may have started meanwhile.
        let init = match &outcome {
            Outcome::Error(_) => None,
            _ => self.route.backend_init(),
        };
        let server_info = init.as_deref().and_then(|init| init.get("serverInfo"));
        match outcome {
            Outcome::Final(result) => {
                if self.method == Method::ToolsList {
                    if let Ok(list) = serde_json::from_str::<Value>(result.get()) {
                        self.route
                            .tool_headers
                            .learn(&list, self.route.pool.tools_generation());
                    }
                }
                let stamped = translate::stamp_result(
                    self.method,
                    &result,
                    &self.route.config,
                    server_info,
                    self.retry,
                );
                (
                    written(&jsonrpc::result_message(&self.id, stamped)),
                    StatusCode::OK,
                )
            }
            Outcome::InputRequired(result) => {
                count_round(&self.route.metrics, &self.route.config.path, &result);
                let stamped = translate::stamp_interim(result, server_info);
                (
                    written(&jsonrpc::result_message(&self.id, stamped)),
                    StatusCode::OK,
                )
            }
            Outcome::Error(error) => (
                written(&jsonrpc::error_response(
                    Some(self.id.clone()),
                    &error.to_jsonrpc(),
                )),
                error.http_status(),
            ),
        }
    }

    fn json(&self, outcome: Outcome) -> Response<Body> {
        let label = outcome_label(&outcome);
        let response = match outcome {
            // With the headers an error's status takes (`Retry-After`).
            Outcome::Error(error) => error_response(Some(self.id.clone()), &error),
            outcome => {
                let (message, status) = self.message(outcome);
                json_bytes_response(status, message)
            }
        };
        labeled(response, self.method, label)
    }

    /// SSE: the first notification, then the call's events, with keep-alives. Closing the stream
    /// drops the receiver, which cancels a first call on the backend.
    fn stream(
        self,
        first: Value,
        events: mpsc::Receiver<Event>,
        keep_alive: Duration,
        calls_end: Arc<CancellationToken>,
    ) -> Response<Body> {
        let method = self.method;
        let metrics = self.route.metrics.clone();
        let mut keep_alive = tokio::time::interval(keep_alive);
        keep_alive.reset();
        let first = stream::once(async move { sse_frame(&first) });
        let rest = stream::unfold(Some((events, keep_alive, self)), move |state| {
            let calls_end = calls_end.clone();
            async move {
                let (mut events, mut keep_alive, reply) = state?;
                tokio::select! {
                    biased;
                    event = events.recv() => match event {
                        Some(Event::Notify(message)) => {
                            Some((sse_frame(&message), Some((events, keep_alive, reply))))
                        }
                        Some(Event::Outcome(outcome)) => {
                            let (message, _) = reply.message(outcome);
                            Some((sse_event(&message), None))
                        }
                        None => None,
                    },
                    () = calls_end.cancelled() => {
                        let (message, _) = reply.message(Outcome::Error(GatewayError::ShutDown));
                        Some((sse_event(&message), None))
                    }
                    _ = keep_alive.tick() => {
                        Some((Bytes::from_static(KEEP_ALIVE), Some((events, keep_alive, reply))))
                    }
                }
            }
        });
        let frames = first.chain(rest).map(move |bytes| {
            metrics.response_bytes.inc_by(bytes.len() as u64);
            Ok::<_, tower::BoxError>(Frame::data(bytes))
        });
        sse_response(StreamBody::new(frames).boxed_unsync(), method, "stream")
    }
}

/// An answer as it is when it comes within `after`, else an SSE stream started then:
/// keep-alive comments every `keep_alive`, then the answer as its one event, or the answer's own
/// SSE events. Proxies and peers that cut a silent response wait for it then.
pub async fn answer_early(
    mut answer: BoxFuture<'static, Response<Body>>,
    method: Method,
    after: Duration,
    keep_alive: Duration,
) -> Response<Body> {
    tokio::select! {
        response = &mut answer => return response,
        _ = tokio::time::sleep(after) => {}
    }
    enum Relay {
        Waiting(BoxFuture<'static, Response<Body>>, tokio::time::Interval),
        Streaming(Body),
    }
    let keep_alive_frame = || Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)));
    let mut keep_alive = tokio::time::interval(keep_alive);
    keep_alive.reset();
    let first = stream::once(async move { keep_alive_frame() });
    let rest = stream::unfold(
        Some(Relay::Waiting(answer, keep_alive)),
        move |relay| async move {
            match relay? {
                Relay::Waiting(mut answer, mut keep_alive) => tokio::select! {
                    response = &mut answer => {
                        let event_stream = is_event_stream(response.headers());
                        let mut body = response.into_body();
                        if event_stream {
                            // Its own events follow.
                            let frame = body.frame().await?;
                            return Some((frame, Some(Relay::Streaming(body))));
                        }
                        match body.collect().await {
                            Ok(message) => Some((Ok(Frame::data(sse_event(&message.to_bytes()))), None)),
                            Err(error) => Some((Err(error), None)),
                        }
                    }
                    _ = keep_alive.tick() => Some((keep_alive_frame(), Some(Relay::Waiting(answer, keep_alive)))),
                },
                Relay::Streaming(mut body) => {
                    let frame = body.frame().await?;
                    Some((frame, Some(Relay::Streaming(body))))
                }
            }
        },
    );
    sse_response(
        StreamBody::new(first.chain(rest)).boxed_unsync(),
        method,
        "stream",
    )
}

/// A round handed to a client: counted per route, and its questions per kind.
fn count_round(metrics: &Metrics, route: &str, result: &Value) {
    metrics.rounds.with_label_values(&[route]).inc();
    if let Some(requests) = result.get("inputRequests").and_then(Value::as_object) {
        for request in requests.values() {
            let kind = request
                .get("method")
                .and_then(Value::as_str)
                .and_then(InputKind::from_method)
                .unwrap_or(InputKind::Roots);
            metrics
                .input_requests
                .with_label_values(&[kind.as_str()])
                .inc();
        }
    }
}

/// The answer to a request whose handling panicked: a JSON-RPC internal error, 500.
pub fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %detail, "request handling panicked");
    error_response(
        None,
        &GatewayError::Internal("the request could not be handled".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{ServiceBuilder, ServiceExt};
    use tower_http::catch_panic::CatchPanicLayer;

    #[tokio::test]
    async fn a_panic_below_answers_500_with_a_jsonrpc_error() {
        let service = ServiceBuilder::new()
            .layer(CatchPanicLayer::custom(panicked))
            .service_fn(|request: http::Request<()>| async move {
                if request.uri().path() == "/panic" {
                    panic!("boom");
                }
                Ok::<_, Infallible>(empty(StatusCode::ACCEPTED))
            });
        let calm = service.oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(calm.status(), StatusCode::ACCEPTED);
        let request = http::Request::builder().uri("/panic").body(()).unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(message["error"]["code"], jsonrpc::codes::INTERNAL_ERROR);
        assert_eq!(message["id"], Value::Null);
    }
}
