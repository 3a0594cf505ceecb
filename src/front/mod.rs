//! The front side: the MCP endpoints over Streamable HTTP (hyper 1), one per configured route,
//! where both eras enter: 2026-07-28 requests, and 2025-11-25 clients' sessions.
//!
//! A request meets a stack of tower layers, one concern each, composed in [`route_stack`] and
//! read top to bottom in the order they run:
//!
//! 1. [`observe`]: the `request` span and the request metrics;
//! 2. panic catching (tower-http): a panic answers 500 instead of dropping the connection;
//! 3. [`origin`]: Host and Origin allow-lists, then POST only (GET and DELETE too for a
//!    2025-11-25 session);
//! 4. [`authn`]: the bearer token becomes a [`Principal`](authn::Principal) (or 401);
//! 5. [`crate::http_serve::body`]: a POST's media types, then the body read within its limit
//!    and timeout;
//! 6. [`parse`]: parsed once ([`request`]), and its era decided: a 2025-11-25 `initialize` or a request
//!    naming a session becomes a [`LegacyRequest`](crate::legacy::serve::LegacyRequest); a
//!    2026-07-28 one has its JSON-RPC, `_meta` and headers parsed into an
//!    [`McpRequest`](request::McpRequest) (notifications end here with 202);
//! 7. [`drain`]: while stopping, only retries of held calls and requests on open sessions pass;
//! 8. [`era`]: the eras part: a 2025-11-25 request goes to its door ([`crate::legacy`]);
//! 9. [`owner`]: with `[fleet]`, a retry whose call another replica holds is forwarded there
//!    ([`crate::fleet`]);
//! 10. [`dispatch`]: the request applied; forwarded methods go to the bridge.
//!
//! Each layer either passes the request on or answers it; every answer is written with
//! [`crate::http_serve`]'s pieces, a call's with [`reply`] (a forwarded retry's answer is the
//! owner's, relayed).
//! [`server`] owns the listeners and start/stop, [`route`] the routes, [`admin`] the ops surface.

mod admin;
mod aggregate;
mod authn;
mod connections;
mod dispatch;
mod drain;
mod era;
mod listen;
mod observe;
mod origin;
mod owner;
mod param_headers;
mod parse;
mod reply;
pub(crate) mod request;
mod route;
mod server;
pub(crate) mod translate;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceBuilder};
use tower_http::auth::AsyncRequireAuthorizationLayer;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::validate_request::ValidateRequestHeaderLayer;

use self::reply::{RouteBody, ServedBody};
use self::route::{Route, RESOURCE_METADATA_PATH};
pub use self::server::{start, RunningGateway, StartError};
use crate::access::{BackendCredentials, RouteAccess};
use crate::audit::AuditLog;
use crate::auth::Authenticator;
use crate::backend::pool::Pool;
use crate::backend::BackendSpec;
use crate::config::{Config, ServerConfig};
use crate::exchange::TokenExchange;
use crate::legacy::serve::EndpointBackend;
use crate::legacy::LegacySessions;
use crate::metrics::Metrics;
use crate::mrtr::state::{random_id, KeyRing};
use crate::mrtr::Bridge;

/// One token exchange per backend that has `token_exchange`, shared by its routes with its
/// cache and each principal's credential, as the backend's sessions are.
fn token_exchanges(
    config: &Config,
    metrics: &Arc<Metrics>,
) -> Result<HashMap<String, Arc<BackendCredentials>>, StartError> {
    let mut exchanges = HashMap::new();
    for (name, backend) in &config.backends {
        let Some(exchange) = &backend.token_exchange else {
            continue;
        };
        let failed = |problem: String| StartError::Access {
            path: format!("backend.{name}.token_exchange"),
            problem,
        };
        let client = crate::http_client::new_client().map_err(|e| failed(e.to_string()))?;
        let exchange = TokenExchange::new(name, exchange, client, metrics.clone())
            .map_err(|e| failed(e.to_string()))?;
        exchanges.insert(name.clone(), Arc::new(BackendCredentials::new(exchange)));
    }
    Ok(exchanges)
}

