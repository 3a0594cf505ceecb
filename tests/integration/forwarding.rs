//! Faithful forwarding through the gateway, against the legacy rmcp backend over stdio and over
//! Streamable HTTP: tools, resources, prompts, completion, pagination, progress, logging,
//! cancellation and `_meta` pass-through. The client is rmcp pinned to 2026-07-28; raw HTTP is
//! used where the wire itself is the assertion.

#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, PaginatedRequestParams,
    ReadResourceRequestParams, ResourceContents, ResultType,
};
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness};
use crate::support::modern_client::{
    connect_in_time, connect_modern, jsonrpc_error, modern_request, post_raw, ModernClient,
    TestClientHandler,
};
use crate::support::rpc::{no_caps, result_text, tool_call};

over_both_transports!(
    discover_and_lists,
    tool_content_kinds,
    resources_and_templates,
    prompts_and_completion,
    progress_is_relayed_under_the_clients_token,
    logs_follow_the_requested_level,
    meta_and_arguments_reach_the_backend,
    closing_the_response_cancels_the_backend_call,
);

/// A client that declares no capabilities, connected through the gateway.
async fn client(h: &Harness) -> ModernClient {
    connect_in_time(&h.url, TestClientHandler::builder().build()).await
}

fn obj(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().expect("object")
}

async fn discover_and_lists(kind: Backend) {
    let h = Harness::start(kind).await;
    let discover = post_raw(
        &h.url,
        &modern_request(1, "server/discover", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(discover.status, 200, "{}", discover.body);
    let result = discover.result().unwrap();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "private");
    assert!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());
    let capabilities = &result["capabilities"];
    for key in ["tools", "resources", "prompts", "completions", "logging"] {
        assert!(capabilities.get(key).is_some(), "{key} in {capabilities}");
    }
    assert!(capabilities.get("tasks").is_none());
    assert_eq!(
        capabilities["resources"],
        json!({"subscribe": true}),
        "subscriptions/listen delivers resource updates"
    );
    assert_eq!(capabilities["tools"], json!({"listChanged": true}));

    let client = client(&h).await;
    let mut names = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .expect("tools/list page");
        assert!(page.tools.len() <= 5);
        names.extend(page.tools.iter().map(|t| t.name.to_string()));
        pages += 1;
        cursor = page.next_cursor;
        if cursor.is_none() || pages > 20 {
            break;
        }
    }
    assert!(pages > 1, "the backend pages its tools");
    for expected in ["echo", "image", "sleep", "echo_meta", "ask_name"] {
        assert!(
            names.contains(&expected.to_string()),
            "{expected} in {names:?}"
        );
    }
    assert!(
        !names.contains(&"needs_task".to_string()),
        "task-only tools are hidden"
    );

    let raw = post_raw(
        &h.url,
        &modern_request(2, "tools/list", json!({}), &no_caps()),
    )
    .await;
    let listed = raw.result().unwrap();
    assert_eq!(listed["resultType"], "complete");
    assert_eq!(listed["cacheScope"], "private");
    assert!(listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.get("execution").is_none()));
    let _ = client.cancel().await;
    h.stop().await;
}

async fn tool_content_kinds(kind: Backend) {
    let h = Harness::start(kind).await;
    let client = client(&h).await;
    let call = |name: &'static str| client.call_tool(CallToolRequestParams::new(name));

    let image = call("image").await.unwrap();
    assert_eq!(image.result_type, Some(ResultType::COMPLETE));
    assert_eq!(
        image.content[0].as_image().map(|i| i.mime_type.as_str()),
        Some("image/png")
    );
    let audio = call("audio").await.unwrap();
    assert!(audio.content[0].as_audio().is_some());
    let embedded = call("embedded_resource").await.unwrap();
    assert!(embedded.content[0].as_resource().is_some());
    let mixed = call("mixed").await.unwrap();
    assert_eq!(mixed.content.len(), 3);
    let failed = call("fail").await.unwrap();
    assert_eq!(failed.is_error, Some(true));
    let structured = call("structured").await.unwrap();
    assert!(structured.structured_content.is_some());

    let echoed = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(obj(json!({"text": "héllo"}))))
        .await
        .unwrap();
    assert_eq!(
        echoed.content[0].as_text().map(|t| t.text.as_str()),
        Some("héllo")
    );

    let unknown = client
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await;
    let error = unknown.expect_err("unknown tool is a protocol error");
    assert_eq!(jsonrpc_error(&error).map(|e| e.code.0), Some(-32602));
    let _ = client.cancel().await;
    h.stop().await;
}

