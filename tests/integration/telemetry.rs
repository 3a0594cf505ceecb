//! Trace export: with the cargo feature `otlp`, each request's span reaches an OTLP/HTTP receiver
//! as a child of the caller's W3C trace; without it, a configured endpoint is reported as not
//! exported rather than silently ignored.

use serde_json::json;

use crate::support::gateway::GatewayProcess;
use crate::support::modern_client::post_raw;
use crate::support::rpc::{no_caps, tool_call};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// One `tools/call echo` carrying the caller's trace context in `_meta`.
async fn traced_echo(url: &str) {
    let mut call = tool_call(1, "echo", json!({"text": "traced"}), &no_caps());
    call["params"]["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"));
    let answer = post_raw(url, &call).await;
    assert_eq!(
        answer.result().expect("a result")["content"][0]["text"],
        "traced",
        "{}",
        answer.body
    );
}

#[cfg(not(feature = "otlp"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_endpoint_without_the_exporter_is_reported() {
    let gateway = GatewayProcess::start(
        &["--listen", "127.0.0.1:0"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")],
    )
    .await;
    traced_echo(&gateway.url).await;
    let (_, log) = gateway.stop().await;
    assert!(
        log.contains("no OTLP exporter"),
        "the missing exporter is reported:\n{log}"
    );
}

#[cfg(feature = "otlp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_reach_an_otlp_receiver_in_the_callers_trace() {
    use crate::support::modern_client::{answer_only_input, modern_request};
    use crate::support::rpc::elicitation_caps;

    let (endpoint, mut received, receiver) = otlp_receiver().await;

    let gateway = GatewayProcess::start(
        &["--listen", "127.0.0.1:0"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    traced_echo(&gateway.url).await;
    let ask = modern_request(
        2,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    let round = post_raw(&gateway.url, &ask).await;
    assert_eq!(
        round.result().expect("a round")["resultType"],
        "input_required",
        "{}",
        round.body
    );
    // Answered, so nothing is held and the drain at shutdown is immediate.
    let retry = answer_only_input(
        &ask,
        json!(3),
        round.result().expect("a round"),
        json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    let done = post_raw(&gateway.url, &retry).await;
    assert_eq!(
        done.result().expect("a result")["content"][0]["text"],
        "Hello, Ada!"
    );
    // Shutdown flushes whatever the batch processor still holds.
    let (status, log) = gateway.stop().await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");

    let (spans, service_names) = exported_spans(&mut received);
    receiver.abort();

    let call = spans
        .iter()
        .find(|s| s.name == "request" && attribute(s, "tool").as_deref() == Some("echo"))
        .unwrap_or_else(|| panic!("the tools/call span was exported; got {spans:?}\n{log}"));
    assert_eq!(attribute(call, "route").as_deref(), Some("/mcp"));
    assert_eq!(attribute(call, "method").as_deref(), Some("tools/call"));
    assert_eq!(attribute(call, "outcome").as_deref(), Some("ok"));
    assert_eq!(hex(&call.trace_id), TRACE_ID, "the caller's trace");
    assert_eq!(
        hex(&call.parent_span_id),
        CALLER_SPAN_ID,
        "the caller's span"
    );
    assert!(call.end_time_unix_nano > call.start_time_unix_nano);
    assert!(attribute(call, "duration_ms").is_some());

    let asked: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "request" && attribute(s, "tool").as_deref() == Some("ask_name"))
        .map(|s| (attribute(s, "outcome"), attribute(s, "round")))
        .collect();
    let expected = |outcome: &str| (Some(outcome.to_string()), Some("1".to_string()));
    assert!(
        asked.contains(&expected("input_required")),
        "the first call records the round it opens: {asked:?}"
    );
    assert!(
        asked.contains(&expected("ok")),
        "the retry records the round it answers: {asked:?}"
    );

    let session = spans
        .iter()
        .find(|s| s.name == "backend_session")
        .unwrap_or_else(|| panic!("a backend session span was exported; got {spans:?}"));
    assert_eq!(attribute(session, "backend").as_deref(), Some("demo"));
    assert!(
        session.parent_span_id.is_empty(),
        "a session span has no parent"
    );
    assert!(
        service_names.iter().any(|n| n.contains("mrtr-gateway")),
        "service.name: {service_names:?}"
    );
}

/// A retry forwarded from one replica to the one holding its call: the forwarder's span joins the
/// caller's trace, and the owner's span is the forwarder's child.
#[cfg(feature = "otlp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_retry_is_traced_on_both_replicas() {
    use crate::support::gateway::TEST_STATE_KEY;
    use crate::support::modern_client::{answer_only_input, modern_request};
    use crate::support::rpc::elicitation_caps;

    let (endpoint, mut received, receiver) = otlp_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        })
        .collect();
    let mut replicas = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let config = dir.path().join(format!("replica-{i}.toml"));
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\ndrain_timeout = \"1s\"\nshutdown_delay = \"0s\"\n\n\
                 [mrtr]\nkeys = [\"{TEST_STATE_KEY}\"]\ninstance_id = \"replica-{i}\"\n\n\
                 [fleet]\nadvertise = \"127.0.0.1:{port}\"\n\n\
                 [[route]]\npath = \"/mcp\"\nbackend = \"demo\"\n[route.auth]\nmode = \"none\"\n\n\
                 [backend.demo]\ntransport = \"stdio\"\ncommand = \"{exe}\"\nargs = [\"demo-backend\"]\n",
                exe = env!("CARGO_BIN_EXE_mrtr-gateway"),
            ),
        )
        .unwrap();
        let config = config.display().to_string();
        replicas.push(
            GatewayProcess::start(
                &["--config", &config],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                    ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                ],
            )
            .await,
        );
    }
    let mut ask = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    ask["params"]["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"));
    let round = post_raw(&replicas[0].url, &ask).await;
    let round = round.result().expect("a round").clone();
    let retry = answer_only_input(
        &ask,
        json!(2),
        &round,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    // Sent to the replica that does not hold the call.
    let done = post_raw(&replicas[1].url, &retry).await;
    assert_eq!(
        done.result().expect("a result")["content"][0]["text"],
        "Hello, Ada!",
        "{}",
        done.body
    );
    let mut logs = String::new();
    for replica in replicas {
        let (status, log) = replica.stop().await;
        assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
        logs.push_str(&log);
    }
    let (spans, _) = exported_spans(&mut received);
    receiver.abort();

    let forwarder = spans
        .iter()
        .find(|s| s.name == "request" && attribute(s, "outcome").as_deref() == Some("forwarded"))
        .unwrap_or_else(|| panic!("the forwarder's span was exported; got {spans:?}\n{logs}"));
    assert_eq!(hex(&forwarder.trace_id), TRACE_ID, "the caller's trace");
    assert_eq!(hex(&forwarder.parent_span_id), CALLER_SPAN_ID);
    let owner = spans
        .iter()
        .find(|s| {
            s.name == "request"
                && attribute(s, "tool").as_deref() == Some("ask_name")
                && attribute(s, "outcome").as_deref() == Some("ok")
        })
        .unwrap_or_else(|| panic!("the owner's span was exported; got {spans:?}"));
    assert_eq!(
        hex(&owner.trace_id),
        TRACE_ID,
        "the caller's trace, on the owner"
    );
    assert_eq!(
        owner.parent_span_id, forwarder.span_id,
        "the owner's span is the forwarder's child"
    );
}