/// One backend's own route on a route over several: the backend's pool and what it is told
/// about callers; its `requestState`s bound to it. It never authenticates: the route over it
/// did, and decided the route's policy on the names it exposes.
fn member_route(
    route: &crate::config::RouteConfig,
    name: &str,
    pool: &Arc<Pool>,
    exchanges: &HashMap<String, Arc<BackendCredentials>>,
    metrics: &Arc<Metrics>,
) -> Result<aggregate::Member, StartError> {
    let failed = |problem: String| StartError::Access {
        path: format!("{} (backend {name})", route.path),
        problem,
    };
    let exchange = exchanges.get(name).cloned();
    let access =
        RouteAccess::for_one_of_many(route, &pool.spec().config, exchange).map_err(failed)?;
    let auth = Authenticator::new(&crate::config::AuthConfig::None, None)
        .map_err(|e| failed(e.to_string()))?;
    let config = crate::config::RouteConfig {
        backend: name.to_string(),
        backends: Vec::new(),
        prefixes: Default::default(),
        resource_prefixes: Default::default(),
        ..route.clone()
    };
    Ok(aggregate::Member {
        finishing: Default::default(),
        name: name.to_string(),
        prefix: format!("{}{}", route.prefix_of(name), crate::config::NAME_SEPARATOR),
        route: Arc::new(Route {
            config,
            backends: route::Backends::One(pool.clone()),
            state_scope: crate::mrtr::backend_scope(&route.path, name),
            tool_headers: Default::default(),
            auth,
            access: Arc::new(access),
            metrics: metrics.clone(),
        }),
    })
}

/// One route's stack, from the raw HTTP request to its response, shared by every connection.
/// Each request gets its own clone of the stack (cheap: the layers hold `Arc`s).
#[derive(Clone)]
pub(crate) struct RouteService(Arc<dyn Fn(Request<Incoming>) -> ResponseFuture + Send + Sync>);

type ResponseFuture = BoxFuture<'static, Result<Response<RouteBody>, Infallible>>;

impl RouteService {
    fn new<S>(stack: S) -> Self
    where
        S: Service<Request<Incoming>, Response = Response<RouteBody>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Into<ResponseFuture>,
    {
        // Every layer of the stack is always ready (none holds a resource back), so a fresh
        // clone is called without polling readiness first.
        Self(Arc::new(move |request| stack.clone().call(request).into()))
    }

    async fn call(&self, request: Request<Incoming>) -> Response<RouteBody> {
        let Ok(response) = (self.0)(request).await;
        response
    }
}

/// What every route's stack shares.
struct Shared<'a> {
    server: &'a ServerConfig,
    bridge: &'a Arc<Bridge>,
    fleet: &'a Option<Arc<crate::fleet::Fleet>>,
    listens: &'a Arc<listen::Listens>,
    legacy: &'a Arc<LegacySessions>,
    drain: &'a CancellationToken,
    calls_end: &'a Arc<CancellationToken>,
    audit: &'a Option<Arc<AuditLog>>,
}

