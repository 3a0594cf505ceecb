//! The innermost service: applies one typed 2026-07-28 request ([`Command`]). `server/discover`
//! is answered here, `subscriptions/listen` opened ([`Listens`]); forwarded methods go to the
//! bridge ([`Bridge::call`]), whose first answer [`Reply`] writes; anything else is "method not
//! found". (A 2025-11-25 client never gets here: the era layer sent it to its door.)

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{HeaderMap, Request, Response, StatusCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::authn::Principal;
use super::listen::Listens;
use super::reply::Reply;
use super::request::{Command, McpRequest};
use super::route::Route;
use super::translate;
use crate::error::GatewayError;
use crate::fleet::{forwarded_by, mark_owner_unavailable};
use crate::http_serve::{
    answer_early, error_outcome, error_response, json_response, labeled, Body,
};
use crate::jsonrpc;
use crate::mrtr::Bridge;
use crate::mrtr::{Caller, Continuation, ForwardedCall};
use crate::protocol::Method;

#[derive(Clone)]
pub(crate) struct Dispatch {
    pub route: Arc<Route>,
    pub bridge: Arc<Bridge>,
    pub listens: Arc<Listens>,
    /// Between SSE keep-alive comments.
    pub keep_alive: Duration,
    /// A forwarded call with no answer after this long is answered as SSE (`server.stream_after`).
    pub stream_after: Duration,
    /// Cancelled when the drain ends: a call still waiting for its first answer is answered
    /// [`GatewayError::ShutDown`], and a streaming one gets it as its last event.
    pub calls_end: Arc<CancellationToken>,
}

impl Service<Request<McpRequest>> for Dispatch {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<McpRequest>) -> Self::Future {
        let dispatch = self.clone();
        let (stream_after, keep_alive) = (self.stream_after, self.keep_alive);
        let method = request.body().method();
        let answer = async move {
            let (mut parts, request) = request.into_parts();
            let id = request.id.clone();
            let forwarded = forwarded_by(&parts.headers).is_some();
            // The authentication layer below which this service runs always sets it.
            let answer = match parts.extensions.remove::<Principal>() {
                Some(Principal(principal)) => {
                    dispatch.apply(request, principal, &parts.headers).await
                }
                None => Err(GatewayError::Internal("no principal".into())),
            };
            answer.unwrap_or_else(|error| {
                let mut response = error_response(Some(id), &error);
                if forwarded && matches!(error, GatewayError::OwnerUnavailable(_)) {
                    mark_owner_unavailable(&mut response);
                }
                labeled(response, method, error_outcome(&error))
            })
        };
        if !method.is_forwarded() {
            return Box::pin(async move { Ok(answer.await) });
        }
        // A call silent past `stream_after` streams keep-alives until it answers. Boxed once
        // here: the call's future is large, and is not copied again.
        let answer = Box::pin(answer);
        Box::pin(async move { Ok(answer_early(answer, method, stream_after, keep_alive).await) })
    }
}

impl Dispatch {
    async fn apply(
        &self,
        request: McpRequest,
        principal: String,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let route = &self.route;
        let McpRequest { id, command, .. } = request;
        match command {
            Command::Discover { scope } => {
                let init = self
                    .bridge
                    .server_init(&route.pool, &principal, &scope.client_capabilities)
                    .await?;
                let result = translate::discover_result(&init, &route.config);
                Ok(labeled(
                    json_response(StatusCode::OK, &jsonrpc::result_message(&id, result)),
                    Method::Discover,
                    "ok",
                ))
            }
            Command::Listen { params } => self.listens.open(route, principal, id, &params).await,
            _ if !route.config.serves_modern() => Err(GatewayError::InvalidRequest(
                "this endpoint serves 2025-11-25 sessions only: send initialize first".into(),
            )),
            Command::Forward(call) => {
                if call.method == Method::ToolsCall {
                    let name = call.target.as_deref().unwrap_or_default();
                    tracing::Span::current().record("tool", name);
                    route.tool_headers.check(
                        name,
                        call.arguments.as_ref(),
                        headers,
                        route.pool.tools_generation(),
                    )?;
                }
                self.forward(id, call, principal).await
            }
            Command::Unserved { name, .. } => Err(GatewayError::method_not_found(name)),
        }
    }

    async fn forward(
        &self,
        id: Value,
        call: ForwardedCall,
        principal: String,
    ) -> Result<Response<Body>, GatewayError> {
        let reply = Reply {
            route: self.route.clone(),
            id,
            method: call.method,
            retry: matches!(call.continuation, Some(Continuation::Retry { .. })),
        };
        if self.calls_end.is_cancelled() {
            // Past the drain's end the calls held here are gone: a retry is told so, as it will
            // be once this replica has exited, not that its state is unknown.
            return Err(if reply.retry {
                GatewayError::OwnerUnavailable(
                    "ended the calls it held at the end of its drain".into(),
                )
            } else {
                GatewayError::ShutDown
            });
        }
        let caller = Caller {
            route: self.route.config.path.clone(),
            principal,
        };
        let started = tokio::select! {
            biased;
            started = self.bridge.call(&self.route.pool, caller, call) => started?,
            () = self.calls_end.cancelled() => return Err(GatewayError::ShutDown),
        };
        Ok(reply.started(started, self.keep_alive, self.calls_end.clone()))
    }
}
