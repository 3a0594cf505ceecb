//! A 2026-07-28 backend over stdio. A process is not a session (2026-07-28 says so), so one
//! process serves every request told the same identity (`identity_env`), concurrently:
//! requests carry the gateway's own ids and progress tokens, and a router task hands each
//! answer, progress notification and listen notification to the request it belongs to. A log
//! notification names no request; it is handed to the one request in flight that asked for logs,
//! if only one did.
//!
//! Dropping an unanswered exchange sends `notifications/cancelled`. A process with nothing in
//! flight for `pool.idle_timeout` is ended; one that exits fails what it had in flight and is
//! started again by the next request. At most `pool.max_sessions` processes run.
//!
//! Tasks: one router per process, on the backend's task tracker; it ends with its process, when
//! it idles out, or at shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Exchange, ModernRequest, Source};
use crate::backend::identity::SessionIdentity;
use crate::backend::{BackendError, BackendSpec, Transport, TransportEvent};
use crate::jsonrpc::Incoming as Decoded;
use crate::protocol::META_LOG_LEVEL;
use crate::sync::LockRecovered;

/// Notifications queued for one request before more are dropped (a client that reads slowly
/// must not stall the process's other requests).
const NOTICE_ROOM: usize = 256;

pub(super) struct ModernStdio {
    spec: Arc<BackendSpec>,
    /// Running processes by the fingerprint of the identity they were started with.
    processes: Mutex<HashMap<String, Arc<Process>>>,
    tasks: TaskTracker,
    stop: CancellationToken,
}

struct Process {
    transport: Transport,
    routes: Mutex<Routes>,
    next_id: AtomicU64,
    /// Cancelled when the process is done for: no request is sent to it any more.
    ended: CancellationToken,
}

#[derive(Default)]
struct Routes {
    requests: HashMap<u64, Waiting>,
    /// The gateway's progress tokens, and the request each belongs to.
    progress: HashMap<String, u64>,
}

struct Waiting {
    notices: mpsc::Sender<Value>,
    answer: oneshot::Sender<Result<Decoded, BackendError>>,
    /// The client's own progress token, given back in its notifications.
    client_progress: Option<(String, Value)>,
    /// It asked for logs (a `logLevel` in its `_meta`, and not a listen): a log line may be
    /// its.
    hears_logs: bool,
}

/// What a request routed from a process reads.
pub(super) struct Routed {
    notices: mpsc::Receiver<Value>,
    answer: oneshot::Receiver<Result<Decoded, BackendError>>,
    guard: CancelOnDrop,
}

impl Routed {
    pub(super) async fn next(&mut self) -> Result<RoutedNext, BackendError> {
        tokio::select! {
            biased;
            Some(notice) = self.notices.recv() => Ok(RoutedNext::Notice(notice)),
            answer = &mut self.answer => {
                self.guard.answered();
                match answer {
                    Ok(Ok(answer)) => Ok(RoutedNext::Answer(answer)),
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(BackendError::Closed("backend process ended before answering".into())),
                }
            }
        }
    }
}

pub(super) enum RoutedNext {
    Notice(Value),
    Answer(Decoded),
}

/// Cancels its request on the backend if dropped before the answer.
pub(super) struct CancelOnDrop {
    process: Weak<Process>,
    id: u64,
    answered: AtomicBool,
}

impl CancelOnDrop {
    fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.answered.load(Ordering::Relaxed) {
            return;
        }
        let Some(process) = self.process.upgrade() else {
            return;
        };
        if process.forget(self.id).is_some() {
            let cancelled = crate::jsonrpc::notification(
                "notifications/cancelled",
                Some(json!({"requestId": self.id, "reason": "the client went away"})),
            );
            let _ = process.transport.send(cancelled);
        }
    }
}

impl Process {
    fn forget(&self, id: u64) -> Option<Waiting> {
        let mut routes = self.routes.lock_recovered();
        let waiting = routes.requests.remove(&id)?;
        if let Some((token, _)) = &waiting.client_progress {
            routes.progress.remove(token);
        }
        Some(waiting)
    }

