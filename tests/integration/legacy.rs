//! 2025-11-25 clients at the same endpoint as 2026-07-28 ones: rmcp's client in `initialize`
//! mode gets a session of its own, proxied to a backend session of its own, and answers the
//! backend's elicitation, sampling and roots requests itself, while a 2026-07-28 client gets
//! MRTR rounds from the same gateway at the same time. Raw HTTP checks the session rules: ids
//! bound to their principal, limits, idle expiry closing the backend session, resumption with
//! `Last-Event-ID`, `DELETE`, and the door closed by `eras`.

#![allow(deprecated)]

use std::time::Duration;

use mrtr_gateway::config::{AuthConfig, BearerToken, Era};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use rmcp::model::{CallToolRequestParams, Root};
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{
    connect_in_time, connect_legacy, send_raw, RawExchange, TestClientHandler,
};
use crate::support::rpc::assert_rpc_error;

over_both_transports!(
    both_eras_at_one_endpoint_at_the_same_time,
    an_idle_session_expires_and_its_backend_session_closes,
);

const LEGACY: &str = "2025-11-25";

fn tool(name: &str, args: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_string());
    if let Value::Object(args) = args {
        params = params.with_arguments(args);
    }
    params
}

/// The count of a metric sample whose line starts with `prefix`.
fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

async fn both_eras_at_one_endpoint_at_the_same_time(kind: Backend) {
    let h = Harness::start(kind).await;
    let legacy_handler = TestClientHandler::builder()
        .elicitation_form()
        .sampling()
        .roots()
        .elicit_accept(json!({"name": "Grace"}))
        .sampling_text("Rome is the capital.")
        .roots_list(vec![Root::new("file:///srv/legacy")])
        .build();
    let legacy = tokio::time::timeout(
        Duration::from_secs(20),
        connect_legacy(&h.url, legacy_handler.clone()),
    )
    .await
    .expect("initialized in time")
    .expect("a legacy client initializes at the gateway");
    assert_eq!(
        legacy
            .peer_info()
            .map(|info| info.protocol_version.to_string()),
        Some(LEGACY.to_string()),
        "the backend's own initialize result, as it answered"
    );
    // The legacy session is the client's own, outside the 2026-07-28 pool.
    assert_eq!(h.pool_stats().open, 0);
    let modern_handler = TestClientHandler::builder()
        .elicitation_form()
        .elicit_accept(json!({"name": "Ada"}))
        .build();
    let modern = connect_in_time(&h.url, modern_handler.clone()).await;

    let legacy_flow = async {
        let greeted = legacy
            .call_tool(tool("ask_name", json!({})))
            .await
            .expect("ask_name (legacy)");
        let summary = legacy
            .call_tool(tool("summarize", json!({"text": "Italy"})))
            .await
            .expect("summarize (legacy)");
        let roots = legacy
            .call_tool(tool("list_roots", json!({})))
            .await
            .expect("list_roots (legacy)");
        (greeted, summary, roots)
    };
    let modern_flow = async {
        modern
            .call_tool(tool("ask_name", json!({})))
            .await
            .expect("ask_name (modern)")
    };
    let ((greeted, summary, roots), modern_greeted) = tokio::join!(legacy_flow, modern_flow);
    assert_eq!(greeted.content[0].as_text().unwrap().text, "Hello, Grace!");
    assert!(summary.content[0]
        .as_text()
        .unwrap()
        .text
        .contains("Rome is the capital."));
    assert!(serde_json::to_string(&roots)
        .unwrap()
        .contains("file:///srv/legacy"));
    assert_eq!(
        modern_greeted.content[0].as_text().unwrap().text,
        "Hello, Ada!"
    );
    // Each client answered its own questions: the legacy one as server requests, the modern
    // one as MRTR rounds.
    let legacy_asked: Vec<&str> = legacy_handler
        .recorded()
        .iter()
        .map(|r| r.method())
        .collect();
    assert!(
        legacy_asked.starts_with(&["elicitation/create"])
            && legacy_asked.contains(&"sampling/createMessage")
            && legacy_asked.contains(&"roots/list"),
        "{legacy_asked:?}"
    );
    let modern_asked: Vec<&str> = modern_handler
        .recorded()
        .iter()
        .map(|r| r.method())
        .collect();
    assert_eq!(modern_asked, ["elicitation/create"]);
    // Nothing of the legacy session went through a held round.
    let metrics = h.metrics();
    assert_eq!(
        sample(&metrics, "mrtr_input_required_rounds_total"),
        1.0,
        "one round, the modern client's:\n{metrics}"
    );
    assert!(
        sample(
            &metrics,
            r#"mrtr_requests_by_era_total{era="2025-11-25",route="/mcp"}"#
        ) >= 4.0
    );
    assert!(
        sample(
            &metrics,
            r#"mrtr_requests_by_era_total{era="2026-07-28",route="/mcp"}"#
        ) >= 2.0
    );
    assert_eq!(sample(&metrics, "mrtr_legacy_sessions "), 1.0, "{metrics}");
    let _ = legacy.cancel().await;
    let _ = modern.cancel().await;
    h.stop().await;
}

