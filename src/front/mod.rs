//! The front side: a 2026-07-28 MCP server over Streamable HTTP (hyper 1).
//!
//! One POST-only endpoint per configured route. A request is validated completely before any
//! response starts ([`validate`]), then either answered here (`server/discover`, removed and
//! unknown methods) or forwarded on a session lent by the route's pool ([`call`]). The answer is
//! a single JSON body, or an SSE stream when notifications (progress, logs) precede it.
//!
//! Tasks: the accept loop (owned by [`RunningGateway`]) and one task per connection, tracked in
//! a `JoinSet` that the accept loop drains at shutdown.

pub mod admin;
pub mod param_headers;
pub mod translate;
pub mod validate;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::validate::{Inbound, OriginPolicy, RequestMeta, SUPPORTED_VERSIONS};
use crate::auth::{AuthError, Authenticator};
use crate::backend::pool::{Pool, PoolKey, Purpose};
use crate::backend::{BackendError, BackendSpec};
use crate::config::{Config, RouteConfig};
use crate::error::GatewayError;
use crate::error::StateRejection;
use crate::jsonrpc;
use crate::metrics::{method_label, Metrics};
use crate::mrtr::call::{CallDriver, LeasedCall, RequestScope};
use crate::mrtr::state::{params_digest, KeyRing};
use crate::mrtr::{Bridge, CallBinding, Event, Outcome, Redeemed, Started};

/// Longest wait for a request's headers (slow clients cannot hold connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// After the drain, how long open connections get to finish writing.
const CONNECTION_GRACE: Duration = Duration::from_secs(2);

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("backend {name}: {source}")]
    Backend {
        name: String,
        source: crate::backend::BackendError,
    },
    #[error("requestState keys: {0}")]
    Keys(String),
    #[error("route {path}: {source}")]
    Auth { path: String, source: AuthError },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// One MCP endpoint and the backend behind it.
pub struct Route {
    pub config: RouteConfig,
    pub pool: Arc<Pool>,
    pub request_timeout: Duration,
    /// `x-mcp-header` annotations learned from this route's `tools/list` results.
    pub tool_headers: param_headers::ToolHeaders,
    pub auth: Authenticator,
    metrics: Arc<Metrics>,
}

const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

impl Route {
    /// This endpoint's URL as a protected resource (RFC 9728).
    fn resource(&self, headers: &http::HeaderMap) -> String {
        match &self.config.resource {
            Some(resource) => resource.clone(),
            None => {
                let host = headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("localhost");
                format!("http://{host}{}", self.config.path)
            }
        }
    }

    /// Where this endpoint's protected resource metadata lives: the well-known path inserted
    /// before the resource's path (RFC 9728 §3.1).
    fn resource_metadata_url(&self, headers: &http::HeaderMap) -> String {
        let resource = self.resource(headers);
        match resource.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                format!("{scheme}://{authority}{RESOURCE_METADATA_PATH}{path}")
            }
            None => resource,
        }
    }

    fn resource_metadata(&self, headers: &http::HeaderMap) -> Value {
        json!({
            "resource": self.resource(headers),
            "authorization_servers": self.config.authorization_servers,
            "bearer_methods_supported": ["header"],
        })
    }
}

