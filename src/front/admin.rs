//! The admin listener (`server.admin_listen`): liveness, readiness, Prometheus metrics and a JSON
//! status of sessions and held calls. Kept off the MCP listener so it can be exposed to the
//! cluster only.

use std::convert::Infallible;
use std::sync::Arc;

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Map};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use crate::backend::pool::Pool;
use crate::http_serve::{full, Body};

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn answer(gateway: &Gateway, request: &Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match request.uri().path() {
        "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let waiting: Vec<&str> = gateway
                .pools()
                .iter()
                .filter(|p| !p.ready())
                .map(|p| p.backend_name())
                .collect();
            let saturated = gateway.connections().saturated();
            if waiting.is_empty() && !gateway.is_stopping() && !saturated {
                text(StatusCode::OK, "text/plain", "ready\n".into())
            } else if gateway.is_draining() {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "draining\n".into(),
                )
            } else if gateway.is_stopping() {
                // The lame-duck period: everything is served while balancers let go.
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "stopping\n".into(),
                )
            } else if saturated {
                // Every connection has a request in flight: a new client would be refused.
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "saturated: every connection is busy\n".into(),
                )
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("backends not ready: {}\n", waiting.join(", ")),
                )
            }
        }
        "/metrics" => {
            gateway.refresh_gauges();
            text(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                gateway.metrics().render(),
            )
        }
        "/status" => {
            let mut backends = Map::new();
            for pool in gateway.pools() {
                let stats = pool.stats();
                backends.insert(
                    pool.backend_name().to_string(),
                    json!({
                        "era": pool.era_label(),
                        "sessions": stats.open,
                        "idle": stats.idle,
                        "ready": pool.ready(),
                    }),
                );
            }
            let status = json!({
                "held_calls": gateway.held_calls(),
                "running_calls": gateway.running_calls(),
                "forwarding": gateway.forwarding(),
                "listens": gateway.open_listens(),
                "legacy_sessions": {
                    "open": gateway.legacy_sessions().open(),
                    "max": gateway.legacy_sessions().max(),
                },
                "connections": {
                    "open": gateway.connections().open(),
                    "max": gateway.connections().max(),
                    "saturated": gateway.connections().saturated(),
                },
                "stopping": gateway.is_stopping(),
                "draining": gateway.is_draining(),
                "backends": backends,
            });
            text(StatusCode::OK, "application/json", status.to_string())
        }
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves the admin endpoints until `stop`; connections are tracked and end with it.
pub(crate) async fn serve(listener: TcpListener, gateway: Arc<Gateway>, stop: CancellationToken) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let gateway = gateway.clone();
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let response = answer(&gateway, &request);
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                connections.spawn(async move {
                    let _ = connection.await;
                });
            }
        }
    }
    connections.shutdown().await;
}

/// Readiness needs each backend to have initialized a session once: tries until it has, every
/// 2 s, until `stop`.
pub(crate) async fn probe_until_ready(pool: Arc<Pool>, stop: CancellationToken) {
    loop {
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            result = pool.probe() => result,
        };
        let Err(e) = result else { return };
        tracing::warn!(backend = pool.backend_name(), error = %e, "backend not reachable yet");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
        }
    }
}