async fn resources_and_templates(kind: Backend) {
    let h = Harness::start(kind).await;
    let client = client(&h).await;
    let listed = client.list_resources(None).await.unwrap();
    let uris: Vec<_> = listed.resources.iter().map(|r| r.uri.clone()).collect();
    assert!(uris.contains(&"demo://text".to_string()), "{uris:?}");
    assert!(uris.contains(&"demo://binary".to_string()), "{uris:?}");

    let text = client
        .read_resource(ReadResourceRequestParams::new("demo://text"))
        .await
        .unwrap();
    assert!(matches!(
        &text.contents[0],
        ResourceContents::TextResourceContents { .. }
    ));
    let binary = client
        .read_resource(ReadResourceRequestParams::new("demo://binary"))
        .await
        .unwrap();
    assert!(matches!(
        &binary.contents[0],
        ResourceContents::BlobResourceContents { .. }
    ));

    let templates = client.list_resource_templates(None).await.unwrap();
    assert!(templates
        .resource_templates
        .iter()
        .any(|t| t.uri_template == "demo://item/{id}"));
    let item = client
        .read_resource(ReadResourceRequestParams::new("demo://item/42"))
        .await
        .unwrap();
    assert!(!item.contents.is_empty());

    // A legacy -32002 must reach a 2026-07-28 client as -32602 with the uri.
    let missing = post_raw(
        &h.url,
        &modern_request(
            5,
            "resources/read",
            json!({"uri": "demo://missing"}),
            &no_caps(),
        ),
    )
    .await;
    assert_eq!(missing.error_code(), Some(-32602), "{}", missing.body);
    assert_eq!(missing.error().unwrap()["data"]["uri"], "demo://missing");
    assert!(!missing.body.contains("-32002"));

    let read = post_raw(
        &h.url,
        &modern_request(
            6,
            "resources/read",
            json!({"uri": "demo://text"}),
            &no_caps(),
        ),
    )
    .await;
    let result = read.result().unwrap();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "private");
    let _ = client.cancel().await;
    h.stop().await;
}

async fn prompts_and_completion(kind: Backend) {
    let h = Harness::start(kind).await;
    let client = client(&h).await;
    let prompts = client.list_prompts(None).await.unwrap();
    let names: Vec<_> = prompts.prompts.iter().map(|p| p.name.clone()).collect();
    assert!(names.contains(&"simple".to_string()) && names.contains(&"greet".to_string()));

    let simple = client
        .get_prompt(GetPromptRequestParams::new("simple"))
        .await
        .unwrap();
    assert!(!simple.messages.is_empty());
    let greet = client
        .get_prompt(
            GetPromptRequestParams::new("greet").with_arguments(obj(json!({"name": "Ada"}))),
        )
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&greet.messages)
            .unwrap()
            .contains("Ada"),
        "the argument reached the backend"
    );

    let completion = client
        .complete_prompt_argument("greet", "name", "A", None)
        .await
        .unwrap();
    assert!(!completion.values.is_empty());
    let _ = client.cancel().await;
    h.stop().await;
}

