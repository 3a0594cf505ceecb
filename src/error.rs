//! Gateway errors and their single mapping onto JSON-RPC error objects and HTTP statuses.
//!
//! Every failure the front door reports goes through [`GatewayError::to_jsonrpc`] and
//! [`GatewayError::http_status`], so a code and its status are decided in one place. Errors that
//! a backend returned are rewritten here too ([`GatewayError::from_backend`]), because a
//! 2025-11-25 server may use codes that a 2026-07-28 server must never emit.
//!
//! The errors of the layers below are defined here too, beside the mapping that turns them
//! into codes ([`BackendError`] for sessions, [`PoolError`] for leasing, [`HeldError`] for the
//! held table); their modules re-export them, and `?` turns them into a [`GatewayError`] that
//! keeps them as its source (a message too large for the backend becomes the client's
//! [`GatewayError::TooLargeForBackend`]). A leaf: nothing here depends on the layers that use it.

use http::StatusCode;
use serde_json::{json, Value};

use crate::jsonrpc::{codes, JsonRpcError};
use crate::protocol::Era;

/// Which `requestState` check failed; surfaced as `data.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRejection {
    Malformed,
    Tampered,
    Expired,
    PrincipalMismatch,
    RequestMismatch,
    ConsumedOrUnknown,
    RoundLimit,
    /// It names an owner outside `fleet.allowed_peers`: it is not forwarded.
    OwnerNotAllowed,
}

impl StateRejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Tampered => "tampered",
            Self::Expired => "expired",
            Self::PrincipalMismatch => "principal_mismatch",
            Self::RequestMismatch => "request_mismatch",
            Self::ConsumedOrUnknown => "consumed_or_unknown",
            Self::RoundLimit => "round_limit",
            Self::OwnerNotAllowed => "owner_not_allowed",
        }
    }
}

/// A backend session failed (the backend's own module re-exports it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("cannot start backend: {0}")]
    Spawn(String),
    #[error("backend connection failed: {0}")]
    Connect(String),
    #[error("backend connection failed: {0}")]
    Tls(#[from] crate::http_client::TlsSetupError),
    #[error("backend session closed: {0}")]
    Closed(String),
    #[error("backend initialize failed: {0}")]
    Initialize(String),
    #[error("backend did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The backend refused the gateway's request (HTTP 401 or 403): its credentials, or the
    /// caller's exchanged token, are not accepted.
    #[error("backend refused the request: {0}")]
    Refused(String),
    /// The session cannot take this call now; another attempt can.
    #[error("{0}")]
    Busy(String),
    /// The message as written is larger than the backend takes (`max_message_bytes`); it was
    /// not sent.
    #[error("message too large for backend {backend} (at most {limit} bytes)")]
    TooLarge { backend: String, limit: usize },
}

/// Why no session could be lent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoolError {
    #[error("pool closed")]
    Closed,
    #[error("no session of backend {backend} became free within {wait:?}")]
    QueueTimeout {
        backend: String,
        wait: std::time::Duration,
    },
    #[error("backend {0} failed to start recently; retrying shortly")]
    BackingOff(String),
    /// The principal already uses its share of the backend's sessions.
    #[error("this client already uses {share} sessions of backend {backend}, its share")]
    PrincipalShare { backend: String, share: usize },
    #[error("{0}")]
    Start(#[from] BackendError),
}