fn headers(session: Option<&str>, token: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(session) = session {
        headers.insert("mcp-session-id", HeaderValue::from_str(session).unwrap());
        headers.insert("mcp-protocol-version", HeaderValue::from_static(LEGACY));
    }
    if let Some(token) = token {
        let bearer = format!("Bearer {token}");
        headers.insert(AUTHORIZATION, HeaderValue::from_str(&bearer).unwrap());
    }
    headers
}

async fn send(
    method: reqwest::Method,
    url: &str,
    session: Option<&str>,
    token: Option<&str>,
    body: Option<Value>,
) -> RawExchange {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let exchange = send_raw(method, url, headers(session, token), body);
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("answered in time")
}

/// A raw `initialize`; the session id when the gateway gave one.
async fn initialize(url: &str, token: Option<&str>) -> (RawExchange, Option<String>) {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "raw-legacy", "version": "1"},
        },
    });
    let exchange = send(reqwest::Method::POST, url, None, token, Some(body)).await;
    let session = exchange
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (exchange, session)
}

async fn tools_list(url: &str, session: &str, token: Option<&str>) -> RawExchange {
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    send(reqwest::Method::POST, url, Some(session), token, Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_its_principal_and_each_has_a_bounded_share() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.mcp_route().auth = AuthConfig::Bearer {
            tokens: ["alice", "bob"]
                .map(|name| BearerToken {
                    principal: name.into(),
                    sha256: None,
                    token: Some(format!("{name}-token")),
                    scopes: Vec::new(),
                    claims: Default::default(),
                })
                .to_vec(),
            scopes: Vec::new(),
        };
        c.legacy.max_sessions_per_principal = 1;
    })
    .await;
    let (init, session) = initialize(&h.url, Some("alice-token")).await;
    assert_eq!(init.status, 200, "{}", init.body);
    let alice = session.expect("alice's session id");
    assert!(
        alice.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "visible ASCII only"
    );
    assert_eq!(
        init.messages[0]["result"]["protocolVersion"], LEGACY,
        "{}",
        init.body
    );
    let listed = tools_list(&h.url, &alice, Some("alice-token")).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed
        .messages
        .iter()
        .any(|m| m["id"] == 2 && m["result"]["tools"].is_array()));

    // Bob holding Alice's session id learns nothing of it; without a token nobody gets in.
    let stolen = tools_list(&h.url, &alice, Some("bob-token")).await;
    assert_rpc_error(&stolen, 404, -32600);
    let get = send(
        reqwest::Method::GET,
        &h.url,
        Some(&alice),
        Some("bob-token"),
        None,
    )
    .await;
    assert_eq!(get.status, 404);
    let delete = send(
        reqwest::Method::DELETE,
        &h.url,
        Some(&alice),
        Some("bob-token"),
        None,
    )
    .await;
    assert_eq!(delete.status, 404);
    let anonymous = tools_list(&h.url, &alice, None).await;
    assert_eq!(anonymous.status, 401);
    let forged = tools_list(&h.url, "not-a-session", Some("alice-token")).await;
    assert_rpc_error(&forged, 404, -32600);

    // Alice's share is one session; Bob still gets his.
    let (second, none) = initialize(&h.url, Some("alice-token")).await;
    assert_rpc_error(&second, 429, -32603);
    assert!(none.is_none());
    let (bob_init, bob) = initialize(&h.url, Some("bob-token")).await;
    assert_eq!(bob_init.status, 200, "{}", bob_init.body);
    assert_ne!(bob.as_deref(), Some(alice.as_str()));

    // Alice's session still works after all that; her DELETE ends it for good.
    assert_eq!(
        tools_list(&h.url, &alice, Some("alice-token")).await.status,
        200
    );
    let deleted = send(
        reqwest::Method::DELETE,
        &h.url,
        Some(&alice),
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(deleted.status, 200);
    assert_rpc_error(
        &tools_list(&h.url, &alice, Some("alice-token")).await,
        404,
        -32600,
    );
    let (again, _) = initialize(&h.url, Some("alice-token")).await;
    assert_eq!(
        again.status, 200,
        "a place freed by the DELETE: {}",
        again.body
    );
    let metrics = h.metrics();
    assert_eq!(
        sample(
            &metrics,
            r#"mrtr_legacy_session_ends_total{reason="deleted"}"#
        ),
        1.0,
        "{metrics}"
    );
    h.stop().await;
}

