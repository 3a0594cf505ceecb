//! Backend faults and pool limits: callers get a clear JSON-RPC error promptly, never a hang,
//! and the next call works on a fresh session.

use std::time::{Duration, Instant};

use mrtr_gateway::config::Config;
use serde_json::json;

use crate::support::gateway::{one_session, Backend, Harness, HttpBackend, TestConfig};
use crate::support::modern_client::{
    answer_only_input, modern_request, post_raw, post_raw_with_headers, standard_headers,
};
use crate::support::rpc::{
    ask_name_round, assert_rpc_error, elicitation_caps, no_caps, result_text, tool_call,
};

/// One backend session, and a short wait for it.
fn one_session_short_queue(config: &mut Config) {
    one_session(config);
    config.legacy().pool.queue_wait = Duration::from_millis(300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_stdio_backend_fails_the_call_quickly_and_the_next_call_works() {
    let h = Harness::start_with(Backend::Stdio, one_session_short_queue).await;
    let pid: i32 =
        result_text(&post_raw(&h.url, &tool_call(1, "pid", json!({}), &no_caps())).await)
            .parse()
            .expect("pid");

    let url = h.url.clone();
    let slow = tokio::spawn(async move {
        post_raw(
            &url,
            &tool_call(2, "sleep", json!({"ms": 30000}), &no_caps()),
        )
        .await
    });
    h.wait_for_backend("the sleep call", |m| m["params"]["name"] == "sleep")
        .await;
    crate::support::signal::send(pid, libc::SIGKILL);
    let killed_at = Instant::now();
    let exchange = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the caller is answered")
        .expect("task");
    assert!(
        killed_at.elapsed() < Duration::from_secs(1),
        "answered after {:?}",
        killed_at.elapsed()
    );
    assert_rpc_error(&exchange, 502, -32603);
    assert_eq!(exchange.response().unwrap()["id"], 2);

    let next = post_raw(&h.url, &tool_call(3, "pid", json!({}), &no_caps())).await;
    let new_pid: i32 = result_text(&next).parse().expect("pid");
    assert_ne!(new_pid, pid, "a fresh backend process serves the next call");
    h.stop().await;
}

#[tokio::test]
async fn unreachable_http_backend_is_a_clear_error() {
    let h = Harness::start_url("http://127.0.0.1:1/mcp", |c| {
        c.legacy().init_timeout = Duration::from_secs(3)
    })
    .await;
    for id in 1..=2 {
        let started = Instant::now();
        let exchange = tokio::time::timeout(
            Duration::from_secs(10),
            post_raw(
                &h.url,
                &modern_request(id, "tools/list", json!({}), &no_caps()),
            ),
        )
        .await
        .expect("no hang");
        assert_rpc_error(&exchange, 502, -32603);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    h.stop().await;
}

#[tokio::test]
async fn backend_that_cannot_start_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-server");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[[route]]\npath = \"/mcp\"\nbackend = \"b\"\n[backend.b]\ntransport = \"stdio\"\ncommand = {:?}\n",
        missing.display().to_string()
    );
    let config = mrtr_gateway::config::Config::from_toml_str(&toml).unwrap();
    let gateway = mrtr_gateway::start(&config).await.unwrap();
    let url = format!("http://{}/mcp", gateway.local_addr());
    let exchange = post_raw(
        &url,
        &modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(exchange.status, 502);
    assert!(exchange.error().unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("cannot start backend"));
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_answers_503_after_queue_wait() {
    let h = Harness::start_with(Backend::Stdio, one_session_short_queue).await;
    let url = h.url.clone();
    let slow = tokio::spawn(async move {
        post_raw(
            &url,
            &tool_call(1, "sleep", json!({"ms": 1500}), &no_caps()),
        )
        .await
    });
    h.wait_for_backend("the sleep call", |m| m["params"]["name"] == "sleep")
        .await;
    let started = Instant::now();
    let refused = post_raw(
        &h.url,
        &tool_call(2, "echo", json!({"text": "x"}), &no_caps()),
    )
    .await;
    assert_rpc_error(&refused, 503, -32603);
    assert!(started.elapsed() < Duration::from_secs(2));
    let metrics = h.metrics();
    assert!(
        metrics.contains(
            "mrtr_requests_total{method=\"tools/call\",outcome=\"error\",route=\"/mcp\"} 1"
        ),
        "the refusal is counted under its method: {metrics}"
    );

    let first = slow.await.unwrap();
    assert_eq!(first.result_type(), Some("complete"));
    // The session went back to the pool: the next call is served.
    let served = post_raw(
        &h.url,
        &tool_call(3, "echo", json!({"text": "y"}), &no_caps()),
    )
    .await;
    assert_eq!(result_text(&served), "y");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_http_session_gives_a_clear_error_then_a_new_session() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("backend.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let backend = HttpBackend::start(&addr, false, &log).await;
    let h = Harness::start_url(&backend.url, |_| {}).await;
    let first = post_raw(
        &h.url,
        &tool_call(1, "echo", json!({"text": "one"}), &no_caps()),
    )
    .await;
    assert_eq!(result_text(&first), "one");

    // A restarted backend knows nothing of the gateway's session.
    backend.stop().await;
    let backend = HttpBackend::start(&addr, false, &log).await;
    let mut outcomes = Vec::new();
    for id in 2..=4 {
        let exchange = tokio::time::timeout(
            Duration::from_secs(10),
            post_raw(
                &h.url,
                &tool_call(id, "echo", json!({"text": "two"}), &no_caps()),
            ),
        )
        .await
        .expect("no hang");
        outcomes.push((exchange.status, exchange.error_code()));
        if exchange.status == 200 {
            assert_eq!(result_text(&exchange), "two");
            break;
        }
        assert_rpc_error(&exchange, 502, -32603);
    }
    assert!(
        outcomes.len() <= 2 && outcomes.last() == Some(&(200, None)),
        "{outcomes:?}"
    );
    h.stop().await;
    backend.stop().await;
}

/// Calls still running when the drain ends get an ending: a streaming one a last JSON-RPC
/// error event and a clean end of its stream, one still waiting as JSON a 503 with the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_running_at_shutdown_get_their_ending() {
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.drain_timeout = Duration::from_millis(500);
    })
    .await;
    let mut counting = tool_call(
        1,
        "countdown",
        json!({"from": 60, "delay_ms": 100}),
        &no_caps(),
    );
    counting["params"]["_meta"]["progressToken"] = json!("p1");
    let sleeping = tool_call(2, "sleep", json!({"ms": 60_000}), &no_caps());
    let url = h.url.clone();
    let streamed = tokio::spawn(async move { post_raw(&url, &counting).await });
    let url = h.url.clone();
    let waited = tokio::spawn(async move { post_raw(&url, &sleeping).await });
    h.wait_for_backend("the sleep call", |m| m["params"]["name"] == "sleep")
        .await;
    // The countdown reports progress every 100 ms: by now its answer is a stream.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let gateway = h.gateway.take().expect("running");
    tokio::time::timeout(Duration::from_secs(15), gateway.shutdown())
        .await
        .expect("the gateway stops after the drain timeout");
    let streamed = tokio::time::timeout(Duration::from_secs(5), streamed)
        .await
        .expect("the stream ended")
        .expect("its body arrived whole");
    assert_eq!(streamed.content_type(), Some("text/event-stream"));
    assert!(!streamed.notifications().is_empty(), "{}", streamed.body);
    let last = streamed.messages.last().expect("events");
    assert_eq!(last["id"], 1, "{}", streamed.body);
    assert_eq!(last["error"]["code"], -32603, "{}", streamed.body);
    assert!(
        last["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shut down")),
        "{last}"
    );
    let waited = tokio::time::timeout(Duration::from_secs(5), waited)
        .await
        .expect("the JSON call was answered")
        .expect("with a whole response");
    let error = assert_rpc_error(&waited, 503, -32603);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("shut down")),
        "{error}"
    );
    h.stop().await;
}

