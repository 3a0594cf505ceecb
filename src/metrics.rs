//! Prometheus metrics of one gateway: what happens at the front door, in rounds, at redemption
//! and in the backend pools. Labels are bounded: configured routes and backends, known method
//! names, fixed outcome and reason sets; never principals, arguments or ids.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    pub rounds: IntCounterVec,
    pub input_requests: IntCounterVec,
    pub held: IntGauge,
    pub held_age: Histogram,
    pub redemptions: IntCounterVec,
    pub sessions: IntGaugeVec,
    /// 1 for the revision each backend speaks (`2026-07-28`, `2025-11-25`, `unknown` before
    /// its first probe), 0 for the others.
    pub backend_era: IntGaugeVec,
    pub session_starts: IntCounterVec,
    pub pool_wait: HistogramVec,
    pub request_bytes: IntCounter,
    pub response_bytes: IntCounter,
    /// Open `subscriptions/listen` streams.
    pub listens: IntGauge,
    /// Retries forwarded to the replica holding their call, by result.
    pub forwarded_retries: IntCounterVec,
    /// From forwarding a retry to the owner's response head.
    pub forward_duration: Histogram,
    /// Open connections of the MCP listener.
    pub connections: IntGauge,
    /// Connections closed by the gateway, by reason (`silent`, `evicted`, `refused`).
    pub connection_closes: IntCounterVec,
    /// Front requests by route and protocol era (`2026-07-28`, `2025-11-25`).
    pub requests_by_era: IntCounterVec,
    /// Open 2025-11-25 client sessions.
    pub legacy_sessions: IntGauge,
    /// 2025-11-25 client sessions ended, by reason.
    pub legacy_session_ends: IntCounterVec,
    /// Backend notifications a call had no room for, by backend and kind.
    pub backend_events_dropped: IntCounterVec,
    /// Token exchanges asked for, by backend and outcome (`exchanged`, `cached`, `rejected`,
    /// `unavailable`).
    pub token_exchanges: IntCounterVec,
    /// On a route over several backends: a backend's part that failed, by route, backend,
    /// method and what became of the answer (`omitted`, `failed`, `call_failed`).
    pub member_failures: IntCounterVec,
    /// Audit records written.
    pub audit_records: IntCounter,
    /// Audit records lost: the queue was full, the log closed, or the write failed.
    pub audit_records_dropped: IntCounter,
}

