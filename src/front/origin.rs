//! The first checks of the stack, on the request line and headers alone: the Host and Origin
//! allow-lists (DNS-rebinding protection) and POST as the only method of an MCP endpoint.

use std::sync::Arc;

use http::header::{HOST, ORIGIN};
use http::{HeaderMap, Method, Request, Response};
use tower_http::validate_request::ValidateRequest;

use crate::error::GatewayError;
use crate::http_serve::{error_response, Body};

/// Host and Origin allow-lists (DNS-rebinding protection).
#[derive(Debug, Clone)]
pub(crate) struct OriginPolicy {
    /// Lower-case host names without port; `None` accepts any.
    hosts: Option<Vec<String>>,
    /// Lower-case `scheme://host[:port]`; an entry without port matches any port.
    origins: Vec<String>,
}

const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

impl OriginPolicy {
    pub(crate) fn new(
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
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        authority: Option<&str>,
    ) -> Result<(), GatewayError> {
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

/// The allow-lists as a layer's check, shared: the stack is cloned per request. HTTP/2 sends the
/// authority in the URI, not in `Host`.
#[derive(Clone)]
pub(crate) struct CheckOrigin(pub Arc<OriginPolicy>);

impl<B> ValidateRequest<B> for CheckOrigin {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        let authority = request.uri().authority().map(|a| a.as_str());
        self.0
            .check(request.headers(), authority)
            .map_err(|error| error_response(None, &error))
    }
}

/// A 2026-07-28 endpoint answers POST only (405 with `Allow: POST`); where 2025-11-25 clients
/// are served, GET and DELETE naming a session (`Mcp-Session-Id`) pass too.
#[derive(Clone, Copy)]
pub(crate) struct PostOnly {
    pub sessions: bool,
}

impl<B> ValidateRequest<B> for PostOnly {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        let method = request.method();
        let session_method = self.sessions
            && (method == Method::GET || method == Method::DELETE)
            && request
                .headers()
                .contains_key(crate::protocol::SESSION_ID_HEADER);
        if method == Method::POST || session_method {
            Ok(())
        } else {
            Err(error_response(None, &GatewayError::MethodNotAllowed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_serve::testing::headers;

    impl OriginPolicy {
        fn check_headers(&self, headers: &HeaderMap) -> Result<(), GatewayError> {
            self.check(headers, None)
        }
    }

    fn policy() -> OriginPolicy {
        OriginPolicy::new(true, None, None)
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
}
