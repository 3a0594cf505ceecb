//! The back side: a 2025-11-25 MCP client for legacy servers, and a 2026-07-28 one for
//! modern servers.
//!
//! - [`stdio`] and [`http`] move JSON-RPC messages to and from one server process or HTTP session;
//! - [`session`] owns one initialized MCP session: request ids, routing of responses, server
//!   requests and notifications to the call that is active on it;
//! - [`pool`] hands out sessions exclusively, keyed by principal and capability profile;
//! - [`changes`] gathers what backends announce outside calls (list changes, resource
//!   updates), per principal; [`listen`] keeps a session open per listening principal.
//!
//! - [`modern`] reaches 2026-07-28 backends: each request relayed on its own, and the era
//!   of a backend detected.
//!
//! Only [`modern`] speaks 2026-07-28; the front decides what reaches a client.

pub(crate) mod changes;
mod http;
pub(crate) mod identity;
pub(crate) mod listen;
pub(crate) mod modern;
pub(crate) mod pool;
pub(crate) mod session;
mod stdio;
#[cfg(test)]
mod test_peer;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use self::identity::SessionIdentity;
use crate::config::{BackendConfig, TransportKind};
use crate::sync::LockRecovered;

pub(crate) use crate::error::BackendError;

impl From<crate::jsonrpc::Incoming> for TransportEvent {
    fn from(message: crate::jsonrpc::Incoming) -> Self {
        match message {
            crate::jsonrpc::Incoming::Answer { id, result } => {
                TransportEvent::Answer { id, result }
            }
            crate::jsonrpc::Incoming::Other(value) => TransportEvent::Message(value),
        }
    }
}

/// What a transport reports to its session.
#[derive(Debug)]
pub(crate) enum TransportEvent {
    Message(Value),
    /// A successful answer, its result as the backend wrote it.
    Answer {
        id: Value,
        result: Box<serde_json::value::RawValue>,
    },
    /// A request could not be delivered or answered (unreachable, bad status, stream lost).
    RequestFailed {
        id: Value,
        reason: String,
    },
    /// The answer to the backend's request `id` could not be delivered: whoever waits on it
    /// would otherwise wait, with nothing to show, for the backend's own timeout.
    AnswerUndelivered {
        id: Value,
        reason: String,
    },
    /// The transport can carry nothing more (process exited, HTTP session gone).
    Closed(String),
    /// A message about one of the client's requests (`request`, its id), for that request's
    /// stream: what the legacy path's reverse bridge knows and a backend session never says.
    ForRequest {
        request: Value,
        message: Value,
    },
}

/// Everything a session needs to reach one backend, resolved once from configuration.
#[derive(Debug)]
pub struct BackendSpec {
    pub name: String,
    pub config: BackendConfig,
    /// Shared HTTP client (connection reuse across sessions); `None` for stdio backends.
    pub http_client: Option<crate::http_client::HttpClient>,
    /// The revision it speaks: configured, or detected and remembered. Its sessions' failures
    /// ask for a new probe.
    pub(crate) era: Arc<modern::detect::EraCell>,
}

impl BackendSpec {
    pub fn new(name: &str, config: BackendConfig) -> Result<Arc<Self>, BackendError> {
        let http_client = match config.transport {
            TransportKind::Http => Some(crate::http_client::new_client()?),
            TransportKind::Stdio => None,
        };
        Ok(Arc::new(Self {
            name: name.to_string(),
            era: Arc::new(modern::detect::EraCell::new(config.era)),
            config,
            http_client,
        }))
    }
}

/// One connection to a backend: a child process or an HTTP session, and the largest message
/// it takes.
pub(crate) struct Transport {
    link: Link,
    /// `max_message_bytes`, or the transport's default: checked on each message as written.
    message_limit: Option<MessageLimit>,
}

/// The largest message one backend takes (`max_message_bytes`, or its transport's default).
#[derive(Debug, Clone)]
pub struct MessageLimit {
    pub(crate) backend: String,
    pub(crate) bytes: usize,
}

