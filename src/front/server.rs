//! Listeners, start and stop. The MCP listener serves each connection with hyper and the
//! gateway's routes, admitted by [`super::connections::Connections`]: at most
//! `server.max_connections` open at once (at the limit the longest-idle one makes room), each
//! closed if it sends nothing within `server.first_byte_timeout`. Tower's limits (on requests,
//! and waiting rather than refusing) do not cover connections. Header reads are bounded by
//! hyper. With `fleet.listen`, a peer listener serves other replicas the same way.
//!
//! Stopping, in three steps a balancer can follow without losing a request:
//! 1. the lame-duck period (`server.shutdown_delay`): `/readyz` fails, everything is served;
//! 2. the drain: the MCP listener closes (unless it is where peers reach this replica), so new
//!    connections are refused before a byte is sent; each open connection finishes the request
//!    it carries (answered with `Connection: close`) and closes, an idle one at once. What was
//!    accepted finishes, calls waiting for a session included; new calls that still arrive get
//!    503, retries of held calls are served, forwarded ones through the peer listener. It ends
//!    when nothing is held or running, or at `server.drain_timeout`;
//! 3. calls still unanswered get their ending, held calls end, backend sessions close, a retry
//!    arriving meanwhile is told its call is gone; then the listeners close and open
//!    connections get a short grace to finish writing.
//!
//! Tasks: the accept loop, owned by [`RunningGateway`]; one task per connection, tracked by the
//! accept loop and aborted after the grace; the admin listener and readiness probes, tracked by
//! [`RunningGateway`] and stopped by its shutdown token.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connections::Tracked;
use super::drain::AcceptedBeforeDrain;
use super::{admin, Gateway};
use crate::auth::AuthError;
use crate::config::{Config, ConfigError};
use crate::mrtr::state::KeyError;

/// Longest wait for a request's headers (slow clients cannot hold connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// After the drain, how long open connections (and call tasks) get to finish.
const CONNECTION_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("backend {name}: {source}")]
    Backend {
        name: String,
        source: crate::backend::BackendError,
    },
    #[error("requestState keys: {0}")]
    KeyList(#[from] ConfigError),
    #[error("requestState keys: {0}")]
    Keys(#[from] KeyError),
    #[error("route {path}: {source}")]
    Auth { path: String, source: AuthError },
    #[error("{path}: {problem}")]
    Access { path: String, problem: String },
    #[error("audit file {file}: {source}")]
    Audit {
        file: String,
        source: std::io::Error,
    },
    #[error("fleet client: {0}")]
    Fleet(#[from] crate::http_client::TlsSetupError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A gateway accepting connections; stopped with [`RunningGateway::shutdown`].
pub struct RunningGateway {
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    /// `server.shutdown_delay`: the lame-duck period before the drain.
    shutdown_delay: Duration,
    task: tokio::task::JoinHandle<()>,
    /// The admin listener and the readiness probes; they end with the gateway's shutdown token.
    side_tasks: TaskTracker,
    gateway: Arc<Gateway>,
}

impl RunningGateway {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The fleet's peer listener (`fleet.listen`), when there is one.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops as [`RunningGateway::shutdown_or_sooner`] does, with the whole lame-duck period.
    pub async fn shutdown(self) {
        self.shutdown_or_sooner(std::future::pending()).await;
    }

    /// Stops: first the lame-duck period (`server.shutdown_delay`, ended early when `sooner`
    /// resolves, e.g. at a second signal), in which readiness fails and everything is served;
    /// then the drain (see the module docs) until nothing is held or running, or the drain
    /// timeout; then held calls end and backend sessions close.
    pub async fn shutdown_or_sooner(mut self, sooner: impl std::future::Future<Output = ()>) {
        self.gateway.start_stopping();
        if !self.shutdown_delay.is_zero() {
            tracing::info!(delay = ?self.shutdown_delay, "stopping: not ready any more, still serving everything");
            tokio::select! {
                () = tokio::time::sleep(self.shutdown_delay) => {}
                () = sooner => tracing::info!("the lame-duck period was cut short"),
            }
        }
        // The accept loop drains, closes the gateway and ends; the admin surface reports the
        // drain until then, however the loop ended.
        self.gateway.start_drain();
        let _ = (&mut self.task).await;
        self.gateway.end();
        self.side_tasks.close();
        self.side_tasks.wait().await;
    }
}

impl Drop for RunningGateway {
    /// A gateway dropped without [`RunningGateway::shutdown`] still stops its tasks.
    fn drop(&mut self) {
        self.gateway.end();
        self.task.abort();
    }
}

/// Binds the listeners and starts serving.
pub async fn start(config: &Config) -> Result<RunningGateway, StartError> {
    let gateway = Gateway::new(config)?;
    let (mcp, local_addr) = bind(config.server.listen).await?;
    let peer = match config.fleet.as_ref().and_then(|fleet| fleet.listen) {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let peer_addr = peer.as_ref().map(|(_, addr)| *addr);
    let listeners = Listeners {
        mcp: Some(mcp),
        // Without a peer listener of its own, a replica of a fleet is reached by its peers
        // on the MCP listener: it must stay open for the retries they forward.
        mcp_closes_at_drain: config.fleet.is_none() || peer.is_some(),
        peer: peer.map(|(listener, _)| listener),
    };
    let task = tokio::spawn(serve(
        listeners,
        gateway.clone(),
        config.server.drain_timeout,
        config.server.first_byte_timeout,
    ));
    tracing::info!(%local_addr, peer = ?peer_addr, routes = ?config.routes.iter().map(|r| &r.path).collect::<Vec<_>>(), "mrtr-gateway listening");
    let side_tasks = TaskTracker::new();
    let mut admin_addr = None;
    if let Some(addr) = config.server.admin_listen {
        let (listener, bound) = bind(addr).await?;
        admin_addr = Some(bound);
        side_tasks.spawn(admin::serve(
            listener,
            gateway.clone(),
            gateway.child_token(),
        ));
        for pool in gateway.pools().to_vec() {
            side_tasks.spawn(admin::probe_until_ready(pool, gateway.child_token()));
        }
        tracing::info!(admin = ?admin_addr, "admin listener up");
    }
    Ok(RunningGateway {
        local_addr,
        admin_addr,
        peer_addr,
        shutdown_delay: config.server.shutdown_delay,
        task,
        side_tasks,
        gateway,
    })
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, bound))
}

/// What the accept loop listens on.
struct Listeners {
    /// The MCP listener; `None` once closed.
    mcp: Option<TcpListener>,
    /// The fleet's peer listener (`fleet.listen`), open until the gateway has closed.
    peer: Option<TcpListener>,
    /// The MCP listener closes when the drain starts: balancers then move on by themselves,
    /// and peers reach this replica elsewhere (or there is no fleet).
    mcp_closes_at_drain: bool,
}

/// Which listener a connection came in on.
enum Door {
    Mcp,
    Peer,
}

impl Door {
    /// The token that lets this door's connections go; none once the MCP listener's were.
    fn closing<'a>(
        &self,
        mcp: &'a Option<CancellationToken>,
        peer: &'a CancellationToken,
    ) -> Option<&'a CancellationToken> {
        match self {
            Door::Mcp => mcp.as_ref(),
            Door::Peer => Some(peer),
        }
    }
}

