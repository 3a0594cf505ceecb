//! Era detection for what the body does not decide: a request naming a session
//! (`Mcp-Session-Id`) is a 2025-11-25 client's, and leaves the modern stack here for its
//! session ([`Door`]). Everything else goes on: a 2026-07-28 request, or a 2025-11-25
//! `initialize`, which only its body reveals (dispatch starts the session).
//!
//! A POST that declares `MCP-Protocol-Version: 2026-07-28` with a session id this fleet never
//! issued is a modern request with a stray header: the header is ignored, as 2026-07-28 has no
//! sessions. Any other session id takes the legacy path, where an unknown one gets 404.
//!
//! Runs after the checks both eras share (Host, Origin, authentication), and only on routes that
//! serve 2025-11-25; elsewhere a session id means nothing and the modern rules answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Either};
use http::{Request, Response};
use hyper::body::Incoming;
use tower::{Layer, Service};

use super::authn::Principal;
use crate::error::GatewayError;
use crate::http_serve::{error_response, Body};
use crate::legacy::serve::Door;
use crate::protocol::{PROTOCOL_VERSION_HEADER, SESSION_ID_HEADER, SUPPORTED_VERSIONS};

#[derive(Clone)]
pub struct SessionsLayer {
    /// `None` where the route serves 2026-07-28 only.
    pub door: Option<Arc<Door>>,
}

impl<S> Layer<S> for SessionsLayer {
    type Service = Sessions<S>;

    fn layer(&self, inner: S) -> Sessions<S> {
        Sessions {
            inner,
            door: self.door.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Sessions<S> {
    inner: S,
    door: Option<Arc<Door>>,
}

impl<S> Service<Request<Incoming>> for Sessions<S>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let door = match &self.door {
            Some(door) if names_session(door, &request) => door.clone(),
            _ => return Either::Left(self.inner.call(request)),
        };
        Either::Right(Box::pin(async move {
            // The authentication layer before this one always sets it.
            let Some(Principal(principal)) = request.extensions().get::<Principal>().cloned()
            else {
                let error = GatewayError::Internal("no principal".into());
                return Ok(error_response(None, &error));
            };
            Ok(door.serve(request, &principal).await)
        }))
    }
}

fn names_session<B>(door: &Door, request: &Request<B>) -> bool {
    let headers = request.headers();
    let Some(token) = headers.get(SESSION_ID_HEADER) else {
        return false;
    };
    let modern_post = request.method() == http::Method::POST
        && headers
            .get(PROTOCOL_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| SUPPORTED_VERSIONS.contains(&v));
    !modern_post || token.to_str().is_ok_and(|t| door.sessions.issued(t))
}
