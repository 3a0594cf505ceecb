//! The innermost service: applies one typed 2026-07-28 request ([`Command`]). `server/discover`
//! is answered here, `subscriptions/listen` opened ([`Listens`]); forwarded methods go to the
//! bridge ([`Bridge::call`]), whose first answer [`Reply`] writes; anything else is "method not
//! found". (A 2025-11-25 client never gets here: the era layer sent it to its door.)
//!
//! Before a call goes on, the route's policy decides whether the caller may use what it names
//! (every retry again), and what the backend is told about the caller is settled; a call,
//! prompt or resource read is audited from here to its last answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{HeaderMap, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::aggregate::{Aggregate, ApplyOn};
use super::authn::{scope_challenge, Principal};
use super::listen::Listens;
use super::reply::Reply;
use super::request::{Command, McpRequest};
use super::route::{Backends, Route};
use super::translate;
use crate::access::{denial_reason, CallerAccess};
use crate::audit::{AuditLog, AuditOutcome, PendingAudit};
use crate::backend::identity::SessionIdentity;
use crate::backend::modern::detect::ResolvedEra;
use crate::backend::modern::{param_headers, MODERN_VERSION};
use crate::config::TransportKind;
use crate::error::GatewayError;
use crate::fleet::{forwarded_by, mark_owner_unavailable};
use crate::http_serve::{
    answer_early, error_outcome, error_response, json_response, labeled, Body,
};
use crate::jsonrpc;
use crate::mrtr::Bridge;
use crate::mrtr::{Caller, Continuation, ForwardedCall, RequestScope};
use crate::protocol::META_PROTOCOL_VERSION;
use crate::protocol::{Era, Method};

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
    /// `[audit]`, if configured.
    pub audit: Option<Arc<AuditLog>>,
    /// For a route over several backends: its names, merged answers and listens.
    pub aggregate: Option<Arc<Aggregate>>,
    /// Applies what a 2025-11-25 session's reverse bridge asks of a route over several
    /// backends, not a client's request: the session's door decided the route's eras, and no
    /// `Mcp-Param-*` headers come with it to check.
    pub for_sessions: bool,
}

impl ApplyOn for Dispatch {
    fn apply_on<'a>(
        &'a self,
        route: Arc<Route>,
        listens: Option<Arc<Listens>>,
        request: McpRequest,
        caller: Arc<CallerAccess>,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Response<Body>, GatewayError>> {
        let aggregate = match route.backends {
            Backends::One(_) => None,
            Backends::Many => self.aggregate.clone(),
        };
        let dispatch = Self {
            route,
            listens: listens.unwrap_or_else(|| self.listens.clone()),
            aggregate,
            ..self.clone()
        };
        Box::pin(async move { dispatch.apply(request, caller, headers).await })
    }

