//! One initialized 2025-11-25 session with a backend.
//!
//! The session owns its transport, its request-id counter (ids are never reused) and the routing
//! of everything the backend sends: answers go to the request they answer; server requests and
//! notifications go to the call that is active on the session. The pool lends a session to one
//! caller at a time, so "active" is unambiguous: on stdio there is no other way to know which call
//! a server request belongs to. `ping` is answered here; server requests that arrive with no call
//! active are answered with [`answer_locally`].
//!
//! Roots belong to the flow that gave them (2026-07-28 gives roots per request; a legacy server
//! caches them per session). The session records whether a client's roots were delivered on it
//! ([`Session::note_client_roots`]); the pool asks such a session's backend to ask again
//! ([`Session::ask_roots_again`]) before another flow may use it, and a call that starts while
//! the backend's questions are waiting is not sent until they are answered (the prelude of
//! [`Session::start_call`]).
//!
//! Task: one reader task per session, aborted when the session is dropped or closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use super::changes::{Change, Feed};
use super::{BackendError, BackendSpec, Transport, TransportEvent};
use crate::config::UnsolicitedPolicy;
use crate::jsonrpc::{self, codes, JsonRpcError, Message};
use crate::protocol::{BACKEND_PROTOCOL_VERSION, LEGACY_VERSIONS};
use crate::sync::LockRecovered;

/// Server requests kept for the next call of an idle session, at most.
const MAX_DEFERRED: usize = 32;
const EVENT_BUFFER: usize = 256;
/// Longest wait for the `ping` that tells the backend has read what came before it.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);
/// After `initialized`, how long a new session waits for a backend that asks for roots at
/// initialization (or may: the first time) to ask.
const ROOTS_ON_INIT_WAIT: Duration = Duration::from_secs(1);

/// What sessions of one backend have shown about asking for roots right after `initialized`,
/// learned by the first session that declared `roots`: a backend that does not ask costs that
/// first session [`ROOTS_ON_INIT_WAIT`] once; one that asks is waited for on every new session,
/// even when it asks from a timer or another task after answering a `ping`.
#[derive(Debug, Default)]
pub struct InitRoots(AtomicU8);

impl InitRoots {
    const UNKNOWN: u8 = 0;
    const ASKS: u8 = 1;
    const SILENT: u8 = 2;

    /// A session's backend asked for roots before its first call.
    fn learn_asks(&self) {
        self.0.store(Self::ASKS, Ordering::Relaxed);
    }