impl MessageLimit {
    /// Refuses a message of `len` bytes that the backend would not take.
    pub(crate) fn check(&self, len: usize) -> Result<(), BackendError> {
        if len > self.bytes {
            return Err(BackendError::TooLarge {
                backend: self.backend.clone(),
                limit: self.bytes,
            });
        }
        Ok(())
    }
}

enum Link {
    Stdio(Box<stdio::StdioTransport>),
    Http(http::HttpTransport),
}

/// A message as it goes on the wire: serialized once, where its size is known.
pub(crate) struct Encoded {
    /// The id of a request, whose response the transport reads; `None` for a notification or
    /// an answer to a server request.
    pub request_id: Option<Value>,
    /// The id of the backend's request this message answers, if it is an answer.
    pub answers: Option<Value>,
    pub bytes: Bytes,
}

impl Encoded {
    fn new(message: &Value) -> Self {
        let id = message.get("id").cloned();
        let (request_id, answers) = if message.get("method").is_some() {
            (id, None)
        } else {
            (None, id)
        };
        // Serializing a `Value` cannot fail.
        let bytes = Bytes::from(serde_json::to_vec(message).unwrap_or_default());
        Self {
            request_id,
            answers,
            bytes,
        }
    }
}

impl Transport {
    pub(crate) async fn connect(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        inbound: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, BackendError> {
        Self::connect_now(spec, identity, inbound)
    }

    /// [`Transport::connect`], for callers that cannot wait: starting either transport never
    /// waits on the backend.
    pub(crate) fn connect_now(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        inbound: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, BackendError> {
        let link = match spec.config.transport {
            TransportKind::Stdio => Link::Stdio(Box::new(stdio::StdioTransport::spawn(
                spec, identity, inbound,
            )?)),
            TransportKind::Http => Link::Http(http::HttpTransport::new(spec, identity, inbound)?),
        };
        Ok(Self {
            link,
            message_limit: spec.config.message_limit().map(|bytes| MessageLimit {
                backend: spec.name.clone(),
                bytes,
            }),
        })
    }

    /// Queues one message for the backend; delivery failures come back as events. A message
    /// larger than the backend takes is refused here, never written: the gateway adds to what
    /// the client sent (trace context, its own progress token), so the client's size says
    /// nothing about it.
    pub(crate) fn send(&self, message: Value) -> Result<(), BackendError> {
        let encoded = Encoded::new(&message);
        if let Some(limit) = &self.message_limit {
            limit.check(encoded.bytes.len())?;
        }
        match &self.link {
            Link::Stdio(t) => t.send(encoded),
            Link::Http(t) => t.send(encoded),
        }
    }

    /// The largest message the backend takes, if it has a limit.
    pub(crate) fn message_limit(&self) -> Option<&MessageLimit> {
        self.message_limit.as_ref()
    }

    /// Called once `initialize` succeeded: HTTP starts sending `MCP-Protocol-Version` and opens
    /// the standalone GET stream.
    pub(crate) fn initialized(&self, protocol_version: &str) {
        if let Link::Http(t) = &self.link {
            t.initialized(protocol_version);
        }
    }

    /// Ends the connection politely: stdin EOF then signals for stdio, DELETE for HTTP.
    pub(crate) async fn shutdown(&self) {
        match &self.link {
            Link::Stdio(t) => t.shutdown().await,
            Link::Http(t) => t.shutdown().await,
        }
    }
}

/// The queue a transport's writer task drains; closing it is how a transport stops writing.
pub(crate) struct Outbox<T>(Mutex<Option<mpsc::UnboundedSender<T>>>);

impl<T> Outbox<T> {
    pub(crate) fn new(sender: mpsc::UnboundedSender<T>) -> Self {
        Self(Mutex::new(Some(sender)))
    }

    pub(crate) fn send(&self, item: T) -> Result<(), BackendError> {
        let guard = self.0.lock_recovered();
        match guard.as_ref() {
            Some(tx) => tx
                .send(item)
                .map_err(|_| BackendError::Closed("backend writer stopped".into())),
            None => Err(BackendError::Closed("transport shut down".into())),
        }
    }

    pub(crate) fn close(&self) {
        self.0.lock_recovered().take();
    }
}
