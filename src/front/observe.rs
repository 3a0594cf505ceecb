//! The outermost layer of a route: one `request` span per request, and the request metrics
//! (count and duration by route, method and outcome; response bytes) once it is answered. The
//! route's metric children are resolved from their vectors once each and kept
//! ([`RouteMetrics`]), so a request pays no label lookup.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::config::Era;
use crate::http_serve::Labels;
use crate::metrics::Metrics;
use crate::protocol::Method;
use prometheus::{Histogram, IntCounter};

/// Every outcome label the front sets; another one is looked up by label each time.
const OUTCOMES: [&str; 6] = [
    "ok",
    "input_required",
    "error",
    "rejected",
    "forwarded",
    "stream",
];
const METHODS: usize = Method::Other as usize + 1;

/// One route's request metrics. A child is resolved from its vector on first use and kept,
/// so series appear only once used, as with a lookup per request.
struct RouteMetrics {
    route: Arc<str>,
    metrics: Arc<Metrics>,
    /// `mrtr_requests_total` by method, then outcome (the index in [`OUTCOMES`]).
    requests: [[OnceLock<IntCounter>; OUTCOMES.len()]; METHODS],
    /// `mrtr_request_duration_seconds` by method.
    duration: [OnceLock<Histogram>; METHODS],
    /// `mrtr_requests_by_era_total`: modern, legacy.
    by_era: [IntCounter; 2],
}

impl RouteMetrics {
    fn new(route: &str, metrics: Arc<Metrics>) -> Self {
        let by_era = [Era::Modern, Era::Legacy].map(|era| {
            metrics
                .requests_by_era
                .with_label_values(&[route, era.label()])
        });
        Self {
            route: route.into(),
            metrics,
            requests: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            duration: std::array::from_fn(|_| OnceLock::new()),
            by_era,
        }
    }

    fn record(&self, labels: Labels, elapsed: f64) {
        let method = labels.method.label();
        let slot = labels.method as usize;
        match OUTCOMES.iter().position(|o| *o == labels.outcome) {
            Some(outcome) => self.requests[slot][outcome]
                .get_or_init(|| {
                    self.metrics.requests.with_label_values(&[
                        &*self.route,
                        method,
                        OUTCOMES[outcome],
                    ])
                })
                .inc(),
            None => self
                .metrics
                .requests
                .with_label_values(&[&*self.route, method, labels.outcome])
                .inc(),
        }
        self.by_era[usize::from(labels.era == Era::Legacy)].inc();
        self.duration[slot]
            .get_or_init(|| {
                self.metrics
                    .duration
                    .with_label_values(&[&*self.route, method])
            })
            .observe(elapsed);
    }
}

#[derive(Clone)]
pub(crate) struct ObserveLayer {
    route: Arc<RouteMetrics>,
}

impl ObserveLayer {
    pub(crate) fn new(route: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            route: Arc::new(RouteMetrics::new(route, metrics)),
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
pub(crate) struct Observe<S> {
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
        let route = Arc::clone(&self.layer.route);
        let span = tracing::info_span!(
            "request",
            route = %route.route,
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
                    method: Method::Other,
                    outcome: if response.status().is_client_error() {
                        "rejected"
                    } else {
                        "error"
                    },
                    era: Era::Modern,
                });
            route.record(labels, started.elapsed().as_secs_f64());
            if let Some(len) = http_body::Body::size_hint(response.body()).exact() {
                route.metrics.response_bytes.inc_by(len);
            }
            // The closing fields reach only an exported span and the debug line below; the log
            // layer formats every recorded field, so they are not recorded for nobody.
            if crate::telemetry::exporting() || tracing::enabled!(tracing::Level::DEBUG) {
                let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
                span.record("method", labels.method.label());
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
