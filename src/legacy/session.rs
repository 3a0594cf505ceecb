//! One 2025-11-25 client session and the backend session dedicated to it.
//!
//! The session is a pipe: the client's messages go to the backend unchanged (its request ids
//! too: nobody else shares the backend session), and what the backend sends goes to one of the
//! client's streams ([`Streams`]):
//!
//! - a response, to the stream of the request it answers, which then finishes;
//! - a progress notification, to the stream of the request that gave its token;
//! - a list change or resource update, to the standalone stream when a client reads it;
//! - anything else (server requests, logs, cancellations), to the stream of the newest request
//!   in flight, as the legacy transport has it ("related to the originating request"), or the
//!   standalone stream when none is.
//!
//! What the route's policy hides is left out on the way: a list result's hidden items, and
//! updates of hidden resources. A call's response finishes its audit record.
//!
//! Task: one reader per session, owned by it (aborted when the session is dropped); it ends the
//! session when the backend closes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::reverse::{ModernUpstream, ReverseBridge, ReverseLimits};
use super::streams::{StreamLog, Streams};
use super::LegacySessions;
use crate::access::CallerAccess;
use crate::audit::{AuditOutcome, PendingAudit};
use crate::backend::identity::SessionIdentity;
use crate::backend::{Transport, TransportEvent};
use crate::error::{BackendError, GatewayError};
use crate::jsonrpc::codes;
use crate::mrtr::quota::Place;
use crate::protocol::Method;
use crate::sync::LockRecovered;

/// The backend's questions a 2026-07-28 client would get as a round.
const INPUT_REQUESTS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Announcements that concern no request: they go where a client listens for such things.
const UNRELATED: [&str; 4] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
    "notifications/resources/updated",
];

/// What a session's messages go to: a backend session of its own, or, for a 2026-07-28
/// backend, the reverse bridge.
pub(crate) enum Upstream {
    Session(Transport),
    Reversed(ReverseBridge),
}

impl Upstream {
    fn send(&self, message: Value) -> Result<(), BackendError> {
        match self {
            Self::Session(transport) => transport.send(message),
            Self::Reversed(bridge) => bridge.send(message),
        }
    }

    fn initialized(&self, version: &str) {
        if let Self::Session(transport) = self {
            transport.initialized(version);
        }
    }

    async fn shutdown(&self) {
        match self {
            Self::Session(transport) => transport.shutdown().await,
            Self::Reversed(bridge) => bridge.shutdown().await,
        }
    }
}

pub struct LegacySession {
    /// The table key, sealed into the client's session id.
    key: String,
    transport: Upstream,
    streams: Arc<Streams>,
    routing: Mutex<Routing>,
    /// Client requests being read or answered, and streams being read, right now.
    open: AtomicUsize,
    last_seen: Mutex<Instant>,
    reader: Mutex<Option<JoinHandle<()>>>,
    /// The client as its latest request showed it: updates of resources its policy hides are
    /// not passed on.
    caller: CallerCell,
    /// What the backend session was told about the client when it started.
    identity: String,
    /// The session's place in the `[legacy]` limits, given back when it is dropped.
    _place: Place,
}

/// Whom a session's client requests come from: the latest, as the session heard them (shared
/// with the reverse bridge of a route over several backends, which asks the route for them).
pub(crate) type CallerCell = Arc<Mutex<Arc<CallerAccess>>>;

/// What a new session connects to.
pub(crate) enum UpstreamOf<'a> {
    Session(&'a crate::backend::BackendSpec),
    Reversed(ModernUpstream, ReverseLimits),
}

/// What a request's response goes through on its way to the client.
pub(crate) struct Answer {
    pub method: Method,
    /// Whose list it is: hidden items are left out.
    pub caller: Arc<CallerAccess>,
    /// Finished by the response; dropped without one (the session ended first), the call is
    /// recorded cancelled.
    pub audit: Option<PendingAudit>,
}

/// A request whose response has not come.
struct InFlight {
    order: u64,
    log: Arc<StreamLog>,
    answer: Answer,
    /// Requests of the backend the request's stream carried: its rounds, for the audit.
    rounds: u32,
}

#[derive(Default)]
struct Routing {
    /// Requests whose response has not come, by id (as JSON text).
    in_flight: HashMap<String, InFlight>,
    order: u64,
    /// Progress tokens (as JSON text) to the request that gave them.
    progress: HashMap<String, String>,
    /// The client's `initialize`, answered before the session is registered.
    init: Option<(String, oneshot::Sender<Value>)>,
    ended: bool,
}