    fn to_shared(&self) -> Arc<dyn ApplyOn> {
        Arc::new(self.clone())
    }
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
                Some(Principal(caller)) => dispatch.apply(request, caller, &parts.headers).await,
                None => Err(GatewayError::Internal("no principal".into())),
            };
            answer.unwrap_or_else(|error| {
                let mut response = error_response(Some(id), &error);
                scope_challenge(&dispatch.route, &parts.headers, &error, &mut response);
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
    /// This dispatch for one backend's own route (on a route over several).
    fn for_member(&self, route: Arc<Route>) -> Self {
        Self {
            route,
            aggregate: None,
            ..self.clone()
        }
    }

    pub(super) async fn apply(
        &self,
        request: McpRequest,
        caller: Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let route = &self.route;
        let McpRequest {
            id,
            command,
            caller_trace,
            ..
        } = request;
        match command {
            Command::Discover { scope } => {
                if let Some(many) = &self.aggregate {
                    return many.discover(self, id, scope, &caller, headers).await;
                }
                let identity = caller.session_identity().await?;
                let pool = route.pool()?;
                if pool.modern().era(&identity).await? == ResolvedEra::Modern {
                    return self.relay_discover(id, scope, caller, identity).await;
                }
                let init = self
                    .bridge
                    .server_init(
                        pool,
                        caller.principal(),
                        identity,
                        &scope.client_capabilities,
                    )
                    .await?;
                let result = translate::discover_result(&init, &route.config);
                Ok(labeled(
                    json_response(StatusCode::OK, &jsonrpc::result_message(&id, result)),
                    Method::Discover,
                    "ok",
                ))
            }
            Command::Listen {
                params,
                client_capabilities,
            } => {
                if let Some(many) = &self.aggregate {
                    let listen = (params, client_capabilities);
                    let limits = &self.listens;
                    return many
                        .listen(self, limits, id, listen, &caller, headers)
                        .await;
                }
                let identity = caller.session_identity().await?;
                if route.pool()?.modern().era(&identity).await? == ResolvedEra::Modern {
                    let listen = (params, client_capabilities);
                    return self
                        .listens
                        .relay(route, caller, identity, id, listen)
                        .await;
                }
                self.listens.open(route, caller, id, &params).await
            }
            _ if !route.config.serves_modern() && !self.for_sessions => {
                Err(GatewayError::InvalidRequest(
                    "this endpoint serves 2025-11-25 sessions only: send initialize first".into(),
                ))
            }
            Command::Forward(call) => {
                if call.method == Method::ToolsCall {
                    let name = call.target.as_deref().unwrap_or_default();
                    tracing::Span::current().record("tool", name);
                }
                let mut audit = self.begin_audit(&call, &caller, &caller_trace);
                // Rounds the call went through before this request, for its audit record.
                let rounds_before = match (&audit, &call.continuation) {
                    (Some(_), Some(Continuation::Retry { token, .. })) => {
                        match self.bridge.round_of(token) {
                            0 => self.bridge.relayed_round_of(token),
                            rounds => rounds,
                        }
                    }
                    _ => 0,
                };
                // Every use is decided first (every retry again; a token that lost its groups
                // does not finish a call), so a hidden item answers as an unknown one would.
                if let Err(refusal) = caller.may_use(
                    call.method,
                    call.target.as_deref(),
                    &call.params,
                    Era::Modern,
                ) {
                    if let Some(audit) = audit {
                        let reason = denial_reason(&refusal);
                        audit.finish(AuditOutcome::Denied, rounds_before, Some(reason));
                    }
                    return Err(refusal);
                }
                let answer = match &self.aggregate {
                    None => {
                        self.forward(id, call, caller, headers, rounds_before, &mut audit)
                            .await
                    }
                    Some(many) if call.method.is_list() => {
                        Box::pin(many.list(self, id, call, &caller, headers)).await
                    }
                    // Renamed and handed to the backend's own route.
                    Some(many) => {
                        let (mut call, audit) = (call, &mut audit);
                        let forward = async {
                            let member = many.member_for(self, &mut call, &caller, headers).await?;
                            let method = call.method;
                            let member_caller = Arc::new(caller.under(&member.route.access));
                            let answer = self
                                .for_member(member.route.clone())
                                .forward(id, call, member_caller, headers, rounds_before, audit)
                                .await;
                            many.note_use(member, method, &answer);
                            answer
                        };
                        Box::pin(forward).await
                    }
                };
                if let (Some(audit), Err(error)) = (audit, &answer) {
                    let reason = super::reply::audit_reason(error);
                    audit.finish(AuditOutcome::Error, rounds_before, Some(reason));
                }
                answer
            }
            Command::Unserved { name, .. } => Err(GatewayError::method_not_found(name)),
        }
    }

    /// The audit record of a call, prompt or resource read, if the log is kept.
    fn begin_audit(
        &self,
        call: &ForwardedCall,
        caller: &CallerAccess,
        caller_trace: &[(&'static str, String)],
    ) -> Option<PendingAudit> {
        let audit = self.audit.as_ref()?;
        if !call.method.is_interruptible() {
            return None;
        }
        Some(
            audit.begin(crate::audit::PendingFields {
                principal: Some(caller.principal().to_string()),
                route: self.route.config.path.clone(),
                era: Era::Modern,
                method: Some(call.method.as_str().to_string()),
                name: call.target.clone(),
                trace_id: crate::telemetry::trace_id_of(caller_trace),
                arguments: audit
                    .wants_arguments()
                    .then(|| call.arguments.clone())
                    .flatten(),
            }),
        )
    }

    pub(super) async fn forward(
        &self,
        id: Value,
        call: ForwardedCall,
        caller: Arc<CallerAccess>,
        headers: &HeaderMap,
        rounds_before: u32,
        audit: &mut Option<PendingAudit>,
    ) -> Result<Response<Body>, GatewayError> {
        let identity = caller.session_identity().await?;
        let pool = self.route.pool()?;
        let modern = pool.modern();
        let relayed = modern.era(&identity).await? == ResolvedEra::Modern;
        // A modern backend over HTTP checks `Mcp-Param-*` against its own schemas (they go on as
        // sent); over stdio it never sees them, so the gateway checks them for it.
        let backend_checks = relayed && pool.spec().config.transport == TransportKind::Http;
        if call.method == Method::ToolsCall && !backend_checks && !self.for_sessions {
            self.route.tool_headers.check(
                call.target.as_deref().unwrap_or_default(),
                call.arguments.as_ref(),
                headers,
                pool.tools_generation(),
            )?;
        }
        let mut reply = Reply {
            route: self.route.clone(),
            id,
            method: call.method,
            retry: matches!(call.continuation, Some(Continuation::Retry { .. })),
            caller: caller.clone(),
            audit: None,
            rounds_before,
            relayed,
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
            route: self.route.state_scope.clone(),
            principal: caller.principal().to_string(),
            identity,
        };
        let started = if relayed {
            let param_headers = param_headers(headers);
            let relay =
                self.bridge
                    .relay(modern, caller, call, param_headers, pool.request_timeout());
            tokio::select! {
                biased;
                started = relay => started?,
                () = self.calls_end.cancelled() => return Err(GatewayError::ShutDown),
            }
        } else {
            tokio::select! {
                biased;
                started = self.bridge.call(pool, caller, call) => started?,
                () = self.calls_end.cancelled() => return Err(GatewayError::ShutDown),
            }
        };
        // From here the answer's writer finishes the record (or, dropped unwritten, records the
        // call cancelled).
        reply.audit = audit.take().map(|mut audit| {
            audit.set_rounds(rounds_before);
            audit
        });
        Ok(reply.started(started, self.keep_alive, self.calls_end.clone()))
    }

    /// `server/discover` of a 2026-07-28 backend, relayed: its capabilities and instructions,
    /// with the revisions this endpoint speaks.
    async fn relay_discover(
        &self,
        id: Value,
        scope: RequestScope,
        caller: Arc<CallerAccess>,
        identity: Arc<SessionIdentity>,
    ) -> Result<Response<Body>, GatewayError> {
        let mut meta = serde_json::Map::new();
        meta.insert(META_PROTOCOL_VERSION.into(), json!(MODERN_VERSION));
        let mut params = serde_json::Map::new();
        params.insert("_meta".into(), Value::Object(meta));
        let call = ForwardedCall {
            method: Method::Discover,
            target: None,
            arguments: None,
            params,
            continuation: None,
            scope,
            trace_headers: Vec::new(),
        };
        let reply = Reply {
            route: self.route.clone(),
            id,
            method: Method::Discover,
            retry: false,
            caller: caller.clone(),
            audit: None,
            rounds_before: 0,
            relayed: true,
        };
        let caller = Caller {
            route: self.route.state_scope.clone(),
            principal: caller.principal().to_string(),
            identity,
        };
        let pool = self.route.pool()?;
        let started = self
            .bridge
            .relay(pool.modern(), caller, call, Vec::new(), pool.init_timeout())
            .await?;
        Ok(reply.started(started, self.keep_alive, self.calls_end.clone()))
    }
}
