//! The back side for 2026-07-28 servers: no `initialize`, no sessions; each request goes as
//! the client's request went, with its own `_meta`, and comes back as its notifications and one
//! answer ([`Exchange`]). What a backend speaks is decided once and remembered ([`detect`]).
//!
//! - `http`: one POST per request, with the request-metadata headers; closing the response
//!   stream (dropping the exchange) is the request's cancellation;
//! - `stdio`: one process per identity the backend is told, requests multiplexed on it by the
//!   gateway's own ids and progress tokens; dropping an unanswered exchange sends
//!   `notifications/cancelled`;
//! - [`detect`] the era of a backend: configured, or probed with `server/discover`.
//!
//! Nothing here knows about held calls, `requestState` or the front; the bridge's relay
//! (`mrtr::relay`) decides what reaches a client.

pub(crate) mod detect;
mod http;
mod stdio;

pub(crate) use self::http::{param_headers, request_headers};

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::value::RawValue;
use serde_json::Value;
use sse_stream::SseStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::detect::{EraCell, ResolvedEra};
use super::identity::SessionIdentity;
use super::{BackendError, BackendSpec};
use crate::config::TransportKind;
use crate::jsonrpc::{Incoming as Decoded, JsonRpcError};

/// The revision spoken to modern backends.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";

/// A 2026-07-28 request for one backend, as the relay built it.
#[derive(Debug, Clone)]
pub(crate) struct ModernRequest {
    pub method: String,
    /// The request's params: the client's, `_meta` included.
    pub params: Value,
    /// `Mcp-Name` (a tool or prompt name, a resource URI), decoded.
    pub name: Option<String>,
    /// Headers the client sent that the backend checks against the body (`Mcp-Param-*`), as
    /// they came; HTTP only.
    pub headers: Vec<(::http::HeaderName, ::http::HeaderValue)>,
}

/// What a backend sends for one request: notifications, then its answer.
#[derive(Debug)]
pub(crate) enum ModernEvent {
    /// A notification about the request (progress, log, a listen's news).
    Notify(Value),
    /// A successful answer, its result as the backend wrote it.
    Result(Box<RawValue>),
    /// An error answer.
    Error { error: JsonRpcError },
}

/// One request's traffic from the backend. Dropped before its answer, the request is cancelled
/// on the backend.
pub(crate) struct Exchange {
    source: Source,
    /// The id the request went with, which the answer carries.
    id: Value,
    answered: bool,
}

enum Source {
    /// An answer read whole (a JSON body).
    Ready(Option<ModernEvent>),
    /// An SSE response stream (HTTP, or a response the gateway wrote itself).
    Stream(Box<SseStream<StreamBody>>),
    /// Messages routed from a shared process (stdio); dropped unanswered, it cancels.
    Routed(Box<stdio::Routed>),
}

impl Exchange {
    /// An exchange already answered (a request refused before it went anywhere).
    pub(crate) fn answered(id: Value, event: ModernEvent) -> Self {
        Self {
            source: Source::Ready(Some(event)),
            id,
            answered: false,
        }
    }

