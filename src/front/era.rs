//! Where the eras part, after the request was read and parsed once ([`Inbound`]): a 2025-11-25
//! client's request goes to its [`Door`] (sessions proxied to backend sessions of their own);
//! a 2026-07-28 request goes on down the stack to the owner check and dispatch.
//!
//! Runs after the checks both eras share (Host, Origin, authentication, media types, the body's
//! limits) and after the drain, which refuses new 2025-11-25 sessions as it refuses new calls.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Either};
use http::{Request, Response};
use tower::{Layer, Service};

use super::authn::Principal;
use super::request::{Inbound, McpRequest};
use super::route::Route;
use crate::error::GatewayError;
use crate::http_serve::{error_response, Body};
use crate::legacy::serve::{Door, LegacyCaller};

#[derive(Clone)]
pub(crate) struct EraLayer {
    /// `None` where the route serves 2026-07-28 only (parsing never yields a legacy request
    /// there).
    pub door: Option<Arc<Door>>,
    /// Its metadata URL is named in a step-up challenge.
    pub route: Arc<Route>,
}

impl<S> Layer<S> for EraLayer {
    type Service = Eras<S>;

    fn layer(&self, inner: S) -> Eras<S> {
        Eras {
            inner,
            door: self.door.clone(),
            route: self.route.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Eras<S> {
    inner: S,
    door: Option<Arc<Door>>,
    route: Arc<Route>,
}

impl<S> Service<Request<Inbound>> for Eras<S>
where
    S: Service<Request<McpRequest>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Inbound>) -> Self::Future {
        let (head, inbound) = request.into_parts();
        let legacy = match inbound {
            Inbound::Modern(request) => {
                return Either::Left(self.inner.call(Request::from_parts(head, request)))
            }
            Inbound::Legacy(legacy) => legacy,
        };
        let door = self.door.clone();
        let route = self.route.clone();
        Either::Right(Box::pin(async move {
            // The authentication layer above always sets it; parsing yields a legacy request
            // only where there is a door.
            let (Some(door), Some(Principal(caller))) =
                (door, head.extensions.get::<Principal>().cloned())
            else {
                let error = GatewayError::Internal("no principal or no door".into());
                return Ok(error_response(None, &error));
            };
            let metadata_url = route.resource_metadata_url(&head.headers);
            let caller = LegacyCaller {
                access: &caller,
                metadata_url: &metadata_url,
            };
            Ok(door.serve(head, legacy, caller).await)
        }))
    }
}
