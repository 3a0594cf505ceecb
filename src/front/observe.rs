//! The outermost layer of a route: one `request` span per request, and the request metrics
//! (count and duration by route, method and outcome; response bytes) once it is answered.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

use super::reply::Labels;
use crate::config::Era;
use crate::metrics::Metrics;
use crate::protocol::Method;
use prometheus::IntCounter;

#[derive(Clone)]
pub struct ObserveLayer {
    route: Arc<str>,
    metrics: Arc<Metrics>,
    /// This route's `mrtr_requests_by_era_total` children, resolved once: modern, legacy.
    by_era: [IntCounter; 2],
}

impl ObserveLayer {
    pub fn new(route: &str, metrics: Arc<Metrics>) -> Self {
        let by_era = [Era::Modern, Era::Legacy].map(|era| {
            metrics
                .requests_by_era
                .with_label_values(&[route, era.label()])
        });
        Self {
            route: route.into(),
            metrics,
            by_era,
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    layer: ObserveLayer,
}

impl<S, B, ResBody> Service<Request<B>> for Observe<S>
where
    S: Service<Request<B>, Response = Response<ResBody>, Error = Infallible>,
    S::Future: Send + 'static,
    ResBody: http_body::Body,
{
    type Response = Response<ResBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<ResBody>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let started = Instant::now();
        let ObserveLayer {
            route,
            metrics,
            by_era,
        } = self.layer.clone();
        let span = tracing::info_span!(
            "request",
            route = %route,
            method = tracing::field::Empty,
            tool = tracing::field::Empty,
            round = tracing::field::Empty,
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let answer = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(async move {
            let Ok(response) = tracing::Instrument::instrument(answer, span.clone()).await;
            let labels = response
                .extensions()
                .get::<Labels>()
                .copied()
                .unwrap_or(Labels {
                    method: Method::Other.label(),
                    outcome: if response.status().is_client_error() {
                        "rejected"
                    } else {
                        "error"
                    },
                    era: Era::Modern,
                });
            metrics
                .requests
                .with_label_values(&[&*route, labels.method, labels.outcome])
                .inc();
            by_era[usize::from(labels.era == Era::Legacy)].inc();
            metrics
                .duration
                .with_label_values(&[&*route, labels.method])
                .observe(started.elapsed().as_secs_f64());
            if let Some(len) = http_body::Body::size_hint(response.body()).exact() {
                metrics.response_bytes.inc_by(len);
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
            Ok(response)
        })
    }
}
