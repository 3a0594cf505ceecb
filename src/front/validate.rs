//! Validation of one 2026-07-28 Streamable HTTP POST, decided before any response starts:
//! Host and Origin allow-lists, media types, body size, JSON-RPC shape, the required request
//! `_meta`, the request-metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//! Base64 sentinel included) and the protocol version.

use base64::Engine;
use http::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN};
use http::HeaderMap;
use serde_json::{Map, Value};

use crate::error::GatewayError;
use crate::jsonrpc::{Message, ShapeError};

/// Revisions the front speaks.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28"];

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// RFC 5424 levels, lowest first.
pub const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

pub fn log_level_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

/// Methods whose request names its target in `Mcp-Name`, and the param that holds it.
fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// Host and Origin allow-lists (DNS-rebinding protection).
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    /// Lower-case host names without port; `None` accepts any.
    hosts: Option<Vec<String>>,
    /// Lower-case `scheme://host[:port]`; an entry without port matches any port.
    origins: Vec<String>,
}

const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

impl OriginPolicy {
    pub fn new(
        listen_is_loopback: bool,
        allowed_hosts: Option<&[String]>,
        allowed_origins: Option<&[String]>,
    ) -> Self {
        let hosts = match allowed_hosts {
            Some(list) if list.iter().any(|h| h == "*") => None,
            Some(list) => Some(list.iter().map(|h| h.to_ascii_lowercase()).collect()),
            None if listen_is_loopback => {
                Some(LOOPBACK_NAMES.iter().map(|h| h.to_string()).collect())
            }
            None => None,
        };
        let origins = match allowed_origins {
            Some(list) => list
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            None => LOOPBACK_NAMES
                .iter()
                .flat_map(|h| [format!("http://{h}"), format!("https://{h}")])
                .collect(),
        };
        Self { hosts, origins }
    }

    /// `authority` is the request URI's, which HTTP/2 sends instead of a Host header.
    pub fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), GatewayError> {
        if let Some(hosts) = &self.hosts {
            let host = headers
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .or(authority)
                .map(|h| strip_port(&h.to_ascii_lowercase()).to_string())
                .ok_or_else(|| GatewayError::Forbidden("missing Host header".into()))?;
            if !hosts.contains(&host) {
                return Err(GatewayError::Forbidden(format!(
                    "host {host:?} is not allowed"
                )));
            }
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| GatewayError::Forbidden("invalid Origin header".into()))?
                .trim_end_matches('/')
                .to_ascii_lowercase();
            let allowed = self.origins.iter().any(|allowed| {
                origin == *allowed
                    || (origin.starts_with(allowed.as_str())
                        && origin[allowed.len()..].starts_with(':')
                        && !allowed[allowed.find("://").map_or(0, |i| i + 3)..].contains(':'))
            });
            if !allowed {
                return Err(GatewayError::Forbidden(format!(
                    "origin {origin:?} is not allowed"
                )));
            }
        }
        Ok(())
    }
}

/// `host:port`, `[v6]:port`, `host` → host part.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// The media types a header lists, without parameters, skipping those with an explicit
/// `q=0` ("not acceptable"). Borrowed: this runs on every request.
fn media_types<'a>(
    headers: &'a HeaderMap,
    name: http::header::HeaderName,
) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let media_type = pieces.next().unwrap_or_default().trim();
            let refused =
                pieces.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (!refused).then_some(media_type)
        })
}

/// Checks `Content-Type` and `Accept` of a POST.
pub fn check_media_types(headers: &HeaderMap) -> Result<(), GatewayError> {
    let json = "application/json";
    if !media_types(headers, CONTENT_TYPE)
        .next()
        .is_some_and(|t| t.eq_ignore_ascii_case(json))
    {
        return Err(GatewayError::UnsupportedMediaType(
            "Content-Type must be application/json".into(),
        ));
    }
    let accepts = |wanted: &str| {
        let major = wanted.split('/').next().unwrap_or_default();
        media_types(headers, ACCEPT).any(|a| {
            a.eq_ignore_ascii_case(wanted)
                || a == "*/*"
                || a.strip_suffix("/*")
                    .is_some_and(|m| m.eq_ignore_ascii_case(major))
        })
    };
    if !(accepts(json) && accepts("text/event-stream")) {
        return Err(GatewayError::NotAcceptable(
            "Accept must list both application/json and text/event-stream".into(),
        ));
    }
    Ok(())
}

/// What a valid request declared in `_meta`.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub client_capabilities: Value,
    pub log_level: Option<String>,
    pub progress_token: Option<Value>,
    /// W3C trace context from HTTP headers (`traceparent`, `tracestate`), used when `_meta`
    /// carries none.
    pub trace_headers: Vec<(&'static str, String)>,
}

/// A POST body that passed validation.
#[derive(Debug)]
pub enum Inbound {
    Request {
        id: Value,
        method: String,
        params: Map<String, Value>,
        meta: RequestMeta,
    },
    /// Accepted with 202; nothing is forwarded (2026-07-28 defines no client notifications on
    /// HTTP).
    Notification { method: String },
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

/// Decodes the `=?base64?...?=` sentinel form of a header value.
pub fn decode_header_value(raw: &str) -> Result<String, String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("invalid Base64: {e}"))?;
            String::from_utf8(bytes).map_err(|_| "Base64 value is not UTF-8".to_string())
        }
        None => Ok(raw.to_string()),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, GatewayError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            GatewayError::HeaderMismatch(format!("{name} header has invalid characters"))
        }),
    }
}