fn must<T>(metric: Result<T, prometheus::Error>) -> T {
    match metric {
        Ok(metric) => metric,
        // The definitions below are fixed: a failure is a programming error caught by tests.
        Err(e) => panic!("invalid metric definition: {e}"),
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let latency = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0,
        ];
        let requests = must(IntCounterVec::new(
            Opts::new(
                "mrtr_requests_total",
                "Front requests by route, method and outcome.",
            ),
            &["route", "method", "outcome"],
        ));
        let duration = must(HistogramVec::new(
            HistogramOpts::new(
                "mrtr_request_duration_seconds",
                "Time from a front request to its final response.",
            )
            .buckets(latency.clone()),
            &["route", "method"],
        ));
        let rounds = must(IntCounterVec::new(
            Opts::new(
                "mrtr_input_required_rounds_total",
                "input_required results sent.",
            ),
            &["route"],
        ));
        let input_requests = must(IntCounterVec::new(
            Opts::new(
                "mrtr_input_requests_total",
                "Input requests surfaced, by kind.",
            ),
            &["kind"],
        ));
        let held = must(IntGauge::new(
            "mrtr_held_calls",
            "Calls held, waiting for a retry.",
        ));
        let held_age = must(Histogram::with_opts(
            HistogramOpts::new(
                "mrtr_held_call_age_seconds",
                "How long a held call waited for its retry.",
            )
            .buckets(vec![
                0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
            ]),
        ));
        let redemptions = must(IntCounterVec::new(
            Opts::new(
                "mrtr_redemptions_total",
                "Retries carrying requestState, by result.",
            ),
            &["result"],
        ));
        let sessions = must(IntGaugeVec::new(
            Opts::new("mrtr_backend_sessions", "Backend sessions by state."),
            &["backend", "state"],
        ));
        let backend_era = must(IntGaugeVec::new(
            Opts::new(
                "mrtr_backend_era",
                "The revision each backend speaks: 1 for its era, 0 for the others.",
            ),
            &["backend", "era"],
        ));
        let session_starts = must(IntCounterVec::new(
            Opts::new(
                "mrtr_backend_session_starts_total",
                "Backend sessions started.",
            ),
            &["backend", "result"],
        ));
        let pool_wait = must(HistogramVec::new(
            HistogramOpts::new(
                "mrtr_pool_wait_seconds",
                "Time a request waited for a backend session.",
            )
            .buckets(latency),
            &["backend"],
        ));
        let request_bytes = must(IntCounter::new(
            "mrtr_http_request_bytes_total",
            "Bytes of front request bodies.",
        ));
        let response_bytes = must(IntCounter::new(
            "mrtr_http_response_bytes_total",
            "Bytes of front response bodies.",
        ));
        let listens = must(IntGauge::new(
            "mrtr_listens",
            "Open subscriptions/listen streams.",
        ));
        let forwarded_retries = must(IntCounterVec::new(
            Opts::new(
                "mrtr_forwarded_retries_total",
                "Retries whose call another replica holds, by result (ok: forwarded and \
                 answered; owner_unavailable: not reached, or restarted; owner_not_allowed).",
            ),
            &["result"],
        ));
        let forward_duration = must(Histogram::with_opts(
            HistogramOpts::new(
                "mrtr_forward_duration_seconds",
                "Time from forwarding a retry to the owner's response head.",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0,
            ]),
        ));
        let connections = must(IntGauge::new(
            "mrtr_connections",
            "Open connections of the MCP listener.",
        ));
        let connection_closes = must(IntCounterVec::new(
            Opts::new(
                "mrtr_connection_closes_total",
                "Connections the gateway closed, by reason (silent: no byte within \
                 first_byte_timeout; evicted: idle the longest at max_connections, for a new \
                 one; refused: at max_connections with none idle).",
            ),
            &["reason"],
        ));
        let requests_by_era = must(IntCounterVec::new(
            Opts::new(
                "mrtr_requests_by_era_total",
                "Front requests by route and protocol era (2026-07-28: stateless; 2025-11-25: \
                 a client session proxied to its own backend session).",
            ),
            &["route", "era"],
        ));
        let legacy_sessions = must(IntGauge::new(
            "mrtr_legacy_sessions",
            "Open 2025-11-25 client sessions, each with its own backend session.",
        ));
        let legacy_session_ends = must(IntCounterVec::new(
            Opts::new(
                "mrtr_legacy_session_ends_total",
                "2025-11-25 client sessions ended, by reason (deleted: the client's DELETE; \
                 expired: idle past legacy.idle_timeout; backend_closed: the backend session \
                 ended; shutdown).",
            ),
            &["reason"],
        ));
        let backend_events_dropped = must(IntCounterVec::new(
            Opts::new(
                "mrtr_backend_events_dropped_total",
                "Backend notifications dropped because their call had no room for them (a call \
                 held for its client's retry reads nothing), by backend and kind (progress, log, \
                 elicitation_complete).",
            ),
            &["backend", "kind"],
        ));
        let member_failures = must(IntCounterVec::new(
            Opts::new(
                "mrtr_route_backend_failures_total",
                "On a route over several backends, a backend that failed its part, by route, \
                 backend, method and outcome (omitted: left out of a merged answer; failed: the \
                 merged answer failed; call_failed: a use of one of its items failed).",
            ),
            &["route", "backend", "method", "outcome"],
        ));
        let token_exchanges = must(IntCounterVec::new(
            Opts::new(
                "mrtr_token_exchanges_total",
                "Backend tokens asked for by token exchange (RFC 8693), by backend and outcome \
                 (exchanged: a new token; cached: one still fresh; rejected: the authorization \
                 server refused; unavailable: it could not be reached or its answer was unusable).",
            ),
            &["backend", "outcome"],
        ));
        let audit_records = must(IntCounter::new(
            "mrtr_audit_records_total",
            "Audit records written.",
        ));
        let audit_records_dropped = must(IntCounter::new(
            "mrtr_audit_records_dropped_total",
            "Audit records lost: the queue was full, the log closed, or the write failed.",
        ));
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(requests_by_era.clone()),
            Box::new(legacy_sessions.clone()),
            Box::new(legacy_session_ends.clone()),
            Box::new(duration.clone()),
            Box::new(rounds.clone()),
            Box::new(input_requests.clone()),
            Box::new(held.clone()),
            Box::new(held_age.clone()),
            Box::new(redemptions.clone()),
            Box::new(sessions.clone()),
            Box::new(backend_era.clone()),
            Box::new(session_starts.clone()),
            Box::new(pool_wait.clone()),
            Box::new(request_bytes.clone()),
            Box::new(response_bytes.clone()),
            Box::new(forwarded_retries.clone()),
            Box::new(forward_duration.clone()),
            Box::new(listens.clone()),
            Box::new(connections.clone()),
            Box::new(connection_closes.clone()),
            Box::new(backend_events_dropped.clone()),
            Box::new(token_exchanges.clone()),
            Box::new(member_failures.clone()),
            Box::new(audit_records.clone()),
            Box::new(audit_records_dropped.clone()),
        ] {
            must(registry.register(collector));
        }
        Self {
            registry,
            requests,
            duration,
            rounds,
            input_requests,
            held,
            held_age,
            redemptions,
            sessions,
            backend_era,
            session_starts,
            pool_wait,
            request_bytes,
            response_bytes,
            forwarded_retries,
            forward_duration,
            listens,
            connections,
            connection_closes,
            requests_by_era,
            legacy_sessions,
            legacy_session_ends,
            backend_events_dropped,
            token_exchanges,
            member_failures,
            audit_records,
            audit_records_dropped,
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_with_their_names() {
        let metrics = Metrics::new();
        metrics
            .requests
            .with_label_values(&["/mcp", crate::protocol::Method::ToolsCall.label(), "ok"])
            .inc();
        metrics.redemptions.with_label_values(&["tampered"]).inc();
        metrics
            .backend_events_dropped
            .with_label_values(&["b", "progress"])
            .inc();
        metrics
            .token_exchanges
            .with_label_values(&["b", "cached"])
            .inc();
        metrics.audit_records_dropped.inc();
        let text = metrics.render();
        assert!(text.contains("mrtr_token_exchanges_total{backend=\"b\",outcome=\"cached\"} 1"));
        assert!(text.contains("mrtr_audit_records_dropped_total 1"));
        assert!(text.contains("mrtr_audit_records_total 0"));
        assert!(
            text.contains(
                "mrtr_requests_total{method=\"tools/call\",outcome=\"ok\",route=\"/mcp\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("mrtr_redemptions_total{result=\"tampered\"} 1"));
        assert!(
            text.contains("mrtr_backend_events_dropped_total{backend=\"b\",kind=\"progress\"} 1")
        );
    }
}