/// A held call never retried is abandoned at the drain timeout: its backend sees cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_abandons_held_calls_after_the_drain_timeout() {
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.drain_timeout = Duration::from_millis(300);
    })
    .await;
    let first = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    assert_eq!(
        post_raw(&h.url, &first).await.result_type(),
        Some("input_required")
    );
    let gateway = h.gateway.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), gateway.shutdown())
        .await
        .expect("shutdown ends after the drain timeout");
    h.wait_for_backend("the cancelled question", |m| {
        m["result"] == json!({"action": "cancel"})
    })
    .await;
    h.stop().await;
}

/// A client that sends headers but not its body gets 408 instead of holding the connection.
#[tokio::test]
async fn a_body_that_never_arrives_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.body_read_timeout = Duration::from_millis(300);
    })
    .await;
    let addr = h.addr().to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = vec![0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut response))
        .await
        .expect("answered in time")
        .unwrap();
    let text = String::from_utf8_lossy(&response[..read]).to_string();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    h.stop().await;
}

/// A misbehaving Streamable HTTP backend: garbage, an error status, a stream cut before the
/// answer, and an answer that never comes. Each caller gets a clear error in bounded time.
mod misbehaving_http_backend {
    use std::convert::Infallible;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::{combinators::BoxBody, BodyExt, Full};
    use hyper::{body::Incoming, Request, Response};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use serde_json::{json, Value};