    /// Hands one message from the process to the request it belongs to.
    fn route(&self, message: Decoded) {
        match message {
            Decoded::Answer { id, result } => {
                if let Some(waiting) = id.as_u64().and_then(|id| self.forget(id)) {
                    let _ = waiting.answer.send(Ok(Decoded::Answer { id, result }));
                }
            }
            Decoded::Other(message) => {
                let id = message.get("id").cloned();
                match (message.get("method").is_some(), id) {
                    // An error answer.
                    (false, Some(id)) => {
                        if let Some(waiting) = id.as_u64().and_then(|id| self.forget(id)) {
                            let _ = waiting.answer.send(Ok(Decoded::Other(message)));
                        }
                    }
                    // A request: 2026-07-28 servers send none; refused so it does not wait.
                    (true, Some(id)) => {
                        let error = crate::jsonrpc::JsonRpcError::new(
                            crate::jsonrpc::codes::METHOD_NOT_FOUND,
                            "servers do not send requests in 2026-07-28",
                        );
                        let _ = self
                            .transport
                            .send(crate::jsonrpc::error_response(Some(id), &error));
                    }
                    (true, None) => self.route_notice(message),
                    (false, None) => {}
                }
            }
        }
    }

    fn route_notice(&self, mut notice: Value) {
        let routes = self.routes.lock_recovered();
        let token = notice
            .pointer("/params/progressToken")
            .and_then(Value::as_str);
        let subscription = notice
            .pointer("/params/_meta/io.modelcontextprotocol~1subscriptionId")
            .and_then(Value::as_u64);
        let target = if let Some(token) = token {
            routes.progress.get(token).copied()
        } else if subscription.is_some() {
            subscription
        } else {
            // A log line names no request: it can only be that of the one request in flight
            // that asked for logs (a server sends none to the others).
            let mut hearing = routes.requests.iter().filter(|(_, w)| w.hears_logs);
            match (hearing.next(), hearing.next()) {
                (Some((id, _)), None) => Some(*id),
                _ => None,
            }
        };
        let Some(waiting) = target.and_then(|id| routes.requests.get(&id)) else {
            return;
        };
        if let (Some((_, client_token)), Some(params)) = (
            &waiting.client_progress,
            notice.get_mut("params").and_then(Value::as_object_mut),
        ) {
            if params.contains_key("progressToken") {
                params.insert("progressToken".into(), client_token.clone());
            }
        }
        // Full: the client reads slowly; this notice is dropped rather than stalling the rest.
        let _ = waiting.notices.try_send(notice);
    }

    /// Fails everything in flight.
    fn fail_all(&self, reason: &str) {
        let waiting: Vec<Waiting> = {
            let mut routes = self.routes.lock_recovered();
            routes.progress.clear();
            routes.requests.drain().map(|(_, w)| w).collect()
        };
        for waiting in waiting {
            let _ = waiting
                .answer
                .send(Err(BackendError::Closed(reason.to_string())));
        }
    }

    fn idle(&self) -> bool {
        self.routes.lock_recovered().requests.is_empty()
    }
}

impl ModernStdio {
    pub(super) fn new(spec: Arc<BackendSpec>, tasks: TaskTracker, stop: CancellationToken) -> Self {
        Self {
            spec,
            processes: Mutex::new(HashMap::new()),
            tasks,
            stop,
        }
    }

    pub(super) async fn send(
        &self,
        identity: &SessionIdentity,
        request: &ModernRequest,
    ) -> Result<Exchange, BackendError> {
        let process = self.process_for(identity)?;
        let id = process.next_id.fetch_add(1, Ordering::Relaxed);
        let mut params = request.params.clone();
        // Tokens of different clients may be equal: the process hears the gateway's own.
        let client_progress = match params
            .pointer_mut("/_meta")
            .and_then(Value::as_object_mut)
            .and_then(|meta| meta.get_mut("progressToken"))
        {
            Some(token) => {
                let ours = format!("mrtr-{id}");
                let theirs = std::mem::replace(token, json!(ours));
                Some((ours, theirs))
            }
            None => None,
        };
        let hears_logs = request.method != "subscriptions/listen"
            && params
                .pointer("/_meta")
                .and_then(|meta| meta.get(META_LOG_LEVEL))
                .is_some();
        let (notices_tx, notices) = mpsc::channel(NOTICE_ROOM);
        let (answer_tx, answer) = oneshot::channel();
        {
            let mut routes = process.routes.lock_recovered();
            if let Some((token, _)) = &client_progress {
                routes.progress.insert(token.clone(), id);
            }
            routes.requests.insert(
                id,
                Waiting {
                    notices: notices_tx,
                    answer: answer_tx,
                    client_progress,
                    hears_logs,
                },
            );
        }
        let guard = CancelOnDrop {
            process: Arc::downgrade(&process),
            id,
            answered: AtomicBool::new(false),
        };
        let message = crate::jsonrpc::request(json!(id), &request.method, Some(params));
        if let Err(error) = process.transport.send(message) {
            guard.answered();
            process.forget(id);
            return Err(error);
        }
        Ok(Exchange {
            source: Source::Routed(Box::new(Routed {
                notices,
                answer,
                guard,
            })),
            id: json!(id),
            answered: false,
        })
    }

