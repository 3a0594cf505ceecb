//! The back side: a 2025-11-25 MCP client for legacy servers.
//!
//! - [`stdio`] and [`http`] move JSON-RPC messages to and from one server process or HTTP session;
//! - [`session`] owns one initialized MCP session: request ids, routing of responses, server
//!   requests and notifications to the call that is active on it;
//! - [`pool`] hands out sessions exclusively, keyed by principal and capability profile;
//! - [`changes`] gathers what backends announce outside calls (list changes, resource
//!   updates), per principal; [`listen`] keeps a session open per listening principal.
//!
//! Nothing here knows about 2026-07-28; the front decides what reaches a client.

pub mod changes;
pub mod http;
pub mod listen;
pub mod pool;
pub mod session;
pub mod stdio;
#[cfg(test)]
mod test_peer;

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::{BackendConfig, TransportKind};
use crate::sync::LockRecovered;

pub use crate::error::BackendError;

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
pub enum TransportEvent {
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
    /// The transport can carry nothing more (process exited, HTTP session gone).
    Closed(String),
}

/// Everything a session needs to reach one backend, resolved once from configuration.
#[derive(Debug)]
pub struct BackendSpec {
    pub name: String,
    pub config: BackendConfig,
    /// Shared HTTP client (connection reuse across sessions); `None` for stdio backends.
    pub http_client: Option<crate::http_client::HttpClient>,
}

impl BackendSpec {
    pub fn new(name: &str, config: BackendConfig) -> Result<Arc<Self>, BackendError> {
        let http_client = match config.transport {
            TransportKind::Http => Some(crate::http_client::new_client()?),
            TransportKind::Stdio => None,
        };
        Ok(Arc::new(Self {
            name: name.to_string(),
            config,
            http_client,
        }))
    }
}

/// One connection to a backend: a child process or an HTTP session.
pub enum Transport {
    Stdio(Box<stdio::StdioTransport>),
    Http(http::HttpTransport),
}

impl Transport {
    pub async fn connect(
        spec: &BackendSpec,
        inbound: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, BackendError> {
        match spec.config.transport {
            TransportKind::Stdio => Ok(Self::Stdio(Box::new(stdio::StdioTransport::spawn(
                spec, inbound,
            )?))),
            TransportKind::Http => Ok(Self::Http(http::HttpTransport::new(spec, inbound)?)),
        }
    }

    /// Queues one message for the backend; delivery failures come back as events.
    pub fn send(&self, message: Value) -> Result<(), BackendError> {
        match self {
            Self::Stdio(t) => t.send(message),
            Self::Http(t) => t.send(message),
        }
    }

    /// Called once `initialize` succeeded: HTTP starts sending `MCP-Protocol-Version` and opens
    /// the standalone GET stream.
    pub fn initialized(&self, protocol_version: &str) {
        if let Self::Http(t) = self {
            t.initialized(protocol_version);
        }
    }

    /// Ends the connection politely: stdin EOF then signals for stdio, DELETE for HTTP.
    pub async fn shutdown(&self) {
        match self {
            Self::Stdio(t) => t.shutdown().await,
            Self::Http(t) => t.shutdown().await,
        }
    }
}

/// The queue a transport's writer task drains; closing it is how a transport stops writing.
pub struct Outbox<T>(Mutex<Option<mpsc::UnboundedSender<T>>>);

impl<T> Outbox<T> {
    pub fn new(sender: mpsc::UnboundedSender<T>) -> Self {
        Self(Mutex::new(Some(sender)))
    }

    pub fn send(&self, item: T) -> Result<(), BackendError> {
        let guard = self.0.lock_recovered();
        match guard.as_ref() {
            Some(tx) => tx
                .send(item)
                .map_err(|_| BackendError::Closed("backend writer stopped".into())),
            None => Err(BackendError::Closed("transport shut down".into())),
        }
    }

    pub fn close(&self) {
        self.0.lock_recovered().take();
    }
}
