//! 2026-07-28 backends (the `modern_backend` fixture, which refuses `initialize`) behind the
//! gateway, over stdio and Streamable HTTP, their era detected (`era = "auto"`):
//! - a 2026-07-28 client (rmcp, pinned) has its requests relayed: discover, lists, every kind of
//!   round, parallel questions in one round, a flow whose state the backend keeps in its own
//!   `requestState`, declines, a missing capability, progress;
//! - a relayed round's state binds the caller and the request: a retry of another principal,
//!   for other arguments, or tampered with, is refused before the backend hears it;
//! - a 2025-11-25 client (rmcp, `initialize`) is served by the reverse bridge: the backend's
//!   rounds come to it as server requests and it gets only the final answers;
//! - the era shows in `/status` terms (`mrtr_backend_era`), and a legacy backend is told apart.

// Roots are deprecated in 2026-07-28 but still a kind of round the gateway relays.
#![allow(deprecated)]

use std::time::Duration;

use mrtr_gateway::config::{AuthConfig, BackendEra, BearerToken, Config};
use rmcp::model::{
    CallToolRequestParams, ElicitResult, ElicitationAction, GetPromptRequestParams,
    ReadResourceRequestParams, Root, ServerNotification, SubscriptionFilter,
};
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{
    connect_in_time, connect_legacy, jsonrpc_error, post_raw, retry_of, ModernClient,
    TestClientHandler,
};
use crate::support::rpc::{
    all_caps, assert_rpc_error, input_required, no_caps, post_with_bearer, result_text, tool_call,
};

