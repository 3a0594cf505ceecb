//! Streamable HTTP transport (2025-11-25): one MCP session on a remote server.
//!
//! Every message is its own POST carrying `Mcp-Session-Id` and `MCP-Protocol-Version` once known.
//! A request's answer comes back as JSON or as an SSE stream that may also carry server requests
//! and notifications; everything read is handed to the session in arrival order. A stream that
//! ends before the answer is resumed with GET + `Last-Event-ID` after the server's `retry:` delay.
//! After `initialize` the standalone GET stream is kept open, since some servers send requests and
//! notifications only there. HTTP 404 on a request that carried the session id means the session
//! is gone. Shutdown sends DELETE.
//!
//! Tasks: a request is POSTed in its own task, owned by the transport, or by the writer task
//! when it was queued behind a one-way message; the writer posts the other messages in order
//! and owns the GET stream. All end with the transport.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::identity::{Credential, SessionIdentity};
use super::modern::detect::EraCell;
use super::{BackendError, BackendSpec, Encoded, Outbox, TransportEvent};
use crate::http_client::{is_event_stream, HttpClient};
use crate::sync::{LockRecovered, RwLockRecovered};

use crate::protocol::PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION;
use crate::protocol::SESSION_ID_HEADER as SESSION_ID;
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// Largest JSON body read from a backend.
const MAX_JSON_BODY: usize = 64 * 1024 * 1024;
/// Consecutive failed reconnects before a stream is given up.
const MAX_STREAM_FAILURES: u32 = 5;
const DEFAULT_RETRY: Duration = Duration::from_millis(1000);
/// Bound on a POST that carries no request (notification or answer) and on DELETE.
const SHORT_POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections a notification or an answer is tried on when none can be made.
const ONE_WAY_ATTEMPTS: u32 = 3;
/// Bound on a server-suggested `retry:` delay.
const MAX_RETRY: Duration = Duration::from_secs(30);

struct Shared {
    backend: String,
    client: HttpClient,
    url: Uri,
    headers: HeaderMap,
    /// `token_exchange`: read as each request is built.
    credential: Option<Arc<Credential>>,
    /// The backend's era: a session's request refused as malformed asks for a new probe.
    era: Arc<EraCell>,
    session_id: RwLock<Option<HeaderValue>>,
    protocol_version: RwLock<Option<HeaderValue>>,
    inbound: mpsc::Sender<TransportEvent>,
}

pub(crate) struct HttpTransport {
    shared: Arc<Shared>,
    outbox: Outbox<Outgoing>,
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Requests POSTed straight from `send` (nothing one-way was queued before them); `None`
    /// once `shutdown` has aborted them, so no request starts after it.
    requests: Mutex<Option<JoinSet<()>>>,
    /// One-way messages queued for the writer and not posted yet: a request sent meanwhile
    /// queues behind them.
    one_way_queued: Arc<AtomicUsize>,
}

enum Outgoing {
    Message(Encoded),
    OpenStandaloneStream,
}

impl HttpTransport {
    pub(crate) fn new(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        inbound: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, BackendError> {
        let client = spec
            .http_client
            .clone()
            .ok_or_else(|| BackendError::Connect("no HTTP client".into()))?;
        let url: Uri = spec
            .config
            .url
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|e| BackendError::Connect(format!("bad url: {e}")))?;
        let headers = identity.request_headers(&spec.config.headers)?;
        let shared = Arc::new(Shared {
            backend: spec.name.clone(),
            client,
            url,
            headers,
            credential: identity.credential.clone(),
            era: spec.era.clone(),
            session_id: RwLock::new(None),
            protocol_version: RwLock::new(None),
            inbound,
        });
        let (outbox, outgoing) = mpsc::unbounded_channel();
        let one_way_queued = Arc::new(AtomicUsize::new(0));
        let writer = tokio::spawn(write_loop(shared.clone(), outgoing, one_way_queued.clone()));
        Ok(Self {
            shared,
            outbox: Outbox::new(outbox),
            writer: Mutex::new(Some(writer)),
            requests: Mutex::new(Some(JoinSet::new())),
            one_way_queued,
        })
    }

    /// A request is POSTed at once, in its own task, unless a one-way message is still queued
    /// (it must land first, e.g. `notifications/initialized`); everything else goes through
    /// the writer, in order.
    pub(crate) fn send(&self, message: Encoded) -> Result<(), BackendError> {
        if message.request_id.is_none() {
            self.one_way_queued.fetch_add(1, Ordering::AcqRel);
            let queued = self.outbox.send(Outgoing::Message(message));
            if queued.is_err() {
                self.one_way_queued.fetch_sub(1, Ordering::AcqRel);
            }
            return queued;
        }
        if self.one_way_queued.load(Ordering::Acquire) > 0 {
            return self.outbox.send(Outgoing::Message(message));
        }
        let mut requests = self.requests.lock_recovered();
        let Some(requests) = requests.as_mut() else {
            return Err(BackendError::Closed("transport shut down".into()));
        };
        // Reap what has finished, so the set holds only requests in flight.
        while requests.try_join_next().is_some() {}
        requests.spawn(post_request(self.shared.clone(), message));
        Ok(())
    }

