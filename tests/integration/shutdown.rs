//! Stopping, as a balancer sees it: the lame-duck period (readiness fails, everything is
//! served), then the drain (the MCP listener closed, each open connection finishing what it
//! carries with `Connection: close`, idle ones closed, held calls' retries served through the
//! peer listener), then the end, where a late retry is told its call is gone.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mrtr_gateway::config::{Config, FleetConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::gateway::{Backend, Harness};
use crate::support::modern_client::{answer_only_input, post_raw, standard_headers};
use crate::support::rpc::{ask_name_round, no_caps, result_text, tool_call};

/// Makes the gateway a replica of a fleet with a peer listener of its own (`fleet.listen`) on
/// a free loopback port; returns the address.
fn peer_listener(config: &mut Config) -> SocketAddr {
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let address = free.local_addr().expect("its address");
    drop(free);
    config.fleet = Some(FleetConfig {
        advertise: address.to_string(),
        allowed_peers: Vec::new(),
        peer_timeout: Duration::from_secs(2),
        listen: Some(address),
    });
    address
}

/// Whether a new connection to `address` is refused, within 2 s.
async fn refused(address: &str) -> bool {
    match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(address)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

/// A 2026-07-28 `tools/call` of `echo`, as HTTP/1.1 bytes for a raw connection to `addr`.
fn echo_over_http1(addr: &str, text: &str) -> String {
    let body = tool_call(1, "echo", json!({ "text": text }), &no_caps()).to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

async fn post_with(client: &reqwest::Client, url: &str, body: &Value) -> reqwest::Response {
    client
        .post(url)
        .headers(standard_headers(body))
        .body(body.to_string())
        .send()
        .await
        .expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lame_duck_period_fails_readiness_and_serves_everything() {
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.shutdown_delay = Duration::from_millis(1500);
        c.server.drain_timeout = Duration::from_secs(10);
        c.server.admin_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    })
    .await;
    let (first, round) = ask_name_round(&h.url).await;
    let gateway = h.gateway.take().unwrap();
    let readyz = format!("http://{}/readyz", gateway.admin_addr().unwrap());
    let started = Instant::now();
    let stopping = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let ready = reqwest::get(&readyz).await.unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.text().await.unwrap(), "stopping\n");
    // Everything is still served: a new call, and a held call's retry.
    let new = post_raw(
        &h.url,
        &tool_call(2, "echo", json!({"text": "still served"}), &no_caps()),
    )
    .await;
    assert_eq!(result_text(&new), "still served", "{}", new.body);
    let retry = answer_only_input(
        &first,
        json!(3),
        &round,
        json!({"action": "accept", "content": {"name": "Duck"}}),
    );
    let done = post_raw(&h.url, &retry).await;
    assert_eq!(result_text(&done), "Hello, Duck!", "{}", done.body);
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "all of it within the lame-duck period"
    );

    // Then the listener closes: balancers move on by themselves.
    let mut closed_after = None;
    for _ in 0..40 {
        if refused(h.addr()).await {
            closed_after = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed_after = closed_after.expect("the listener closes after the lame-duck period");
    assert!(
        closed_after >= Duration::from_millis(1500),
        "not before shutdown_delay: {closed_after:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the gateway stops: nothing was left")
        .unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_closes_the_listener_and_lets_each_connection_finish_what_it_carries() {
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.drain_timeout = Duration::from_secs(10);
    })
    .await;
    // A keep-alive connection that served one request and waits, idle.
    let mut idle = TcpStream::connect(h.addr()).await.unwrap();
    idle.write_all(echo_over_http1(h.addr(), "once").as_bytes())
        .await
        .unwrap();
    let mut answered = vec![0u8; 16 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut answered))
        .await
        .expect("an answer")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&answered[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answered[..n])
    );
    // A call in flight on another connection when the drain starts.
    let client = reqwest::Client::new();
    let url = h.url.clone();
    let slow = tokio::spawn(async move {
        let body = tool_call(2, "sleep", json!({"ms": 1500}), &no_caps());
        let response = post_with(&client, &url, &body).await;
        let connection = response
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap_or_default().to_string());
        (
            response.status(),
            connection,
            response.text().await.unwrap(),
        )
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let gateway = h.gateway.take().unwrap();
    let stopping = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        refused(h.addr()).await,
        "a new connection is refused before a byte is sent"
    );
    // The idle connection is closed: the client sees its end, not a reset mid-request.
    let mut rest = [0u8; 64];
    let end = tokio::time::timeout(Duration::from_secs(2), idle.read(&mut rest))
        .await
        .expect("the idle connection is closed");
    assert!(matches!(end, Ok(0)), "{end:?}");
    // The call in flight is answered in full, with the connection closing after it.
    let (status, connection, text) = slow.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Slept 1500 ms."), "{text}");
    assert_eq!(connection.as_deref(), Some("close"));
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the gateway stops once the call is answered")
        .unwrap();
    h.stop().await;
}