/// Parses and validates the body of a POST whose headers passed [`OriginPolicy::check`] and
/// [`check_media_types`].
pub fn validate_body(headers: &HeaderMap, body: &[u8]) -> Result<Inbound, Rejection> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| reject(None, GatewayError::Parse(e.to_string())))?;
    if value.is_array() {
        return Err(reject(
            None,
            GatewayError::InvalidRequest("batch arrays are not supported".into()),
        ));
    }
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
    let (id, method, params) = match message {
        Message::Notification { method, .. } => return Ok(Inbound::Notification { method }),
        Message::Response { id, .. } => {
            return Err(reject(
                crate::jsonrpc::is_valid_id(&id).then_some(&id),
                GatewayError::InvalidRequest("clients must not send JSON-RPC responses".into()),
            ))
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let params = match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let meta = validate_meta(headers, &method, &params).map_err(|e| reject(Some(&id), e))?;
    Ok(Inbound::Request {
        id,
        method,
        params,
        meta,
    })
}

fn validate_meta(
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
) -> Result<RequestMeta, GatewayError> {
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
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return Err(GatewayError::invalid_params(format!(
                "_meta[\"{META_PROTOCOL_VERSION}\"] must be a string"
            )))
        }
    };
    let client_capabilities = match meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)) {
        Some(caps @ Value::Object(_)) => caps.clone(),
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
    if !SUPPORTED_VERSIONS.contains(&body_version.as_str()) {
        return Err(GatewayError::UnsupportedVersion {
            requested: body_version,
            supported: SUPPORTED_VERSIONS,
        });
    }
    match header_str(headers, "mcp-method")? {
        None => {
            return Err(GatewayError::HeaderMismatch(
                "missing required Mcp-Method header".into(),
            ))
        }
        Some(h) if h != method => {
            return Err(GatewayError::HeaderMismatch(format!(
                "Mcp-Method header value '{h}' does not match body value '{method}'"
            )))
        }
        Some(_) => {}
    }
    if let Some(param) = name_param(method) {
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
    let trace_headers = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| {
            let value = headers.get(name)?.to_str().ok()?;
            Some((name, value.to_string()))
        })
        .collect();
    Ok(RequestMeta {
        protocol_version: body_version,
        client_capabilities,
        log_level,
        progress_token,
        trace_headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    impl OriginPolicy {
        fn check_headers(&self, headers: &HeaderMap) -> Result<(), GatewayError> {
            self.check(headers, None)
        }
    }

    fn policy() -> OriginPolicy {
        OriginPolicy::new(true, None, None)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn host_and_origin_allow_lists() {
        let p = policy();
        assert!(p
            .check_headers(&headers(&[("host", "127.0.0.1:8080")]))
            .is_ok());
        assert!(p.check_headers(&headers(&[("host", "[::1]:9")])).is_ok());
        assert!(p
            .check_headers(&headers(&[("host", "evil.example")]))
            .is_err());
        assert!(p
            .check_headers(&headers(&[
                ("host", "localhost"),
                ("origin", "http://localhost:3000")
            ]))
            .is_ok());
        assert!(p
            .check_headers(&headers(&[
                ("host", "localhost"),
                ("origin", "http://evil.example")
            ]))
            .is_err());
        assert!(p
            .check_headers(&headers(&[
                ("host", "localhost"),
                ("origin", "http://localhost.evil.example")
            ]))
            .is_err());
        let open = OriginPolicy::new(false, None, Some(&["https://app.example:8443".into()]));
        assert!(open
            .check_headers(&headers(&[("host", "gw.internal")]))
            .is_ok());
        assert!(open
            .check_headers(&headers(&[
                ("host", "gw"),
                ("origin", "https://app.example:8443")
            ]))
            .is_ok());
        assert!(open
            .check_headers(&headers(&[
                ("host", "gw"),
                ("origin", "https://app.example:9999")
            ]))
            .is_err());
    }

    #[test]
    fn media_types_are_checked() {
        let ok = headers(&[
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
        ]);
        assert!(check_media_types(&ok).is_ok());
        let only_json = headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]);
        assert!(matches!(
            check_media_types(&only_json),
            Err(GatewayError::NotAcceptable(_))
        ));
        let text = headers(&[("content-type", "text/plain"), ("accept", "*/*")]);
        assert!(matches!(
            check_media_types(&text),
            Err(GatewayError::UnsupportedMediaType(_))
        ));
        // Case does not matter; wildcards count; types may come in separate headers.
        let mixed = headers(&[
            ("content-type", "Application/JSON"),
            ("accept", "APPLICATION/json;q=0.9"),
            ("accept", "text/*"),
        ]);
        assert!(check_media_types(&mixed).is_ok());
        // An explicit q=0 refuses a type.
        let refused = headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
        ]);
        assert!(matches!(
            check_media_types(&refused),
            Err(GatewayError::NotAcceptable(_))
        ));
        let missing = headers(&[("accept", "*/*")]);
        assert!(matches!(
            check_media_types(&missing),
            Err(GatewayError::UnsupportedMediaType(_))
        ));
    }

    #[test]
    fn base64_sentinel_is_decoded() {
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
        assert_eq!(
            decode_header_value("=?base64?w6lsw6h2ZQ==?=").unwrap(),
            "élève"
        );
        assert!(decode_header_value("=?base64?***?=").is_err());
    }
}