async fn progress_is_relayed_under_the_clients_token(kind: Backend) {
    let h = Harness::start(kind).await;
    let body = modern_request(
        "p-1",
        "tools/call",
        json!({
            "name": "countdown",
            "arguments": {"from": 3, "delay_ms": 20},
            "_meta": {"progressToken": "client-token"}
        }),
        &no_caps(),
    );
    let exchange = post_raw(&h.url, &body).await;
    assert_eq!(exchange.status, 200, "{}", exchange.body);
    assert_eq!(exchange.content_type(), Some("text/event-stream"));
    assert_eq!(exchange.headers["x-accel-buffering"], "no");
    let progress: Vec<&Value> = exchange
        .notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{}", exchange.body);
    let values: Vec<f64> = progress
        .iter()
        .map(|n| {
            assert_eq!(n["params"]["progressToken"], "client-token");
            n["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert_eq!(exchange.result_type(), Some("complete"));
    assert_eq!(exchange.response().unwrap()["id"], "p-1");

    // The backend saw the gateway's own token, not the client's.
    let sent = h
        .wait_for_backend("the countdown call", |m| {
            m["method"] == "tools/call" && m["params"]["name"] == "countdown"
        })
        .await;
    let backend_token = &sent["params"]["_meta"]["progressToken"];
    assert!(backend_token.is_string() && backend_token != "client-token");

    // Integer tokens keep their JSON type.
    let mut numeric = body.clone();
    numeric["params"]["_meta"]["progressToken"] = json!(77);
    let exchange = post_raw(&h.url, &numeric).await;
    assert!(exchange
        .notifications()
        .iter()
        .all(|n| n["params"]["progressToken"] == json!(77)));
    h.stop().await;
}

async fn logs_follow_the_requested_level(kind: Backend) {
    let h = Harness::start(kind).await;
    let log_call = |id: i64, level: &str, requested: Option<&str>| {
        let mut meta = json!({});
        if let Some(requested) = requested {
            meta["io.modelcontextprotocol/logLevel"] = json!(requested);
        }
        modern_request(
            id,
            "tools/call",
            json!({"name": "log", "arguments": {"level": level, "message": "m"}, "_meta": meta}),
            &no_caps(),
        )
    };
    let relayed = post_raw(&h.url, &log_call(1, "warning", Some("warning"))).await;
    let messages: Vec<&Value> = relayed
        .notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/message")
        .collect();
    assert_eq!(messages.len(), 1, "{}", relayed.body);
    assert_eq!(messages[0]["params"]["level"], "warning");
    assert!(h
        .backend_messages()
        .iter()
        .any(|m| m["method"] == "logging/setLevel" && m["params"]["level"] == "warning"));

    let below = post_raw(&h.url, &log_call(2, "info", Some("error"))).await;
    assert!(below.notifications().is_empty(), "{}", below.body);
    assert_eq!(below.content_type(), Some("application/json"));

    let unasked = post_raw(&h.url, &log_call(3, "emergency", None)).await;
    assert!(unasked.notifications().is_empty(), "{}", unasked.body);
    assert_eq!(unasked.result_type(), Some("complete"));
    h.stop().await;
}

async fn meta_and_arguments_reach_the_backend(kind: Backend) {
    let h = Harness::start(kind).await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let body = modern_request(
        1,
        "tools/call",
        json!({
            "name": "echo_meta",
            "_meta": {
                "traceparent": traceparent,
                "tracestate": "vendor=1",
                "com.example/tag": {"kept": true}
            }
        }),
        &no_caps(),
    );
    let exchange = post_raw(&h.url, &body).await;
    let seen: Value = serde_json::from_str(&result_text(&exchange)).unwrap();
    assert_eq!(seen["traceparent"], traceparent);
    assert_eq!(seen["tracestate"], "vendor=1");
    assert_eq!(seen["com.example/tag"], json!({"kept": true}));
    let reserved: Vec<&String> = seen
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("io.modelcontextprotocol/"))
        .collect();
    assert!(
        reserved.is_empty(),
        "2026-only keys were stripped: {reserved:?}"
    );

    let call = h
        .wait_for_backend("echo_meta call", |m| {
            m["method"] == "tools/call" && m["params"]["name"] == "echo_meta"
        })
        .await;
    assert_eq!(
        call["params"]["arguments"],
        json!({}),
        "arguments defaulted to {{}}"
    );
    h.stop().await;
}

async fn closing_the_response_cancels_the_backend_call(kind: Backend) {
    let h = Harness::start(kind).await;
    let body = tool_call(1, "sleep", json!({"ms": 20000}), &no_caps());
    let request = reqwest::Client::new()
        .post(&h.url)
        .headers(crate::support::modern_client::standard_headers(&body))
        .body(body.to_string())
        .send();
    let pending = tokio::spawn(request);

    let call = h
        .wait_for_backend("the sleep call", |m| {
            m["method"] == "tools/call" && m["params"]["name"] == "sleep"
        })
        .await;
    // The call runs in the request's own task until it answers, and still counts as running.
    let gateway = h.gateway.as_ref().expect("in-process gateway").gateway();
    assert_eq!(gateway.running_calls(), 1, "the call in flight is counted");
    // The client gives up: its connection closes.
    pending.abort();
    assert!(pending.await.is_err_and(|e| e.is_cancelled()));
    let cancelled = h
        .wait_for_backend("notifications/cancelled", |m| {
            m["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(cancelled["params"]["requestId"], call["id"]);

    // The session is usable again.
    let echo = post_raw(
        &h.url,
        &tool_call(2, "echo", json!({"text": "again"}), &no_caps()),
    )
    .await;
    assert_eq!(result_text(&echo), "again");
    h.stop().await;
}

/// The test client is really pinned: against a server that only speaks 2025-11-25 it fails
/// instead of falling back to `initialize` (a fallback would make every test above meaningless).
#[tokio::test]
async fn the_pinned_client_does_not_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("backend.jsonl");
    let legacy = crate::support::gateway::HttpBackend::start("127.0.0.1:0", false, &log).await;
    let attempt = tokio::time::timeout(
        Duration::from_secs(20),
        connect_modern(&legacy.url, TestClientHandler::builder().build()),
    )
    .await
    .expect("answered in time");
    assert!(
        attempt.is_err(),
        "a 2026-07-28 pinned client must not connect to a legacy server"
    );
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !received.contains("\"initialize\""),
        "no legacy handshake was attempted: {received}"
    );
    legacy.stop().await;
}

/// The backend's `ping` is answered by the gateway; no client ever sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_pings_are_answered_by_the_gateway() {
    for kind in Backend::ALL {
        let h = Harness::start(kind).await;
        let exchange = post_raw(
            &h.url,
            &modern_request(1, "tools/call", json!({"name": "ping_client"}), &no_caps()),
        )
        .await;
        assert_eq!(
            exchange.result().unwrap()["content"][0]["text"],
            "ping answered: true"
        );
        h.stop().await;
    }
}
