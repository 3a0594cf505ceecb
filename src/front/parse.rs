//! The parse layer: the read body parsed once ([`parse`]) and its era decided, the one point
//! both eras enter from. `Request<Bytes>` becomes `Request<Inbound>`.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::{Either, Ready};
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use super::request::{parse, read_message, trace_context, Inbound, Parsed};
use crate::error::GatewayError;
use crate::http_serve::{empty, error_outcome, error_response, labeled, Body};
use crate::legacy::serve::{refused, Door, LegacyRequest, SessionRequest};
use crate::protocol::{Method, PROTOCOL_VERSION_HEADER, SESSION_ID_HEADER, SUPPORTED_VERSIONS};

/// Parses the read body once and decides its era: `Request<Bytes>` becomes `Request<Inbound>`.
/// A request naming a 2025-11-25 session, or a 2025-11-25 `initialize`, is the legacy era's
/// (where the route serves it); everything else is 2026-07-28. A notification is answered 202
/// here.
///
/// A POST that declares `MCP-Protocol-Version: 2026-07-28` with a session id this fleet never
/// issued is a modern request with a stray header: the header is ignored, as 2026-07-28 has no
/// sessions. Any other session id takes the legacy path, where an unknown one gets 404.
#[derive(Clone)]
pub(crate) struct ParseLayer {
    /// `None` where the route serves 2026-07-28 only: a session id means nothing there.
    pub door: Option<Arc<Door>>,
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;

    fn layer(&self, inner: S) -> Parse<S> {
        Parse {
            inner,
            door: self.door.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Parse<S> {
    inner: S,
    door: Option<Arc<Door>>,
}

impl<S> Service<Request<Bytes>> for Parse<S>
where
    S: Service<Request<Inbound>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response<Body>, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let answer = |response| Either::Left(futures_util::future::ready(Ok(response)));
        if let Some(token) = self
            .door
            .as_ref()
            .and_then(|door| session_named(door, &parts))
        {
            let message = match parts.method {
                http::Method::POST => match read_message(&body) {
                    Ok(message) => Some(message),
                    Err(error) => return answer(refused(None, &error, Method::Other)),
                },
                _ => None,
            };
            let session = SessionRequest {
                token,
                body,
                message,
            };
            let inbound = Inbound::Legacy(LegacyRequest::Session(session));
            return Either::Right(self.inner.call(Request::from_parts(parts, inbound)));
        }
        match parse(&parts.headers, &body) {
            Ok(Parsed::Request(mut request)) => {
                // The request span (opened by the outer layer) joins the caller's trace: for a
                // retry another replica forwarded here, the forwarder's span it names in the
                // headers, when it does.
                // Only retries are forwarded: no header lookup for a first call.
                let forwarded = request.retry_token().is_some()
                    && crate::fleet::forwarded_by(&parts.headers).is_some();
                if forwarded && parts.headers.contains_key("traceparent") {
                    crate::telemetry::join_caller_trace(&trace_context(&parts.headers));
                } else {
                    crate::telemetry::join_caller_trace(&request.caller_trace);
                }
                request.body = body;
                let inbound = Inbound::Modern(request);
                Either::Right(self.inner.call(Request::from_parts(parts, inbound)))
            }
            Ok(Parsed::Initialize { id, message }) => {
                if self.door.is_none() {
                    let error = GatewayError::initialize_refused();
                    let refusal = labeled(
                        error_response(Some(id), &error),
                        Method::Initialize,
                        error_outcome(&error),
                    );
                    return answer(refusal);
                }
                let inbound = Inbound::Legacy(LegacyRequest::Initialize { id, message });
                Either::Right(self.inner.call(Request::from_parts(parts, inbound)))
            }
            Ok(Parsed::Notification { method }) => {
                tracing::debug!(%method, "notification accepted");
                answer(empty(StatusCode::ACCEPTED))
            }
            Err(rejection) => answer(error_response(rejection.id, &rejection.error)),
        }
    }
}

/// The session a request names, when it is the legacy era's (see [`ParseLayer`]).
fn session_named(door: &Door, head: &http::request::Parts) -> Option<String> {
    let token = head.headers.get(SESSION_ID_HEADER)?.to_str().ok();
    let modern_post = head.method == http::Method::POST
        && head
            .headers
            .get(PROTOCOL_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| SUPPORTED_VERSIONS.contains(&v));
    if modern_post && !token.is_some_and(|t| door.issued(t)) {
        return None;
    }
    // A token that is not even text names no session: the legacy path answers 404.
    Some(token.unwrap_or_default().to_string())
}
