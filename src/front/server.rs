//! Listeners, start and stop. The MCP listener serves each connection with hyper and the
//! gateway's routes, admitted by [`super::connections::Connections`]: at most
//! `server.max_connections` open at once (at the limit the longest-idle one makes room), each
//! closed if it sends nothing within `server.first_byte_timeout`. Tower's limits (on requests,
//! and waiting rather than refusing) do not cover connections. Header reads are bounded by
//! hyper. Stopping drains first:
//! the listener stays open, new calls get 503 and retries of held calls are still served until
//! nothing is held or running, or the drain timeout; then held calls end, backend sessions
//! close, and open connections get a short grace to finish writing.
//!
//! Tasks: the accept loop, owned by [`RunningGateway`]; one task per connection, tracked by the
//! accept loop and aborted after the grace; the admin listener and readiness probes, tracked by [`RunningGateway`] and
//! stopped by its shutdown token.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use super::connections::Tracked;
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

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Drains (new calls get 503, retries of held calls are served) until nothing is held or
    /// running or the drain timeout, then stops accepting and closes backend sessions.
    pub async fn shutdown(mut self) {
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
    let addr = config.server.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let task = tokio::spawn(serve(
        listener,
        gateway.clone(),
        config.server.drain_timeout,
        config.server.first_byte_timeout,
    ));
    tracing::info!(%local_addr, routes = ?config.routes.iter().map(|r| &r.path).collect::<Vec<_>>(), "mrtr-gateway listening");
    let side_tasks = TaskTracker::new();
    let mut admin_addr = None;
    if let Some(addr) = config.server.admin_listen {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        admin_addr = listener.local_addr().ok();
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
        task,
        side_tasks,
        gateway,
    })
}

async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    drain_timeout: Duration,
    first_byte_timeout: Duration,
) {
    let open = gateway.connections().clone();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
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
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Some(admitted) = open.admit().await else {
                        tracing::warn!(max_connections = open.max(), "connection refused: every connection is busy");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let activity = admitted.activity.clone();
                    let gateway = gateway.clone();
                    let service = hyper::service::service_fn(move |request| {
                        let gateway = gateway.clone();
                        let in_flight = activity.request_started();
                        async move {
                            let response = gateway.handle(request).await;
                            Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
                        }
                    });
                    let builder = builder.clone();
                    let watcher = graceful.watcher();
                    let open = open.clone();
                    connections.spawn(async move {
                        let activity = admitted.activity.clone();
                        // A connection that never speaks is closed, and so is one evicted
                        // while waiting.
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
                        tokio::select! {
                            served = watcher.watch(connection) => {
                                if let Err(e) = served {
                                    tracing::debug!(error = %e, "connection ended with an error");
                                }
                            }
                            () = activity.closed() => {}
                        }
                        drop(admitted);
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
    // Calls still unanswered get their ending, held calls end (their backends see
    // cancellation), then open connections get a short grace to finish writing.
    gateway.end_calls();
    gateway.close(CONNECTION_GRACE).await;
    if tokio::time::timeout(CONNECTION_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("closing remaining connections");
    }
    connections.shutdown().await;
}