async fn an_idle_session_expires_and_its_backend_session_closes(kind: Backend) {
    let h = Harness::start_with(kind, |c| c.legacy.idle_timeout = Duration::from_secs(1)).await;
    let (init, session) = initialize(&h.url, None).await;
    assert_eq!(init.status, 200, "{}", init.body);
    let session = session.expect("a session id");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "pid", "arguments": {}}});
    let answered = send(
        reqwest::Method::POST,
        &h.url,
        Some(&session),
        None,
        Some(call),
    )
    .await;
    let pid: i32 = answered
        .messages
        .iter()
        .find(|m| m["id"] == 3)
        .and_then(|m| m["result"]["content"][0]["text"].as_str())
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("the backend's pid: {}", answered.body));
    // Nobody comes back: after a second the session ends, and its backend session with it.
    match kind {
        Backend::Stdio => {
            let mut gone = false;
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                // Exited (and reaped by the gateway), or a zombie waiting to be.
                let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
                if status.map_or(true, |s| s.contains("State:\tZ")) {
                    gone = true;
                    break;
                }
            }
            assert!(
                gone,
                "the backend process {pid} of the expired session still runs"
            );
        }
        _ => {
            h.wait_for_backend("DELETE of the backend session", |m| {
                m.get("httpDelete").is_some()
            })
            .await;
        }
    }
    assert_rpc_error(&tools_list(&h.url, &session, None).await, 404, -32600);
    let metrics = h.metrics();
    assert_eq!(
        sample(
            &metrics,
            r#"mrtr_legacy_session_ends_total{reason="expired"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "mrtr_legacy_sessions "), 0.0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_stream_broken_off_is_resumed_with_last_event_id() {
    let h = Harness::start(Backend::Stdio).await;
    let (_, session) = initialize(&h.url, None).await;
    let session = session.expect("a session id");
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"ms": 600}}});
    let mut response = reqwest::Client::new()
        .post(&h.url)
        .headers(headers(Some(&session), None))
        .body(call.to_string())
        .send()
        .await
        .expect("the call is sent");
    assert_eq!(response.status(), 200);
    // The priming event names the stream's first event; the client goes away after it.
    let first = tokio::time::timeout(Duration::from_secs(10), response.chunk())
        .await
        .expect("a first event in time")
        .expect("readable")
        .expect("a first chunk");
    let first = String::from_utf8_lossy(&first).to_string();
    let event_id = first
        .lines()
        .find_map(|line| line.strip_prefix("id: "))
        .unwrap_or_else(|| panic!("a priming event with an id: {first:?}"))
        .to_string();
    assert!(first.contains("retry: "), "{first:?}");
    drop(response);
    // Disconnection is not cancellation: the call goes on, and its answer waits for the
    // client, who resumes that stream.
    let mut resume = headers(Some(&session), None);
    resume.insert("last-event-id", HeaderValue::from_str(&event_id).unwrap());
    resume.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let resumed = tokio::time::timeout(
        Duration::from_secs(20),
        send_raw(reqwest::Method::GET, &h.url, resume, Vec::new()),
    )
    .await
    .expect("resumed in time");
    assert_eq!(resumed.status, 200);
    let answer = resumed
        .messages
        .iter()
        .find(|m| m["id"] == 4)
        .unwrap_or_else(|| panic!("the call's answer on the resumed stream: {}", resumed.body));
    assert_eq!(answer["result"]["content"][0]["text"], "Slept 600 ms.");
    assert!(
        !resumed.body.contains(&format!("id: {event_id}\n")),
        "nothing replayed twice"
    );
    assert_eq!(h.backend_method_count("notifications/cancelled"), 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_serves_2026_only_refuses_initialize_as_the_spec_says() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.mcp_route().eras = vec![Era::Modern];
    })
    .await;
    let (refused, session) = initialize(&h.url, None).await;
    let error = assert_rpc_error(&refused, 404, -32601);
    assert_eq!(error["data"]["supported"], json!(["2026-07-28"]));
    assert!(session.is_none());
    let get = send(reqwest::Method::GET, &h.url, Some("any"), None, None).await;
    assert_eq!(get.status, 405);
    assert_eq!(
        h.backend_method_count("initialize"),
        0,
        "no backend was asked"
    );
    h.stop().await;
}

/// A request the client cancels gets no response: its stream ends, and the backend hears the
/// cancellation (2025-11-25: a cancelled request is not answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_ends_its_stream_without_a_response() {
    let h = Harness::start(Backend::Stdio).await;
    let (_, session) = initialize(&h.url, None).await;
    let session = session.expect("a session id");
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"ms": 10000}}});
    let mut response = reqwest::Client::new()
        .post(&h.url)
        .headers(headers(Some(&session), None))
        .body(call.to_string())
        .send()
        .await
        .expect("the call is sent");
    assert_eq!(response.status(), 200);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 9, "reason": "changed my mind"}});
    let accepted = send(
        reqwest::Method::POST,
        &h.url,
        Some(&session),
        None,
        Some(cancel),
    )
    .await;
    assert_eq!(accepted.status, 202);
    let mut body = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = response.chunk().await.expect("readable") {
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ended: {body}");
    assert!(!body.contains("\"id\":9"), "no response to it: {body}");
    h.wait_for_backend("the cancellation", |m| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == 9
    })
    .await;
    h.stop().await;
}