    pub(crate) fn initialized(&self, protocol_version: &str) {
        if let Ok(value) = HeaderValue::from_str(protocol_version) {
            *self.shared.protocol_version.write_recovered() = Some(value);
        }
        let _ = self.outbox.send(Outgoing::OpenStandaloneStream);
    }

    pub(crate) async fn shutdown(&self) {
        let requests = self.requests.lock_recovered().take();
        // Dropping the set aborts the requests still waiting for answers.
        drop(requests);
        self.outbox.close();
        let writer = self.writer.lock_recovered().take();
        if let Some(mut writer) = writer {
            // Messages already queued (a cancellation, say) still go out; requests still
            // waiting for answers are dropped with the writer's tasks.
            if tokio::time::timeout(SHORT_POST_TIMEOUT, &mut writer)
                .await
                .is_err()
            {
                writer.abort();
            }
        }

        if self.shared.session_id().is_some() {
            let request = self.shared.request(Method::DELETE, Bytes::new(), None);
            if let Ok(request) = request {
                match tokio::time::timeout(SHORT_POST_TIMEOUT, self.shared.client.request(request))
                    .await
                {
                    Ok(Ok(resp)) if resp.status() == StatusCode::METHOD_NOT_ALLOWED => {}
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(backend = %self.shared.backend, error = %e, "DELETE failed")
                    }
                    Err(_) => tracing::debug!(backend = %self.shared.backend, "DELETE timed out"),
                }
            }
        }
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.lock_recovered().take() {
            writer.abort();
        }
    }
}