    /// A healthy first session's backend did not ask in time; a concurrent session that saw it
    /// ask wins.
    fn learn_silent(&self) {
        let _ = self.0.compare_exchange(
            Self::UNKNOWN,
            Self::SILENT,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

static SESSION_NUMBERS: AtomicU64 = AtomicU64::new(1);

/// What the backend sends that concerns one call.
#[derive(Debug)]
pub enum CallEvent {
    /// `notifications/progress` params, as sent.
    Progress(Value),
    /// `notifications/message` params, as sent.
    Log(Value),
    /// A request from the server made while this call was active, or (`deferred`) one made
    /// while the session was idle and kept for the next interruptible call.
    ServerRequest {
        id: Value,
        method: String,
        params: Option<Value>,
        deferred: bool,
    },
    /// The server withdrew one of its own requests (`notifications/cancelled`).
    ServerRequestCancelled { id: Value },
    /// `notifications/elicitation/complete` params.
    ElicitationComplete(Value),
    /// The answer to the call, its result as the backend wrote it.
    Final(Result<Box<RawValue>, JsonRpcError>),
    /// The call cannot be answered: the transport failed or the session is gone.
    Failed(BackendError),
}

/// The answer the gateway gives itself to a server request no client can see.
pub fn answer_locally(method: &str) -> Result<Value, JsonRpcError> {
    match method {
        "ping" => Ok(json!({})),
        "roots/list" => Ok(json!({ "roots": [] })),
        // Never an invented accept: the user did not see the question.
        "elicitation/create" => Ok(json!({ "action": "cancel" })),
        "sampling/createMessage" => Err(JsonRpcError::new(
            -1,
            "Sampling is not available for this request",
        )),
        other => Err(JsonRpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

#[derive(Default)]
struct Routing {
    pending: HashMap<u64, mpsc::Sender<CallEvent>>,
    active: Option<(u64, mpsc::Sender<CallEvent>)>,
    /// The gateway cancelled a request here: whatever the backend still sends for it (late
    /// questions included) could be taken for the next caller's, so the session is not lent
    /// again.
    tainted: bool,
    /// Server requests that arrived outside any call (`unsolicited = "defer"`).
    deferred: Vec<(Value, String, Option<Value>)>,
    /// A client's answer to `roots/list` reached the backend: what it holds as roots belongs to
    /// a flow, not to the session.
    client_roots: bool,
    /// The backend asked for roots outside any call on this session (it keeps roots per
    /// session): a call that can ask its client runs here only once that question waits for it.
    roots_asked: bool,
    /// A `roots/list` arrived outside any call, whoever answered it.
    roots_question_seen: bool,
    /// A call was started on this session.
    lent: bool,
    dead: Option<String>,
}

impl Routing {
    /// A `roots/list` outside any call; one before the session's first call teaches the pool
    /// that its backend asks at initialization.
    fn note_roots_question(&mut self, init_roots: &InitRoots) {
        self.roots_question_seen = true;
        if !self.lent {
            init_roots.learn_asks();
        }
    }

    fn reusable(&self) -> bool {
        self.dead.is_none() && self.pending.is_empty() && !self.tainted
    }

    fn roots_question_waiting(&self) -> bool {
        self.deferred
            .iter()
            .any(|(_, method, _)| method == "roots/list")
    }

    fn roots_fit(&self, can_ask_client: bool) -> bool {
        if can_ask_client {
            self.roots_question_waiting() || (!self.roots_asked && !self.client_roots)
        } else {
            !self.client_roots
        }
    }

    /// Whether asking the backend to ask for roots again is settled: `Some(true)` once its
    /// question waits here, `Some(false)` when it never can (session ended or tainted).
    fn roots_reask_settled(&self) -> Option<bool> {
        if self.roots_question_waiting() {
            Some(true)
        } else if self.dead.is_some() || self.tainted {
            Some(false)
        } else {
            None
        }
    }
}

pub struct SessionCore {
    number: u64,
    backend: String,
    transport: Transport,
    next_id: AtomicU64,
    routing: Mutex<Routing>,
    init: OnceLock<Arc<Value>>,
    log_level: Mutex<Option<String>>,
    unsolicited: UnsolicitedPolicy,
    static_roots: Value,
    /// After roots reach the backend, how long before a call may rely on them.
    roots_settle: Duration,
    /// The session declared `roots.listChanged`: the backend may be told to ask again.
    reasks_roots: bool,
    /// What this backend's sessions showed about asking for roots at initialization.
    init_roots: Arc<InitRoots>,
    /// Woken when the backend asks something outside a call (deferred) or asks for roots, and
    /// when the session ends or is tainted.
    asked: Notify,
    /// Where the list changes and resource updates this session hears go: its principal's feed.
    changes: Option<Arc<Feed>>,
}

impl SessionCore {
    fn routing(&self) -> std::sync::MutexGuard<'_, Routing> {
        // A poisoned lock only means another thread panicked mid-update; the map is still usable.
        self.routing.lock_recovered()
    }

    fn register(&self, sink: mpsc::Sender<CallEvent>, active: bool) -> Result<u64, BackendError> {
        let mut routing = self.routing();
        if let Some(reason) = &routing.dead {
            return Err(BackendError::Closed(reason.clone()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if active {
            routing.active = Some((id, sink.clone()));
            routing.lent = true;
        }
        routing.pending.insert(id, sink);
        Ok(id)
    }

    fn send_request(
        &self,
        method: &str,
        params: Option<Value>,
        sink: mpsc::Sender<CallEvent>,
        active: bool,
    ) -> Result<u64, BackendError> {
        let id = self.register(sink, active)?;
        self.send_registered(id, method, params)?;
        Ok(id)
    }

    /// Sends a request under an id registered before.
    fn send_registered(
        &self,
        id: u64,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), BackendError> {
        if let Err(e) = self
            .transport
            .send(jsonrpc::request(json!(id), method, params))
        {
            self.forget(id);
            return Err(e);
        }
        Ok(())
    }

    fn forget(&self, id: u64) {
        let mut routing = self.routing();
        routing.pending.remove(&id);
        if routing.active.as_ref().is_some_and(|(a, _)| *a == id) {
            routing.active = None;
        }
    }

    /// Withdraws a request the gateway no longer wants answered (2025-11-25: a closed stream is
    /// not a cancellation, so it is said explicitly).
    fn cancel(&self, id: u64, reason: &str) {
        {
            let mut routing = self.routing();
            if routing.pending.remove(&id).is_none() {
                return;
            }
            if routing.active.as_ref().is_some_and(|(a, _)| *a == id) {
                routing.active = None;
            }
            routing.tainted = true;
        }
        self.asked.notify_waiters();
        tracing::debug!(backend = %self.backend, session = self.number, request = id, reason, "cancelling backend request");
        let _ = self.transport.send(jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({ "requestId": id, "reason": reason })),
        ));
    }

    /// `notifications/roots/list_changed`: the backend is to ask for roots again.
    fn tell_roots_changed(&self) -> Result<(), BackendError> {
        self.transport.send(jsonrpc::notification(
            "notifications/roots/list_changed",
            None,
        ))
    }

    fn respond(&self, id: Value, outcome: Result<Value, JsonRpcError>) -> Result<(), BackendError> {
        let message = match outcome {
            Ok(result) => jsonrpc::result_response(id, result),
            Err(error) => jsonrpc::error_response(Some(id), &error),
        };
        self.transport.send(message)
    }

    fn mark_dead(&self, reason: String) {
        let sinks: Vec<_> = {
            let mut routing = self.routing();
            if routing.dead.is_none() {
                routing.dead = Some(reason.clone());
            }
            routing.active = None;
            routing.pending.drain().map(|(_, s)| s).collect()
        };
        self.asked.notify_waiters();
        tracing::debug!(backend = %self.backend, session = self.number, %reason, "backend session closed");
        for sink in sinks {
            let _ = sink.try_send(CallEvent::Failed(BackendError::Closed(reason.clone())));
        }
    }

    /// The backend answered one of the gateway's requests.
    async fn answered(&self, id: Value, outcome: Result<Box<RawValue>, JsonRpcError>) {
        let Some(num) = id.as_u64() else {
            tracing::debug!(backend = %self.backend, %id, "answer to an unknown request id; ignored");
            return;
        };
        let sink = {
            let mut routing = self.routing();
            let sink = routing.pending.remove(&num);
            if routing.active.as_ref().is_some_and(|(a, _)| *a == num) {
                routing.active = None;
            }
            sink
        };
        if let Some(sink) = sink {
            let _ = sink.send(CallEvent::Final(outcome)).await;
        }
    }

    async fn dispatch(&self, value: Value) {
        let message = match Message::classify(value) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(backend = %self.backend, error = %e, "backend sent an invalid JSON-RPC message; ignored");
                return;
            }
        };
        match message {
            Message::Response { id, outcome } => {
                let outcome = outcome.map(|result| crate::jsonrpc::raw(&result));
                self.answered(id, outcome).await;
            }
            Message::Request { id, method, params } => {
                if method == "ping" {
                    let _ = self.respond(id, Ok(json!({})));
                    return;
                }
                if method == "roots/list" && self.unsolicited == UnsolicitedPolicy::Static {
                    // The operator's roots, in and outside calls: no client is asked.
                    let _ = self.respond(id, Ok(json!({ "roots": self.static_roots })));
                    self.roots_question_handled();
                    return;
                }
                let active = self.routing().active.as_ref().map(|(_, s)| s.clone());
                match active {
                    Some(sink) => {
                        let event = CallEvent::ServerRequest {
                            id: id.clone(),
                            method: method.clone(),
                            params,
                            deferred: false,
                        };
                        if sink.send(event).await.is_err() {
                            let _ = self.respond(id, answer_locally(&method));
                        }
                    }
                    None => self.unsolicited(id, method, params),
                }
            }
            Message::Notification { method, params } => {
                let params = params.unwrap_or_else(|| json!({}));
                let event = match method.as_str() {
                    "notifications/progress" => CallEvent::Progress(params),
                    "notifications/message" => CallEvent::Log(params),
                    "notifications/cancelled" => match params.get("requestId") {
                        Some(id) => CallEvent::ServerRequestCancelled { id: id.clone() },
                        None => return,
                    },
                    "notifications/elicitation/complete" => CallEvent::ElicitationComplete(params),
                    other => {
                        // Not a call's: the principal's listeners hear it.
                        if let (Some(change), Some(feed)) =
                            (Change::from_notification(other, &params), &self.changes)
                        {
                            feed.publish(change);
                            return;
                        }
                        tracing::debug!(backend = %self.backend, method = other, "backend notification not relayed");
                        return;
                    }
                };
                let (active, roots_withdrawn) = {
                    let mut routing = self.routing();
                    let waiting = routing.roots_question_waiting();
                    if let CallEvent::ServerRequestCancelled { id } = &event {
                        routing.deferred.retain(|(deferred, _, _)| deferred != id);
                    }
                    let withdrawn = waiting && !routing.roots_question_waiting();
                    (routing.active.as_ref().map(|(_, s)| s.clone()), withdrawn)
                };
                if roots_withdrawn && self.reasks_roots {
                    // A backend gives up on a question nobody answered (the TypeScript SDK after
                    // 60 s): have it ask again, so the next call's client is asked first.
                    tracing::debug!(backend = %self.backend, session = self.number, "backend withdrew its roots question; asking it to ask again");
                    let _ = self.tell_roots_changed();
                }
                if let Some(sink) = active {
                    let _ = sink.send(event).await;
                }
            }
        }
    }

    /// A server request with no call to belong to, e.g. `roots/list` right after `initialized`.
    fn unsolicited(&self, id: Value, method: String, params: Option<Value>) {
        let surfaceable = matches!(
            method.as_str(),
            "elicitation/create" | "sampling/createMessage" | "roots/list"
        );
        tracing::debug!(backend = %self.backend, session = self.number, %method, policy = ?self.unsolicited, "server request outside any call");
        let outcome = match self.unsolicited {
            UnsolicitedPolicy::Defer if surfaceable => {
                let mut routing = self.routing();
                if routing.deferred.len() < MAX_DEFERRED && !routing.tainted {
                    if method == "roots/list" {
                        routing.roots_asked = true;
                        routing.note_roots_question(&self.init_roots);
                    }
                    routing.deferred.push((id, method, params));
                    drop(routing);
                    self.asked.notify_waiters();
                    return;
                }
                drop(routing);
                answer_locally(&method)
            }
            UnsolicitedPolicy::Static if method == "roots/list" => {
                Ok(json!({ "roots": self.static_roots }))
            }
            UnsolicitedPolicy::Error => Err(JsonRpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("{method} is not available outside a client request"),
            )),
            _ => answer_locally(&method),
        };
        let _ = self.respond(id, outcome);
        if method == "roots/list" {
            self.roots_question_handled();
        }
    }

    /// A `roots/list` outside any call was answered here.
    fn roots_question_handled(&self) {
        self.routing().note_roots_question(&self.init_roots);
        self.asked.notify_waiters();
    }

    fn failed_request(&self, id: &Value, reason: String) {
        let Some(num) = id.as_u64() else { return };
        let sink = self.routing().pending.remove(&num);
        if let Some(sink) = sink {
            let _ = sink.try_send(CallEvent::Failed(BackendError::Connect(reason)));
        }
    }
}

async fn read_loop(core: Arc<SessionCore>, mut inbound: mpsc::Receiver<TransportEvent>) {
    let reason = loop {
        match inbound.recv().await {
            Some(TransportEvent::Message(value)) => core.dispatch(value).await,
            Some(TransportEvent::Answer { id, result }) => core.answered(id, Ok(result)).await,
            Some(TransportEvent::RequestFailed { id, reason }) => core.failed_request(&id, reason),
            Some(TransportEvent::Closed(reason)) => break reason,
            None => break "transport stopped".to_string(),
        }
    };
    core.mark_dead(reason);
}

/// Forgets a request id when dropped; a no-op once the answer arrived or the request was
/// cancelled.
struct ForgetOnDrop<'a> {
    core: &'a SessionCore,
    id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.core.forget(self.id);
    }
}

/// An initialized session, lent out by the pool.
pub struct Session {
    core: Arc<SessionCore>,
    reader: JoinHandle<()>,
    _slot: Option<OwnedSemaphorePermit>,
    pub created: Instant,
    pub last_used: Instant,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Session {
    /// Starts the transport and performs `initialize` + `notifications/initialized`, declaring
    /// `capabilities` (the client capabilities of the callers this session will serve).
    pub async fn connect(
        spec: &BackendSpec,
        capabilities: Value,
        slot: Option<OwnedSemaphorePermit>,
        init_roots: &Arc<InitRoots>,
        changes: Option<Arc<Feed>>,
    ) -> Result<Self, BackendError> {
        let number = SESSION_NUMBERS.fetch_add(1, Ordering::Relaxed);
        // A session outlives the request that started it: its span has no parent.
        let span = tracing::info_span!(parent: None, "backend_session", backend = %spec.name, session = number);
        tracing::Instrument::instrument(
            Self::start(
                spec,
                capabilities,
                slot,
                init_roots,
                changes,
                number,
                span.clone(),
            ),
            span,
        )
        .await
    }

    async fn start(
        spec: &BackendSpec,
        capabilities: Value,
        slot: Option<OwnedSemaphorePermit>,
        init_roots: &Arc<InitRoots>,
        changes: Option<Arc<Feed>>,
        number: u64,
        span: tracing::Span,
    ) -> Result<Self, BackendError> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let transport = Transport::connect(spec, tx).await?;
        let core = Arc::new(SessionCore {
            number,
            backend: spec.name.clone(),
            transport,
            next_id: AtomicU64::new(1),
            routing: Mutex::new(Routing::default()),
            init: OnceLock::new(),
            log_level: Mutex::new(None),
            unsolicited: spec.config.unsolicited,
            static_roots: serde_json::to_value(&spec.config.static_roots).unwrap_or_default(),
            roots_settle: spec.config.roots_settle,
            reasks_roots: capabilities.get("roots").is_some()
                && spec.config.unsolicited == UnsolicitedPolicy::Defer,
            init_roots: init_roots.clone(),
            asked: Notify::new(),
            changes,
        });
        let reader = tokio::spawn(tracing::Instrument::instrument(
            read_loop(core.clone(), rx),
            span,
        ));
        let now = Instant::now();
        let session = Self {
            core,
            reader,
            _slot: slot,
            created: now,
            last_used: now,
        };
        let declares_roots = capabilities.get("roots").is_some();
        let mut capabilities = capabilities;
        if session.core.reasks_roots {
            // The gateway tells the backend when a session's roots must be asked again.
            capabilities["roots"] = json!({ "listChanged": true });
        }
        let params = json!({
            "protocolVersion": BACKEND_PROTOCOL_VERSION,
            "capabilities": capabilities,
            "clientInfo": {
                "name": "mrtr-gateway",
                "version": env!("CARGO_PKG_VERSION"),
            },
        });
        let result = match session
            .request("initialize", Some(params), spec.config.init_timeout)
            .await?
        {
            Ok(result) => result,
            Err(e) => return Err(BackendError::Initialize(e.message)),
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !LEGACY_VERSIONS.contains(&version.as_str()) {
            return Err(BackendError::Initialize(format!(
                "backend negotiated unsupported protocol version {version:?}"
            )));
        }
        let _ = session.core.init.set(Arc::new(result));
        session
            .core
            .transport
            .send(jsonrpc::notification("notifications/initialized", None))?;
        session.core.transport.initialized(&version);
        if declares_roots {
            session.await_roots_on_init().await;
        }
        tracing::debug!(backend = %spec.name, session = session.core.number, %version, "backend session initialized");
        Ok(session)
    }

    /// A backend that asks for roots in reaction to `initialized` asks before the session is
    /// lent: the question then waits for the first call's client (or, under `static`, its
    /// answer has reached the backend and applied).
    async fn await_roots_on_init(&self) {
        let learned = &self.core.init_roots;
        if learned.0.load(Ordering::Relaxed) == InitRoots::SILENT {
            return;
        }
        // Most backends ask while handling `initialized`, before they answer this.
        let pinged = self.ping_barrier().await;
        let asked = self
            .wait_until_asked(ROOTS_ON_INIT_WAIT, |routing| {
                if routing.roots_question_seen {
                    Some(true)
                } else {
                    routing.dead.is_some().then_some(false)
                }
            })
            .await;
        if asked {
            if self.core.unsolicited == UnsolicitedPolicy::Static {
                // Answered from static_roots already: let them apply before the first call.
                self.roots_barrier().await;
            }
        } else if pinged && self.is_reusable() {
            // Only a healthy session teaches anything.
            tracing::debug!(backend = %self.core.backend, "backend does not ask for roots at initialization; later sessions do not wait for it");
            learned.learn_silent();
        }
    }

    /// Sends a `ping` and waits for its answer; false when none came.
    async fn ping_barrier(&self) -> bool {
        match self.request("ping", None, BARRIER_TIMEOUT).await {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(backend = %self.core.backend, session = self.core.number, error = %e, "barrier ping failed");
                false
            }
        }
    }