/// A connection accepted before the listener closed whose request comes only after the drain
/// began: the request was accepted, and a balancer that sent it cannot send it elsewhere, so
/// even a new call is served (then the connection closes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_connection_accepted_before_the_drain_is_served() {
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.drain_timeout = Duration::from_secs(2);
    })
    .await;
    // A held call keeps the drain going until drain_timeout.
    let _held = ask_name_round(&h.url).await;
    let mut early = TcpStream::connect(h.addr()).await.unwrap();
    let gateway = h.gateway.take().unwrap();
    let stopping = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(refused(h.addr()).await, "the listener is closed");

    early
        .write_all(echo_over_http1(h.addr(), "accepted in time").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), early.read_to_end(&mut answer))
        .await
        .expect("answered, then the connection closes")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains("accepted in time"), "{answer}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the gateway stops")
        .unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_serves_held_calls_retries_through_its_peer_listener() {
    let mut peer = None;
    let mut h = Harness::start_with(Backend::Stdio, |c| {
        c.server.drain_timeout = Duration::from_secs(10);
        peer = Some(peer_listener(c));
    })
    .await;
    let peer_url = format!("http://{}/mcp", peer.unwrap());
    let (first, round) = ask_name_round(&h.url).await;

    let gateway = h.gateway.take().unwrap();
    let started = Instant::now();
    let stopping = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;

    assert!(refused(h.addr()).await, "the MCP listener is closed");
    // What still arrives at the peer listener: a new call is refused, the retry served.
    let client = reqwest::Client::new();
    let late = post_with(
        &client,
        &peer_url,
        &tool_call(2, "echo", json!({"text": "late"}), &no_caps()),
    )
    .await;
    assert_eq!(late.status(), 503);
    let retry = answer_only_input(
        &first,
        json!(3),
        &round,
        json!({"action": "accept", "content": {"name": "Last"}}),
    );
    let done = post_raw(&peer_url, &retry).await;
    assert_eq!(result_text(&done), "Hello, Last!", "{}", done.body);

    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the gateway stops once nothing is held")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        refused(&peer.unwrap().to_string()).await,
        "the peer listener closes at the end"
    );
    h.stop().await;
}

/// Past its drain's end and until it exits, a replica still answers at its peer listener
/// (here while its HTTP backend is slow to end its sessions). A forwarded retry of a call it
/// held is told that the call is gone (503 `owner_unavailable`, start again, marked for the
/// forwarder's count), as it is once the replica has exited, not that its state is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_drain_ran_out_is_told_its_call_is_gone() {
    let mut peer = None;
    let mut h = Harness::start_with_env(
        Backend::Http,
        &[("LEGACY_BACKEND_DELETE_DELAY_MS", "4000")],
        |c| {
            c.server.drain_timeout = Duration::from_millis(300);
            peer = Some(peer_listener(c));
        },
    )
    .await;
    let peer_url = format!("http://{}/mcp", peer.unwrap());
    let (first, round) = ask_name_round(&h.url).await;

    let gateway = h.gateway.take().unwrap();
    let stopping = tokio::spawn(gateway.shutdown());
    // The drain runs out with the call still held: the backend hears it withdrawn.
    h.wait_for_backend("the held call cancelled", |m| {
        m["method"] == "notifications/cancelled"
    })
    .await;

    let retry = answer_only_input(
        &first,
        json!(2),
        &round,
        json!({"action": "accept", "content": {"name": "Late"}}),
    );
    let mut headers = standard_headers(&retry);
    headers.insert("mrtr-forwarded-by", "127.0.0.1:1".parse().unwrap());
    let answer = reqwest::Client::new()
        .post(&peer_url)
        .headers(headers)
        .body(retry.to_string())
        .send()
        .await
        .expect("the peer listener still answers");
    assert_eq!(answer.status(), 503);
    assert!(answer.headers().contains_key("retry-after"));
    assert!(
        answer.headers().contains_key("mrtr-owner-unavailable"),
        "marked for the forwarder's count"
    );
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["id"], 2, "{body}");
    assert_eq!(
        body["error"]["data"]["reason"], "owner_unavailable",
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("start it again")),
        "{body}"
    );
    tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("the gateway stops")
        .unwrap();
    assert!(
        !h.backend_messages()
            .iter()
            .any(|m| m["result"]["content"]["name"] == "Late"),
        "the answer never reached the backend"
    );
}

/// A call still waiting for its backend session when the drain starts is served: the drain
/// waits for it as it waits for a running call, instead of ending it with the shutdown error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_session_is_served_across_the_drain() {
    let mut h = Harness::start_with_env(
        Backend::Stdio,
        &[("LEGACY_BACKEND_START_DELAY_MS", "2000")],
        |c| c.server.drain_timeout = Duration::from_secs(10),
    )
    .await;
    let url = h.url.clone();
    let call = tokio::spawn(async move {
        post_raw(
            &url,
            &tool_call(1, "echo", json!({"text": "waited"}), &no_caps()),
        )
        .await
    });
    // The call is waiting for the session its backend is still starting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gateway = h.gateway.take().unwrap();
    let stopping = tokio::spawn(gateway.shutdown());
    let answer = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call is answered")
        .unwrap();
    assert_eq!(result_text(&answer), "waited", "{}", answer.body);
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the gateway stops once the call is answered")
        .unwrap();
}