    /// The next notification or the answer; `None` after the answer. A stream that ends
    /// without an answer is an error.
    pub(crate) async fn next(&mut self) -> Option<Result<ModernEvent, BackendError>> {
        if self.answered {
            return None;
        }
        loop {
            let decoded = match &mut self.source {
                Source::Ready(event) => {
                    self.answered = true;
                    return event.take().map(Ok);
                }
                Source::Stream(events) => match events.next().await {
                    Some(Ok(event)) => {
                        if event.event.as_deref().is_some_and(|e| e != "message") {
                            continue;
                        }
                        let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                            continue;
                        };
                        match crate::jsonrpc::decode(&data) {
                            Ok(messages) => messages,
                            Err(e) => {
                                self.answered = true;
                                return Some(Err(BackendError::Closed(format!(
                                    "backend sent invalid JSON: {e}"
                                ))));
                            }
                        }
                    }
                    Some(Err(e)) => {
                        self.answered = true;
                        return Some(Err(BackendError::Closed(format!(
                            "backend response stream failed: {e}"
                        ))));
                    }
                    None => {
                        self.answered = true;
                        return Some(Err(BackendError::Closed(
                            "backend closed the response stream without answering".into(),
                        )));
                    }
                },
                Source::Routed(routed) => match routed.next().await {
                    Ok(stdio::RoutedNext::Notice(notice)) => {
                        return Some(Ok(ModernEvent::Notify(notice)))
                    }
                    Ok(stdio::RoutedNext::Answer(answer)) => vec![answer],
                    Err(error) => {
                        self.answered = true;
                        return Some(Err(error));
                    }
                },
            };
            // A batch is not expected here; each of its messages is taken in order, and the
            // first answer ends the exchange.
            for message in decoded {
                if let Some(event) = self.event_of(message) {
                    if !matches!(event, ModernEvent::Notify(_)) {
                        self.answered = true;
                    }
                    return Some(Ok(event));
                }
            }
        }
    }

    /// The event a message is for this request: a notification, or its answer; `None` for
    /// anything else (a server request, which 2026-07-28 forbids, or another request's answer).
    fn event_of(&self, message: Decoded) -> Option<ModernEvent> {
        match message {
            Decoded::Answer { id, result } => {
                (id == self.id).then_some(ModernEvent::Result(result))
            }
            Decoded::Other(message) => {
                if message.get("method").is_some() {
                    return message
                        .get("id")
                        .is_none()
                        .then_some(ModernEvent::Notify(message));
                }
                let error = message.get("error")?;
                (message.get("id") == Some(&self.id)).then(|| ModernEvent::Error {
                    error: JsonRpcError::from_value(error),
                })
            }
        }
    }
}

/// A response body an exchange reads: the backend's over HTTP, or one the gateway wrote.
type StreamBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

impl Exchange {
    /// The exchange of a request the gateway answered itself, for a route over several
    /// backends: its response (a JSON answer, or an SSE stream), read as a backend's is.
    /// Dropping it cancels the request, as the response's reader going away would.
    pub(crate) async fn from_response(
        id: Value,
        response: ::http::Response<crate::http_serve::Body>,
    ) -> Result<Self, BackendError> {
        if crate::http_client::is_event_stream(response.headers()) {
            let body = response.into_body().map_err(stream_failed);
            return Ok(Self {
                source: Source::Stream(Box::new(SseStream::new(body.boxed_unsync()))),
                id,
                answered: false,
            });
        }
        let status = response.status();
        // Read whole here: the gateway wrote it, no limit applies.
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| BackendError::Closed(format!("reading the answer failed: {e}")))?
            .to_bytes();
        read_answer(http_body_util::Full::new(body), usize::MAX, &id, status).await
    }
}

/// A response body's failure, as the SSE reader takes it.
fn stream_failed(error: tower::BoxError) -> std::io::Error {
    std::io::Error::other(error)
}

/// Reads a whole JSON answer (HTTP), refusing more than `limit` bytes.
async fn read_answer<B>(
    body: B,
    limit: usize,
    id: &Value,
    status: ::http::StatusCode,
) -> Result<Exchange, BackendError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tower::BoxError>,
{
    let body: Bytes = http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| BackendError::Closed(format!("reading backend response failed: {e}")))?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| BackendError::Closed(format!("backend answered HTTP {status}, not UTF-8")))?;
    let not_json =
        || BackendError::Closed(format!("backend answered HTTP {status} without JSON-RPC"));
    let mut messages = crate::jsonrpc::decode(text).map_err(|_| not_json())?;
    if messages.len() != 1 {
        return Err(not_json());
    }
    let event = match messages.pop() {
        Some(Decoded::Answer { result, .. }) if status.is_success() => ModernEvent::Result(result),
        Some(Decoded::Other(message)) => match message.get("error") {
            // An error without an id is the answer to a request the server could not read.
            Some(error) => ModernEvent::Error {
                error: JsonRpcError::from_value(error),
            },
            None => return Err(not_json()),
        },
        _ => return Err(not_json()),
    };
    Ok(Exchange::answered(id.clone(), event))
}