    /// Waits until the backend has read everything sent before (a `ping` answered), then
    /// `roots_settle`, so roots it was just given apply to what is sent next: some servers apply
    /// them asynchronously (server-filesystem resolves each root on disk).
    pub async fn roots_barrier(&self) {
        let _ = self.ping_barrier().await;
        if !self.core.roots_settle.is_zero() {
            tokio::time::sleep(self.core.roots_settle).await;
        }
    }

    /// A client's roots reached the backend on this session.
    pub fn note_client_roots(&self) {
        self.core.routing().client_roots = true;
    }

    /// Whether a call may run here without the roots of another flow. A call that can ask its
    /// client needs the backend's roots question waiting (its first round answers it before the
    /// call is sent), unless the backend never asked and holds no client's roots; a call that
    /// cannot ask needs a session that never held a client's roots.
    pub fn roots_fit(&self, can_ask_client: bool) -> bool {
        self.core.routing().roots_fit(can_ask_client)
    }

    /// Whether this session may be lent to a call (`is_reusable` and `roots_fit`), and if so
    /// whether it holds a client's roots (a call that can ask its client takes those first, to
    /// keep the others for calls that cannot). One look under the routing lock.
    pub fn lendable(&self, can_ask_client: bool) -> Option<bool> {
        let routing = self.core.routing();
        (routing.reusable() && routing.roots_fit(can_ask_client)).then_some(routing.client_roots)
    }

