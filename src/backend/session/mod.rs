//! One initialized 2025-11-25 session with a backend: it is started (transport connected,
//! `initialize` and `notifications/initialized`), lent by the pool to one caller at a time,
//! carries that caller's requests and calls, and is closed politely (stdin EOF / DELETE).
//!
//! - `shared` what the session's handles and its reader share, and what the gateway sends;
//! - `reader` the task that reads what the backend sends, one per session, aborted when the
//!   session is dropped or closed;
//! - `routing` where each message goes: answers to their requests, server requests and a
//!   call's notifications to the call active on the session ([`answer_locally`] when none
//!   can see them), list changes to the principal's feed;
//! - `table` the routing table the reader and the session's users share;
//! - `call` the [`ActiveCall`] a caller holds;
//! - `queue` the [`CallEvent`]s between the routing and a call, a queue the reader never waits
//!   on;
//! - `roots` what the session knows about the roots its backend holds; `init_roots` what a
//!   backend's sessions learned about its asking for them at initialization ([`InitRoots`]).
//!
//! A call that starts while the backend's questions asked outside any call are waiting is not
//! sent until they are answered (the prelude of [`Session::start_call`]).

mod call;
mod init_roots;
mod queue;
mod reader;
mod roots;
mod routing;
mod shared;
mod table;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

pub(crate) use self::call::ActiveCall;
pub(crate) use self::init_roots::InitRoots;
use self::queue::call_queue;
pub(crate) use self::queue::CallEvent;
pub(crate) use self::queue::DroppedNotices;
pub(crate) use self::routing::answer_locally;
use self::shared::{ForgetOnDrop, SessionCore};
use self::table::Routing;
use super::changes::Feed;
use super::{BackendError, BackendSpec, MessageLimit, Transport};
use crate::backend::identity::SessionIdentity;
use crate::config::UnsolicitedPolicy;
use crate::jsonrpc::{self, JsonRpcError};
use crate::protocol::{BACKEND_PROTOCOL_VERSION, LEGACY_VERSIONS};
use crate::sync::LockRecovered;

/// Messages a transport may read ahead of the session's reader.
const TRANSPORT_BUFFER: usize = 256;

static SESSION_NUMBERS: AtomicU64 = AtomicU64::new(1);

/// What the sessions of one backend share.
#[derive(Clone)]
pub(crate) struct PerBackend {
    /// What they showed about asking for roots at initialization.
    pub init_roots: Arc<InitRoots>,
    /// Counts the notifications their calls had no room for.
    pub dropped: DroppedNotices,
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
    pub(crate) async fn connect(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        capabilities: Value,
        slot: Option<OwnedSemaphorePermit>,
        per_backend: &PerBackend,
        changes: Option<Arc<Feed>>,
    ) -> Result<Self, BackendError> {
        let number = SESSION_NUMBERS.fetch_add(1, Ordering::Relaxed);
        // A session outlives the request that started it: its span has no parent.
        let span = tracing::info_span!(parent: None, "backend_session", backend = %spec.name, session = number);
        tracing::Instrument::instrument(
            Self::start(
                spec,
                identity,
                capabilities,
                slot,
                per_backend,
                changes,
                number,
            ),
            span,
        )
        .await
    }

    async fn start(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        capabilities: Value,
        slot: Option<OwnedSemaphorePermit>,
        per_backend: &PerBackend,
        changes: Option<Arc<Feed>>,
        number: u64,
    ) -> Result<Self, BackendError> {
        // The session's own span, which `connect` runs this in; its reader runs in it too.
        let span = tracing::Span::current();
        let (tx, rx) = mpsc::channel(TRANSPORT_BUFFER);
        let transport = Transport::connect(spec, identity, tx).await?;
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
            init_roots: per_backend.init_roots.clone(),
            asked: Notify::new(),
            changes,
            dropped: per_backend.dropped.clone(),
        });
        let reader = tokio::spawn(tracing::Instrument::instrument(
            reader::read_loop(core.clone(), rx),
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
            "clientInfo": crate::protocol::gateway_implementation(),
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

    /// The largest message the backend takes, if it has a limit.
    pub(crate) fn message_limit(&self) -> Option<MessageLimit> {
        self.core.transport.message_limit().cloned()
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
        let (sink, mut events) = call_queue(&self.core.dropped);
        let id = self.core.send_request(method, params, sink, false)?;
        // Dropped unanswered (the caller went away), the id must not keep the session busy.
        let _forget = ForgetOnDrop {
            core: &self.core,
            id,
        };
        let wait = async {
            loop {
                match events.recv().await {
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
        let (sink, events) = call_queue(&self.core.dropped);
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
                self.core.send_request(method, params, sink.clone(), true)?,
                None,
            )
        } else {
            let id = match self.core.register(sink.clone(), true) {
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
            // A question is never dropped: should the call be gone, the backend still gets an
            // answer.
            if let Err(CallEvent::ServerRequest { id, method, .. }) = sink.deliver(event) {
                let _ = self.core.respond(id, answer_locally(&method));
            }
        }
        Ok(ActiveCall {
            core: self.core.clone(),
            id,
            events,
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