/// Owns the GET stream and the requests queued behind a one-way message. Messages that carry no
/// request are posted in order, one after another, so `notifications/initialized` lands before
/// the next request.
async fn write_loop(
    shared: Arc<Shared>,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    one_way_queued: Arc<AtomicUsize>,
) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            item = outgoing.recv() => match item {
                Some(Outgoing::Message(message)) => {
                    if message.request_id.is_some() {
                        tasks.spawn(post_request(shared.clone(), message));
                    } else {
                        post_one_way(&shared, message).await;
                        one_way_queued.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                Some(Outgoing::OpenStandaloneStream) => {
                    tasks.spawn(standalone_stream(shared.clone()));
                }
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

impl Shared {
    fn session_id(&self) -> Option<HeaderValue> {
        self.session_id.read_recovered().clone()
    }

    fn request(
        &self,
        method: Method,
        body: Bytes,
        last_event_id: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, BackendError> {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(self.url.clone());
        if let Some(headers) = builder.headers_mut() {
            headers.extend(self.headers.clone());
            if let Some(credential) = &self.credential {
                headers.insert(AUTHORIZATION, (*credential.current()).clone());
            }
            if method == Method::GET {
                headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
            } else {
                headers.insert(
                    ACCEPT,
                    HeaderValue::from_static("application/json, text/event-stream"),
                );
            }
            if method == Method::POST {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            if let Some(sid) = self.session_id() {
                headers.insert(SESSION_ID, sid);
            }
            if let Some(version) = self.protocol_version.read_recovered().clone() {
                headers.insert(PROTOCOL_VERSION, version);
            }
            if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
                headers.insert(LAST_EVENT_ID, id);
            }
        }
        builder
            .body(Full::new(body))
            .map_err(|e| BackendError::Connect(e.to_string()))
    }

    /// HTTP 404 for a request that carried the session id: the server forgot the session.
    async fn session_lost(&self) {
        let _ = self
            .inbound
            .send(TransportEvent::Closed(
                "backend session expired (HTTP 404)".into(),
            ))
            .await;
    }

    async fn deliver(&self, message: TransportEvent) {
        let _ = self.inbound.send(message).await;
    }

    /// Fails one request with a transport-level error the session can tell from a peer error.
    async fn fail_request(&self, id: &Value, reason: String) {
        tracing::warn!(backend = %self.backend, %reason, "backend request failed");
        let _ = self
            .inbound
            .send(TransportEvent::RequestFailed {
                id: id.clone(),
                reason,
            })
            .await;
    }

    /// Handles what every response status means before its body is read. Returns the response
    /// when the body should be read.
    async fn check_status(
        &self,
        response: hyper::Response<Incoming>,
        had_session: bool,
        request_id: Option<&Value>,
    ) -> Option<hyper::Response<Incoming>> {
        if let Some(sid) = response.headers().get(SESSION_ID) {
            let mut slot = self.session_id.write_recovered();
            if slot.is_none() {
                *slot = Some(sid.clone());
            }
        }
        let status = response.status();
        if status == StatusCode::NOT_FOUND && had_session {
            self.session_lost().await;
            return None;
        }
        if status.is_success() {
            return Some(response);
        }
        if status == StatusCode::BAD_REQUEST && had_session {
            // A server that moved to 2026-07-28 ignores the session and refuses what it gets
            // (no `_meta`, an old `MCP-Protocol-Version`): the next request probes again.
            self.era.forget();
        }
        // An error status may still carry a JSON-RPC error for the request.
        let body = read_limited(response.into_body(), 1024 * 1024).await;
        if let Some(id) = request_id {
            let parsed = body
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|v| v.get("error").is_some() && v.get("id") == Some(id));
            match parsed {
                Some(error) => self.deliver(TransportEvent::Message(error)).await,
                None => {
                    self.fail_request(id, format!("backend answered HTTP {status}"))
                        .await
                }
            }
        } else {
            tracing::warn!(backend = %self.backend, %status, "backend rejected a message");
        }
        None
    }
}

async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes, String> {
    Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string())
}

/// Notifications and answers to server requests: expect 202, nothing to read. A POST whose
/// connection could not even be made is sent again on another one: nothing reached the backend.
/// Once it may have been read, it is never sent twice (an answer reaches the backend once): an
/// answer that cannot be delivered is reported, so the call waiting on it ends now instead of
/// at the backend's own timeout.
async fn post_one_way(shared: &Shared, message: Encoded) {
    let mut attempt = 1;
    let failure = loop {
        let had_session = shared.session_id().is_some();
        let request = match shared.request(Method::POST, message.bytes.clone(), None) {
            Ok(r) => r,
            Err(e) => break format!("cannot build the POST: {e}"),
        };
        match tokio::time::timeout(SHORT_POST_TIMEOUT, shared.client.request(request)).await {
            Ok(Ok(response)) => {
                let status = response.status();
                if shared
                    .check_status(response, had_session, None)
                    .await
                    .is_some()
                {
                    return;
                }
                break format!("backend answered HTTP {status}");
            }
            Ok(Err(e)) if e.is_connect() && attempt < ONE_WAY_ATTEMPTS => {
                tracing::debug!(backend = %shared.backend, error = %e, attempt, "no connection for the POST; trying again");
                attempt += 1;
            }
            Ok(Err(e)) => break format!("POST failed {attempt} times: {e}"),
            Err(_) => break format!("no response within {SHORT_POST_TIMEOUT:?}"),
        }
    };
    tracing::warn!(backend = %shared.backend, reason = %failure, "message not delivered to the backend");
    if let Some(id) = message.answers {
        shared
            .deliver(TransportEvent::AnswerUndelivered {
                id,
                reason: failure,
            })
            .await;
    }
}

async fn post_request(shared: Arc<Shared>, message: Encoded) {
    let Some(id) = message.request_id else {
        return;
    };
    let had_session = shared.session_id().is_some();
    let request = match shared.request(Method::POST, message.bytes, None) {
        Ok(r) => r,
        Err(e) => return shared.fail_request(&id, e.to_string()).await,
    };
    let response = match shared.client.request(request).await {
        Ok(r) => r,
        Err(e) => {
            return shared
                .fail_request(&id, format!("backend unreachable: {e}"))
                .await
        }
    };
    let Some(response) = shared.check_status(response, had_session, Some(&id)).await else {
        return;
    };
    if response.status() == StatusCode::ACCEPTED || response.status() == StatusCode::NO_CONTENT {
        return shared
            .fail_request(
                &id,
                "backend accepted the request without answering it".into(),
            )
            .await;
    }
    if !is_event_stream(response.headers()) {
        match read_limited(response.into_body(), MAX_JSON_BODY).await {
            Ok(body) => match std::str::from_utf8(&body)
                .map_err(|e| e.to_string())
                .and_then(|text| crate::jsonrpc::decode(text).map_err(|e| e.to_string()))
            {
                Ok(messages) => {
                    for message in messages {
                        shared.deliver(message.into()).await;
                    }
                }
                Err(e) => {
                    shared
                        .fail_request(&id, format!("backend sent invalid JSON: {e}"))
                        .await
                }
            },
            Err(e) => {
                shared
                    .fail_request(&id, format!("reading backend response failed: {e}"))
                    .await
            }
        }
        return;
    }
    let mut end = read_stream(&shared, response.into_body(), Some(&id)).await;
    let mut failures = 0;
    while !end.answered && failures < MAX_STREAM_FAILURES {
        let Some(last) = end.last_event_id.clone() else {
            break;
        };
        tokio::time::sleep(end.retry.unwrap_or(DEFAULT_RETRY)).await;
        match open_get(&shared, Some(&last)).await {
            GetOutcome::Stream(body) => {
                let next = read_stream(&shared, body, Some(&id)).await;
                failures = if next.last_event_id.is_some() {
                    0
                } else {
                    failures + 1
                };
                end = StreamEnd {
                    answered: next.answered,
                    last_event_id: next.last_event_id.or(end.last_event_id),
                    retry: next.retry.or(end.retry),
                };
            }
            GetOutcome::SessionLost => return,
            GetOutcome::Unavailable => failures += 1,
        }
    }
    if !end.answered {
        shared
            .fail_request(
                &id,
                "backend closed the response stream without answering".into(),
            )
            .await;
    }
}

struct StreamEnd {
    answered: bool,
    last_event_id: Option<String>,
    retry: Option<Duration>,
}

/// Reads one SSE stream to its end, delivering every JSON-RPC message on it.
async fn read_stream(shared: &Shared, body: Incoming, expect: Option<&Value>) -> StreamEnd {
    let mut end = StreamEnd {
        answered: false,
        last_event_id: None,
        retry: None,
    };
    let mut events = SseStream::new(body);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(backend = %shared.backend, error = %e, "SSE stream ended with an error");
                break;
            }
        };
        if let Some(id) = event.id {
            end.last_event_id = Some(id);
        }
        if let Some(retry) = event.retry {
            end.retry = Some(Duration::from_millis(retry).min(MAX_RETRY));
        }
        if event.event.as_deref().is_some_and(|e| e != "message") {
            continue;
        }
        // Priming events carry an empty data field.
        let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
            continue;
        };
        let messages = match crate::jsonrpc::decode(&data) {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(backend = %shared.backend, error = %e, "non-JSON SSE data ignored");
                continue;
            }
        };
        for message in messages {
            let is_answer = expect.is_some_and(|id| match &message {
                crate::jsonrpc::Incoming::Answer { id: answered, .. } => answered == id,
                crate::jsonrpc::Incoming::Other(message) => {
                    message.get("id") == Some(id)
                        && (message.get("result").is_some() || message.get("error").is_some())
                }
            });
            shared.deliver(message.into()).await;
            if is_answer {
                end.answered = true;
                return end;
            }
        }
    }
    end
}