impl Routing {
    fn newest(&mut self) -> Option<&mut InFlight> {
        self.in_flight
            .values_mut()
            .max_by_key(|request| request.order)
    }

    /// The waiter of the client's `initialize`, if `key` is its id.
    fn take_init(&mut self, key: &str) -> Option<oneshot::Sender<Value>> {
        if self.init.as_ref().is_some_and(|(init, _)| init == key) {
            return self.init.take().map(|(_, answered)| answered);
        }
        None
    }

    fn take(&mut self, key: &str) -> Option<InFlight> {
        let request = self.in_flight.remove(key)?;
        self.progress.retain(|_, request| request != key);
        Some(request)
    }
}

/// Counts a request or stream as open for as long as it lives (idle expiry waits for none).
pub struct Busy(Arc<LegacySession>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

fn internal_error(id: &Value, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": codes::INTERNAL_ERROR, "message": message },
    })
}

impl LegacySession {
    /// Connects a backend session for one client (or, for a 2026-07-28 backend, the reverse
    /// bridge); the reader starts at once.
    pub(crate) async fn connect(
        key: String,
        sessions: &Arc<LegacySessions>,
        upstream: UpstreamOf<'_>,
        identity: &Arc<SessionIdentity>,
        caller: CallerCell,
        keep: usize,
        place: Place,
    ) -> Result<Arc<Self>, BackendError> {
        let (inbound, events) = mpsc::channel(64);
        let transport = match upstream {
            UpstreamOf::Session(spec) => {
                Upstream::Session(Transport::connect(spec, identity, inbound).await?)
            }
            UpstreamOf::Reversed(upstream, limits) => {
                Upstream::Reversed(ReverseBridge::new(upstream, inbound, limits))
            }
        };
        let session = Arc::new(Self {
            key,
            transport,
            streams: Streams::new(keep),
            routing: Mutex::new(Routing::default()),
            open: AtomicUsize::new(0),
            last_seen: Mutex::new(Instant::now()),
            reader: Mutex::new(None),
            caller,
            identity: identity.fingerprint().to_string(),
            _place: place,
        });
        let reader = tokio::spawn(read_backend(
            Arc::downgrade(&session),
            Arc::downgrade(sessions),
            events,
        ));
        *session.reader.lock_recovered() = Some(reader);
        Ok(session)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }

    /// Sends the client's `initialize` and waits for the backend's answer; a result makes the
    /// transport speak the negotiated revision from now on.
    pub async fn initialize(&self, message: Value, wait: Duration) -> Result<Value, GatewayError> {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let (answered, answer) = oneshot::channel();
        self.routing.lock_recovered().init = Some((id_key(&id), answered));
        self.transport.send(message)?;
        let response = tokio::time::timeout(wait, answer)
            .await
            .map_err(|_| {
                GatewayError::BackendTimeout(format!("no answer to initialize within {wait:?}"))
            })?
            .map_err(|_| {
                GatewayError::Upstream(BackendError::Closed(
                    "the backend closed before answering initialize".into(),
                ))
            })?;
        if let Some(version) = response
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            self.transport.initialized(version);
        }
        Ok(response)
    }

    /// The client is here: the session is not idle until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Busy(self.clone())
    }

    fn touch(&self) {
        *self.last_seen.lock_recovered() = Instant::now();
    }

    /// No client request or stream open, and none for `idle`.
    pub fn idle_for(&self, idle: Duration) -> bool {
        self.open.load(Ordering::Acquire) == 0 && self.last_seen.lock_recovered().elapsed() >= idle
    }

    /// Client requests whose response has not come.
    pub fn requests_in_flight(&self) -> usize {
        self.routing.lock_recovered().in_flight.len()
    }

    /// Whether the backend session was told about the client what `identity` tells.
    pub(crate) fn tells(&self, identity: &SessionIdentity) -> bool {
        self.identity == identity.fingerprint()
    }

    /// The client cancelled a request: its audit record says so now, and its stream ends
    /// without a response (2025-11-25: a cancelled request is not answered). Whatever the
    /// backend still sends for it is dropped.
    pub(crate) fn cancelled_by_client(&self, request_id: &Value) {
        let request = self.routing.lock_recovered().take(&id_key(request_id));
        let Some(mut request) = request else {
            return;
        };
        if let Some(audit) = request.answer.audit.take() {
            audit.finish(AuditOutcome::Cancelled, request.rounds, None);
        }
        request.log.finish();
    }

    /// The client's latest request came from `caller`.
    pub(crate) fn heard_from(&self, caller: Arc<CallerAccess>) {
        *self.caller.lock_recovered() = caller;
    }

    /// Sends a client request; its response, and what relates to it, go to the stream returned.
    pub(crate) fn request(
        &self,
        id: &Value,
        message: Value,
        answer: Answer,
    ) -> Result<Arc<StreamLog>, GatewayError> {
        let key = id_key(id);
        let log = {
            let mut routing = self.routing.lock_recovered();
            if routing.ended {
                return Err(GatewayError::SessionNotFound);
            }
            if routing.in_flight.contains_key(&key) {
                return Err(GatewayError::InvalidRequest(format!(
                    "a request with id {key} is still in flight on this session"
                )));
            }
            let log = self.streams.open();
            routing.order += 1;
            let order = routing.order;
            routing.in_flight.insert(
                key.clone(),
                InFlight {
                    order,
                    log: log.clone(),
                    answer,
                    rounds: 0,
                },
            );
            if let Some(token) = message.pointer("/params/_meta/progressToken") {
                routing.progress.insert(id_key(token), key.clone());
            }
            log
        };
        if let Err(error) = self.transport.send(message) {
            self.routing.lock_recovered().take(&key);
            return Err(error.into());
        }
        Ok(log)
    }

    /// Sends a notification or a response to one of the backend's requests.
    pub fn send(&self, message: Value) -> Result<(), GatewayError> {
        if self.routing.lock_recovered().ended {
            return Err(GatewayError::SessionNotFound);
        }
        Ok(self.transport.send(message)?)
    }

    /// Places one message from the backend on the client's stream it belongs to.
    fn deliver(&self, message: Value) {
        let mut routing = self.routing.lock_recovered();
        let method = message.get("method").and_then(Value::as_str);
        let target = match (method, message.get("id")) {
            (None, Some(id)) => {
                let key = id_key(id);
                if let Some(answered) = routing.take_init(&key) {
                    let _ = answered.send(message);
                    return;
                }
                match routing.take(&key) {
                    Some(request) => {
                        drop(routing);
                        let message = answered(request.answer, request.rounds, message);
                        request.log.push(&message);
                        request.log.finish();
                    }
                    None => tracing::debug!(id = %key, "response to no request in flight dropped"),
                }
                return;
            }
            (Some("notifications/progress"), _) => message
                .pointer("/params/progressToken")
                .and_then(|token| routing.progress.get(&id_key(token)))
                .and_then(|request| routing.in_flight.get(request))
                .map(|request| request.log.clone())
                .or_else(|| routing.newest().map(|request| request.log.clone())),
            (Some("notifications/resources/updated"), _) if !self.hears_of(&message) => {
                return;
            }
            (Some(method), _) if UNRELATED.contains(&method) => {
                let standalone = self.streams.standalone();
                match standalone {
                    Some(log) if log.is_attached() => Some(log),
                    standalone => routing
                        .newest()
                        .map(|request| request.log.clone())
                        .or(standalone),
                }
            }
            (Some(method), Some(_)) => routing.newest().map(|request| {
                // A question of the backend's on the stream of the call it belongs to is a
                // round, as a 2026-07-28 client would get it (a ping is not).
                if INPUT_REQUESTS.contains(&method) {
                    request.rounds += 1;
                    if let Some(audit) = request.answer.audit.as_mut() {
                        audit.set_rounds(request.rounds);
                    }
                }
                request.log.clone()
            }),
            _ => routing.newest().map(|request| request.log.clone()),
        };
        drop(routing);
        if let Some(log) = target.or_else(|| self.streams.standalone()) {
            log.push(&message);
        }
    }

    /// Places a message about one client request on that request's stream (a question of the
    /// backend's counts as a round); one whose request is gone is placed as any other.
    fn deliver_for(&self, request: &Value, message: Value) {
        let mut routing = self.routing.lock_recovered();
        let Some(in_flight) = routing.in_flight.get_mut(&id_key(request)) else {
            drop(routing);
            return self.deliver(message);
        };
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            if message.get("id").is_some() && INPUT_REQUESTS.contains(&method) {
                in_flight.rounds += 1;
                if let Some(audit) = in_flight.answer.audit.as_mut() {
                    audit.set_rounds(in_flight.rounds);
                }
            }
        }
        let log = in_flight.log.clone();
        drop(routing);
        log.push(&message);
    }

    /// The transport could not deliver or answer a request.
    fn fail_request(&self, id: &Value, reason: &str) {
        let key = id_key(id);
        let mut routing = self.routing.lock_recovered();
        if let Some(answered) = routing.take_init(&key) {
            let _ = answered.send(internal_error(id, reason));
            return;
        }
        if let Some(request) = routing.take(&key) {
            drop(routing);
            let message = internal_error(id, &format!("Backend unavailable: {reason}"));
            let message = answered(request.answer, request.rounds, message);
            request.log.push(&message);
            request.log.finish();
        }
    }

    /// Nothing more reaches the backend: requests in flight are answered with `why`, and every
    /// stream finishes.
    fn end_streams(&self, why: &str) {
        let in_flight: Vec<(String, InFlight)> = {
            let mut routing = self.routing.lock_recovered();
            routing.ended = true;
            routing.init = None;
            routing.progress.clear();
            routing.in_flight.drain().collect()
        };
        for (key, mut request) in in_flight {
            let id: Value = serde_json::from_str(&key).unwrap_or(Value::Null);
            // The session ended before the backend answered: the call did not conclude.
            if let Some(audit) = request.answer.audit.take() {
                audit.finish(
                    AuditOutcome::Cancelled,
                    request.rounds,
                    Some(why.to_string()),
                );
            }
            let message = answered(request.answer, request.rounds, internal_error(&id, why));
            request.log.push(&message);
            request.log.finish();
        }
        self.streams.finish_all();
    }

    /// Whether the client may hear of the resource an update names.
    fn hears_of(&self, update: &Value) -> bool {
        let uri = update.pointer("/params/uri").and_then(Value::as_str);
        uri.is_some_and(|uri| self.caller.lock_recovered().hears_of(uri))
    }

    /// Ends the session: its streams, then the backend session (stdin closed or the child
    /// stopped; HTTP `DELETE`).
    pub async fn close(&self, why: &str) {
        self.end_streams(why);
        self.transport.shutdown().await;
    }
}

