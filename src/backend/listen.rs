//! Listening sessions: what a principal needs to hear a backend's changes while it listens.
//!
//! Per principal with listeners, one backend session outside the exclusive call pool (it takes
//! no slot) stays open: over HTTP its standalone GET stream, over stdio its stdout, carry the
//! backend's list changes into the principal's [`Feed`](super::changes::Feed), like those the
//! principal's call sessions hear. Resource subscriptions are reference counted on it:
//! `resources/subscribe` for a URI's first listener, `resources/unsubscribe` when its last one
//! leaves. A session that dies is started again with backoff, and its URIs subscribed again.
//!
//! Tasks: one per listening principal ([`keep_listening`]), on the pool's task tracker; it ends
//! when the principal's last [`ListenGuard`] is dropped, or with the pool's stop token.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::changes::Feed;
use super::identity::SessionIdentity;
use super::session::{PerBackend, Session};
use super::BackendSpec;
use crate::sync::LockRecovered;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often a listening session is checked for life between commands.
const LIVENESS_TICK: Duration = Duration::from_millis(500);

enum Command {
    Subscribe(String),
    Unsubscribe(String),
}

/// One principal's listening state, shared by its listeners.
struct Listener {
    commands: mpsc::UnboundedSender<Command>,
    /// Listeners per subscribed URI.
    uris: Mutex<HashMap<String, usize>>,
    /// The `InitializeResult` of the current listening session, once one started.
    init: watch::Receiver<Option<Arc<Value>>>,
}

/// The listening sessions of one backend, by principal.
#[derive(Default)]
pub(crate) struct Listening {
    by_principal: Mutex<HashMap<String, Weak<Listener>>>,
}

/// One listener's hold on its principal's listening session and its URIs; dropping it
/// unsubscribes what no other listener still wants and, for the last listener, closes the
/// session.
pub(crate) struct ListenGuard {
    listener: Arc<Listener>,
    uris: Vec<String>,
}

impl ListenGuard {
    /// The listening session's `InitializeResult`, waiting up to `wait` for it to start.
    pub(crate) async fn init(&self, wait: Duration) -> Option<Arc<Value>> {
        let mut init = self.listener.init.clone();
        let ready = tokio::time::timeout(wait, init.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(value)) => value.clone(),
            _ => None,
        }
    }
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let mut uris = self.listener.uris.lock_recovered();
        for uri in &self.uris {
            if let Some(count) = uris.get_mut(uri) {
                *count -= 1;
                if *count == 0 {
                    uris.remove(uri);
                    let _ = self
                        .listener
                        .commands
                        .send(Command::Unsubscribe(uri.clone()));
                }
            }
        }
    }
}

/// What [`keep_listening`] needs of its pool.
pub(crate) struct ListenContext {
    pub spec: Arc<BackendSpec>,
    /// What the backend is told about the listening caller (its first listener's).
    pub identity: Arc<SessionIdentity>,
    pub per_backend: PerBackend,
    pub feed: Arc<Feed>,
    pub stop: CancellationToken,
    pub tasks: tokio_util::task::TaskTracker,
}

impl Listening {
    /// A listener of `principal` for `uris` (subscribed when the backend supports it): the
    /// principal's listening session is started if it is not running yet.
    pub(crate) fn listen(
        &self,
        principal: &str,
        uris: &[String],
        context: impl FnOnce() -> ListenContext,
    ) -> ListenGuard {
        let mut by_principal = self.by_principal.lock_recovered();
        let listener = match by_principal.get(principal).and_then(Weak::upgrade) {
            Some(listener) => listener,
            None => {
                let (commands, received) = mpsc::unbounded_channel();
                let (init_sender, init) = watch::channel(None);
                let listener = Arc::new(Listener {
                    commands,
                    uris: Mutex::new(HashMap::new()),
                    init,
                });
                let context = context();
                context.tasks.clone().spawn(keep_listening(
                    context,
                    Arc::downgrade(&listener),
                    received,
                    init_sender,
                ));
                by_principal.insert(principal.to_string(), Arc::downgrade(&listener));
                listener
            }
        };
        by_principal.retain(|_, listener| listener.strong_count() > 0);
        drop(by_principal);
        {
            let mut subscribed = listener.uris.lock_recovered();
            for uri in uris {
                let count = subscribed.entry(uri.clone()).or_insert(0);
                *count += 1;
                if *count == 1 {
                    let _ = listener.commands.send(Command::Subscribe(uri.clone()));
                }
            }
        }
        ListenGuard {
            listener,
            uris: uris.to_vec(),
        }
    }

