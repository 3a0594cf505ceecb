//! The HTTP side of a 2025-11-25 client (Streamable HTTP, 2025-11-25 transport rules), entered
//! from the front's one entry point with the request read and parsed ([`LegacyRequest`]):
//!
//! - `initialize` starts a session; the response carries the gateway's `Mcp-Session-Id`;
//! - POST with the session id: a request is answered as SSE on its own stream (priming event,
//!   then whatever relates to it, then its response); a notification or a response to one of
//!   the backend's requests gets 202;
//! - GET: the standalone stream, or with `Last-Event-ID` the rest of the stream that id names;
//! - DELETE: the session ends, and its backend session with it;
//! - a session id that names nothing here: 404. With `[fleet]`, one another replica holds is
//!   forwarded there (GET streams included), as a retry of a held call is.
//!
//! The checks both eras share ran before: Host and Origin, authentication, media types, the
//! body read within its limits and parsed as JSON. The route's policy applies here as on
//! 2026-07-28 requests: a hidden item is an unknown name and its use never reaches the backend;
//! lists and resource updates leave out what the caller may not see ([`super::session`]).

use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method as HttpMethod, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use super::session::LegacySession;
use super::streams::parse_event_id;
use super::{EndReason, LegacySessions, Located};
use crate::access::{denial_reason, CallerAccess};
use crate::audit::{AuditLog, AuditOutcome, PendingFields};
use crate::backend::pool::Pool;
use crate::error::GatewayError;
use crate::fleet::{forwarded_by, Fleet};
use crate::http_serve::{
    accepts, empty, error_outcome, error_response, json_response, labeled_in, scope_challenge,
    sse_response, Body,
};
use crate::jsonrpc::Message;
use crate::legacy::LocalServer;
use crate::protocol::Era;
use crate::protocol::{Method, LEGACY_VERSIONS, PROTOCOL_VERSION_HEADER, SESSION_ID_HEADER};

const LAST_EVENT_ID: &str = "last-event-id";

/// Marks a response as served in the legacy era, for the metrics.
fn labeled(response: Response<Body>, method: Method, outcome: &'static str) -> Response<Body> {
    labeled_in(response, method, outcome, Era::Legacy)
}

/// An error answer to a 2025-11-25 client's request.
pub(crate) fn refused(id: Option<Value>, error: &GatewayError, method: Method) -> Response<Body> {
    labeled(error_response(id, error), method, error_outcome(error))
}

/// The MCP endpoint a session lives on: its path, and what its sessions connect to.
pub(crate) struct Endpoint {
    pub path: String,
    pub backend: EndpointBackend,
}

/// What an endpoint's sessions connect to.
pub(crate) enum EndpointBackend {
    /// One backend: a session of its own there (or the reverse bridge, for a 2026-07-28 one).
    One(Arc<Pool>),
    /// The gateway's own route over several backends, through the reverse bridge.
    Local(Arc<dyn LocalServer>),
}

/// A 2025-11-25 client's request, read and parsed by the front's one entry point.
pub(crate) enum LegacyRequest {
    /// `initialize`: a session of its own. The message as sent.
    Initialize { id: Value, message: Value },
    /// A request naming a session (`Mcp-Session-Id`): POST, GET or DELETE.
    Session(SessionRequest),
}

/// A request on a session, as read.
pub(crate) struct SessionRequest {
    /// The `Mcp-Session-Id` value.
    pub token: String,
    /// The body as received, forwarded as is to the replica holding the session.
    pub body: Bytes,
    /// A POST's message, parsed once (JSON, no batch); `None` for GET and DELETE.
    pub message: Option<Value>,
}

/// What a session's requests need besides the session.
pub(crate) struct Door {
    pub sessions: Arc<LegacySessions>,
    pub endpoint: Endpoint,
    pub fleet: Option<Arc<Fleet>>,
    /// `[audit]`, if configured.
    pub audit: Option<Arc<AuditLog>>,
}

/// Who sent a request, as the route's rules see them, and where a step-up learns how.
pub(crate) struct LegacyCaller<'a> {
    pub access: &'a Arc<CallerAccess>,
    /// The route's protected resource metadata URL, named in a 403's challenge.
    pub metadata_url: &'a str,
}

impl Door {
    /// Serves a 2025-11-25 client's request (`head`: its request line and headers).
    pub(crate) async fn serve(
        &self,
        head: http::request::Parts,
        request: LegacyRequest,
        caller: LegacyCaller<'_>,
    ) -> Response<Body> {
        match request {
            LegacyRequest::Initialize { id, message } => {
                self.initialize(caller.access, id, message).await
            }
            LegacyRequest::Session(request) => self.in_session(head, request, caller).await,
        }
    }