type Accepted = std::io::Result<(tokio::net::TcpStream, SocketAddr)>;

impl Listeners {
    /// The next connection on either open listener.
    async fn accept(&self) -> (Accepted, Door) {
        tokio::select! {
            accepted = accept_on(&self.mcp) => (accepted, Door::Mcp),
            accepted = accept_on(&self.peer) => (accepted, Door::Peer),
        }
    }
}

/// The next connection on `listener`; never, when it is closed.
async fn accept_on(listener: &Option<TcpListener>) -> Accepted {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// How each connection is served; one per accept loop.
struct ConnectionServer {
    gateway: Arc<Gateway>,
    builder: auto::Builder<TokioExecutor>,
    first_byte_timeout: Duration,
}

impl ConnectionServer {
    /// Admits a new connection (or closes it at the limit) and serves it in a task of
    /// `connections`, until `closing` lets it go: then the request it carries finishes (its
    /// first one, if it has not begun it yet), answered with `Connection: close`, and an idle
    /// connection closes at once. With `before_drain`, its listener closes when the drain
    /// begins, so whatever the connection carries was accepted before and is served.
    async fn serve(
        &self,
        connections: &mut tokio::task::JoinSet<()>,
        accepted: Accepted,
        closing: &CancellationToken,
        before_drain: bool,
    ) {
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                return;
            }
        };
        let open = self.gateway.connections().clone();
        let Some(admitted) = open.admit().await else {
            tracing::warn!(
                max_connections = open.max(),
                "connection refused: every connection is busy"
            );
            return;
        };
        let _ = stream.set_nodelay(true);
        let activity = admitted.activity.clone();
        let gateway = self.gateway.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            if before_drain {
                request.extensions_mut().insert(AcceptedBeforeDrain);
            }
            let gateway = gateway.clone();
            let in_flight = activity.request_started();
            async move {
                let response = gateway.handle(request).await;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
            }
        });
        let builder = self.builder.clone();
        let closing = closing.clone();
        let first_byte_timeout = self.first_byte_timeout;
        connections.spawn(async move {
            let activity = admitted.activity.clone();
            // A connection that never speaks is closed, and so is one evicted while waiting.
            let mut first = [0u8; 1];
            tokio::select! {
                peeked = tokio::time::timeout(first_byte_timeout, stream.peek(&mut first)) => {
                    if !matches!(peeked, Ok(Ok(n)) if n > 0) {
                        if peeked.is_err() {
                            open.silent();
                        }
                        return;
                    }
                }
                () = activity.closed() => return,
            }
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::pin!(connection);
            // Let go only once its first request has begun: before that, hyper would drop what
            // the client already sent.
            let let_go = async {
                closing.cancelled().await;
                activity.first_request_begun().await;
            };
            let served = tokio::select! {
                served = connection.as_mut() => Some(served),
                () = activity.closed() => None,
                () = let_go => {
                    connection.as_mut().graceful_shutdown();
                    tokio::select! {
                        served = connection.as_mut() => Some(served),
                        () = activity.closed() => None,
                    }
                }
            };
            if let Some(Err(e)) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(admitted);
        });
    }
}