    /// Tells the backend its roots changed (`notifications/roots/list_changed`) and waits up to
    /// `wait` for it to ask again; the question then waits for the next call, whose client
    /// answers it. False when the backend did not ask: its roots cannot be taken back.
    pub async fn ask_roots_again(&self, wait: Duration) -> bool {
        if let Some(asked) = self.core.routing().roots_reask_settled() {
            return asked;
        }
        if self.core.tell_roots_changed().is_err() {
            return false;
        }
        self.wait_until_asked(wait, Routing::roots_reask_settled)
            .await
    }

    /// Waits up to `wait` for what the backend asks to settle `settled` (`Some(answer)`);
    /// false when it did not in time.
    async fn wait_until_asked(
        &self,
        wait: Duration,
        settled: impl Fn(&Routing) -> Option<bool>,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let asked = self.core.asked.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            if let Some(answer) = settled(&self.core.routing()) {
                return answer;
            }
            if tokio::time::timeout_at(deadline, asked).await.is_err() {
                return false;
            }
        }
    }

    pub fn number(&self) -> u64 {
        self.core.number
    }

    /// The backend's `InitializeResult`.
    pub fn init_result(&self) -> Arc<Value> {
        self.core
            .init
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::new(json!({})))
    }

    pub fn is_alive(&self) -> bool {
        self.core.routing().dead.is_none()
    }

    /// Alive, nothing outstanding and nothing cancelled: safe to lend to the next caller
    /// without mixing up whose messages are whose.
    pub fn is_reusable(&self) -> bool {
        self.core.routing().reusable()
    }

    /// Gives back the pool slot now, before a polite close that may take a while.
    pub fn release_slot(&mut self) {
        self._slot.take();
    }

    /// A request whose answer the caller awaits; other events are not expected.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Result<Value, JsonRpcError>, BackendError> {
        let (tx, mut rx) = mpsc::channel(EVENT_BUFFER);
        let id = self.core.send_request(method, params, tx, false)?;
        // Dropped unanswered (the caller went away), the id must not keep the session busy.
        let _forget = ForgetOnDrop {
            core: &self.core,
            id,
        };
        let wait = async {
            loop {
                match rx.recv().await {
                    Some(CallEvent::Final(outcome)) => {
                        return Ok(outcome.map(|result| {
                            // Raw JSON the transport checked: it parses.
                            serde_json::from_str(result.get()).unwrap_or(Value::Null)
                        }));
                    }
                    Some(CallEvent::Failed(e)) => return Err(e),
                    Some(_) => continue,
                    None => return Err(BackendError::Closed("session closed".into())),
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(outcome) => outcome,
            Err(_) => {
                self.core.cancel(id, "timed out");
                Err(BackendError::Timeout(timeout))
            }
        }
    }

    /// Sets the backend's log level for the next call, when the backend logs at all and the
    /// level differs from what the session last set.
    pub async fn apply_log_level(
        &self,
        level: Option<&str>,
        timeout: Duration,
    ) -> Result<(), BackendError> {
        let Some(level) = level else { return Ok(()) };
        let logs = self
            .init_result()
            .get("capabilities")
            .and_then(|c| c.get("logging"))
            .is_some();
        if !logs {
            return Ok(());
        }
        let current = self.core.log_level.lock_recovered().clone();
        if current.as_deref() == Some(level) {
            return Ok(());
        }
        match self
            .request("logging/setLevel", Some(json!({ "level": level })), timeout)
            .await?
        {
            Ok(_) => {
                *self.core.log_level.lock_recovered() = Some(level.to_string());
                Ok(())
            }
            Err(e) => {
                tracing::debug!(backend = %self.core.backend, error = %e.message, "logging/setLevel refused");
                Ok(())
            }
        }
    }

    /// Starts the call that owns the session's server requests and notifications until it ends.
    /// An interruptible call also receives the server requests deferred while the session was
    /// idle, so they reach a client in its first round. While there are any, the call is not sent
    /// (its prelude): the backend hears it only after their answers, through [`ActiveCall::send`].
    pub fn start_call(
        &self,
        method: &str,
        params: Option<Value>,
        interruptible: bool,
    ) -> Result<ActiveCall, BackendError> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let deferred = if interruptible {
            let mut routing = self.core.routing();
            if !routing.roots_fit(true) {
                // The backend withdrew its roots question after the session was lent: it holds
                // roots this call's client did not give.
                return Err(BackendError::Busy(
                    "the backend withdrew its roots question; send the request again".into(),
                ));
            }
            std::mem::take(&mut routing.deferred)
        } else {
            Vec::new()
        };
        let (id, unsent) = if deferred.is_empty() {
            (
                self.core.send_request(method, params, tx.clone(), true)?,
                None,
            )
        } else {
            let id = match self.core.register(tx.clone(), true) {
                Ok(id) => id,
                Err(e) => {
                    for (id, method, _) in deferred {
                        let _ = self.core.respond(id, answer_locally(&method));
                    }
                    return Err(e);
                }
            };
            (id, Some((method.to_string(), params)))
        };
        for (id, method, params) in deferred {
            let event = CallEvent::ServerRequest {
                id,
                method,
                params,
                deferred: true,
            };
            if let Err(mpsc::error::TrySendError::Full(CallEvent::ServerRequest {
                id,
                method,
                ..
            })) = tx.try_send(event)
            {
                let _ = self.core.respond(id, answer_locally(&method));
            }
        }
        Ok(ActiveCall {
            core: self.core.clone(),
            id,
            events: rx,
            open: unsent.is_none(),
            unsent,
        })
    }

    /// Ends the session politely (stdin EOF / DELETE).
    pub async fn close(self) {
        self.reader.abort();
        self.core.transport.shutdown().await;
    }
}