/// The layers of one route, in the order a request meets them.
fn route_stack(
    route: &Arc<Route>,
    aggregate: Option<Arc<aggregate::Aggregate>>,
    shared: &Shared<'_>,
) -> RouteService {
    let Shared {
        server,
        bridge,
        fleet,
        listens,
        legacy,
        drain,
        calls_end,
        audit,
    } = *shared;
    let read_body = crate::http_serve::ReadBodyLayer {
        max_bytes: server.max_body_bytes,
        timeout: server.body_read_timeout,
        metrics: route.metrics.clone(),
    };
    let dispatch = dispatch::Dispatch {
        route: route.clone(),
        bridge: bridge.clone(),
        listens: listens.clone(),
        keep_alive: server.sse_keep_alive,
        stream_after: server.stream_after,
        calls_end: calls_end.clone(),
        audit: audit.clone(),
        aggregate: aggregate.clone(),
        for_sessions: false,
    };
    // What a 2025-11-25 session connects to: the one backend, or the route itself.
    let sessions_reach = match (&aggregate, &route.backends) {
        (Some(many), _) => {
            // The session's door keeps the audit of its requests.
            // A session's listen is counted as the session, in `[legacy]`.
            let inner = Arc::new(dispatch::Dispatch {
                audit: None,
                listens: many.unlimited_listens(),
                for_sessions: true,
                ..dispatch.clone()
            });
            let timeout = many.request_timeout();
            let server = aggregate::AggregateServer::new(inner, route.clone(), timeout);
            Some(EndpointBackend::Local(Arc::new(server)))
        }
        (None, route::Backends::One(pool)) => Some(EndpointBackend::One(pool.clone())),
        (None, route::Backends::Many) => None,
    };
    let sessions_reach = sessions_reach.filter(|_| route.config.serves_legacy());
    let door = sessions_reach.map(|backend| {
        Arc::new(crate::legacy::serve::Door {
            sessions: legacy.clone(),
            endpoint: crate::legacy::serve::Endpoint {
                path: route.config.path.clone(),
                backend,
            },
            fleet: fleet.clone(),
            audit: audit.clone(),
        })
    });
    let origin_policy = Arc::new(origin::OriginPolicy::new(
        server.listen.ip().is_loopback(),
        server.allowed_hosts.as_deref(),
        server.allowed_origins.as_deref(),
    ));
    let stack = ServiceBuilder::new()
        .layer(observe::ObserveLayer::new(
            &route.config.path,
            route.metrics.clone(),
        ))
        .layer(CatchPanicLayer::custom(crate::http_serve::panicked))
        .layer(ValidateRequestHeaderLayer::custom(origin::CheckOrigin(
            origin_policy,
        )))
        .layer(ValidateRequestHeaderLayer::custom(origin::PostOnly {
            sessions: door.is_some(),
        }))
        .layer(AsyncRequireAuthorizationLayer::new(authn::Authenticate {
            route: route.clone(),
            audit: audit.clone(),
        }))
        .layer(ValidateRequestHeaderLayer::custom(
            crate::http_serve::MediaTypes,
        ))
        .layer(read_body)
        .layer(parse::ParseLayer { door: door.clone() })
        .layer(ValidateRequestHeaderLayer::custom(drain::Drain(Arc::new(
            drain.clone(),
        ))))
        .layer(era::EraLayer {
            door,
            route: route.clone(),
        })
        .layer(owner::OwnerLayer {
            fleet: fleet.clone(),
            bridge: bridge.clone(),
        })
        .service(dispatch);
    RouteService::new(stack)
}

pub struct Gateway {
    routes: HashMap<String, (Arc<Route>, RouteService)>,
    pools: Vec<Arc<Pool>>,
    bridge: Arc<Bridge>,
    /// With `[fleet]`: the other replicas, reached for retries of calls they hold.
    fleet: Option<Arc<crate::fleet::Fleet>>,
    /// Open `subscriptions/listen` streams and their limits.
    listens: Arc<listen::Listens>,
    /// 2025-11-25 client sessions, on every route that serves that era.
    legacy: Arc<LegacySessions>,
    metrics: Arc<Metrics>,
    /// The root of shutdown: when cancelled, every task of the gateway ends. Pools, the bridge
    /// and the admin side hold child tokens.
    shutdown: CancellationToken,
    /// Cancelled at the stop signal, before the drain: the lame-duck period, in which
    /// readiness fails and everything is still served.
    stopping: CancellationToken,
    /// A child of `shutdown`, cancelled when the lame-duck period ends: only what was accepted
    /// and retries of held calls are still served.
    drain: CancellationToken,
    /// A child of `shutdown`, cancelled when the drain ends: every call still unanswered gets
    /// its ending (`GatewayError::ShutDown`). Behind an `Arc`, as the drain token is.
    calls_end: Arc<CancellationToken>,
    /// The MCP listener's open connections.
    connections: Arc<connections::Connections>,
    /// `[audit]`: closed (what is queued written) when the gateway has stopped.
    audit: Option<Arc<AuditLog>>,
}