impl Drop for LegacySession {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.lock_recovered().take() {
            reader.abort();
        }
    }
}

/// A response as the client gets it: a list without what the caller may not see; the call's
/// audit record finished.
fn answered(answer: Answer, rounds: u32, mut message: Value) -> Value {
    let Answer {
        method,
        caller,
        audit,
    } = answer;
    if method.is_list() {
        if let Some(Value::Object(result)) = message.get_mut("result") {
            caller.filter_list(method, result);
        }
    }
    if let Some(audit) = audit {
        let (outcome, error) = match (message.get("error"), message.pointer("/result/isError")) {
            // The code only: a backend's message may echo the arguments.
            (Some(error), _) => (
                AuditOutcome::Error,
                error
                    .get("code")
                    .and_then(Value::as_i64)
                    .map(|code| format!("backend error {code}")),
            ),
            (None, Some(Value::Bool(true))) => (AuditOutcome::Error, None),
            (None, _) => (AuditOutcome::Ok, None),
        };
        audit.finish(outcome, rounds, error);
    }
    message
}

/// Reads what the backend sends until it closes, then ends the session.
async fn read_backend(
    session: Weak<LegacySession>,
    sessions: Weak<LegacySessions>,
    mut events: mpsc::Receiver<TransportEvent>,
) {
    let reason = loop {
        let Some(event) = events.recv().await else {
            break "the backend connection ended".to_string();
        };
        let Some(session) = session.upgrade() else {
            return;
        };
        match event {
            TransportEvent::Message(message) => session.deliver(message),
            TransportEvent::Answer { id, result } => {
                // The client's own answer, passed on as a whole message.
                let result = serde_json::from_str(result.get()).unwrap_or(Value::Null);
                session.deliver(crate::jsonrpc::result_response(id, result))
            }
            TransportEvent::RequestFailed { id, reason } => session.fail_request(&id, &reason),
            // The client's answer was acknowledged when it arrived and the transport logged the
            // loss; the backend's own timeout ends its question, as it would with no gateway.
            TransportEvent::AnswerUndelivered { .. } => {}
            TransportEvent::ForRequest { request, message } => {
                session.deliver_for(&request, message)
            }
            TransportEvent::Closed(reason) => break reason,
        }
    };
    let Some(session) = session.upgrade() else {
        return;
    };
    tracing::info!(%reason, "legacy session's backend closed");
    let why = format!("Backend session closed: {reason}");
    session.end_streams(&why);
    if let Some(sessions) = sessions.upgrade() {
        sessions
            .end(session.key(), super::EndReason::BackendClosed)
            .await;
    }
}