    /// The running process for this identity, or a new one.
    fn process_for(&self, identity: &SessionIdentity) -> Result<Arc<Process>, BackendError> {
        let mut processes = self.processes.lock_recovered();
        match processes.get(identity.fingerprint()) {
            Some(process) if !process.ended.is_cancelled() => return Ok(process.clone()),
            // Ended (exited, idled out): another is started below.
            Some(_) => {
                processes.remove(identity.fingerprint());
            }
            None => {}
        }
        if processes.len() >= self.spec.config.pool.max_sessions {
            // Make room of processes that ended since.
            processes.retain(|_, p| !p.ended.is_cancelled());
        }
        if processes.len() >= self.spec.config.pool.max_sessions {
            return Err(BackendError::Busy(format!(
                "backend {} runs {} processes, its most",
                self.spec.name,
                processes.len()
            )));
        }
        if self.stop.is_cancelled() {
            return Err(BackendError::Closed("shutting down".into()));
        }
        let (inbound_tx, inbound) = mpsc::channel(NOTICE_ROOM);
        let transport = Transport::connect_now(&self.spec, identity, inbound_tx)?;
        let process = Arc::new(Process {
            transport,
            routes: Mutex::new(Routes::default()),
            next_id: AtomicU64::new(1),
            ended: self.stop.child_token(),
        });
        self.tasks.spawn(run_router(
            process.clone(),
            inbound,
            self.spec.config.pool.idle_timeout,
        ));
        processes.insert(identity.fingerprint().to_string(), process.clone());
        Ok(process)
    }

    pub(super) async fn shutdown(&self) {
        let processes: Vec<Arc<Process>> = self
            .processes
            .lock_recovered()
            .drain()
            .map(|(_, p)| p)
            .collect();
        for process in processes {
            process.ended.cancel();
        }
    }
}

/// Routes a process's messages until it exits, idles out or the backend stops; then ends it.
async fn run_router(
    process: Arc<Process>,
    mut inbound: mpsc::Receiver<TransportEvent>,
    idle_timeout: std::time::Duration,
) {
    let mut idle_since = tokio::time::Instant::now();
    let reason = loop {
        let idle_deadline = idle_since + idle_timeout;
        tokio::select! {
            () = process.ended.cancelled() => break "the backend stopped".to_string(),
            () = tokio::time::sleep_until(idle_deadline) => {
                if process.idle() {
                    break "idle".to_string();
                }
                idle_since = tokio::time::Instant::now();
            }
            event = inbound.recv() => match event {
                Some(TransportEvent::Message(message)) => process.route(Decoded::Other(message)),
                Some(TransportEvent::Answer { id, result }) => {
                    process.route(Decoded::Answer { id, result });
                }
                Some(TransportEvent::RequestFailed { id, reason }) => {
                    if let Some(waiting) = id.as_u64().and_then(|id| process.forget(id)) {
                        let _ = waiting.answer.send(Err(BackendError::Closed(reason)));
                    }
                }
                Some(TransportEvent::AnswerUndelivered { .. } | TransportEvent::ForRequest { .. }) => {}
                Some(TransportEvent::Closed(reason)) => break reason,
                None => break "backend process exited".to_string(),
            },
        }
        if !process.idle() {
            idle_since = tokio::time::Instant::now();
        }
    };
    process.ended.cancel();
    process.fail_all(&reason);
    process.transport.shutdown().await;
}
