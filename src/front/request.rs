//! The typed request, and the parse that makes it once: what a request is for each era
//! ([`Inbound`]), and for 2026-07-28 its JSON-RPC, the required request `_meta`, the
//! request-metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, Base64 sentinel
//! included) and the protocol version, all decided before any response starts. What passes
//! becomes an [`McpRequest`] whose [`Command`] is typed; downstream nothing looks fields up in
//! the params again (what stays in `params`, `_meta` included, passes to the backend).

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};

use crate::error::{GatewayError, StateRejection};
use crate::http_serve::{decode_header_value, header_str};
use crate::jsonrpc::{Message, ShapeError};
use crate::legacy::serve::LegacyRequest;
use crate::mrtr::RequestScope;
use crate::mrtr::{Continuation, ForwardedCall};
use crate::protocol::{
    log_level_rank, Method, LOG_LEVELS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL,
    META_PROTOCOL_VERSION, PROTOCOL_VERSION_HEADER, SUPPORTED_VERSIONS,
};

/// One valid 2026-07-28 client request, parsed once: what it asks ([`Command`]) and what every
/// request carries.
#[derive(Debug)]
pub struct McpRequest {
    pub id: Value,
    pub command: Command,
    /// The caller's W3C trace context (`traceparent`, `tracestate`): from `_meta`, else from
    /// the HTTP headers. The request's span joins it.
    pub caller_trace: Vec<(&'static str, String)>,
    /// The body as received, for a retry forwarded unchanged to the replica holding its call
    /// (shared, not copied).
    pub body: Bytes,
}

/// What a 2026-07-28 request asks, typed: the one shape it has from parse to the bridge.
#[derive(Debug)]
pub enum Command {
    /// A method the backend answers: what [`Bridge::call`](crate::mrtr::Bridge::call) takes,
    /// first call or retry decided.
    Forward(ForwardedCall),
    /// `server/discover`, answered by the gateway.
    Discover { scope: RequestScope },
    /// `subscriptions/listen`, a stream the gateway keeps.
    /// `subscriptions/listen`: its params, and the capabilities its `_meta` declared.
    Listen {
        params: Map<String, Value>,
        client_capabilities: Value,
    },
    /// A method the gateway does not serve, named as sent.
    Unserved { method: Method, name: String },
}

impl McpRequest {
    pub fn method(&self) -> Method {
        match &self.command {
            Command::Forward(call) => call.method,
            Command::Discover { .. } => Method::Discover,
            Command::Listen { .. } => Method::SubscriptionsListen,
            Command::Unserved { method, .. } => *method,
        }
    }

    /// The `requestState` of a retry of a held call.
    pub fn retry_token(&self) -> Option<&str> {
        match &self.command {
            Command::Forward(ForwardedCall {
                continuation: Some(Continuation::Retry { token, .. }),
                ..
            }) => Some(token),
            _ => None,
        }
    }
}

/// A POST body that passed validation.
#[derive(Debug)]
// Built once and moved once per request: boxing the large variant would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Request(McpRequest),
    /// A 2025-11-25 client's `initialize` (nothing of 2026-07-28 about it): the message as sent.
    Initialize {
        id: Value,
        message: Value,
    },
    /// Accepted with 202; nothing is forwarded (2026-07-28 defines no client notifications on
    /// HTTP).
    Notification {
        method: String,
    },
}

/// A request read and parsed once, for the era it belongs to: the one point where the eras
/// part.
// Built once and moved once per request, as `Parsed` is.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Inbound {
    /// A 2026-07-28 request.
    Modern(McpRequest),
    /// A 2025-11-25 client's: its `initialize`, or a request naming its session.
    Legacy(LegacyRequest),
}

/// A validation failure, with the request id when it could be read.
#[derive(Debug)]
pub struct Rejection {
    pub id: Option<Value>,
    pub error: GatewayError,
}

fn reject(id: Option<&Value>, error: GatewayError) -> Rejection {
    Rejection {
        id: id.cloned(),
        error,
    }
}

/// A POST body as one JSON-RPC message (either era): JSON, and not a batch.
pub(crate) fn read_message(body: &[u8]) -> Result<Value, GatewayError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::Parse(e.to_string()))?;
    if value.is_array() {
        return Err(GatewayError::InvalidRequest(
            "batch arrays are not supported".into(),
        ));
    }
    Ok(value)
}