async fn serve(
    mut listeners: Listeners,
    gateway: Arc<Gateway>,
    drain_timeout: Duration,
    first_byte_timeout: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let server = ConnectionServer {
        gateway: gateway.clone(),
        builder,
        first_byte_timeout,
    };
    // The MCP listener's connections, and the peer listener's: the first are let go when the
    // drain starts, the others only at the end.
    let mut mcp_closing = Some(CancellationToken::new());
    let peer_closing = CancellationToken::new();
    // A JoinSet, not a tracker: connections still open after the grace are aborted.
    let mut connections = tokio::task::JoinSet::new();
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let mut drain_tick = tokio::time::interval(Duration::from_millis(50));
    let drain = gateway.drain_token();
    loop {
        tokio::select! {
            _ = drain.cancelled(), if drain_deadline.is_none() => {
                drain_deadline = Some(tokio::time::Instant::now() + drain_timeout);
                tracing::info!(held = gateway.held_calls(), "draining");
                if listeners.mcp_closes_at_drain {
                    // New connections are refused before a byte is sent, so a balancer moves on
                    // by itself. Those the kernel has already completed are taken first: closing
                    // the socket would reset them, requests and all. Each open connection then
                    // finishes what it carries, and closes.
                    if let (Some(listener), Some(closing)) = (listeners.mcp.take(), &mcp_closing) {
                        while let Some(accepted) = listener.accept().now_or_never() {
                            server.serve(&mut connections, accepted, closing, true).await;
                        }
                    }
                    if let Some(closing) = mcp_closing.take() {
                        closing.cancel();
                    }
                }
            }
            _ = drain_tick.tick(), if drain_deadline.is_some() => {
                let expired = drain_deadline.is_some_and(|d| d <= tokio::time::Instant::now());
                let idle = gateway.idle();
                if expired || idle {
                    if !idle {
                        tracing::warn!(held = gateway.held_calls(), "drain timeout reached; abandoning what is left");
                    }
                    break;
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            (accepted, door) = listeners.accept() => {
                if let Some(closing) = door.closing(&mcp_closing, &peer_closing) {
                    let before_drain = matches!(door, Door::Mcp) && listeners.mcp_closes_at_drain;
                    server.serve(&mut connections, accepted, closing, before_drain).await;
                }
            }
        }
    }
    // Calls still unanswered get their ending, held calls end (their backends see
    // cancellation); a retry reaching this replica meanwhile is told its call is gone. Then
    // the listeners close, and open connections get a short grace to finish writing.
    gateway.end_calls();
    let closing = gateway.close(CONNECTION_GRACE);
    tokio::pin!(closing);
    // Still accepting meanwhile, so what arrives is answered, not reset with the backlog.
    loop {
        tokio::select! {
            () = &mut closing => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            (accepted, door) = listeners.accept() => {
                if let Some(closing) = door.closing(&mcp_closing, &peer_closing) {
                    let before_drain = matches!(door, Door::Mcp) && listeners.mcp_closes_at_drain;
                    server.serve(&mut connections, accepted, closing, before_drain).await;
                }
            }
        }
    }
    drop(listeners);
    peer_closing.cancel();
    if let Some(closing) = mcp_closing {
        closing.cancel();
    }
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(CONNECTION_GRACE, finished)
        .await
        .is_err()
    {
        tracing::debug!("closing remaining connections");
    }
    connections.shutdown().await;
}