    /// Principals with a listening session.
    pub(crate) fn count(&self) -> usize {
        self.by_principal
            .lock_recovered()
            .values()
            .filter(|l| l.strong_count() > 0)
            .count()
    }
}

/// Keeps one principal's listening session open while it has listeners: starts it (again, with
/// backoff), subscribes and unsubscribes as listeners come and go, and closes it at the end.
async fn keep_listening(
    context: ListenContext,
    listener: Weak<Listener>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    init: watch::Sender<Option<Arc<Value>>>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut session: Option<Session> = None;
    // What the current session is subscribed to.
    let mut subscribed: HashSet<String> = HashSet::new();
    loop {
        if !session.as_ref().is_some_and(Session::is_alive) {
            session = None;
            subscribed.clear();
            let started = tokio::select! {
                _ = context.stop.cancelled() => return,
                started = Session::connect(
                    &context.spec,
                    &context.identity,
                    json!({}),
                    None,
                    &context.per_backend,
                    Some(context.feed.clone()),
                ) => started,
            };
            match started {
                Ok(started) => {
                    backoff = FIRST_BACKOFF;
                    let _ = init.send(Some(started.init_result()));
                    // The URIs listened to so far, on the new session.
                    let uris: Vec<String> = match listener.upgrade() {
                        Some(listener) => listener.uris.lock_recovered().keys().cloned().collect(),
                        None => return close(Some(started)).await,
                    };
                    for uri in uris {
                        subscribe(&started, "resources/subscribe", &uri, &context.spec).await;
                        subscribed.insert(uri);
                    }
                    session = Some(started);
                }
                Err(error) => {
                    tracing::warn!(backend = %context.spec.name, %error, retry_in = ?backoff, "listening session failed to start");
                    tokio::select! {
                        _ = context.stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        tokio::select! {
            _ = context.stop.cancelled() => return close(session).await,
            command = commands.recv() => match (command, &session) {
                // Every listener is gone.
                (None, _) => return close(session).await,
                (Some(Command::Subscribe(uri)), Some(s)) => {
                    // A new session already subscribed to what was wanted when it started.
                    if subscribed.insert(uri.clone()) {
                        subscribe(s, "resources/subscribe", &uri, &context.spec).await;
                    }
                }
                (Some(Command::Unsubscribe(uri)), Some(s)) => {
                    if subscribed.remove(&uri) {
                        subscribe(s, "resources/unsubscribe", &uri, &context.spec).await;
                    }
                }
                // No session now: the next one subscribes to what is wanted then.
                (Some(_), None) => {}
            },
            _ = tokio::time::sleep(LIVENESS_TICK) => {}
        }
    }
}

/// Sends `resources/subscribe` or `resources/unsubscribe` when the backend offers them.
async fn subscribe(session: &Session, method: &str, uri: &str, spec: &BackendSpec) {
    let offered = session
        .init_result()
        .get("capabilities")
        .and_then(|c| c.get("resources"))
        .and_then(|r| r.get("subscribe"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !offered {
        return;
    }
    let answer = session
        .request(
            method,
            Some(json!({ "uri": uri })),
            spec.config.request_timeout,
        )
        .await;
    if !matches!(answer, Ok(Ok(_))) {
        tracing::warn!(backend = %spec.name, %method, %uri, ?answer, "resource subscription not changed");
    }
}

async fn close(session: Option<Session>) {
    if let Some(session) = session {
        session.close().await;
    }
}
