//! The front side: a 2026-07-28 MCP server over Streamable HTTP (hyper 1).
//!
//! One POST-only endpoint per configured route. A request is validated completely before any
//! response starts ([`validate`]), then either answered here (`server/discover`, removed and
//! unknown methods) or forwarded on a session lent by the route's pool ([`call`]). The answer is
//! a single JSON body, or an SSE stream when notifications (progress, logs) precede it.
//!
//! Tasks: the accept loop (owned by [`RunningGateway`]) and one task per connection, tracked in
//! a `JoinSet` that the accept loop drains at shutdown.

pub mod call;
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
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::call::{CallDriver, CallSetup, Step};
use self::validate::{Inbound, OriginPolicy, RequestMeta, SUPPORTED_VERSIONS};
use crate::backend::pool::{capability_profile, Pool, PoolKey};
use crate::backend::BackendSpec;
use crate::config::{Config, RouteConfig};
use crate::error::GatewayError;
use crate::jsonrpc;

/// The principal of unauthenticated requests.
pub const ANONYMOUS: &str = "anonymous";
/// Longest wait for a request's headers (slow clients cannot hold connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("backend {name}: {source}")]
    Backend {
        name: String,
        source: crate::backend::BackendError,
    },
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
}

pub struct Gateway {
    routes: HashMap<String, Arc<Route>>,
    pools: Vec<Arc<Pool>>,
    policy: OriginPolicy,
    max_body_bytes: usize,
    keep_alive: Duration,
    progress_tokens: AtomicU64,
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn json_response(status: StatusCode, message: &Value) -> Response<Body> {
    let mut response = Response::new(full(message.to_string()));
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

impl Gateway {
    pub fn new(config: &Config) -> Result<Arc<Self>, StartError> {
        let mut pools: HashMap<&str, Arc<Pool>> = HashMap::new();
        for (name, backend) in &config.backends {
            let spec =
                BackendSpec::new(name, backend.clone()).map_err(|source| StartError::Backend {
                    name: name.clone(),
                    source,
                })?;
            pools.insert(name, Arc::new(Pool::new(spec)));
        }
        let mut routes = HashMap::new();
        for route in &config.routes {
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
                }),
            );
        }
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
            keep_alive: config.server.sse_keep_alive,
            progress_tokens: AtomicU64::new(1),
        }))
    }

    /// Handles one HTTP request.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let Some(route) = self.routes.get(request.uri().path()).cloned() else {
            let mut response = Response::new(full("not found\n"));
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        };
        match self.handle_route(route, request).await {
            Ok(response) => response,
            Err((id, error)) => error_response(id, &error),
        }
    }

    async fn handle_route(
        &self,
        route: Arc<Route>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, (Option<Value>, GatewayError)> {
        let no_id = |e| (None, e);
        self.policy.check(request.headers()).map_err(no_id)?;
        if request.method() != Method::POST {
            return Err((None, GatewayError::MethodNotAllowed));
        }
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
        let body = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(collected) => collected.to_bytes(),
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
                let result = self
                    .dispatch(&route, id.clone(), &method, params, meta)
                    .await;
                result.map_err(|e| (Some(id), e))
            }
        }
    }

    async fn dispatch(
        &self,
        route: &Arc<Route>,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        meta: RequestMeta,
    ) -> Result<Response<Body>, GatewayError> {
        match method {
            "server/discover" => {
                let init = match route.pool.cached_init() {
                    Some(init) => init,
                    None => {
                        let profile = capability_profile(&meta.client_capabilities);
                        let lease = route
                            .pool
                            .acquire(&PoolKey::new(ANONYMOUS, &profile), &profile)
                            .await?;
                        lease
                            .session()
                            .map(|s| s.init_result())
                            .ok_or_else(|| GatewayError::Internal("lease without session".into()))?
                    }
                };
                let result = translate::discover_result(&init, &route.config);
                Ok(json_response(
                    StatusCode::OK,
                    &jsonrpc::result_response(id, result),
                ))
            }
            "initialize" => Err(GatewayError::MethodNotFound {
                method: method.into(),
                data: Some(json!({ "supported": SUPPORTED_VERSIONS })),
            }),
            m if translate::is_forwarded(m) => self.forward(route, id, m, params, meta).await,
            other => Err(GatewayError::method_not_found(other)),
        }
    }

    async fn forward(
        &self,
        route: &Arc<Route>,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        meta: RequestMeta,
    ) -> Result<Response<Body>, GatewayError> {
        let profile = capability_profile(&meta.client_capabilities);
        let key = PoolKey::new(ANONYMOUS, &profile);
        let lease = route.pool.acquire(&key, &profile).await?;
        let session = lease
            .session()
            .ok_or_else(|| GatewayError::Internal("lease without session".into()))?;
        let init = session.init_result();
        let backend_capabilities = init.get("capabilities");
        if let Some(capability) = translate::required_backend_capability(method) {
            if backend_capabilities
                .and_then(|c| c.get(capability))
                .is_none()
            {
                return Err(GatewayError::method_not_found(method));
            }
        }
        if let Some(level) = &meta.log_level {
            if backend_capabilities
                .and_then(|c| c.get("logging"))
                .is_some()
            {
                session
                    .ensure_log_level(level, route.request_timeout)
                    .await
                    .map_err(|e| GatewayError::BackendUnavailable(e.to_string()))?;
            }
        }
        let backend_progress_token = meta.progress_token.as_ref().map(|_| {
            format!(
                "mrtr-{}",
                self.progress_tokens.fetch_add(1, Ordering::Relaxed)
            )
        });
        let error_context = json!({ "uri": params.get("uri") });
        let backend_params =
            translate::backend_params(method, params, backend_progress_token.as_deref());
        let call = session
            .start_call(method, Some(backend_params))
            .map_err(|e| GatewayError::BackendUnavailable(e.to_string()))?;
        let setup = CallSetup {
            route: route.clone(),
            id,
            method: method.to_string(),
            params: error_context,
            server_info: init.get("serverInfo").cloned(),
            client_progress_token: meta.progress_token,
            backend_progress_token,
            log_level: meta.log_level,
        };
        let mut driver = CallDriver::new(call, lease, setup);
        match driver.next_step().await {
            Step::Done { message, status } => Ok(json_response(status, &message)),
            Step::Notify(first) => Ok(self.sse_response(first, driver)),
        }
    }

    /// Streams the rest of a call as SSE; closing the stream drops the driver, which cancels the
    /// backend request.
    fn sse_response(&self, first: Value, driver: CallDriver) -> Response<Body> {
        let mut keep_alive = tokio::time::interval(self.keep_alive);
        keep_alive.reset();
        let first = stream::once(async move { sse_frame(&first) });
        let rest = stream::unfold(Some((driver, keep_alive)), |state| async move {
            let (mut driver, mut keep_alive) = state?;
            tokio::select! {
                step = driver.next_step() => match step {
                    Step::Notify(message) => Some((sse_frame(&message), Some((driver, keep_alive)))),
                    Step::Done { message, .. } => Some((sse_frame(&message), None)),
                },
                _ = keep_alive.tick() => {
                    Some((Bytes::from_static(b": keep-alive\n\n"), Some((driver, keep_alive))))
                }
            }
        });
        use futures_util::StreamExt;
        let frames = first
            .chain(rest)
            .map(|bytes| Ok::<_, Infallible>(Frame::data(bytes)));
        let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }

    /// Closes every backend session politely.
    pub async fn close_backends(&self) {
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
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    gateway: Arc<Gateway>,
}

impl RunningGateway {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops accepting, lets in-flight requests finish within the drain timeout, then closes
    /// backend sessions.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
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
    ));
    tracing::info!(%local_addr, routes = ?config.routes.iter().map(|r| &r.path).collect::<Vec<_>>(), "mrtr-gateway listening");
    Ok(RunningGateway {
        local_addr,
        stop,
        task,
        gateway,
    })
}

async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    stop: CancellationToken,
    drain_timeout: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
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
    if tokio::time::timeout(drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain timeout reached; closing remaining connections");
    }
    connections.shutdown().await;
    gateway.close_backends().await;
}