    use crate::support::gateway::{Harness, TestConfig};
    use crate::support::modern_client::post_raw;
    use crate::support::rpc::{assert_rpc_error, no_caps, tool_call};

    fn reply(
        status: u16,
        content_type: &str,
        body: impl Into<Bytes>,
    ) -> Response<BoxBody<Bytes, Infallible>> {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .header("mcp-session-id", "fault-session")
            .body(Full::new(body.into()).boxed())
            .unwrap()
    }

    async fn serve(
        request: Request<Incoming>,
    ) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
        if request.method() != hyper::Method::POST {
            return Ok(reply(405, "text/plain", ""));
        }
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap_or_default();
        let id = message["id"].clone();
        Ok(match message["method"].as_str() {
            Some("initialize") => reply(
                200,
                "application/json",
                json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "faulty", "version": "0"}
                }})
                .to_string(),
            ),
            Some("tools/call") => match message["params"]["name"].as_str() {
                Some("garbage") => reply(200, "application/json", "{{{ not json"),
                Some("error500") => reply(500, "text/plain", "boom"),
                // A priming event, then the stream ends: no answer, and no way to resume.
                Some("cut") => reply(200, "text/event-stream", "id: 1\nretry: 10\ndata: \n\n"),
                Some("slow") => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    reply(200, "application/json", "{}")
                }
                _ => reply(
                    200,
                    "application/json",
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}).to_string(),
                ),
            },
            _ => reply(202, "text/plain", ""),
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_get_clear_errors_promptly() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(serve))
                        .await;
                });
            }
        });
        let h = Harness::start_url(&url, |c| {
            c.legacy().request_timeout = Duration::from_secs(1)
        })
        .await;
        for (id, tool, status) in [
            (1, "garbage", 502),
            (2, "error500", 502),
            (3, "cut", 502),
            (4, "slow", 504),
        ] {
            let started = Instant::now();
            let exchange = tokio::time::timeout(
                Duration::from_secs(10),
                post_raw(&h.url, &tool_call(id, tool, json!({}), &no_caps())),
            )
            .await
            .expect("no hang");
            assert_rpc_error(&exchange, status, -32603);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{tool} took {:?}",
                started.elapsed()
            );
        }
        // The backend still works for well-formed calls.
        let fine = post_raw(&h.url, &tool_call(5, "fine", json!({}), &no_caps())).await;
        assert_eq!(fine.result_type(), Some("complete"), "{}", fine.body);
        h.stop().await;
        server.abort();
    }
}