/// Why one more call cannot be held.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HeldError {
    #[error("{0} calls are waiting for input")]
    Full(usize),
    #[error("{0} of this client's calls are waiting for input")]
    PrincipalFull(usize),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    #[error("Method not found: {method}")]
    MethodNotFound { method: String, data: Option<Value> },
    #[error("Invalid params: {message}")]
    InvalidParams {
        message: String,
        data: Option<Value>,
    },
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    #[error("Missing required client capability")]
    MissingCapability { required: Value },
    #[error("Unsupported protocol version")]
    UnsupportedVersion {
        requested: String,
        supported: &'static [&'static str],
    },
    #[error("Invalid requestState: {}", reason.as_str())]
    BadState { reason: StateRejection },
    #[error("Request body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// Larger than the backend takes (`max_message_bytes`): never sent.
    #[error("Request too large for backend {backend}: it takes messages of at most {limit} bytes")]
    TooLargeForBackend { backend: String, limit: usize },
    #[error("Forbidden: {0}")]
    Forbidden(String),
    /// The token lacks scopes this request needs (the route's, or a policy rule's step-up);
    /// the front adds the `WWW-Authenticate` challenge naming them.
    #[error("Forbidden: insufficient scope: this needs the scopes {}", scopes.join(" "))]
    InsufficientScope { scopes: Vec<String> },
    /// An `identity_headers` or `identity_env` expression failed for this caller: the backend
    /// cannot be told who is calling, so it is not called.
    #[error("Forbidden: the backend cannot be told who is calling: {0}")]
    IdentityUnavailable(String),
    /// The authorization server refused to exchange the caller's token for the backend's.
    #[error("Forbidden: {0}")]
    ExchangeRefused(String),
    /// The token exchange could not be done (unreachable, failing, or a malformed answer).
    #[error("{0}")]
    ExchangeFailed(String),
    #[error("Unauthorized: {0}")]
    Unauthorized(String),
    #[error("Not acceptable: {0}")]
    NotAcceptable(String),
    #[error("Unsupported media type: {0}")]
    UnsupportedMediaType(String),
    #[error("Method not allowed")]
    MethodNotAllowed,
    #[error("Request timeout: {0}")]
    RequestTimeout(String),
    #[error("Gateway busy: {0}")]
    Busy(String),
    /// The drain ended before the call did.
    #[error("The gateway shut down before the call finished; send the request again")]
    ShutDown,
    #[error("Backend timed out: {0}")]
    BackendTimeout(String),
    /// One backend of a route over several failed its part of a merged answer, and the route
    /// fails the whole answer (`on_backend_error = "fail"`).
    #[error("Backend {backend} failed: {reason}")]
    MemberFailed { backend: String, reason: String },
    /// No place for one more `subscriptions/listen` stream.
    #[error("Too many listens: {0}")]
    ListenLimit(String),
    /// A 2025-11-25 request names a session this gateway does not know (ended, expired, never
    /// issued, or another principal's): the client starts a new one with `initialize`.
    #[error("Session not found")]
    SessionNotFound,
    /// A second reader of one of a session's streams while one is attached.
    #[error("Conflict: {0}")]
    StreamConflict(String),
    /// No place for one more 2025-11-25 session.
    #[error("Too many sessions: {0}")]
    SessionLimit(String),
    /// The replica holding a retry's call is certainly gone (it refused the connection, was
    /// restarted, or ended its held calls at its drain's end): the call is lost.
    #[error("Owner unavailable: {0}")]
    OwnerUnavailable(String),
    /// The replica holding a retry's call did not answer in time, or broke off its answer: the
    /// call may still be held there, so the same retry is to be sent again.
    #[error("Owner not answering: {0}")]
    OwnerNotAnswering(String),
    /// No session could be lent.
    #[error("{0}")]
    Pool(#[from] PoolError),
    /// No place to hold one more call.
    #[error("Too many calls waiting for input: {0}")]
    Held(#[from] HeldError),
    /// The backend session failed under a call.
    #[error("{0}")]
    Upstream(BackendError),
    /// An error object a backend returned, already rewritten for 2026-07-28 clients.
    #[error("{}", .0.message)]
    Backend(JsonRpcError),
    #[error("Internal error: {0}")]
    Internal(String),
}

impl From<BackendError> for GatewayError {
    fn from(error: BackendError) -> Self {
        match error {
            // The client's request, as the gateway would have written it, is the problem.
            BackendError::TooLarge { backend, limit } => {
                Self::TooLargeForBackend { backend, limit }
            }
            error => Self::Upstream(error),
        }
    }
}

impl GatewayError {
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::InvalidParams {
            message: message.into(),
            data: None,
        }
    }

    pub fn method_not_found(method: impl Into<String>) -> Self {
        Self::MethodNotFound {
            method: method.into(),
            data: None,
        }
    }

    /// What a backend answers for a name it does not have: what a caller gets for an item the
    /// route's policy hides, so hidden and absent look the same. Resources follow the era's
    /// code (`-32002` before 2026-07-28, `-32602` since), with `data.uri`.
    pub fn unknown_item(method: crate::protocol::Method, name: &str, era: Era) -> Self {
        use crate::protocol::Method;
        let error = match method {
            Method::ToolsCall => {
                JsonRpcError::new(codes::INVALID_PARAMS, format!("Unknown tool: {name}"))
            }
            Method::PromptsGet => {
                JsonRpcError::new(codes::INVALID_PARAMS, format!("Unknown prompt: {name}"))
            }
            _ => {
                let code = match era {
                    Era::Legacy => codes::LEGACY_RESOURCE_NOT_FOUND,
                    Era::Modern => codes::INVALID_PARAMS,
                };
                JsonRpcError::new(code, "Resource not found").with_data(json!({ "uri": name }))
            }
        };
        Self::Backend(error)
    }

    /// Whether a backend failed (down, failing, slow, or answering with an internal error),
    /// rather than the request (its caller's share of the pool included).
    pub fn is_backend_failure(&self) -> bool {
        match self {
            Self::Pool(PoolError::PrincipalShare { .. }) => false,
            Self::Backend(e) => e.code == codes::INTERNAL_ERROR,
            Self::Upstream(_) | Self::Pool(_) | Self::BackendTimeout(_) => true,
            Self::MemberFailed { .. } => true,
            _ => false,
        }
    }

    /// The answer to a 2025-11-25 `initialize`: no such method, and the revisions spoken here.
    pub fn initialize_refused() -> Self {
        Self::MethodNotFound {
            method: "initialize".into(),
            data: Some(serde_json::json!({ "supported": crate::protocol::SUPPORTED_VERSIONS })),
        }
    }

    /// Rewrites an error object from a 2025-11-25 backend into one a 2026-07-28 server may send.
    pub fn from_backend(error: JsonRpcError, method: &str, params: &Value) -> Self {
        let JsonRpcError {
            code,
            message,
            data,
        } = error;
        let rewritten = match code {
            // Retired "resource not found": 2026 says -32602 with the uri.
            codes::LEGACY_RESOURCE_NOT_FOUND => {
                let mut data = match data {
                    Some(Value::Object(map)) => map,
                    _ => serde_json::Map::new(),
                };
                if !data.contains_key("uri") {
                    if let Some(uri) = params.get("uri") {
                        data.insert("uri".into(), uri.clone());
                    }
                }
                JsonRpcError::new(codes::INVALID_PARAMS, message).with_data(Value::Object(data))
            }
            // Kept only when it carries the shape 2026 defines for it.
            codes::MISSING_CLIENT_CAPABILITY
                if data
                    .as_ref()
                    .and_then(|d| d.get("requiredCapabilities"))
                    .is_some_and(Value::is_object) =>
            {
                JsonRpcError {
                    code,
                    message,
                    data,
                }
            }
            // Any other code of the range reserved for the MCP spec is undefined or means
            // something else in 2026: report it as internal, keeping the original.
            c if (codes::RESERVED_MCP_LOW..=codes::RESERVED_MCP_HIGH).contains(&c) => {
                JsonRpcError::new(codes::INTERNAL_ERROR, format!("Backend error: {message}"))
                    .with_data(json!({
                        "backendCode": code,
                        "backendMessage": message,
                        "backendData": data,
                    }))
            }
            _ => JsonRpcError {
                code,
                message,
                data,
            },
        };
        if rewritten.code == codes::METHOD_NOT_FOUND {
            return Self::MethodNotFound {
                method: method.to_string(),
                data: rewritten.data,
            };
        }
        Self::Backend(rewritten)
    }

    /// An error object a 2026-07-28 backend returned: its codes already mean what 2026-07-28
    /// says, except `-32022`, which says the backend does not speak the revision the gateway
    /// sent (the gateway's problem, not the client's).
    pub fn from_modern_backend(error: JsonRpcError, method: &str) -> Self {
        match error.code {
            codes::UNSUPPORTED_PROTOCOL_VERSION => Self::Upstream(BackendError::Closed(format!(
                "the backend does not speak 2026-07-28 any more: {}",
                error.message
            ))),
            codes::HEADER_MISMATCH => Self::Backend(error),
            _ => Self::from_backend(error, method, &Value::Null),
        }
    }

    /// A pool or session that cannot take the call now, though another attempt can (503),
    /// rather than a backend that failed (502).
    fn lower_layer_busy(&self) -> bool {
        matches!(
            self,
            Self::Pool(PoolError::Closed | PoolError::QueueTimeout { .. })
                | Self::Upstream(BackendError::Busy(_))
        )
    }

    /// The HTTP status that accompanies this error on the front's Streamable HTTP transport.
    pub fn http_status(&self) -> StatusCode {
        match self {
            Self::Parse(_)
            | Self::InvalidRequest(_)
            | Self::InvalidParams { .. }
            | Self::HeaderMismatch(_)
            | Self::MissingCapability { .. }
            | Self::UnsupportedVersion { .. }
            | Self::BadState { .. } => StatusCode::BAD_REQUEST,
            Self::MethodNotFound { .. } | Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::StreamConflict(_) => StatusCode::CONFLICT,
            Self::BodyTooLarge { .. } | Self::TooLargeForBackend { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::Forbidden(_)
            | Self::InsufficientScope { .. }
            | Self::IdentityUnavailable(_)
            | Self::ExchangeRefused(_) => StatusCode::FORBIDDEN,
            Self::ExchangeFailed(_) => StatusCode::BAD_GATEWAY,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Busy(_)
            | Self::OwnerUnavailable(_)
            | Self::OwnerNotAnswering(_)
            | Self::ShutDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::BackendTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::MemberFailed { .. } => StatusCode::BAD_GATEWAY,
            Self::Pool(PoolError::PrincipalShare { .. }) => StatusCode::TOO_MANY_REQUESTS,
            Self::Pool(_) | Self::Upstream(_) if self.lower_layer_busy() => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Pool(_) | Self::Upstream(_) => StatusCode::BAD_GATEWAY,
            Self::Held(_) | Self::ListenLimit(_) | Self::SessionLimit(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::Backend(e)
                if e.code == codes::MISSING_CLIENT_CAPABILITY
                    || e.code == codes::HEADER_MISMATCH =>
            {
                StatusCode::BAD_REQUEST
            }
            Self::Backend(_) => StatusCode::OK,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Seconds to wait before trying again, sent as `Retry-After` with every 429 and 503: a
    /// place among the listens frees when a listen ends, the others sooner.
    pub fn retry_after_secs(&self) -> Option<u32> {
        match self.http_status() {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Some(
                if matches!(self, Self::ListenLimit(_) | Self::SessionLimit(_)) {
                    5
                } else {
                    1
                },
            ),
            _ => None,
        }
    }

    /// The JSON-RPC error object for this error.
    pub fn to_jsonrpc(&self) -> JsonRpcError {
        match self {
            Self::Parse(m) => JsonRpcError::new(codes::PARSE_ERROR, format!("Parse error: {m}")),
            Self::InvalidRequest(m) | Self::NotAcceptable(m) | Self::UnsupportedMediaType(m) => {
                JsonRpcError::new(codes::INVALID_REQUEST, format!("Invalid request: {m}"))
            }
            Self::Forbidden(m) => {
                JsonRpcError::new(codes::INVALID_REQUEST, format!("Forbidden: {m}"))
            }
            Self::InsufficientScope { scopes } => {
                JsonRpcError::new(codes::INVALID_REQUEST, self.to_string()).with_data(json!({
                    "reason": "insufficient_scope",
                    "scopes": scopes,
                }))
            }
            Self::IdentityUnavailable(_) | Self::ExchangeRefused(_) => {
                JsonRpcError::new(codes::INVALID_REQUEST, self.to_string())
            }
            Self::ExchangeFailed(_) => JsonRpcError::new(codes::INTERNAL_ERROR, self.to_string()),
            Self::Unauthorized(m) => {
                JsonRpcError::new(codes::INVALID_REQUEST, format!("Unauthorized: {m}"))
            }
            Self::BodyTooLarge { .. }
            | Self::TooLargeForBackend { .. }
            | Self::MethodNotAllowed
            | Self::RequestTimeout(_)
            | Self::SessionNotFound
            | Self::StreamConflict(_) => {
                JsonRpcError::new(codes::INVALID_REQUEST, self.to_string())
            }
            Self::MethodNotFound { method, data } => {
                let e = JsonRpcError::new(
                    codes::METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                );
                match data {
                    Some(d) => e.with_data(d.clone()),
                    None => e,
                }
            }
            Self::InvalidParams { message, data } => {
                let e =
                    JsonRpcError::new(codes::INVALID_PARAMS, format!("Invalid params: {message}"));
                match data {
                    Some(d) => e.with_data(d.clone()),
                    None => e,
                }
            }
            Self::HeaderMismatch(m) => {
                JsonRpcError::new(codes::HEADER_MISMATCH, format!("Header mismatch: {m}"))
            }
            Self::MissingCapability { required } => JsonRpcError::new(
                codes::MISSING_CLIENT_CAPABILITY,
                "Missing required client capability",
            )
            .with_data(json!({ "requiredCapabilities": required })),
            Self::UnsupportedVersion {
                requested,
                supported,
            } => JsonRpcError::new(
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
            )
            .with_data(json!({ "supported": supported, "requested": requested })),
            Self::BadState { reason } => JsonRpcError::new(
                codes::INVALID_PARAMS,
                format!("Invalid requestState: {}", reason.as_str()),
            )
            .with_data(json!({ "reason": reason.as_str() })),
            Self::Busy(m) => JsonRpcError::new(codes::INTERNAL_ERROR, format!("Gateway busy: {m}")),
            Self::ShutDown => JsonRpcError::new(codes::INTERNAL_ERROR, self.to_string()),
            Self::BackendTimeout(m) => {
                JsonRpcError::new(codes::INTERNAL_ERROR, format!("Backend timed out: {m}"))
            }
            Self::MemberFailed { backend, .. } => {
                JsonRpcError::new(codes::INTERNAL_ERROR, self.to_string())
                    .with_data(json!({ "backend": backend }))
            }
            Self::Pool(PoolError::PrincipalShare { .. }) => JsonRpcError::new(
                codes::INTERNAL_ERROR,
                format!("Too many calls at once: {self}"),
            ),
            Self::Pool(_) | Self::Upstream(_) => {
                let kind = if self.lower_layer_busy() {
                    "Gateway busy"
                } else {
                    "Backend unavailable"
                };
                JsonRpcError::new(codes::INTERNAL_ERROR, format!("{kind}: {self}"))
            }
            Self::Held(_) | Self::ListenLimit(_) | Self::SessionLimit(_) => {
                JsonRpcError::new(codes::INTERNAL_ERROR, self.to_string())
            }
            Self::OwnerUnavailable(m) => JsonRpcError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "Owner unavailable: the gateway replica holding this call {m}; \
                     the call cannot be finished, start it again without requestState"
                ),
            )
            .with_data(json!({ "reason": "owner_unavailable" })),
            Self::OwnerNotAnswering(m) => JsonRpcError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "Owner not answering: the gateway replica holding this call {m}; \
                     the call may still finish there: send the same request again, \
                     with the same requestState and inputResponses"
                ),
            )
            .with_data(json!({ "reason": "owner_not_answering" })),
            Self::Backend(e) => e.clone(),
            Self::Internal(m) => {
                JsonRpcError::new(codes::INTERNAL_ERROR, format!("Internal error: {m}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_not_found_becomes_invalid_params_with_uri() {
        let err = GatewayError::from_backend(
            JsonRpcError::new(codes::LEGACY_RESOURCE_NOT_FOUND, "Resource not found"),
            "resources/read",
            &json!({"uri": "demo://missing"}),
        );
        let obj = err.to_jsonrpc();
        assert_eq!(obj.code, codes::INVALID_PARAMS);
        assert_eq!(obj.data, Some(json!({"uri": "demo://missing"})));
        assert_eq!(err.http_status(), StatusCode::OK);
    }

    #[test]
    fn reserved_range_codes_are_remapped_but_capability_errors_pass() {
        let odd = GatewayError::from_backend(
            JsonRpcError::new(-32050, "private"),
            "tools/call",
            &json!({}),
        );
        assert_eq!(odd.to_jsonrpc().code, codes::INTERNAL_ERROR);
        assert_eq!(odd.to_jsonrpc().data.unwrap()["backendCode"], -32050);

        let bare = GatewayError::from_backend(
            JsonRpcError::new(codes::MISSING_CLIENT_CAPABILITY, "no data"),
            "tools/call",
            &json!({}),
        );
        assert_eq!(bare.to_jsonrpc().code, codes::INTERNAL_ERROR);

        let shaped = GatewayError::from_backend(
            JsonRpcError::new(codes::MISSING_CLIENT_CAPABILITY, "needs elicitation")
                .with_data(json!({"requiredCapabilities": {"elicitation": {}}})),
            "tools/call",
            &json!({}),
        );
        assert_eq!(shaped.to_jsonrpc().code, codes::MISSING_CLIENT_CAPABILITY);
        assert_eq!(shaped.http_status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn layered_errors_keep_their_codes_statuses_and_messages() {
        let queue = GatewayError::from(PoolError::QueueTimeout {
            backend: "b".into(),
            wait: std::time::Duration::from_secs(5),
        });
        assert_eq!(queue.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(queue.retry_after_secs(), Some(1));
        let share = GatewayError::from(PoolError::PrincipalShare {
            backend: "b".into(),
            share: 8,
        });
        assert_eq!(share.http_status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(share.retry_after_secs(), Some(1));
        assert_eq!(
            share.to_jsonrpc().message,
            "Too many calls at once: this client already uses 8 sessions of backend b, its share"
        );
        assert_eq!(
            GatewayError::ListenLimit("x".into()).retry_after_secs(),
            Some(5)
        );
        assert_eq!(GatewayError::method_not_found("x").retry_after_secs(), None);
        assert_eq!(
            queue.to_jsonrpc().message,
            "Gateway busy: no session of backend b became free within 5s"
        );
        let start =
            GatewayError::from(PoolError::Start(BackendError::Spawn("no such file".into())));
        assert_eq!(start.http_status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            start.to_jsonrpc().message,
            "Backend unavailable: cannot start backend: no such file"
        );
        let lost = GatewayError::from(BackendError::Closed("eof".into()));
        assert_eq!(lost.http_status(), StatusCode::BAD_GATEWAY);
        assert_eq!(lost.to_jsonrpc().code, codes::INTERNAL_ERROR);
        let busy = GatewayError::from(BackendError::Busy("roots withdrawn".into()));
        assert_eq!(busy.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.to_jsonrpc().message, "Gateway busy: roots withdrawn");
        let held = GatewayError::from(HeldError::PrincipalFull(3));
        assert_eq!(held.http_status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            held.to_jsonrpc().message,
            "Too many calls waiting for input: 3 of this client's calls are waiting for input"
        );
        // The cause stays reachable.
        let source = std::error::Error::source(&start).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("cannot start backend: no such file")
        );
    }

    #[test]
    fn an_owner_gone_or_silent_is_503_with_what_to_do() {
        let silent = GatewayError::OwnerNotAnswering("did not answer within 2s".into());
        assert_eq!(silent.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(silent.retry_after_secs(), Some(1));
        let object = silent.to_jsonrpc();
        assert_eq!(object.data, Some(json!({"reason": "owner_not_answering"})));
        assert!(
            object.message.contains("send the same request again")
                && !object.message.contains("start it again"),
            "{}",
            object.message
        );
        let gone = GatewayError::OwnerUnavailable("refused the connection".into());
        assert_eq!(gone.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        let object = gone.to_jsonrpc();
        assert_eq!(object.code, codes::INTERNAL_ERROR);
        assert_eq!(object.data, Some(json!({"reason": "owner_unavailable"})));
        assert!(
            object.message.contains("start it again"),
            "{}",
            object.message
        );
        let refused = GatewayError::BadState {
            reason: StateRejection::OwnerNotAllowed,
        };
        assert_eq!(refused.http_status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            refused.to_jsonrpc().data,
            Some(json!({"reason": "owner_not_allowed"}))
        );
    }

    #[test]
    fn backend_method_not_found_is_http_404() {
        let err = GatewayError::from_backend(
            JsonRpcError::new(codes::METHOD_NOT_FOUND, "nope"),
            "prompts/list",
            &json!({}),
        );
        assert_eq!(err.http_status(), StatusCode::NOT_FOUND);
        assert_eq!(err.to_jsonrpc().code, codes::METHOD_NOT_FOUND);
    }
}