enum GetOutcome {
    Stream(Incoming),
    SessionLost,
    Unavailable,
}

async fn open_get(shared: &Shared, last_event_id: Option<&str>) -> GetOutcome {
    let had_session = shared.session_id().is_some();
    let Ok(request) = shared.request(Method::GET, Bytes::new(), last_event_id) else {
        return GetOutcome::Unavailable;
    };
    match shared.client.request(request).await {
        Ok(response)
            if response.status() == StatusCode::OK && is_event_stream(response.headers()) =>
        {
            GetOutcome::Stream(response.into_body())
        }
        Ok(response) if response.status() == StatusCode::NOT_FOUND && had_session => {
            shared.session_lost().await;
            GetOutcome::SessionLost
        }
        Ok(_) | Err(_) => GetOutcome::Unavailable,
    }
}

/// The standalone GET stream: kept open for the session's life, reconnected after the server
/// closes it, given up after repeated failures or a 405 (the server offers none).
async fn standalone_stream(shared: Arc<Shared>) {
    let mut last_event_id: Option<String> = None;
    let mut retry = DEFAULT_RETRY;
    let mut failures = 0;
    while failures < MAX_STREAM_FAILURES {
        let had_session = shared.session_id().is_some();
        let Ok(request) = shared.request(Method::GET, Bytes::new(), last_event_id.as_deref())
        else {
            return;
        };
        match shared.client.request(request).await {
            Ok(response) if response.status() == StatusCode::METHOD_NOT_ALLOWED => return,
            Ok(response) if response.status() == StatusCode::NOT_FOUND && had_session => {
                shared.session_lost().await;
                return;
            }
            Ok(response)
                if response.status() == StatusCode::OK && is_event_stream(response.headers()) =>
            {
                let end = read_stream(&shared, response.into_body(), None).await;
                if end.last_event_id.is_some() {
                    last_event_id = end.last_event_id;
                }
                retry = end.retry.unwrap_or(retry);
                failures = 0;
            }
            Ok(_) | Err(_) => failures += 1,
        }
        tokio::time::sleep(retry * (failures + 1)).await;
    }
    tracing::debug!(backend = %shared.backend, "standalone GET stream given up");
}