fn arguments(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// A handler that answers everything the fixture asks: `Ada` for a name, `x` then `y` for the
/// two rounds' values, `forty-two` when sampled, two roots.
fn answering_handler() -> TestClientHandler {
    let accept =
        |content: Value| ElicitResult::new(ElicitationAction::Accept).with_content(content);
    TestClientHandler::builder()
        .elicitation_form()
        .sampling()
        .roots()
        .elicit_replies(vec![
            accept(json!({"name": "Ada"})),
            accept(json!({"a": "x"})),
            accept(json!({"b": "y"})),
            accept(json!({"name": "Ada"})),
        ])
        .sampling_text("forty-two")
        .roots_list(vec![Root::new("file:///one"), Root::new("file:///two")])
        .build()
}

async fn call_text<H: rmcp::ClientHandler>(
    client: &ModernClient<H>,
    name: &'static str,
    args: Value,
) -> String {
    let params = CallToolRequestParams::new(name).with_arguments(arguments(args));
    let result = tokio::time::timeout(Duration::from_secs(20), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{name} answered in time"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    result.content[0]
        .as_text()
        .unwrap_or_else(|| panic!("{name} answered with text"))
        .text
        .clone()
}

/// The calls every client era makes, and what it must get back. The elicitation replies of
/// [`answering_handler`] are used in this order.
async fn every_kind_of_round<H: rmcp::ClientHandler>(client: &ModernClient<H>) {
    assert_eq!(call_text(client, "echo", json!({"text": "hi"})).await, "hi");
    assert_eq!(
        call_text(client, "ask_name", json!({})).await,
        "Hello, Ada!"
    );
    assert_eq!(call_text(client, "two_rounds", json!({})).await, "x+y");
    assert_eq!(
        call_text(client, "sample", json!({"prompt": "q"})).await,
        "Sampled: forty-two"
    );
    assert_eq!(
        call_text(client, "list_roots", json!({})).await,
        "Roots: file:///one,file:///two"
    );
    assert_eq!(
        call_text(client, "parallel", json!({})).await,
        "Ada/forty-two"
    );
    let prompt = client
        .get_prompt(
            GetPromptRequestParams::new("greet").with_arguments(arguments(json!({"name": "Ada"}))),
        )
        .await
        .expect("greet");
    assert_eq!(prompt.messages.len(), 1);
    let read = client
        .read_resource(ReadResourceRequestParams::new("test://static"))
        .await
        .expect("read");
    assert!(format!("{:?}", read.contents).contains("static content"));
}

/// What the backend was asked: never `initialize`, and the retries carried the answers.
fn assert_backend_heard_rounds(h: &Harness) {
    let messages = h.backend_messages();
    assert!(
        messages.iter().all(|m| m["method"] != "initialize"),
        "a 2026-07-28 backend is never sent initialize"
    );
    let retries: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "tools/call" && m["params"].get("inputResponses").is_some())
        .collect();
    assert!(retries.len() >= 6, "{retries:?}");
    let parallel = retries
        .iter()
        .find(|m| m["params"]["name"] == "parallel")
        .expect("parallel was retried");
    let answers = parallel["params"]["inputResponses"].as_object().unwrap();
    assert!(answers.contains_key("name") && answers.contains_key("answer"));
    // Every request says what it is and what the client declared, 2026-07-28's way.
    for message in messages.iter().filter(|m| m.get("id").is_some()) {
        let meta = &message["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
    }
}

async fn modern_client_through_relay(kind: Backend) {
    let h = Harness::start_modern(kind, |_| {}).await;
    let handler = answering_handler();
    let client = connect_in_time(&h.url, handler.clone()).await;
    let info = client.peer_info().expect("discovered");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("modern-backend")
    );
    every_kind_of_round(&client).await;
    // The two questions of `parallel` came in one round.
    let recorded = handler.recorded();
    let parallel_round: Vec<&str> = recorded[recorded.len() - 2..]
        .iter()
        .map(|r| r.key())
        .collect();
    assert_eq!(parallel_round, ["answer", "name"]);
    assert_backend_heard_rounds(&h);
    assert!(h
        .metrics()
        .contains("mrtr_backend_era{backend=\"legacy\",era=\"2026-07-28\"} 1"));
    let _ = client.cancel().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_is_relayed_to_a_modern_backend_over_stdio() {
    modern_client_through_relay(Backend::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_is_relayed_to_a_modern_backend_over_http() {
    modern_client_through_relay(Backend::Http).await;
}

async fn legacy_client_through_reverse_bridge(kind: Backend) {
    let h = Harness::start_modern(kind, |_| {}).await;
    let handler = answering_handler();
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        connect_legacy(&h.url, handler.clone()),
    )
    .await
    .expect("initialized in time")
    .expect("a 2025-11-25 client initializes with a 2026-07-28 backend");
    let info = client.peer_info().expect("initialized");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("modern-backend")
    );
    every_kind_of_round(&client).await;
    // Each round's questions came to the client as server requests; `parallel`'s two at once
    // (answered in whatever order the client took them).
    let mut asked: Vec<&str> = handler.recorded().iter().map(|r| r.method()).collect();
    asked[5..].sort_unstable();
    assert_eq!(
        asked,
        [
            "elicitation/create",
            "elicitation/create",
            "elicitation/create",
            "sampling/createMessage",
            "roots/list",
            "elicitation/create",
            "sampling/createMessage",
        ]
    );
    assert_backend_heard_rounds(&h);
    let _ = client.cancel().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_reaches_a_modern_backend_over_stdio() {
    legacy_client_through_reverse_bridge(Backend::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_reaches_a_modern_backend_over_http() {
    legacy_client_through_reverse_bridge(Backend::Http).await;
}

/// Two principals with static tokens on `/mcp`.
fn two_principals(config: &mut Config) {
    let token = |principal: &str| BearerToken {
        principal: principal.into(),
        sha256: None,
        token: Some(format!("{principal}-secret")),
        scopes: Vec::new(),
        claims: Default::default(),
    };
    config.mcp_route().auth = AuthConfig::Bearer {
        tokens: vec![token("alice"), token("bob")],
        scopes: Vec::new(),
    };
}

fn tools_calls(h: &Harness) -> usize {
    h.backend_messages()
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count()
}

/// A relayed round's state opens only for the principal it was issued to, the request it
/// belongs to, and as it was sealed; a refused retry reaches the backend with nothing, and the
/// round can still be finished by its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_state_is_bound_to_its_principal_and_request() {
    let h = Harness::start_modern(Backend::Http, two_principals).await;
    let first = tool_call(1, "ask_name", json!({}), &all_caps());
    let round = post_with_bearer(&h.url, Some("alice-secret"), &first).await;
    let round = input_required(&round);
    let key = round.requests.keys().next().expect("a question").clone();
    let answer = json!({ key: {"action": "accept", "content": {"name": "Ada"}} });
    let retry = retry_of(&first, json!(2), answer.clone(), &round.state);
    assert_eq!(tools_calls(&h), 1);

    let bob = post_with_bearer(&h.url, Some("bob-secret"), &retry).await;
    let error = assert_rpc_error(&bob, 400, -32602);
    assert_eq!(error["data"]["reason"], "principal_mismatch");

    let mut other_request = retry.clone();
    other_request["params"]["arguments"] = json!({"extra": 1});
    let mismatch = post_with_bearer(&h.url, Some("alice-secret"), &other_request).await;
    assert_eq!(
        assert_rpc_error(&mismatch, 400, -32602)["data"]["reason"],
        "request_mismatch"
    );

    let mut tampered = retry.clone();
    let mut state = round.state.clone();
    state.replace_range(10..11, if &state[10..11] == "A" { "B" } else { "A" });
    tampered["params"]["requestState"] = json!(state);
    let refused = post_with_bearer(&h.url, Some("alice-secret"), &tampered).await;
    let reason = assert_rpc_error(&refused, 400, -32602)["data"]["reason"].clone();
    assert!(reason == "tampered" || reason == "malformed", "{reason}");

    // None of them reached the backend.
    assert_eq!(tools_calls(&h), 1);
    // The backend's own state is inside the gateway's, never shown.
    let sent_state = h.backend_messages()[0..]
        .iter()
        .find_map(|m| m["params"]["requestState"].as_str().map(String::from));
    assert!(sent_state.is_none());

    let done = post_with_bearer(&h.url, Some("alice-secret"), &retry).await;
    assert_eq!(result_text(&done), "Hello, Ada!");
    // The backend got its own state back, not the gateway's.
    let retried = h
        .backend_messages()
        .into_iter()
        .find(|m| m["params"].get("requestState").is_some())
        .expect("the retry reached the backend");
    assert_ne!(retried["params"]["requestState"], json!(round.state));
    h.stop().await;
}

/// Declines reach the backend as answers; a client that lacks a capability the backend needs
/// gets the backend's -32021 with HTTP 400, and a 2025-11-25 client the same code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declines_and_missing_capabilities_are_the_backends_answers() {
    let h = Harness::start_modern(Backend::Stdio, |_| {}).await;
    let missing = post_raw(&h.url, &tool_call(1, "ask_name", json!({}), &no_caps())).await;
    let error = assert_rpc_error(&missing, 400, -32021);
    assert!(error["data"]["requiredCapabilities"]["elicitation"].is_object());

    let decline = TestClientHandler::builder()
        .elicitation_form()
        .elicit_decline()
        .build();
    let client = connect_in_time(&h.url, decline).await;
    assert_eq!(
        call_text(&client, "ask_name", json!({})).await,
        "No name given (decline)"
    );
    let _ = client.cancel().await;

    let bare = TestClientHandler::builder().build();
    let legacy = connect_legacy(&h.url, bare).await.expect("initialized");
    let refused = legacy
        .call_tool(CallToolRequestParams::new("ask_name"))
        .await
        .expect_err("no elicitation declared");
    assert_eq!(jsonrpc_error(&refused).map(|e| e.code.0), Some(-32021));
    let _ = legacy.cancel().await;
    h.stop().await;
}

/// `era = "auto"` tells the two fixtures apart, and a fixed era is not probed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_era_of_each_backend_is_detected() {
    let legacy = Harness::start_with(Backend::Http, |c| c.legacy().era = BackendEra::Auto).await;
    let listed = post_raw(
        &legacy.url,
        &crate::support::modern_client::modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(legacy
        .metrics()
        .contains("mrtr_backend_era{backend=\"legacy\",era=\"2025-11-25\"} 1"));
    legacy.stop().await;

    let fixed = Harness::start_modern(Backend::Http, |c| c.legacy().era = BackendEra::Modern).await;
    let listed = post_raw(
        &fixed.url,
        &crate::support::modern_client::modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(
        fixed
            .backend_messages()
            .iter()
            .all(|m| m["method"] != "server/discover"),
        "a configured era is not probed"
    );
    fixed.stop().await;
}

/// A listen on a 2026-07-28 backend is the backend's own, relayed: what it asked for (a hidden
/// resource left out), tagged with its id; closing it cancels the backend's listen, and
/// shutdown ends it with its result.
async fn a_listen_is_relayed(kind: Backend) {
    let h = Harness::start_modern(kind, |c| {
        c.mcp_route().policy = toml::from_str::<PolicyRules>(
            r#"
            [[policy]]
            resources = ["test://static"]
            effect = "deny"
            [[policy]]
            tools = ["*"]
            prompts = ["*"]
            resources = ["*"]
            effect = "allow"
            "#,
        )
        .expect("a policy")
        .policy;
    })
    .await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let asked = SubscriptionFilter::builder()
        .tools_list_changed()
        .resource_subscription("test://changing")
        .resource_subscription("test://static")
        .build();
    let mut subscription =
        tokio::time::timeout(Duration::from_secs(10), client.peer().listen(asked))
            .await
            .expect("acknowledged in time")
            .expect("the listen is acknowledged");
    assert_eq!(
        subscription.acknowledged().resource_subscriptions,
        Some(vec!["test://changing".to_string()])
    );
    // The backend was asked only for what the caller may hear of.
    let listen = h
        .wait_for_backend("subscriptions/listen", |m| {
            m["method"] == "subscriptions/listen"
        })
        .await;
    assert_eq!(
        listen["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://changing"])
    );
    let mut heard = Vec::new();
    for _ in 0..3 {
        let notice = tokio::time::timeout(Duration::from_secs(10), subscription.next())
            .await
            .expect("a notification in time")
            .expect("not an error")
            .expect("open");
        heard.push(match notice {
            ServerNotification::ToolListChangedNotification(_) => "tools".to_string(),
            ServerNotification::ResourceUpdatedNotification(n) => n.params.uri.clone(),
            other => panic!("unexpected {other:?}"),
        });
    }
    assert!(heard.contains(&"tools".to_string()), "{heard:?}");
    assert!(heard.contains(&"test://changing".to_string()), "{heard:?}");
    let stop = tokio::spawn(h.stop());
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match subscription.next().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the listen ends in time");
    assert!(matches!(end, Ok(None)), "{end:?}");
    stop.await.expect("stopped");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_is_relayed_over_stdio() {
    a_listen_is_relayed(Backend::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_is_relayed_over_http() {
    a_listen_is_relayed(Backend::Http).await;
}

/// Just the policy table of a route, for reading rules from TOML.
#[derive(serde::Deserialize)]
struct PolicyRules {
    policy: Vec<mrtr_gateway::config::PolicyRule>,
}

/// The backend's log lines that record a cancelled tool call.
fn cancelled_calls(h: &Harness) -> usize {
    h.backend_log_lines()
        .iter()
        .filter(|line| line["event"] == "cancelled")
        .count()
}

async fn wait_cancelled(h: &Harness, count: usize) {
    for _ in 0..100 {
        if cancelled_calls(h) >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the backend saw {} cancellations, not {count}",
        cancelled_calls(h)
    );
}

/// A client that goes away cancels its request on the backend: a 2026-07-28 client by closing
/// the stream, a 2025-11-25 one with `notifications/cancelled`.
async fn cancellation_reaches_the_backend(kind: Backend) {
    let h = Harness::start_modern(kind, |_| {}).await;
    let mut slow = tool_call(1, "slow", json!({"ms": 20000}), &no_caps());
    slow["params"]["_meta"]["progressToken"] = json!("p-1");
    let gave_up =
        crate::support::rpc::post_giving_up_after(&h.url, &slow, Duration::from_millis(400)).await;
    // The progress stream started, and the client closed it before the end.
    if let Ok(response) = gave_up {
        assert_eq!(response.status(), 200);
        assert!(response.text().await.is_err(), "the stream was cut");
    }
    wait_cancelled(&h, 1).await;

    let legacy = connect_legacy(&h.url, TestClientHandler::builder().build())
        .await
        .expect("initialized");
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("slow").with_arguments(arguments(json!({"ms": 20000}))),
    ));
    let timed_out = legacy
        .send_request_with_option(
            request,
            rmcp::service::PeerRequestOptions::with_timeout(Duration::from_millis(400)),
        )
        .await
        .expect("sent")
        .await_response()
        .await;
    assert!(timed_out.is_err(), "{timed_out:?}");
    wait_cancelled(&h, 2).await;
    let _ = legacy.cancel().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_a_modern_backend_over_stdio() {
    cancellation_reaches_the_backend(Backend::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_a_modern_backend_over_http() {
    cancellation_reaches_the_backend(Backend::Http).await;
}

/// A 2025-11-25 session on a 2026-07-28 backend hears, on its GET stream, the list changes the
/// backend announces and the updates of what it subscribed to (`resources/subscribe`): the
/// session's one listen on the backend, its notifications passed on as 2025-11-25 ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_hears_subscribed_updates_and_list_changes() {
    use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
    let h = Harness::start_modern(Backend::Http, |_| {}).await;
    let headers = |session: Option<&str>| {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(session) = session {
            headers.insert("mcp-session-id", HeaderValue::from_str(session).unwrap());
            headers.insert(
                "mcp-protocol-version",
                HeaderValue::from_static("2025-11-25"),
            );
        }
        headers
    };
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-legacy", "version": "1"}}});
    let initialized = http
        .post(&h.url)
        .headers(headers(None))
        .body(initialize.to_string())
        .send()
        .await
        .expect("initialize");
    assert_eq!(initialized.status(), 200);
    let session = initialized.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut get = headers(Some(&session));
    get.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let mut stream = http
        .get(&h.url)
        .headers(get)
        .send()
        .await
        .expect("the GET stream");
    assert_eq!(stream.status(), 200);
    let subscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                           "params": {"uri": "test://changing"}});
    let subscribed = http
        .post(&h.url)
        .headers(headers(Some(&session)))
        .body(subscribe.to_string())
        .send()
        .await
        .expect("subscribe");
    assert_eq!(subscribed.status(), 200);
    let mut seen = String::new();
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        while !(seen.contains("notifications/resources/updated")
            && seen.contains("notifications/tools/list_changed"))
        {
            let chunk = stream.chunk().await.expect("readable").expect("open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(heard.is_ok(), "heard on the GET stream: {seen}");
    assert!(seen.contains("test://changing"), "{seen}");
    assert!(
        !seen.contains("subscriptionId"),
        "the listen is the gateway's: {seen}"
    );
    h.stop().await;
}

/// A server that moves to 2026-07-28 behind an `era = "auto"` backend is found by itself: the
/// old sessions fail, `initialize` is refused, the era is probed again, and the next requests
/// are relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_moves_to_2026_is_probed_again() {
    let mut h = Harness::start_with(Backend::Http, |c| c.legacy().era = BackendEra::Auto).await;
    let discover = |id: u64| {
        crate::support::modern_client::modern_request(id, "server/discover", json!({}), &no_caps())
    };
    let before = post_raw(&h.url, &discover(1)).await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert!(h
        .metrics()
        .contains("mrtr_backend_era{backend=\"legacy\",era=\"2025-11-25\"} 1"));
    let old = h.http_backend.take().expect("an HTTP backend");
    let addr = old
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    old.stop().await;
    let log = h.dir.path().join("modern.jsonl");
    h.http_backend = Some(crate::support::gateway::HttpBackend::start_modern(&addr, &log).await);
    let mut served_by = None;
    for id in 2..20 {
        let call = tool_call(id, "echo", json!({"text": "moved"}), &no_caps());
        let answer = post_raw(&h.url, &call).await;
        if answer.status == 200 && answer.result().is_some() {
            served_by = Some(result_text(&answer));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(served_by.as_deref(), Some("moved"));
    assert!(h
        .metrics()
        .contains("mrtr_backend_era{backend=\"legacy\",era=\"2026-07-28\"} 1"));
    let relayed = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(relayed.contains("\"echo\"") && !relayed.contains("\"initialize\""));
    h.stop().await;
}

/// A relayed round holds nothing: its retry is served by whichever replica it reaches, without
/// forwarding, each round's state sealed by one replica and opened by another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_serves_a_relayed_retry() {
    use crate::support::fleet::{set, Fleet};
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("modern.jsonl");
    let backend = crate::support::gateway::HttpBackend::start_modern("127.0.0.1:0", &log).await;
    let url = backend.url.clone();
    let fleet = Fleet::builder(Backend::Http)
        .configure(move |_, config| {
            set(config, "backend.legacy.url", url.clone());
            set(config, "backend.legacy.era", "auto");
        })
        .start()
        .await;
    let caps = all_caps();
    let first = tool_call(1, "two_rounds", json!({}), &caps);
    let round = input_required(&post_raw(fleet.url(0), &first).await);
    let second = retry_of(
        &first,
        json!(2),
        json!({"first": {"action": "accept", "content": {"a": "x"}}}),
        &round.state,
    );
    let round = input_required(&post_raw(fleet.url(1), &second).await);
    let third = retry_of(
        &first,
        json!(3),
        json!({"second": {"action": "accept", "content": {"b": "y"}}}),
        &round.state,
    );
    let done = post_raw(fleet.url(2), &third).await;
    assert_eq!(result_text(&done), "x+y");
    let forwarded = fleet
        .metric_total("mrtr_forwarded_retries_total", &[])
        .await;
    assert_eq!(forwarded, 0.0, "nothing was forwarded");
    fleet.stop().await;
    backend.stop().await;
}

/// A request that asks for logs gets the backend's log lines on its stream, even over stdio,
/// where a log names no request, while another request (which did not ask) is in flight.
async fn logs_reach_the_request_that_asked(kind: Backend) {
    let h = Harness::start_modern(kind, |_| {}).await;
    let slow = tool_call(1, "slow", json!({"ms": 1500}), &no_caps());
    let mut log = tool_call(2, "log", json!({"message": "hello"}), &no_caps());
    log["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let url = h.url.clone();
    let slow = tokio::spawn(async move { post_raw(&url, &slow).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logged = post_raw(&h.url, &log).await;
    assert_eq!(result_text(&logged), "logged");
    let line = logged
        .messages
        .iter()
        .find(|m| m["method"] == "notifications/message")
        .unwrap_or_else(|| panic!("a log line on its stream: {}", logged.body));
    assert_eq!(line["params"]["level"], "info");
    let slow = slow.await.expect("the slow call");
    assert_eq!(result_text(&slow), "done");
    assert!(slow
        .messages
        .iter()
        .all(|m| m["method"] != "notifications/message"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_reach_the_request_that_asked_over_stdio() {
    logs_reach_the_request_that_asked(Backend::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_reach_the_request_that_asked_over_http() {
    logs_reach_the_request_that_asked(Backend::Http).await;
}
