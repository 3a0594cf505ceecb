//! The owner layer: with `[fleet]`, a retry whose `requestState` names another replica is
//! forwarded there ([`crate::fleet`]), and one forwarded here is answered early enough that the
//! forwarder does not take a slow answer for a dead owner: when the answer takes longer than half
//! of `fleet.peer_timeout`, its response starts as SSE with keep-alive comments
//! ([`answer_early`]).
//!
//! The marker only changes how the request that carries it is served (never forwarded, its
//! answer started early, its trace taken from the headers), so a client that sets it itself
//! harms only its own request.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Either};
use http::{Request, Response};
use tower::{Layer, Service};

use super::authn::Principal;
use super::request::McpRequest;
use crate::error::GatewayError;
use crate::fleet::{forwarded_by, mark_owner_unavailable, Fleet};
use crate::http_serve::{answer_early, error_response, Body};
use crate::mrtr::{Bridge, Location};

/// Puts the owner check in front of dispatch; without `[fleet]` every request passes.
#[derive(Clone)]
pub(crate) struct OwnerLayer {
    pub fleet: Option<Arc<Fleet>>,
    pub bridge: Arc<Bridge>,
}

impl<S> Layer<S> for OwnerLayer {
    type Service = Owner<S>;

    fn layer(&self, inner: S) -> Owner<S> {
        Owner {
            inner,
            fleet: self.fleet.clone(),
            bridge: self.bridge.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Owner<S> {
    inner: S,
    fleet: Option<Arc<Fleet>>,
    bridge: Arc<Bridge>,
}

type Answer = BoxFuture<'static, Result<Response<Body>, Infallible>>;

impl<S> Service<Request<McpRequest>> for Owner<S>
where
    S: Service<Request<McpRequest>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Answer>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<McpRequest>) -> Self::Future {
        let (Some(fleet), Some(token)) = (&self.fleet, request.body().retry_token()) else {
            return Either::Left(self.inner.call(request));
        };
        let method = request.body().method();
        // Set by the authentication layer above; without it the call below refuses the request.
        let principal = request.extensions().get::<Principal>().map(Principal::name);
        // Only an interruptible method's request carries a retry token.
        let location = match principal {
            Some(principal) => {
                self.bridge
                    .locate(token, principal, request.uri().path(), method.as_str())
            }
            None => Location::Here,
        };
        let fleet = fleet.clone();
        let forwarded = forwarded_by(request.headers()).is_some();
        match location {
            Location::Here if forwarded => {
                let answer = self.inner.call(request);
                Either::Right(Box::pin(async move {
                    let answer = async move {
                        let Ok(response) = answer.await;
                        response
                    };
                    Ok(answer_early(
                        Box::pin(answer),
                        method,
                        fleet.peer_timeout() / 2,
                        fleet.keep_alive(),
                    )
                    .await)
                }))
            }
            Location::Here => Either::Left(self.inner.call(request)),
            // The forwarder counts what the owner answers.
            Location::Gone if forwarded => Either::Right(refuse(&request, "was restarted", true)),
            Location::Gone => {
                fleet.count_unavailable();
                Either::Right(refuse(&request, "was restarted", false))
            }
            // One hop at most: a replica that forwarded here knew no better owner.
            Location::Replica(_) if forwarded => Either::Right(refuse(
                &request,
                "is not the replica this retry was forwarded to",
                true,
            )),
            Location::Replica(owner) => Either::Right(Box::pin(async move {
                let (parts, call) = request.into_parts();
                let answer = fleet
                    .forward_retry(owner, parts, call.body, call.id, method)
                    .await;
                Ok(answer)
            })),
        }
    }
}

/// `owner_unavailable` for a retry whose call no replica can finish; marked for the forwarder
/// when it forwarded the retry here.
fn refuse(request: &Request<McpRequest>, why: &str, to_forwarder: bool) -> Answer {
    let mut response = error_response(
        Some(request.body().id.clone()),
        &GatewayError::OwnerUnavailable(why.into()),
    );
    if to_forwarder {
        mark_owner_unavailable(&mut response);
    }
    Box::pin(futures_util::future::ready(Ok(response)))
}