pub struct Gateway {
    routes: HashMap<String, Arc<Route>>,
    pools: Vec<Arc<Pool>>,
    policy: OriginPolicy,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    keep_alive: Duration,
    progress_tokens: AtomicU64,
    bridge: Arc<Bridge>,
    metrics: Arc<Metrics>,
    /// Set at shutdown: only retries of held calls are still served.
    draining: std::sync::atomic::AtomicBool,
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn json_response(status: StatusCode, message: &Value) -> Response<Body> {
    let mut response = Response::new(full(serde_json::to_vec(message).unwrap_or_default()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_response(id: Option<Value>, error: &GatewayError) -> Response<Body> {
    let mut response = json_response(
        error.http_status(),
        &jsonrpc::error_response(id, &error.to_jsonrpc()),
    );
    if matches!(error, GatewayError::MethodNotAllowed) {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
    }
    response
}

fn sse_frame(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// What a response was, for metrics: set by whoever builds it.
#[derive(Clone, Copy)]
struct Labels {
    method: &'static str,
    outcome: &'static str,
}

fn labeled(mut response: Response<Body>, method: &str, outcome: &'static str) -> Response<Body> {
    response.extensions_mut().insert(Labels {
        method: method_label(method),
        outcome,
    });
    response
}

/// How the outcome of one front request is written.
struct Reply {
    route: Arc<Route>,
    id: Value,
    method: String,
    /// A retry's result must not be cached.
    retry: bool,
}

fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Complete(_) => "ok",
        Outcome::InputRequired(_) => "input_required",
        Outcome::Error(_) => "error",
    }
}

impl Reply {
    fn message(&self, outcome: Outcome) -> (Value, StatusCode) {
        let init = self.route.pool.cached_init();
        let server_info = init.as_deref().and_then(|init| init.get("serverInfo"));
        match outcome {
            Outcome::Complete(result) => {
                if self.method == "tools/list" {
                    self.route.tool_headers.learn(&result);
                }
                let stamped = translate::stamp_result(
                    &self.method,
                    result,
                    &self.route.config,
                    server_info,
                    self.retry,
                );
                (
                    jsonrpc::result_response(self.id.clone(), stamped),
                    StatusCode::OK,
                )
            }
            Outcome::InputRequired(result) => {
                let metrics = &self.route.metrics;
                metrics
                    .rounds
                    .with_label_values(&[self.route.config.path.as_str()])
                    .inc();
                if let Some(requests) = result.get("inputRequests").and_then(Value::as_object) {
                    for request in requests.values() {
                        let kind = match request.get("method").and_then(Value::as_str) {
                            Some("elicitation/create") => "elicitation",
                            Some("sampling/createMessage") => "sampling",
                            _ => "roots",
                        };
                        metrics.input_requests.with_label_values(&[kind]).inc();
                    }
                }
                let stamped = translate::stamp_interim(result, server_info);
                (
                    jsonrpc::result_response(self.id.clone(), stamped),
                    StatusCode::OK,
                )
            }
            Outcome::Error(error) => (
                jsonrpc::error_response(Some(self.id.clone()), &error.to_jsonrpc()),
                error.http_status(),
            ),
        }
    }

    fn json(&self, outcome: Outcome) -> Response<Body> {
        let label = outcome_label(&outcome);
        let (message, status) = self.message(outcome);
        labeled(json_response(status, &message), &self.method, label)
    }

    /// A re-sent retry: the outcome of the first one, under this request's id.
    async fn attach(
        self,
        mut outcome: watch::Receiver<Option<Outcome>>,
        wait: Duration,
    ) -> Response<Body> {
        let ready = tokio::time::timeout(wait, outcome.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(done)) => match done.clone() {
                Some(outcome) => self.json(outcome),
                None => self.json(Outcome::Error(GatewayError::Internal("no outcome".into()))),
            },
            _ => self.json(Outcome::Error(GatewayError::BackendTimeout(
                "the original retry did not finish".into(),
            ))),
        }
    }
}

impl Gateway {
    pub fn new(config: &Config) -> Result<Arc<Self>, StartError> {
        let metrics = Arc::new(Metrics::new());
        let mut pools: HashMap<&str, Arc<Pool>> = HashMap::new();
        for (name, backend) in &config.backends {
            let spec =
                BackendSpec::new(name, backend.clone()).map_err(|source| StartError::Backend {
                    name: name.clone(),
                    source,
                })?;
            pools.insert(name, Arc::new(Pool::new(spec, metrics.clone())));
        }
        let mut routes = HashMap::new();
        let needs_client = config
            .routes
            .iter()
            .any(|r| matches!(&r.auth, crate::auth::AuthConfig::Jwt(j) if j.jwks_url.is_some()));
        let auth_client = if needs_client {
            Some(
                crate::backend::http::new_client().map_err(|source| StartError::Backend {
                    name: "jwks".into(),
                    source,
                })?,
            )
        } else {
            None
        };
        for route in &config.routes {
            let auth = Authenticator::new(&route.auth, auth_client.clone()).map_err(|source| {
                StartError::Auth {
                    path: route.path.clone(),
                    source,
                }
            })?;
            let (Some(pool), Some(backend)) = (
                pools.get(route.backend.as_str()),
                config.backends.get(&route.backend),
            ) else {
                continue;
            };
            routes.insert(
                route.path.clone(),
                Arc::new(Route {
                    config: route.clone(),
                    pool: pool.clone(),
                    request_timeout: backend.request_timeout,
                    tool_headers: Default::default(),
                    auth,
                    metrics: metrics.clone(),
                }),
            );
        }
        let keys = config
            .mrtr
            .key_list()
            .map_err(|e| StartError::Keys(e.to_string()))?;
        let keys = if keys.is_empty() {
            KeyRing::ephemeral()
        } else {
            KeyRing::from_base64(&keys).map_err(|e| StartError::Keys(e.to_string()))?
        };
        let instance = config
            .mrtr
            .instance_id
            .clone()
            .unwrap_or_else(crate::mrtr::state::random_id);
        let bridge = Bridge::new(config.mrtr.clone(), keys, instance, metrics.clone());
        let listen_is_loopback = config.server.listen.ip().is_loopback();
        Ok(Arc::new(Self {
            routes,
            pools: pools.into_values().collect(),
            policy: OriginPolicy::new(
                listen_is_loopback,
                config.server.allowed_hosts.as_deref(),
                config.server.allowed_origins.as_deref(),
            ),
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: config.server.body_read_timeout,
            keep_alive: config.server.sse_keep_alive,
            progress_tokens: AtomicU64::new(1),
            bridge,
            metrics,
            draining: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Handles one HTTP request.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        if let Some(path) = request.uri().path().strip_prefix(RESOURCE_METADATA_PATH) {
            if let Some(route) = self.routes.get(path).filter(|r| r.auth.required()) {
                if request.method() == Method::GET {
                    return json_response(
                        StatusCode::OK,
                        &route.resource_metadata(request.headers()),
                    );
                }
                return error_response(None, &GatewayError::MethodNotAllowed);
            }
        }
        let Some(route) = self.routes.get(request.uri().path()).cloned() else {
            let mut response = Response::new(full("not found\n"));
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        };
        let started = std::time::Instant::now();
        let path = route.config.path.clone();
        let span = tracing::info_span!(
            "request",
            route = %path,
            method = tracing::field::Empty,
            tool = tracing::field::Empty,
            round = tracing::field::Empty,
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let response =
            tracing::Instrument::instrument(self.handle_route_answer(route, request), span.clone())
                .await;
        let labels = response
            .extensions()
            .get::<Labels>()
            .copied()
            .unwrap_or(Labels {
                method: "other",
                outcome: if response.status().is_client_error() {
                    "rejected"
                } else {
                    "error"
                },
            });
        self.metrics
            .requests
            .with_label_values(&[path.as_str(), labels.method, labels.outcome])
            .inc();
        self.metrics
            .duration
            .with_label_values(&[path.as_str(), labels.method])
            .observe(started.elapsed().as_secs_f64());
        if let Some(len) = http_body::Body::size_hint(response.body()).exact() {
            self.metrics.response_bytes.inc_by(len);
        }
        // The closing fields reach only an exported span and the debug line below; the log
        // layer formats every recorded field, so they are not recorded for nobody.
        if crate::telemetry::exporting() || tracing::enabled!(tracing::Level::DEBUG) {
            let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
            span.record("method", labels.method);
            span.record("outcome", labels.outcome);
            span.record("duration_ms", duration_ms);
            tracing::debug!(
                parent: &span,
                status = response.status().as_u16(),
                "request answered"
            );
        }
        response
    }

    async fn handle_route_answer(
        &self,
        route: Arc<Route>,
        request: Request<Incoming>,
    ) -> Response<Body> {
        // Only a route that authenticates can answer 401, and only 401 names this URL.
        let metadata_url = route
            .auth
            .required()
            .then(|| route.resource_metadata_url(request.headers()));
        match self.handle_route(route, request).await {
            Ok(response) => response,
            Err((id, error)) => {
                let mut response = error_response(id, &error);
                if let (GatewayError::Unauthorized(reason), Some(metadata_url)) =
                    (&error, &metadata_url)
                {
                    // RFC 6750 / RFC 9728: tell the client where to learn how to authenticate.
                    let invalid = if reason.starts_with("missing") {
                        ""
                    } else {
                        ", error=\"invalid_token\""
                    };
                    let challenge = format!("Bearer resource_metadata=\"{metadata_url}\"{invalid}");
                    if let Ok(value) = HeaderValue::from_str(&challenge) {
                        response
                            .headers_mut()
                            .insert(http::header::WWW_AUTHENTICATE, value);
                    }
                }
                response
            }
        }
    }

    async fn handle_route(
        &self,
        route: Arc<Route>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, (Option<Value>, GatewayError)> {
        let no_id = |e| (None, e);
        let authority = request.uri().authority().map(|a| a.as_str());
        self.policy
            .check(request.headers(), authority)
            .map_err(no_id)?;
        if request.method() != Method::POST {
            return Err((None, GatewayError::MethodNotAllowed));
        }
        let principal = route
            .auth
            .authenticate(request.headers())
            .await
            .map_err(|e| (None, GatewayError::Unauthorized(e.to_string())))?;
        validate::check_media_types(request.headers()).map_err(no_id)?;
        let too_large = GatewayError::BodyTooLarge {
            limit: self.max_body_bytes,
        };
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|len| len > self.max_body_bytes) {
            return Err((None, too_large));
        }
        let (parts, body) = request.into_parts();
        let collected = tokio::time::timeout(
            self.body_read_timeout,
            Limited::new(body, self.max_body_bytes).collect(),
        )
        .await
        .map_err(|_| {
            (
                None,
                GatewayError::RequestTimeout("the request body did not arrive in time".into()),
            )
        })?;
        let body = match collected {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                self.metrics.request_bytes.inc_by(bytes.len() as u64);
                bytes
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err((None, too_large)),
            Err(e) => {
                return Err((
                    None,
                    GatewayError::InvalidRequest(format!("reading the body failed: {e}")),
                ))
            }
        };
        let inbound = validate::validate_body(&parts.headers, &body)
            .map_err(|rejection| (rejection.id, rejection.error))?;
        match inbound {
            Inbound::Notification { method } => {
                tracing::debug!(%method, "notification accepted");
                let mut response = Response::new(Empty::new().boxed_unsync());
                *response.status_mut() = StatusCode::ACCEPTED;
                Ok(response)
            }
            Inbound::Request {
                id,
                method,
                params,
                meta,
            } => {
                crate::telemetry::join_caller_trace(&params, &meta.trace_headers);
                let result = self
                    .dispatch(
                        &route,
                        &principal,
                        &parts.headers,
                        id.clone(),
                        &method,
                        params,
                        meta,
                    )
                    .await;
                result.map_err(|e| (Some(id), e))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        &self,
        route: &Arc<Route>,
        principal: &str,
        headers: &http::HeaderMap,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        meta: RequestMeta,
    ) -> Result<Response<Body>, GatewayError> {
        let resumes_held_call =
            translate::is_interruptible(method) && params.contains_key("requestState");
        if self.draining.load(Ordering::Acquire) && !resumes_held_call {
            return Err(GatewayError::Busy("the gateway is shutting down".into()));
        }
        match method {
            "server/discover" => {
                let init = match route.pool.cached_init() {
                    Some(init) => init,
                    None => {
                        let profile = route.pool.profile_for(&meta.client_capabilities);
                        let lease = route
                            .pool
                            .acquire(&PoolKey::new(principal, &profile), &profile, Purpose::Plain)
                            .await?;
                        lease
                            .session()
                            .map(|s| s.init_result())
                            .ok_or_else(|| GatewayError::Internal("lease without session".into()))?
                    }
                };
                let result = translate::discover_result(&init, &route.config);
                Ok(labeled(
                    json_response(StatusCode::OK, &jsonrpc::result_response(id, result)),
                    method,
                    "ok",
                ))
            }
            "initialize" => Err(GatewayError::MethodNotFound {
                method: method.into(),
                data: Some(json!({ "supported": SUPPORTED_VERSIONS })),
            }),
            m if translate::is_forwarded(m) => {
                if m == "tools/call" {
                    let name = params
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    tracing::Span::current().record("tool", name);
                    route
                        .tool_headers
                        .check(name, params.get("arguments"), headers)?;
                }
                self.forward(route, principal, id, m, params, meta).await
            }
            other => Err(GatewayError::method_not_found(other)),
        }
    }

    async fn forward(
        &self,
        route: &Arc<Route>,
        principal: &str,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        meta: RequestMeta,
    ) -> Result<Response<Body>, GatewayError> {
        let interruptible = translate::is_interruptible(method);
        let binding = CallBinding {
            route: route.config.path.clone(),
            principal: principal.to_string(),
            method: method.to_string(),
            params_digest: params_digest(method, &params),
            error_context: json!({ "uri": params.get("uri") }),
        };
        let mut scope = RequestScope {
            client_capabilities: meta.client_capabilities.clone(),
            client_progress_token: meta.progress_token.clone(),
            log_level: meta.log_level.clone(),
            preanswers: Map::new(),
        };
        let mut reply = Reply {
            route: route.clone(),
            id,
            method: method.to_string(),
            retry: false,
        };
        if interruptible {
            let answers = match params.get("inputResponses") {
                None => Map::new(),
                Some(Value::Object(answers)) => answers.clone(),
                Some(_) => {
                    return Err(GatewayError::invalid_params(
                        "inputResponses must be an object",
                    ))
                }
            };
            match params.get("requestState") {
                None => scope.preanswers = answers,
                Some(Value::String(token)) => {
                    reply.retry = true;
                    match self
                        .bridge
                        .redeem(&binding, token, &answers, scope.clone())?
                    {
                        Redeemed::Fresh(events) => return Ok(self.respond(reply, events).await),
                        Redeemed::Duplicate(outcome) => {
                            let wait = route.request_timeout + self.bridge.config().round_wait;
                            return Ok(reply.attach(outcome, wait).await);
                        }
                        // The client visited the URLs: the original request is issued again.
                        Redeemed::Reissue { accepted: true, .. } => {}
                        Redeemed::Reissue { error, .. } => return Err(error),
                    }
                }
                Some(_) => {
                    return Err(GatewayError::BadState {
                        reason: StateRejection::Malformed,
                    })
                }
            }
        }

        let profile = route.pool.profile_for(&meta.client_capabilities);
        let key = PoolKey::new(principal, &profile);
        let purpose = if interruptible {
            Purpose::Interruptible
        } else {
            Purpose::Plain
        };
        let lease = route.pool.acquire(&key, &profile, purpose).await?;
        let session = lease
            .session()
            .ok_or_else(|| GatewayError::Internal("lease without session".into()))?;
        let init = session.init_result();
        if let Some(capability) = translate::required_backend_capability(method) {
            let declared = init.get("capabilities").and_then(|c| c.get(capability));
            if declared.is_none() {
                return Err(GatewayError::method_not_found(method));
            }
        }
        let backend_progress_token = meta.progress_token.as_ref().map(|_| {
            format!(
                "mrtr-{}",
                self.progress_tokens.fetch_add(1, Ordering::Relaxed)
            )
        });
        let backend_params = translate::backend_params(
            method,
            params,
            backend_progress_token.as_deref(),
            &meta.trace_headers,
        );
        // The level is set on the exclusive session before the call starts.
        session
            .apply_log_level(meta.log_level.as_deref(), route.request_timeout)
            .await
            .map_err(|e| GatewayError::BackendUnavailable(e.to_string()))?;
        let call = session
            .start_call(method, Some(backend_params), interruptible)
            .map_err(|e| match e {
                BackendError::Busy(reason) => GatewayError::Busy(reason),
                other => GatewayError::BackendUnavailable(other.to_string()),
            })?;
        let driver = CallDriver::new(
            LeasedCall::new(call, lease),
            interruptible,
            backend_progress_token,
            scope,
            route.request_timeout,
            self.bridge.config().settle_window,
        );
        Ok(match self.bridge.start(driver, binding).await {
            Started::Done(outcome) => reply.json(outcome),
            Started::Streaming(first, events) => self.stream(reply, first, events),
        })
    }

    /// JSON when the outcome comes first; SSE when notifications precede it.
    async fn respond(&self, reply: Reply, mut events: mpsc::Receiver<Event>) -> Response<Body> {
        match events.recv().await {
            Some(Event::Notify(first)) => self.stream(reply, first, events),
            Some(Event::Done(outcome)) => reply.json(outcome),
            None => error_response(
                Some(reply.id),
                &GatewayError::Internal("call ended without an outcome".into()),
            ),
        }
    }

    /// SSE: the first notification, then the call's events, with keep-alives. Closing the stream
    /// drops the receiver, which cancels a first call on the backend.
    fn stream(&self, reply: Reply, first: Value, events: mpsc::Receiver<Event>) -> Response<Body> {
        let reply_method = reply.method.clone();
        let mut keep_alive = tokio::time::interval(self.keep_alive);
        keep_alive.reset();
        let first = stream::once(async move { sse_frame(&first) });
        let rest = stream::unfold(Some((events, keep_alive, reply)), |state| async move {
            let (mut events, mut keep_alive, reply) = state?;
            tokio::select! {
                event = events.recv() => match event {
                    Some(Event::Notify(message)) => {
                        Some((sse_frame(&message), Some((events, keep_alive, reply))))
                    }
                    Some(Event::Done(outcome)) => {
                        let (message, _) = reply.message(outcome);
                        Some((sse_frame(&message), None))
                    }
                    None => None,
                },
                _ = keep_alive.tick() => {
                    Some((Bytes::from_static(b": keep-alive\n\n"), Some((events, keep_alive, reply))))
                }
            }
        });
        use futures_util::StreamExt;
        let metrics = self.metrics.clone();
        let frames = first.chain(rest).map(move |bytes| {
            metrics.response_bytes.inc_by(bytes.len() as u64);
            Ok::<_, Infallible>(Frame::data(bytes))
        });
        let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        labeled(response, &reply_method, "stream")
    }

    /// Calls held right now, waiting for a retry.
    pub fn held_calls(&self) -> usize {
        self.bridge.held_count()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn running_calls(&self) -> usize {
        self.bridge.running_count()
    }

    /// Gauges are read from their sources when scraped.
    pub fn refresh_gauges(&self) {
        self.metrics.held.set(self.held_calls() as i64);
        for pool in &self.pools {
            let stats = pool.stats();
            let name = pool.backend_name();
            self.metrics
                .sessions
                .with_label_values(&[name, "open"])
                .set(stats.open as i64);
            self.metrics
                .sessions
                .with_label_values(&[name, "idle"])
                .set(stats.idle as i64);
        }
    }

    /// Nothing held and nothing running: a draining gateway may stop.
    fn idle(&self) -> bool {
        self.bridge.held_count() == 0 && self.bridge.running_count() == 0
    }

    /// Reads the `requestState` keys again (key rotation without restart).
    pub fn reload_keys(&self) -> Result<(), String> {
        self.bridge.reload_keys()
    }

    /// Ends held calls, then closes every backend session politely.
    pub async fn close_backends(&self) {
        self.bridge.shutdown(CONNECTION_GRACE).await;
        for pool in &self.pools {
            pool.shutdown().await;
        }
    }

    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }
}

/// A gateway accepting connections; stopped with [`RunningGateway::shutdown`].
pub struct RunningGateway {
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// The admin listener and the readiness probes; they end with the gateway.
    side_tasks: JoinSet<()>,
    admin_stop: CancellationToken,
    gateway: Arc<Gateway>,
}

impl RunningGateway {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops accepting, lets in-flight requests finish within the drain timeout, then closes
    /// backend sessions.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.admin_stop.cancel();
        while self.side_tasks.join_next().await.is_some() {}
    }
}

/// Binds the listener and starts serving.
pub async fn start(config: &Config) -> Result<RunningGateway, StartError> {
    let gateway = Gateway::new(config)?;
    let addr = config.server.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let stop = CancellationToken::new();
    let task = tokio::spawn(serve(
        listener,
        gateway.clone(),
        stop.clone(),
        config.server.drain_timeout,
        config.server.max_connections,
    ));
    tracing::info!(%local_addr, routes = ?config.routes.iter().map(|r| &r.path).collect::<Vec<_>>(), "mrtr-gateway listening");
    let admin_stop = CancellationToken::new();
    let mut side_tasks = JoinSet::new();
    let mut admin_addr = None;
    if let Some(addr) = config.server.admin_listen {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        admin_addr = listener.local_addr().ok();
        side_tasks.spawn(admin::serve(listener, gateway.clone(), admin_stop.clone()));
        // Readiness needs each backend to have initialized a session once.
        for pool in gateway.pools().to_vec() {
            let stop = admin_stop.clone();
            side_tasks.spawn(async move {
                loop {
                    let result = tokio::select! {
                        _ = stop.cancelled() => return,
                        result = pool.probe() => result,
                    };
                    let Err(e) = result else { return };
                    tracing::warn!(backend = pool.backend_name(), error = %e, "backend not reachable yet");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    }
                }
            });
        }
        tracing::info!(admin = ?admin_addr, "admin listener up");
    }
    Ok(RunningGateway {
        local_addr,
        admin_addr,
        stop,
        task,
        side_tasks,
        admin_stop,
        gateway,
    })
}

async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    stop: CancellationToken,
    drain_timeout: Duration,
    max_connections: usize,
) {
    let connection_slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    // At shutdown the listener stays open for the drain: new calls get 503, retries of held
    // calls are still served, until nothing is held or running, or the drain timeout.
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let mut drain_tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = stop.cancelled(), if drain_deadline.is_none() => {
                gateway.draining.store(true, Ordering::Release);
                drain_deadline = Some(tokio::time::Instant::now() + drain_timeout);
                tracing::info!(held = gateway.held_calls(), "draining");
            }
            _ = drain_tick.tick(), if drain_deadline.is_some() => {
                let expired = drain_deadline.is_some_and(|d| d <= tokio::time::Instant::now());
                if expired || gateway.idle() {
                    if expired && !gateway.idle() {
                        tracing::warn!(held = gateway.held_calls(), "drain timeout reached; abandoning what is left");
                    }
                    break;
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Ok(slot) = connection_slots.clone().try_acquire_owned() else {
                        tracing::warn!(max_connections, "connection refused: too many open connections");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let gateway = gateway.clone();
                    let service = hyper::service::service_fn(move |request| {
                        let gateway = gateway.clone();
                        async move { Ok::<_, Infallible>(gateway.handle(request).await) }
                    });
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let connection = graceful.watch(connection);
                    connections.spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    // Held calls end first (their backends see cancellation), then open connections get a
    // short grace to finish writing.
    gateway.close_backends().await;
    if tokio::time::timeout(CONNECTION_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("closing remaining connections");
    }
    connections.shutdown().await;
}