/// Parses and validates the body of a POST whose headers passed the checks before it.
pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Parsed, Rejection> {
    let value = read_message(body).map_err(|error| reject(None, error))?;
    // Kept whole for the session it starts (rare: once per 2025-11-25 client).
    let initialize =
        (value.get("method").and_then(Value::as_str) == Some("initialize")).then(|| value.clone());
    let readable_id = value
        .get("id")
        .filter(|id| crate::jsonrpc::is_valid_id(id))
        .cloned();
    let message = Message::classify(value).map_err(|e: ShapeError| {
        reject(
            readable_id.as_ref(),
            GatewayError::InvalidRequest(e.to_string()),
        )
    })?;
    let (id, method_name, params) = match message {
        Message::Notification { method, .. } => return Ok(Parsed::Notification { method }),
        Message::Response { id, .. } => {
            return Err(reject(
                crate::jsonrpc::is_valid_id(&id).then_some(&id),
                GatewayError::InvalidRequest("clients must not send JSON-RPC responses".into()),
            ))
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let mut params = match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let method = Method::parse(&method_name);
    if method == Method::Initialize {
        // A 2026-07-28 request by that name is a removed method: told the revisions spoken here.
        let modern = params
            .get("_meta")
            .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
            .is_some()
            || headers
                .get(PROTOCOL_VERSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| SUPPORTED_VERSIONS.contains(&v));
        if modern {
            return Err(reject(Some(&id), GatewayError::initialize_refused()));
        }
        // A 2025-11-25 client sends no request-metadata headers: its session starts, or it is
        // told which revision to speak, never that its headers are missing.
        return Ok(Parsed::Initialize {
            id,
            message: initialize.unwrap_or_default(),
        });
    }
    let (mut scope, trace_headers, target) =
        validate_meta(headers, method, &method_name, &mut params)
            .map_err(|e| reject(Some(&id), e))?;
    let caller_trace = if trace_headers.is_empty() {
        meta_trace(&params)
    } else {
        trace_headers.clone()
    };
    let request_state = params.remove("requestState");
    let input_responses = params.remove("inputResponses");
    let command = match method {
        Method::Discover => Command::Discover { scope },
        Method::SubscriptionsListen => Command::Listen {
            params,
            client_capabilities: scope.client_capabilities,
        },
        method if method.is_forwarded() => {
            let arguments = params.remove("arguments");
            // Both revisions define `arguments` of these two as an object; a backend given
            // anything else answers with something the client cannot place.
            if matches!(method, Method::ToolsCall | Method::PromptsGet)
                && arguments.as_ref().is_some_and(|a| !a.is_object())
            {
                return Err(reject(
                    Some(&id),
                    GatewayError::invalid_params("\"arguments\" must be an object"),
                ));
            }
            let continuation = if method.is_interruptible() {
                let continuation = continuation(request_state, input_responses, &mut scope)
                    .map_err(|e| reject(Some(&id), e))?;
                Some(continuation)
            } else {
                None
            };
            Command::Forward(ForwardedCall {
                method,
                target,
                arguments,
                params,
                continuation,
                scope,
                trace_headers,
            })
        }
        method => Command::Unserved {
            method,
            name: method_name,
        },
    };
    Ok(Parsed::Request(McpRequest {
        id,
        command,
        caller_trace,
        body: Bytes::new(),
    }))
}

/// First call or retry, decided once: a `requestState` names a held call, and
/// `inputResponses` answer its round; on a first call they answer questions the backend has yet
/// to ask (the scope's `preanswers`).
fn continuation(
    request_state: Option<Value>,
    input_responses: Option<Value>,
    scope: &mut RequestScope,
) -> Result<Continuation, GatewayError> {
    let answers = match input_responses {
        None => Map::new(),
        Some(Value::Object(answers)) => answers,
        Some(_) => {
            return Err(GatewayError::invalid_params(
                "inputResponses must be an object",
            ))
        }
    };
    match request_state {
        None => {
            scope.preanswers = answers;
            Ok(Continuation::First)
        }
        Some(Value::String(token)) => Ok(Continuation::Retry { token, answers }),
        Some(_) => Err(GatewayError::BadState {
            reason: StateRejection::Malformed,
        }),
    }
}

/// W3C trace context from `_meta` (`traceparent`, `tracestate`).
fn meta_trace(params: &Map<String, Value>) -> Vec<(&'static str, String)> {
    let meta = params.get("_meta").and_then(Value::as_object);
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| {
            let value = meta?.get(name)?.as_str()?;
            Some((name, value.to_string()))
        })
        .collect()
}

/// W3C trace context from the HTTP headers (`traceparent`, `tracestate`).
pub(crate) fn trace_context(headers: &HeaderMap) -> Vec<(&'static str, String)> {
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| {
            let value = headers.get(name)?.to_str().ok()?;
            Some((name, value.to_string()))
        })
        .collect()
}