    /// Whether `token` names a session this fleet issued (whether or not it still lives).
    pub(crate) fn issued(&self, token: &str) -> bool {
        self.sessions.issued(token)
    }

    /// Answers a client's `initialize`: a session of its own, or the backend's refusal.
    async fn initialize(
        &self,
        caller: &Arc<CallerAccess>,
        id: Value,
        message: Value,
    ) -> Response<Body> {
        match self
            .sessions
            .initialize(&self.endpoint, caller, message)
            .await
        {
            Ok((response, Some(session_id))) => {
                let mut reply = json_response(StatusCode::OK, &response);
                if let Ok(value) = HeaderValue::from_str(&session_id) {
                    reply.headers_mut().insert(SESSION_ID_HEADER, value);
                }
                labeled(reply, Method::Initialize, "ok")
            }
            Ok((response, None)) => labeled(
                json_response(StatusCode::OK, &response),
                Method::Initialize,
                "error",
            ),
            Err(error) => refused(Some(id), &error, Method::Initialize),
        }
    }

    /// A request that names a session: served here, or by the replica that holds it.
    async fn in_session(
        &self,
        head: http::request::Parts,
        request: SessionRequest,
        caller: LegacyCaller<'_>,
    ) -> Response<Body> {
        match self.sessions.locate(
            &request.token,
            caller.access.principal(),
            &self.endpoint.path,
        ) {
            Located::Here(session) => self.apply(session, &head, request, caller).await,
            Located::Replica(owner) => match &self.fleet {
                Some(fleet) if forwarded_by(&head.headers).is_none() => {
                    let response = fleet
                        .clone()
                        .forward_session(owner, head, request.body)
                        .await;
                    labeled(response, Method::Other, "forwarded")
                }
                _ => refused(None, &GatewayError::SessionNotFound, Method::Other),
            },
            Located::NotFound => refused(None, &GatewayError::SessionNotFound, Method::Other),
        }
    }

    async fn apply(
        &self,
        session: Arc<LegacySession>,
        head: &http::request::Parts,
        request: SessionRequest,
        caller: LegacyCaller<'_>,
    ) -> Response<Body> {
        let busy = session.busy();
        let headers = &head.headers;
        if let Err(error) = check_version(headers) {
            return refused(None, &error, Method::Other);
        }
        match (&head.method, request.message) {
            (&HttpMethod::GET, _) => {
                if !accepts(headers, "text/event-stream") {
                    let error = GatewayError::NotAcceptable(
                        "a GET stream needs Accept: text/event-stream".into(),
                    );
                    return refused(None, &error, Method::Other);
                }
                let resume = headers
                    .get(LAST_EVENT_ID)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_event_id);
                let streams = session.streams();
                let attached =
                    match resume.and_then(|(stream, seq)| Some((streams.find(stream)?, seq))) {
                        Some((log, seq)) => log.attach(Some(seq), self.sessions.keep_alive),
                        None => match streams.standalone() {
                            Some(log) => log.attach(None, self.sessions.keep_alive),
                            None => Err(GatewayError::SessionNotFound),
                        },
                    };
                match attached {
                    Ok(body) => sse_legacy(body, busy, Method::Other),
                    Err(error) => refused(None, &error, Method::Other),
                }
            }
            (&HttpMethod::DELETE, _) => {
                drop(busy);
                self.sessions.end(session.key(), EndReason::Deleted).await;
                labeled(empty(StatusCode::OK), Method::Other, "ok")
            }
            (&HttpMethod::POST, Some(message)) => self.post(session, message, busy, caller).await,
            _ => refused(None, &GatewayError::MethodNotAllowed, Method::Other),
        }
    }

    async fn post(
        &self,
        session: Arc<LegacySession>,
        message: Value,
        busy: super::session::Busy,
        caller: LegacyCaller<'_>,
    ) -> Response<Body> {
        let readable_id = message
            .get("id")
            .filter(|id| crate::jsonrpc::is_valid_id(id))
            .cloned();
        let (id, method) = match Message::classify(message.clone()) {
            Err(e) => {
                let error = GatewayError::InvalidRequest(e.to_string());
                return refused(readable_id, &error, Method::Other);
            }
            Ok(Message::Request { id, method, .. }) => (id, Method::parse(&method)),
            Ok(Message::Notification { .. } | Message::Response { .. }) => {
                if message.get("method").and_then(Value::as_str) == Some("notifications/cancelled")
                {
                    if let Some(request) = message.pointer("/params/requestId") {
                        session.cancelled_by_client(request);
                    }
                }
                return match session.send(message) {
                    Ok(()) => labeled(empty(StatusCode::ACCEPTED), Method::Other, "ok"),
                    Err(error) => refused(None, &error, Method::Other),
                };
            }
        };
        if method == Method::Initialize {
            let error = GatewayError::InvalidRequest("this session is initialized already".into());
            return refused(Some(id), &error, method);
        }
        let audit = self.begin_audit(&message, method, caller.access);
        if let Err(error) = check_use(&message, method, caller.access) {
            if let Some(audit) = audit {
                audit.finish(AuditOutcome::Denied, 0, Some(denial_reason(&error)));
            }
            let mut response = refused(Some(id), &error, method);
            scope_challenge(caller.metadata_url, &error, &mut response);
            return response;
        }
        // Renews the caller's exchanged token for the session's next messages.
        let identity = match caller.access.session_identity().await {
            Ok(identity) => identity,
            Err(error) => {
                if let Some(audit) = audit {
                    audit.finish(AuditOutcome::Error, 0, Some(error.to_string()));
                }
                return refused(Some(id), &error, method);
            }
        };
        // The backend session was told who the client was when it started; told otherwise now
        // (its claims changed), the session ends and the client starts a new one.
        if !session.tells(&identity) {
            drop(audit);
            drop(busy);
            self.sessions
                .end(session.key(), EndReason::IdentityChanged)
                .await;
            return refused(Some(id), &GatewayError::SessionNotFound, method);
        }
        session.heard_from(caller.access.clone());
        let answer = super::session::Answer {
            method,
            caller: caller.access.clone(),
            audit,
        };
        match session
            .request(&id, message, answer)
            .and_then(|log| log.attach(None, self.sessions.keep_alive))
        {
            Ok(body) => sse_legacy(body, busy, method),
            Err(error) => refused(Some(id), &error, method),
        }
    }
}