/// A 2026-07-28 backend: its era, and the link requests travel on.
pub(crate) struct ModernBackend {
    spec: Arc<BackendSpec>,
    /// The backend's (`spec.era`): its legacy sessions may ask for a new probe too.
    era: Arc<EraCell>,
    link: Link,
}

enum Link {
    Http(Box<http::ModernHttp>),
    Stdio(stdio::ModernStdio),
}

impl ModernBackend {
    /// Processes (stdio) end when `stop` is cancelled; their tasks run on `tasks`.
    pub(crate) fn new(
        spec: Arc<BackendSpec>,
        tasks: TaskTracker,
        stop: CancellationToken,
    ) -> Result<Self, BackendError> {
        let link = match spec.config.transport {
            TransportKind::Http => Link::Http(Box::new(http::ModernHttp::new(&spec)?)),
            TransportKind::Stdio => Link::Stdio(stdio::ModernStdio::new(spec.clone(), tasks, stop)),
        };
        Ok(Self {
            era: spec.era.clone(),
            spec,
            link,
        })
    }

    /// What the backend speaks: remembered, else probed with this caller's identity.
    pub(crate) async fn era(
        &self,
        identity: &SessionIdentity,
    ) -> Result<ResolvedEra, BackendError> {
        self.era.resolve(|| self.probe(identity)).await
    }

    /// The era last decided, without probing.
    pub(crate) fn known_era(&self) -> Option<ResolvedEra> {
        self.era.known()
    }

    /// Forgets a detected era (the backend restarted or fails): the next request probes again.
    pub(crate) fn forget_era(&self) {
        self.era.forget();
    }

    /// A request to it failed: one it could not be reached for, or that it ended unanswered
    /// (it may have restarted as another revision), has the next request probe its era again.
    pub(crate) fn failed(&self, error: &BackendError) {
        if matches!(
            error,
            BackendError::Connect(_) | BackendError::Closed(_) | BackendError::Spawn(_)
        ) {
            self.forget_era();
        }
    }

    /// Sends one request; its notifications and answer follow on the exchange.
    pub(crate) async fn send(
        &self,
        identity: &SessionIdentity,
        request: &ModernRequest,
    ) -> Result<Exchange, BackendError> {
        match &self.link {
            Link::Http(link) => link.send(&self.spec, identity, request).await,
            Link::Stdio(link) => link.send(identity, request).await,
        }
    }

    /// `server/discover` as the era probe sends it: what the answer says about the backend.
    async fn probe(&self, identity: &SessionIdentity) -> Result<detect::Verdict, BackendError> {
        let request = detect::discover_request();
        let attempt = async {
            let mut exchange = self.send(identity, &request).await?;
            loop {
                match exchange.next().await {
                    Some(Ok(ModernEvent::Notify(_))) => continue,
                    Some(Ok(event)) => return Ok(detect::verdict_of(event)),
                    Some(Err(e)) => return Err(e),
                    None => return Err(BackendError::Closed("no answer".into())),
                }
            }
        };
        let verdict = match tokio::time::timeout(self.spec.config.init_timeout, attempt).await {
            Ok(Ok(verdict)) => verdict,
            // Unreachable, or refused the caller: no verdict, and nothing remembered.
            Ok(Err(
                error @ (BackendError::Connect(_)
                | BackendError::Spawn(_)
                | BackendError::Refused(_)),
            )) => return Err(error),
            // Anything else a legacy server does with a request before `initialize`: an error
            // that is not a 2026-07-28 one, closing, or no answer in time.
            Ok(Err(_)) | Err(_) => detect::Verdict::Legacy,
        };
        if matches!(verdict, detect::Verdict::Legacy) {
            // The process that answered the probe is not one a session may use.
            self.shutdown().await;
        }
        Ok(verdict)
    }

    /// Ends the backend's processes (stdio).
    pub(crate) async fn shutdown(&self) {
        if let Link::Stdio(link) = &self.link {
            link.shutdown().await;
        }
    }
}