/// Connections that never send a byte cannot lock clients out: at `max_connections` the one
/// idle the longest is closed for a new client, who is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_cannot_lock_clients_out() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.max_connections = 8;
        // Long: eviction, not the first-byte deadline, makes the room here.
        c.server.first_byte_timeout = Duration::from_secs(60);
    })
    .await;
    let address = h.addr().to_string();
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(
            tokio::net::TcpStream::connect(&address)
                .await
                .expect("connects"),
        );
    }
    let gateway = h.gateway.as_ref().expect("running").gateway().clone();
    for _ in 0..100 {
        if gateway.connections().open() == 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gateway.connections().open(), 8, "every place taken");
    assert!(!gateway.connections().saturated(), "but none of them busy");
    for id in 1..=3 {
        let answer = post_raw(
            &h.url,
            &tool_call(id, "echo", json!({"text": "still served"}), &no_caps()),
        )
        .await;
        assert_eq!(answer.result_type(), Some("complete"), "{}", answer.body);
    }
    let metrics = h.metrics();
    assert!(
        metrics.contains("mrtr_connection_closes_total{reason=\"evicted\"}"),
        "{metrics}"
    );
    drop(silent);
    h.stop().await;
}

/// A connection that sends nothing within `first_byte_timeout` is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_speaks_is_closed() {
    use tokio::io::AsyncReadExt;

    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.first_byte_timeout = Duration::from_millis(200);
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(h.addr())
        .await
        .expect("connects");
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed by the gateway: {read:?}"
    );
    let metrics = h.metrics();
    assert!(
        metrics.contains("mrtr_connection_closes_total{reason=\"silent\"} 1"),
        "{metrics}"
    );
    h.stop().await;
}

/// A call that has not answered within `stream_after` is answered as SSE: keep-alive comments
/// while it runs, so that a proxy's idle timeout does not cut it, then its result as an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_streams_keep_alives_until_it_answers() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.stream_after = Duration::from_millis(300);
        c.server.sse_keep_alive = Duration::from_millis(100);
    })
    .await;
    let quick = post_raw(
        &h.url,
        &tool_call(1, "echo", json!({"text": "fast"}), &no_caps()),
    )
    .await;
    assert_eq!(quick.content_type(), Some("application/json"));
    let slow = post_raw(
        &h.url,
        &tool_call(2, "sleep", json!({"ms": 1200}), &no_caps()),
    )
    .await;
    assert_eq!(slow.status, 200);
    assert_eq!(
        slow.content_type(),
        Some("text/event-stream"),
        "{}",
        slow.body
    );
    assert!(
        slow.body.matches(": keep-alive").count() >= 3,
        "keep-alives while it ran: {}",
        slow.body
    );
    assert_eq!(result_text(&slow), "Slept 1200 ms.");
    h.stop().await;
}

/// A request larger than a stdio backend takes (16 MiB by default, rmcp's line limit) is
/// refused at once with 413, and nothing reaches the backend, which would drop it silently and
/// leave the call waiting for `request_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_the_backend_takes_is_refused_at_once() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.max_body_bytes = 32 * 1024 * 1024;
    })
    .await;
    let big = "x".repeat(17 * 1024 * 1024);
    let exchange = post_raw(
        &h.url,
        &tool_call(1, "echo", json!({ "text": big }), &no_caps()),
    )
    .await;
    let error = assert_rpc_error(&exchange, 413, -32600);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("16777216 bytes")),
        "{error}"
    );
    assert_eq!(h.backend_method_count("tools/call"), 0);
    h.stop().await;
}