impl Door {
    /// The audit record of a call, prompt or resource read, if the log is kept.
    fn begin_audit(
        &self,
        message: &Value,
        method: Method,
        caller: &CallerAccess,
    ) -> Option<crate::audit::PendingAudit> {
        let audit = self.audit.as_ref()?;
        if !method.is_interruptible() {
            return None;
        }
        let params = message.get("params");
        let trace_id = params
            .and_then(|p| p.pointer("/_meta/traceparent"))
            .and_then(Value::as_str)
            .and_then(|parent| {
                crate::telemetry::trace_id_of(&[("traceparent", parent.to_string())])
            });
        Some(
            audit.begin(PendingFields {
                principal: Some(caller.principal().to_string()),
                route: self.endpoint.path.clone(),
                era: Era::Legacy,
                method: Some(method.as_str().to_string()),
                name: target_of(message, method).map(String::from),
                trace_id,
                arguments: audit
                    .wants_arguments()
                    .then(|| params.and_then(|p| p.get("arguments")).cloned())
                    .flatten(),
            }),
        )
    }
}

/// The name a request uses: a tool's or prompt's name, a resource's URI.
fn target_of(message: &Value, method: Method) -> Option<&str> {
    let params = message.get("params")?;
    let key = match method {
        Method::ToolsCall | Method::PromptsGet => "name",
        _ => "uri",
    };
    params.get(key)?.as_str()
}

/// Whether the caller may use what the request names (its subscriptions included).
fn check_use(message: &Value, method: Method, caller: &CallerAccess) -> Result<(), GatewayError> {
    let empty = serde_json::Map::new();
    let params = message
        .get("params")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let subscription = matches!(
        message.get("method").and_then(Value::as_str),
        Some("resources/subscribe" | "resources/unsubscribe")
    );
    // A subscription names a resource as a read does.
    let method = if subscription {
        Method::ResourcesRead
    } else {
        method
    };
    caller.may_use(method, target_of(message, method), params, Era::Legacy)
}

/// An SSE response that keeps its session busy (not idle) until the client lets go.
fn sse_legacy(body: Body, busy: super::session::Busy, method: Method) -> Response<Body> {
    let body = body
        .map_frame(move |frame| {
            let _session = &busy;
            frame
        })
        .boxed_unsync();
    labeled(sse_response(body, method, "ok"), method, "ok")
}

/// A session's requests may name their revision; it must be one of the session-based ones.
fn check_version(headers: &http::HeaderMap) -> Result<(), GatewayError> {
    match headers.get(PROTOCOL_VERSION_HEADER).map(|v| v.to_str()) {
        None => Ok(()),
        Some(Ok(version)) if LEGACY_VERSIONS.contains(&version) => Ok(()),
        Some(version) => Err(GatewayError::InvalidRequest(format!(
            "Unsupported protocol version {:?} on a session (supported: {})",
            version.unwrap_or_default(),
            LEGACY_VERSIONS.join(", ")
        ))),
    }
}