/// A request in flight on a session, and the stream of what the backend sends for it. Dropping
/// it before its answer arrived cancels it on the backend.
pub struct ActiveCall {
    core: Arc<SessionCore>,
    id: u64,
    events: mpsc::Receiver<CallEvent>,
    /// Sent and not answered yet.
    open: bool,
    /// The request itself, while its prelude runs (not sent yet).
    unsent: Option<(String, Option<Value>)>,
}

impl ActiveCall {
    pub fn backend_id(&self) -> u64 {
        self.id
    }

    /// The request waits for its prelude's questions to be answered.
    pub fn is_unsent(&self) -> bool {
        self.unsent.is_some()
    }

    /// Sends the request a prelude held back (nothing happens if it was sent).
    pub fn send(&mut self) -> Result<(), BackendError> {
        let Some((method, params)) = self.unsent.take() else {
            return Ok(());
        };
        self.core.send_registered(self.id, &method, params)?;
        self.open = true;
        Ok(())
    }

    pub async fn next_event(&mut self) -> CallEvent {
        let event =
            self.events.recv().await.unwrap_or_else(|| {
                CallEvent::Failed(BackendError::Closed("session closed".into()))
            });
        if matches!(event, CallEvent::Final(_) | CallEvent::Failed(_)) {
            self.open = false;
        }
        event
    }

    /// The session stopped delivering: no event is buffered and none can come.
    pub fn events_closed(&self) -> bool {
        self.events.is_closed() && self.events.is_empty()
    }

    /// An event that already arrived, without waiting.
    pub fn try_next_event(&mut self) -> Option<CallEvent> {
        let event = self.events.try_recv().ok()?;
        if matches!(event, CallEvent::Final(_) | CallEvent::Failed(_)) {
            self.open = false;
        }
        Some(event)
    }

    /// Hands a server request back to the session, as if it had arrived outside any call
    /// (the backend's unsolicited policy applies).
    pub fn release(&self, id: Value, method: String, params: Option<Value>) {
        self.core.unsolicited(id, method, params);
    }

    /// Answers a server request of this call.
    pub fn respond(
        &self,
        server_request_id: Value,
        outcome: Result<Value, JsonRpcError>,
    ) -> Result<(), BackendError> {
        self.core.respond(server_request_id, outcome)
    }

    pub fn cancel(mut self, reason: &str) {
        if self.open {
            self.core.cancel(self.id, reason);
            self.open = false;
        }
    }
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        if self.open {
            self.core.cancel(self.id, "request cancelled by the client");
        } else {
            self.core.forget(self.id);
        }
    }
}
