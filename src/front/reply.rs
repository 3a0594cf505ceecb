//! How the front writes a 2026-07-28 call's answer: its outcome as one JSON body (stamped for
//! 2026-07-28), or an SSE stream when notifications precede it, labelled for the metrics
//! ([`Labels`]); and the body types of the MCP listener's responses. The pieces both eras write
//! with are in [`crate::http_serve`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::route::Route;
use super::translate;
use crate::access::CallerAccess;
use crate::audit::{AuditOutcome, PendingAudit};
use crate::error::GatewayError;
use crate::http_serve::{
    error_response, json_bytes_response, labeled, sse_event, sse_frame, sse_response, Body,
    KEEP_ALIVE,
};
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::mrtr::inputs::InputKind;
use crate::mrtr::{Event, Outcome, Started};
use crate::protocol::Method;

/// What a route's stack answers with: its bodies as panic catching wraps them.
pub(crate) type RouteBody = tower_http::body::UnsyncBoxBody<Bytes, tower::BoxError>;

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

/// A message as JSON bytes; serializing a message cannot fail.
fn written(message: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_default()
}

fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Final(_) => "ok",
        Outcome::InputRequired(_) => "input_required",
        Outcome::Error(_) => "error",
    }
}

/// How the answer to one forwarded request is written.
pub(crate) struct Reply {
    pub route: Arc<Route>,
    pub id: Value,
    pub method: Method,
    /// A retry's result must not be cached.
    pub retry: bool,
    /// Lists are filtered by what this caller may see.
    pub caller: Arc<CallerAccess>,
    /// The call's audit record, finished by its last answer; dropped unfinished (the client
    /// went away), it records the call cancelled.
    pub audit: Option<PendingAudit>,
    /// Rounds the call went through before this request.
    pub rounds_before: u32,
    /// Relayed from a 2026-07-28 backend: its results are already 2026-07-28's.
    pub relayed: bool,
}

impl Reply {
    /// The response to a call's first answer. A stream still open when `calls_end` is
    /// cancelled ends with [`GatewayError::ShutDown`] as its last event.
    pub(crate) fn started(
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

    /// Finishes the audit record with the outcome about to be written.
    fn audit(&mut self, outcome: &Outcome) {
        let Some(audit) = self.audit.take() else {
            return;
        };
        let (verdict, rounds, error) = match outcome {
            Outcome::Final(result) => {
                let failed = serde_json::from_str::<ToolFailure>(result.get())
                    .is_ok_and(|result| result.is_error);
                let verdict = if failed {
                    AuditOutcome::Error
                } else {
                    AuditOutcome::Ok
                };
                (verdict, self.rounds_before, None)
            }
            Outcome::InputRequired(_) => {
                (AuditOutcome::InputRequired, self.rounds_before + 1, None)
            }
            Outcome::Error(error) => (
                AuditOutcome::Error,
                self.rounds_before,
                Some(audit_reason(error)),
            ),
        };
        audit.finish(verdict, rounds, error);
    }

    /// A list result without what the caller may not see; other results as they are.
    fn visible(&self, result: Box<RawValue>) -> Box<RawValue> {
        if !self.method.is_list() || !self.caller.filters_lists() {
            return result;
        }
        let Ok(mut members) = serde_json::from_str::<Map<String, Value>>(result.get()) else {
            return result;
        };
        self.caller.filter_list(self.method, &mut members);
        serde_json::value::to_raw_value(&members).unwrap_or(result)
    }

    /// The JSON-RPC message for an outcome, written.
    fn message(&mut self, outcome: Outcome) -> (Vec<u8>, StatusCode) {
        self.audit(&outcome);
        // Read when the message is written: the first session may have started meanwhile.
        let init = match &outcome {
            Outcome::Error(_) => None,
            _ if self.relayed => None,
            _ => self.route.backend_init(),
        };
        let server_info = init.as_deref().and_then(|init| init.get("serverInfo"));
        match outcome {
            Outcome::Final(result) => {
                // Learned from the backend's whole list: what one caller may see must not
                // decide which headers another's calls are checked for.
                if let (Method::ToolsList, Ok(pool)) = (self.method, self.route.pool()) {
                    if let Ok(list) = serde_json::from_str::<Value>(result.get()) {
                        self.route
                            .tool_headers
                            .learn(&list, pool.tools_generation());
                    }
                }
                let result = self.visible(result);
                let stamped = if self.relayed {
                    translate::relay_result(self.method, &result, &self.route.config, self.retry)
                } else {
                    translate::stamp_result(
                        self.method,
                        &result,
                        &self.route.config,
                        server_info,
                        self.retry,
                    )
                };
                (
                    written(&jsonrpc::result_message(&self.id, stamped)),
                    StatusCode::OK,
                )
            }
            Outcome::InputRequired(result) => {
                count_round(&self.route.metrics, &self.route.config.path, &result);
                let stamped = if self.relayed {
                    result
                } else {
                    translate::stamp_interim(result, server_info)
                };
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

    fn json(mut self, outcome: Outcome) -> Response<Body> {
        let label = outcome_label(&outcome);
        let response = match outcome {
            // With the headers an error's status takes (`Retry-After`).
            Outcome::Error(error) => {
                self.audit(&Outcome::Error(error.clone()));
                error_response(Some(self.id.clone()), &error)
            }
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
                let (mut events, mut keep_alive, mut reply) = state?;
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

/// An error as the audit log records it: the gateway's own words, and for a backend's error its
/// code only (its message may echo the arguments, which the log keeps only when asked to).
pub(crate) fn audit_reason(error: &GatewayError) -> String {
    match error {
        GatewayError::Backend(e) => format!("backend error {}", e.code),
        _ => error.to_string(),
    }
}

/// Whether a tool's result reports its failure (`isError`), for the audit record.
#[derive(serde::Deserialize)]
struct ToolFailure {
    #[serde(default, rename = "isError")]
    is_error: bool,
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