/// What the request-metadata checks read: the request's scope, the trace headers and the target
/// the method names.
type Metadata = (RequestScope, Vec<(&'static str, String)>, Option<String>);

/// Checks the required `_meta` fields and the request-metadata headers against the body, and
/// reads the target the method names.
fn validate_meta(
    headers: &HeaderMap,
    method: Method,
    method_name: &str,
    params: &mut Map<String, Value>,
) -> Result<Metadata, GatewayError> {
    // Order matters to clients: a missing header is a header error; a missing `_meta` field is
    // invalid params; a mismatch outranks an unsupported version.
    let header_version = header_str(headers, "mcp-protocol-version")?.ok_or_else(|| {
        GatewayError::HeaderMismatch("missing required MCP-Protocol-Version header".into())
    })?;
    let meta = match params.get("_meta") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(GatewayError::invalid_params("_meta must be an object")),
    };
    let body_version = meta.and_then(|m| m.get(META_PROTOCOL_VERSION));
    let body_version = match body_version {
        None => {
            return Err(GatewayError::invalid_params(format!(
                "_meta[\"{META_PROTOCOL_VERSION}\"] is required"
            )))
        }
        Some(Value::String(v)) => v.as_str(),
        Some(_) => {
            return Err(GatewayError::invalid_params(format!(
                "_meta[\"{META_PROTOCOL_VERSION}\"] must be a string"
            )))
        }
    };
    match meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)) {
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(GatewayError::invalid_params(format!(
                "_meta[\"{META_CLIENT_CAPABILITIES}\"] must be an object"
            )))
        }
        None => {
            return Err(GatewayError::invalid_params(format!(
                "_meta[\"{META_CLIENT_CAPABILITIES}\"] is required"
            )))
        }
    };

    if header_version != body_version {
        return Err(GatewayError::HeaderMismatch(format!(
            "MCP-Protocol-Version header value '{header_version}' does not match body value '{body_version}'"
        )));
    }
    if !SUPPORTED_VERSIONS.contains(&body_version) {
        return Err(GatewayError::UnsupportedVersion {
            requested: body_version.to_owned(),
            supported: SUPPORTED_VERSIONS,
        });
    }
    match header_str(headers, "mcp-method")? {
        None => {
            return Err(GatewayError::HeaderMismatch(
                "missing required Mcp-Method header".into(),
            ))
        }
        Some(h) if h != method_name => {
            return Err(GatewayError::HeaderMismatch(format!(
                "Mcp-Method header value '{h}' does not match body value '{method_name}'"
            )))
        }
        Some(_) => {}
    }
    let mut target = None;
    if let Some(param) = method.name_param() {
        let body_name = match params.get(param) {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => {
                return Err(GatewayError::invalid_params(format!(
                    "\"{param}\" must be a string"
                )))
            }
            None => {
                return Err(GatewayError::invalid_params(format!(
                    "\"{param}\" is required"
                )))
            }
        };
        let header = header_str(headers, "mcp-name")?.ok_or_else(|| {
            GatewayError::HeaderMismatch("missing required Mcp-Name header".into())
        })?;
        let decoded = decode_header_value(header.trim())
            .map_err(|e| GatewayError::HeaderMismatch(format!("Mcp-Name header: {e}")))?;
        if decoded != body_name {
            return Err(GatewayError::HeaderMismatch(format!(
                "Mcp-Name header value '{decoded}' does not match body value '{body_name}'"
            )));
        }
        target = Some(decoded);
    }
    let log_level = match meta.and_then(|m| m.get(META_LOG_LEVEL)) {
        None => None,
        Some(Value::String(level)) if log_level_rank(level).is_some() => Some(level.clone()),
        Some(other) => {
            return Err(GatewayError::invalid_params(format!(
                "unknown log level {other}; expected one of {}",
                LOG_LEVELS.join(", ")
            )))
        }
    };
    let progress_token = match meta.and_then(|m| m.get("progressToken")) {
        None => None,
        Some(token) if token.is_string() || token.is_i64() || token.is_u64() => Some(token.clone()),
        Some(_) => {
            return Err(GatewayError::invalid_params(
                "progressToken must be a string or an integer",
            ))
        }
    };
    // The headers are the fallback for trace context `_meta` lacks.
    let trace_headers = if meta.is_some_and(|m| m.contains_key("traceparent")) {
        Vec::new()
    } else {
        trace_context(headers)
    };
    // Checked above; moved, not copied (no 2025 backend sees `io.modelcontextprotocol/*`).
    let client_capabilities = params
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove(META_CLIENT_CAPABILITIES))
        .unwrap_or_default();
    let scope = RequestScope {
        client_capabilities,
        client_progress_token: progress_token,
        log_level,
        preanswers: Map::new(),
    };
    Ok((scope, trace_headers, target))
}