/// The demo backend reads lines as long as the gateway writes: a 20 MiB call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_backend_takes_what_the_gateway_sends() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.max_body_bytes = 32 * 1024 * 1024;
        let demo = c.legacy();
        demo.command = Some(env!("CARGO_BIN_EXE_mrtr-gateway").into());
        demo.args = vec!["demo-backend".into()];
        demo.max_message_bytes = Some(64 * 1024 * 1024);
        // A demo that dropped the line would leave the call waiting this long.
        demo.request_timeout = Duration::from_secs(20);
    })
    .await;
    let big = "y".repeat(20 * 1024 * 1024);
    let exchange = post_raw(
        &h.url,
        &tool_call(1, "echo", json!({ "text": big }), &no_caps()),
    )
    .await;
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        &exchange.body[..200.min(exchange.body.len())]
    );
    assert_eq!(result_text(&exchange).len(), big.len());
    h.stop().await;
}

/// The backend's limit applies to what the gateway writes, not to what the client sent: trace
/// context from the HTTP headers joins the call's `_meta`, so a body under the limit can make a
/// message over it. That call is refused with 413 and never reaches the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_limit_applies_to_the_message_written() {
    // Over the smallest limit a backend may have (1 KiB).
    let text = "h".repeat(1200);
    let body = tool_call(1, "echo", json!({ "text": text }), &no_caps());
    let client_bytes = body.to_string().len();
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.legacy().max_message_bytes = Some(client_bytes + 200);
    })
    .await;
    let mut headers = standard_headers(&body);
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let tracestate = format!("a={},b={}", "x".repeat(250), "y".repeat(250));
    headers.insert("traceparent", traceparent.parse().unwrap());
    headers.insert("tracestate", tracestate.parse().unwrap());
    let exchange = post_raw_with_headers(&h.url, &body, headers).await;
    assert_rpc_error(&exchange, 413, -32600);
    assert_eq!(h.backend_method_count("tools/call"), 0);

    // Without the trace context the same call fits, and is answered.
    let fits = post_raw(&h.url, &body).await;
    assert_eq!(result_text(&fits), text);
    h.stop().await;
}

/// A retry writes only its answers to the backend (the call went out with the first request):
/// a retry body over the backend's limit whose answers fit completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_measured_by_the_answers_it_writes() {
    let limit = 1024;
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.legacy().max_message_bytes = Some(limit);
    })
    .await;
    let (first, result) = ask_name_round(&h.url).await;
    let mut retry = answer_only_input(
        &first,
        json!(2),
        &result,
        json!({"action": "accept", "content": {"name": "Last"}}),
    );
    retry["params"]["_meta"]["com.example/note"] = json!("n".repeat(2 * limit));
    assert!(retry.to_string().len() > limit);
    let done = post_raw(&h.url, &retry).await;
    assert_eq!(result_text(&done), "Hello, Last!", "{}", done.body);
    h.stop().await;
}

/// An answer larger than the backend takes is refused with 413 before the call is taken: the
/// backend hears nothing of it, and a corrected retry (within `refused_retry_grace`) completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_larger_than_the_backend_takes_is_refused_and_the_call_stays_held() {
    let limit = 1024;
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.legacy().max_message_bytes = Some(limit);
    })
    .await;
    let (first, result) = ask_name_round(&h.url).await;
    let long = answer_only_input(
        &first,
        json!(2),
        &result,
        json!({"action": "accept", "content": {"name": "L".repeat(2 * limit)}}),
    );
    let refused = post_raw(&h.url, &long).await;
    assert_rpc_error(&refused, 413, -32600);
    let answered = h
        .backend_messages()
        .iter()
        .filter(|m| m.get("result").is_some_and(|r| r.get("action").is_some()))
        .count();
    assert_eq!(answered, 0, "the backend heard no answer");

    let short = answer_only_input(
        &first,
        json!(3),
        &result,
        json!({"action": "accept", "content": {"name": "Short"}}),
    );
    let done = post_raw(&h.url, &short).await;
    assert_eq!(result_text(&done), "Hello, Short!", "{}", done.body);
    h.stop().await;
}