impl Gateway {
    pub fn new(config: &Config) -> Result<Arc<Self>, StartError> {
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let mut pools: HashMap<&str, Arc<Pool>> = HashMap::new();
        for (name, backend) in &config.backends {
            let spec =
                BackendSpec::new(name, backend.clone()).map_err(|source| StartError::Backend {
                    name: name.clone(),
                    source,
                })?;
            let pool =
                Pool::new(spec, metrics.clone(), shutdown.child_token()).map_err(|source| {
                    StartError::Backend {
                        name: name.clone(),
                        source,
                    }
                })?;
            pools.insert(name, Arc::new(pool));
        }
        let needs_client = config
            .routes
            .iter()
            .any(|r| matches!(&r.auth, crate::config::AuthConfig::Jwt(j) if j.jwks_url.is_some()));
        let auth_client = if needs_client {
            Some(
                crate::http_client::new_client().map_err(|source| StartError::Backend {
                    name: "jwks".into(),
                    source: source.into(),
                })?,
            )
        } else {
            None
        };
        let keys = config.mrtr.key_list()?;
        let keys = if keys.is_empty() {
            KeyRing::ephemeral()
        } else {
            KeyRing::from_base64(&keys)?
        };
        let instance = config.mrtr.instance_id.clone().unwrap_or_else(random_id);
        let bridge = Bridge::new(
            config.mrtr.clone(),
            keys,
            instance,
            config.fleet.as_ref().map(|f| f.advertise.clone()),
            metrics.clone(),
            shutdown.child_token(),
        );
        let calls_end = Arc::new(shutdown.child_token());
        let fleet = match &config.fleet {
            Some(fleet) => Some(Arc::new(crate::fleet::Fleet::new(
                fleet,
                config.server.sse_keep_alive,
                metrics.clone(),
                calls_end.clone(),
            )?)),
            None => None,
        };
        let drain = shutdown.child_token();
        let listens = Arc::new(listen::Listens {
            quota: Arc::new(crate::mrtr::quota::Quota::new(
                config.server.max_listens,
                config.server.max_listens_per_principal,
            )),
            keep_alive: config.server.sse_keep_alive,
            drain: drain.clone(),
        });
        let legacy = LegacySessions::new(
            config.legacy.clone(),
            bridge.clone(),
            metrics.clone(),
            config.server.sse_keep_alive,
            shutdown.child_token(),
        );
        let exchanges = token_exchanges(config, &metrics)?;
        let audit = match &config.audit {
            Some(audit) => Some(Arc::new(AuditLog::open(audit, metrics.clone()).map_err(
                |source| StartError::Audit {
                    file: audit.file.clone(),
                    source,
                },
            )?)),
            None => None,
        };
        let mut routes = HashMap::new();
        let mut aggregates = HashMap::new();
        for route in &config.routes {
            let auth = Authenticator::new(&route.auth, auth_client.clone()).map_err(|source| {
                StartError::Auth {
                    path: route.path.clone(),
                    source,
                }
            })?;
            let route = if route.is_aggregate() {
                let members = route
                    .members()
                    .iter()
                    .filter_map(|name| {
                        let pool = pools.get(name.as_str())?;
                        Some(member_route(route, name, pool, &exchanges, &metrics))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let access =
                    RouteAccess::for_many(route).map_err(|problem| StartError::Access {
                        path: route.path.clone(),
                        problem,
                    })?;
                let many = aggregate::Aggregate::new(route, members, metrics.clone(), &listens);
                aggregates.insert(route.path.clone(), Arc::new(many));
                Arc::new(Route {
                    config: route.clone(),
                    backends: route::Backends::Many,
                    state_scope: route.path.clone(),
                    tool_headers: Default::default(),
                    auth,
                    access: Arc::new(access),
                    metrics: metrics.clone(),
                })
            } else {
                let Some(pool) = pools.get(route.backend.as_str()) else {
                    continue;
                };
                let exchange = exchanges.get(route.backend.as_str()).cloned();
                let access =
                    RouteAccess::new(route, &pool.spec().config, exchange).map_err(|problem| {
                        StartError::Access {
                            path: route.path.clone(),
                            problem,
                        }
                    })?;
                Arc::new(Route {
                    config: route.clone(),
                    backends: route::Backends::One(pool.clone()),
                    state_scope: route.path.clone(),
                    tool_headers: Default::default(),
                    auth,
                    access: Arc::new(access),
                    metrics: metrics.clone(),
                })
            };
            let aggregate = aggregates.get(&route.config.path).cloned();
            let stack = route_stack(
                &route,
                aggregate,
                &Shared {
                    server: &config.server,
                    bridge: &bridge,
                    fleet: &fleet,
                    listens: &listens,
                    legacy: &legacy,
                    drain: &drain,
                    calls_end: &calls_end,
                    audit: &audit,
                },
            );
            routes.insert(route.config.path.clone(), (route, stack));
        }
        let connections = Arc::new(connections::Connections::new(
            config.server.max_connections,
            metrics.clone(),
        ));
        Ok(Arc::new(Self {
            routes,
            pools: pools.into_values().collect(),
            bridge,
            fleet,
            listens,
            legacy,
            metrics,
            shutdown,
            stopping: CancellationToken::new(),
            drain,
            calls_end,
            connections,
            audit,
        }))
    }

    /// Handles one HTTP request: the route's metadata document, the route's stack, or 404.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ServedBody> {
        let path = request.uri().path();
        if let Some(route_path) = path.strip_prefix(RESOURCE_METADATA_PATH) {
            if let Some((route, _)) = self
                .routes
                .get(route_path)
                .filter(|(r, _)| r.auth.required())
            {
                return route.resource_metadata(&request).map(ServedBody::Own);
            }
        }
        let Some((_, stack)) = self.routes.get(path) else {
            return crate::http_serve::not_found().map(ServedBody::Own);
        };
        stack.call(request).await.map(ServedBody::Route)
    }

    /// Calls held right now, waiting for a retry.
    pub fn held_calls(&self) -> usize {
        self.bridge.held_count()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn connections(&self) -> &Arc<connections::Connections> {
        &self.connections
    }

    pub fn is_draining(&self) -> bool {
        self.drain.is_cancelled()
    }

    /// Stopping: in the lame-duck period or draining. Readiness fails from the first instant.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// The lame-duck period begins: readiness fails, everything is still served.
    fn start_stopping(&self) {
        self.stopping.cancel();
    }

    /// From now on new calls are refused; what was accepted and retries of held calls are
    /// served.
    fn start_drain(&self) {
        self.drain.cancel();
    }

    fn drain_token(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// The drain is over: calls still unanswered end now, each with a proper answer.
    fn end_calls(&self) {
        self.calls_end.cancel();
    }

    /// A token for a task that ends with the gateway.
    fn child_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    pub fn running_calls(&self) -> usize {
        self.bridge.running_count()
    }

    /// Gauges are read from their sources when scraped.
    pub fn refresh_gauges(&self) {
        self.metrics.held.set(self.held_calls() as i64);
        self.metrics.listens.set(self.open_listens() as i64);
        self.metrics.legacy_sessions.set(self.legacy.open() as i64);
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
            let era = pool.era_label();
            for label in ["2026-07-28", "2025-11-25", "unknown"] {
                self.metrics
                    .backend_era
                    .with_label_values(&[name, label])
                    .set(i64::from(label == era));
            }
        }
    }

    /// Nothing held, running or being forwarded, and no 2025-11-25 request unanswered: a
    /// draining gateway may stop.
    fn idle(&self) -> bool {
        self.held_calls() == 0
            && self.running_calls() == 0
            && self.forwarding() == 0
            && self.legacy.requests_in_flight() == 0
    }

    /// 2025-11-25 client sessions.
    pub fn legacy_sessions(&self) -> &Arc<LegacySessions> {
        &self.legacy
    }

    /// Open `subscriptions/listen` streams.
    pub fn open_listens(&self) -> usize {
        self.listens.quota.taken()
    }

    /// Retries whose answer is being relayed from the replica holding their call.
    pub fn forwarding(&self) -> usize {
        self.fleet.as_ref().map_or(0, |fleet| fleet.forwarding())
    }

    /// Reads the `requestState` keys again (key rotation without restart).
    pub fn reload_keys(&self) -> Result<(), crate::mrtr::ReloadError> {
        self.bridge.reload_keys()
    }

    /// Ends held calls and 2025-11-25 sessions, then closes every backend session politely.
    async fn close(&self, grace: Duration) {
        self.bridge.shutdown(grace).await;
        self.legacy.close_all().await;
        for pool in &self.pools {
            pool.shutdown().await;
        }
        // Last: the calls ended above (cancelled ones included) are in the log.
        if let Some(audit) = &self.audit {
            audit.close().await;
        }
    }

    /// Ends whatever the gateway started that is still running (the root of shutdown).
    fn end(&self) {
        self.shutdown.cancel();
    }

    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }
}