/// An OTLP/HTTP protobuf receiver on `/v1/traces`: its endpoint, every export it receives, and its
/// task (aborted by the test).
#[cfg(feature = "otlp")]
async fn otlp_receiver() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, bytes::Bytes)>,
    tokio::task::JoinHandle<()>,
) {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::sync::mpsc;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let (exports, received) = mpsc::unbounded_channel::<(String, Bytes)>();
    let receiver = tokio::spawn(async move {
        // Connection tasks end with the receiver (aborted at the end of the test).
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let exports = exports.clone();
            connections.spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let exports = exports.clone();
                    async move {
                        let path = request.uri().path().to_string();
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let _ = exports.send((path, body));
                        let mut response = hyper::Response::new(Full::new(Bytes::new()));
                        response.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });

    (endpoint, received, receiver)
}

#[cfg(feature = "otlp")]
type OtlpSpan = opentelemetry_proto::tonic::trace::v1::Span;

/// The spans and `service.name` values of every export received so far.
#[cfg(feature = "otlp")]
fn exported_spans(
    received: &mut tokio::sync::mpsc::UnboundedReceiver<(String, bytes::Bytes)>,
) -> (Vec<OtlpSpan>, Vec<String>) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    let mut spans = Vec::new();
    let mut service_names = Vec::new();
    while let Ok((path, body)) = received.try_recv() {
        assert_eq!(path, "/v1/traces");
        let export = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
        for resource_spans in export.resource_spans {
            for attribute in resource_spans.resource.iter().flat_map(|r| &r.attributes) {
                if attribute.key == "service.name" {
                    service_names.push(format!("{:?}", attribute.value));
                }
            }
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    (spans, service_names)
}

/// A span attribute as text.
#[cfg(feature = "otlp")]
fn attribute(span: &OtlpSpan, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| match &v.value {
            Some(AnyValue::StringValue(s)) => Some(s.clone()),
            Some(AnyValue::IntValue(n)) => Some(n.to_string()),
            Some(AnyValue::DoubleValue(x)) => Some(x.to_string()),
            _ => None,
        })
}

#[cfg(feature = "otlp")]
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
