//! A scripted [`BackendCall`] for the unit tests: the test pushes the backend's events through
//! a [`Backend`] and reads back, in order, what the code under test sent the backend.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::BackendCall;
use crate::backend::session::CallEvent;
use crate::backend::{BackendError, MessageLimit};
use crate::jsonrpc::{self, JsonRpcError};

/// What the driver did to the backend, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Sent {
    Respond(Value, Result<Value, JsonRpcError>),
    Release(Value, String),
    Send,
    NoteRoots,
    Barrier,
}

type Log = Arc<Mutex<Vec<Sent>>>;

/// A scripted [`BackendCall`].
pub(crate) struct FakeCall {
    events: mpsc::UnboundedReceiver<CallEvent>,
    unsent: bool,
    log: Log,
    /// The backend's message limit; answers over it are refused as a transport would.
    limit: Option<MessageLimit>,
}

impl FakeCall {
    /// A call and the test's end of it; `unsent` while its prelude holds it back.
    pub(crate) fn new(unsent: bool) -> (Self, Backend) {
        let (tx, rx) = mpsc::unbounded_channel();
        let log = Log::default();
        let call = Self {
            events: rx,
            unsent,
            log: log.clone(),
            limit: None,
        };
        (call, Backend { events: tx, log })
    }

    /// A backend that takes messages of at most `bytes`.
    pub(crate) fn with_limit(mut self, bytes: usize) -> Self {
        self.limit = Some(MessageLimit {
            backend: "fake".into(),
            bytes,
        });
        self
    }

    fn record(&self, sent: Sent) {
        self.log.lock().unwrap().push(sent);
    }
}

impl BackendCall for FakeCall {
    fn is_unsent(&self) -> bool {
        self.unsent
    }

    fn send(&mut self) -> Result<(), BackendError> {
        if std::mem::take(&mut self.unsent) {
            self.record(Sent::Send);
        }
        Ok(())
    }

    async fn next_event(&mut self) -> CallEvent {
        self.events
            .recv()
            .await
            .unwrap_or_else(|| CallEvent::Failed(BackendError::Closed("test over".into())))
    }

    fn try_next_event(&mut self) -> Option<CallEvent> {
        self.events.try_recv().ok()
    }

    fn events_closed(&self) -> bool {
        self.events.is_closed() && self.events.is_empty()
    }

    fn respond(
        &self,
        server_request_id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError> {
        if let (Some(limit), Ok(result)) = (&self.limit, &outcome) {
            let response = jsonrpc::result_message(&server_request_id, result);
            limit.check(jsonrpc::written_len(&response))?;
        }
        self.record(Sent::Respond(server_request_id, outcome));
        Ok(())
    }

    fn release(&self, id: Value, method: String, _params: Option<Value>) {
        self.record(Sent::Release(id, method));
    }

    fn session_alive(&self) -> bool {
        true
    }

    fn message_limit(&self) -> Option<MessageLimit> {
        self.limit.clone()
    }

    fn note_client_roots(&self) {
        self.record(Sent::NoteRoots);
    }

    async fn roots_barrier(&self) {
        self.record(Sent::Barrier);
    }

    async fn apply_log_level(
        &self,
        _level: Option<&str>,
        _timeout: Duration,
    ) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The test's end of a [`FakeCall`].
pub(crate) struct Backend {
    events: mpsc::UnboundedSender<CallEvent>,
    log: Log,
}

impl Backend {
    pub(crate) fn push(&self, event: CallEvent) {
        // A driver already dropped hears nothing, as a real session would.
        let _ = self.events.send(event);
    }

    pub(crate) fn ask(&self, id: i64, method: &str, params: Value) {
        self.push(CallEvent::ServerRequest {
            id: json!(id),
            method: method.into(),
            params: Some(params),
            deferred: false,
        });
    }

    pub(crate) fn ask_deferred(&self, id: i64, method: &str, params: Option<Value>) {
        self.push(CallEvent::ServerRequest {
            id: json!(id),
            method: method.into(),
            params,
            deferred: true,
        });
    }

    pub(crate) fn withdraw(&self, id: i64) {
        self.push(CallEvent::ServerRequestCancelled { id: json!(id) });
    }

    pub(crate) fn answer(&self) {
        self.push(CallEvent::Final(Ok(crate::jsonrpc::raw(
            &json!({ "content": [] }),
        ))));
    }

    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.log.lock().unwrap().clone()
    }

    /// What the driver answered to server request `id`, in order.
    pub(crate) fn responses_to(&self, id: i64) -> Vec<Result<Value, JsonRpcError>> {
        self.sent()
            .into_iter()
            .filter_map(|s| match s {
                Sent::Respond(rid, outcome) if rid == json!(id) => Some(outcome),
                _ => None,
            })
            .collect()
    }
}
