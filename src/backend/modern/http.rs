//! A 2026-07-28 backend over Streamable HTTP: each request is its own POST with the
//! request-metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, the client's
//! `Mcp-Param-*`), the backend's static and identity headers and the caller's exchanged token;
//! the answer is JSON, or an SSE stream of the request's notifications ending with its
//! response. Dropping the exchange closes the stream: the request's cancellation.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use sse_stream::SseStream;

use super::{read_answer, Exchange, ModernRequest, Source, MODERN_VERSION};
use crate::backend::identity::SessionIdentity;
use crate::backend::{BackendError, BackendSpec};
use crate::http_client::{is_event_stream, HttpClient};
use crate::http_serve::encode_header_value;
use crate::protocol::PROTOCOL_VERSION_HEADER;

const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// Largest JSON answer read from a backend.
const MAX_JSON_BODY: usize = 64 * 1024 * 1024;

pub(super) struct ModernHttp {
    client: HttpClient,
    /// The backend's `headers`, parsed once; each request adds its caller's identity headers.
    configured: http::HeaderMap,
    url: Uri,
    /// Request ids: each POST is its own exchange, so they only need to differ.
    next_id: AtomicU64,
}

impl ModernHttp {
    pub(super) fn new(spec: &BackendSpec) -> Result<Self, BackendError> {
        let client = spec
            .http_client
            .clone()
            .ok_or_else(|| BackendError::Connect("no HTTP client".into()))?;
        let url = spec
            .config
            .url
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|e| BackendError::Connect(format!("bad url: {e}")))?;
        let configured = SessionIdentity::none().request_headers(&spec.config.headers)?;
        Ok(Self {
            client,
            configured,
            url,
            next_id: AtomicU64::new(1),
        })
    }

    pub(super) async fn send(
        &self,
        spec: &BackendSpec,
        identity: &SessionIdentity,
        request: &ModernRequest,
    ) -> Result<Exchange, BackendError> {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let message =
            crate::jsonrpc::request(id.clone(), &request.method, Some(request.params.clone()));
        let body = Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
        if let Some(limit) = spec.config.message_limit() {
            if body.len() > limit {
                return Err(BackendError::TooLarge {
                    backend: spec.name.clone(),
                    limit,
                });
            }
        }
        let mut headers = self.configured.clone();
        for (name, value) in &identity.headers {
            headers.insert(name.clone(), value.clone());
        }
        if let Some(credential) = &identity.credential {
            headers.insert(AUTHORIZATION, (*credential.current()).clone());
        }
        request_headers(request, &mut headers)?;
        let mut builder = Request::post(self.url.clone());
        if let Some(all) = builder.headers_mut() {
            all.extend(headers);
        }
        let post = builder
            .body(Full::new(body))
            .map_err(|e| BackendError::Connect(e.to_string()))?;
        let response = self
            .client
            .request(post)
            .await
            .map_err(|e| BackendError::Connect(format!("backend unreachable: {e}")))?;
        let status = response.status();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            // The gateway's or the caller's credentials, not the protocol: nothing to learn
            // about the backend's era from it.
            return Err(BackendError::Refused(format!("HTTP {status}")));
        }
        if status.is_success() && is_event_stream(response.headers()) {
            return Ok(Exchange {
                source: Source::Stream(Box::new(SseStream::new(
                    response
                        .into_body()
                        .map_err(std::io::Error::other)
                        .boxed_unsync(),
                ))),
                id,
                answered: false,
            });
        }
        read_answer(response.into_body(), MAX_JSON_BODY, &id, status).await
    }
}

/// The headers a 2026-07-28 request travels with: its media types, the revision, the
/// request-metadata headers of its body (`Mcp-Method`, `Mcp-Name`) and the client's
/// `Mcp-Param-*`.
pub(crate) fn request_headers(
    request: &ModernRequest,
    headers: &mut http::HeaderMap,
) -> Result<(), BackendError> {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        PROTOCOL_VERSION_HEADER,
        HeaderValue::from_static(MODERN_VERSION),
    );
    headers.insert(
        MCP_METHOD,
        HeaderValue::from_str(&request.method)
            .map_err(|_| BackendError::Connect("method is not a header value".into()))?,
    );
    if let Some(name) = &request.name {
        headers.insert(MCP_NAME, encode_header_value(name));
    }
    for (name, value) in &request.headers {
        headers.append(name.clone(), value.clone());
    }
    Ok(())
}

/// The request-metadata headers a client sent that a modern backend checks against the body
/// (`Mcp-Param-*`), passed on as they came.
pub(crate) fn param_headers(headers: &http::HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("mcp-param-"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}
