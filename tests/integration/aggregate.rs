//! One endpoint over several backends (`backends = [...]`): the legacy test backend (2025-11-25)
//! and the 2026-07-28 one behind one route, with prefixes `old` and `new`:
//! - a 2026-07-28 client (rmcp, pinned) sees both backends' tools and prompts under their
//!   prefixes (both `echo`s callable), their resources by URI, and calls each with its rounds;
//! - `server/discover` is the union, with the gateway's own `serverInfo` and each backend's
//!   instructions labelled;
//! - unknown names, a cursor that is not the gateway's, and a retry whose state another
//!   backend's call issued are refused before any backend hears them;
//! - a backend that is down is left out of lists (counted) or fails them
//!   (`on_backend_error = "fail"`), and its own tools get a clear error;
//! - the route's policy and audit log see the exposed names;
//! - listens, progress, cancellation and the fleet's forwarding work through both backends.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;

use mrtr_gateway::config::{BackendEra, Config, Effect, OnBackendError, PolicyRule, TransportKind};
use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams, ServerNotification,
    SubscriptionFilter,
};
use rmcp::service::SubscriptionEnd;
use serde_json::{json, Value};

use crate::support::fleet::{set, Fleet};
use crate::support::gateway::{
    example_path, Backend, Harness, HttpBackend, TestConfig, MODERN_FIXTURE,
};
use crate::support::modern_client::{
    connect_in_time, connect_legacy, jsonrpc_error, modern_request, next_notification, post_raw,
    ModernClient, TestClientHandler,
};
use crate::support::rpc::{
    all_caps, assert_rpc_error, input_required, key_of, no_caps, result_text, tool_call,
};

/// The route over the legacy backend (`old__`) and a 2026-07-28 one (`new__`), both over stdio.
fn two_eras(config: &mut Config) {
    let mut modern = config.legacy().clone();
    modern.command = Some(example_path(MODERN_FIXTURE).display().to_string());
    modern.args = vec!["--stdio".into()];
    modern.env = BTreeMap::new();
    modern.era = BackendEra::Modern;
    config.backends.insert("modern".into(), modern);
    let route = config.mcp_route();
    route.backend = String::new();
    route.backends = vec!["legacy".into(), "modern".into()];
    route.prefixes = BTreeMap::from([
        ("legacy".into(), "old".into()),
        ("modern".into(), "new".into()),
    ]);
}

/// A third backend that nothing serves: an HTTP URL on a closed loopback port.
fn with_dead_backend(config: &mut Config, on_error: OnBackendError) {
    two_eras(config);
    let mut dead = config.legacy().clone();
    dead.transport = TransportKind::Http;
    dead.command = None;
    dead.args = Vec::new();
    dead.url = Some("http://127.0.0.1:9/mcp".into());
    dead.init_timeout = Duration::from_secs(2);
    config.backends.insert("dead".into(), dead);
    let route = config.mcp_route();
    route.backends.push("dead".into());
    route.on_backend_error = on_error;
    route.list_timeout = Duration::from_secs(3);
    route.ttl_ms = 60_000;
}

/// A client that answers the backends' name questions (form elicitation) with `names`, in turn.
fn naming(names: &[&str]) -> TestClientHandler {
    let accept = |name: &str| {
        rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
            .with_content(json!({ "name": name }))
    };
    TestClientHandler::builder()
        .elicitation_form()
        .elicit_replies(names.iter().map(|name| accept(name)).collect())
        .build()
}

/// Every tool of the route, its pages followed by raw requests (at most 20 pages).
async fn all_tools(url: &str) -> Vec<Value> {
    let mut tools = Vec::new();
    let mut params = json!({});
    for _ in 0..20 {
        let page = post_raw(url, &modern_request(1, "tools/list", params, &no_caps())).await;
        let result = page
            .result()
            .unwrap_or_else(|| panic!("{}", page.body))
            .clone();
        tools.extend(result["tools"].as_array().cloned().unwrap_or_default());
        match result.get("nextCursor") {
            Some(cursor) => params = json!({ "cursor": cursor }),
            None => return tools,
        }
    }
    panic!("more than 20 pages of tools");
}

async fn text_of<H: rmcp::ClientHandler>(
    client: &ModernClient<H>,
    name: &str,
    args: Value,
) -> String {
    let params = CallToolRequestParams::new(name.to_string())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(Duration::from_secs(20), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{name} answered in time"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    result.content[0].as_text().expect("text").text.clone()
}

#[tokio::test]
async fn one_route_serves_both_eras_of_backend_under_their_prefixes() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    let handler = naming(&["Ada", "Bob"]);
    let client = connect_in_time(&harness.url, handler).await;

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in ["old__echo", "new__echo", "old__ask_name", "new__ask_name"] {
        assert!(names.contains(&name), "{name} listed: {names:?}");
    }
    assert!(names
        .iter()
        .all(|n| n.starts_with("old__") || n.starts_with("new__")));

    // Both `echo`s are callable, each reaching its own backend under its own name.
    assert_eq!(
        text_of(&client, "old__echo", json!({"text": "one"})).await,
        "one"
    );
    assert_eq!(
        text_of(&client, "new__echo", json!({"text": "two"})).await,
        "two"
    );
    let legacy_calls = harness.backend_messages();
    assert!(legacy_calls
        .iter()
        .any(|m| m["method"] == "tools/call" && m["params"]["name"] == "echo"));
    assert!(!legacy_calls
        .iter()
        .any(|m| m["params"]["arguments"]["text"] == "two"));

    // Rounds through both: the bridge's for the legacy backend, the relay for the modern one.
    assert_eq!(
        text_of(&client, "old__ask_name", json!({})).await,
        "Hello, Ada!"
    );
    assert_eq!(
        text_of(&client, "new__ask_name", json!({})).await,
        "Hello, Bob!"
    );

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let prompt_names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(prompt_names.contains(&"new__greet") && prompt_names.contains(&"old__simple"));
    let greet = GetPromptRequestParams::new("new__greet").with_arguments(
        json!({"name": "Eve"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let greeting = client.get_prompt(greet).await.expect("prompts/get");
    assert!(format!("{:?}", greeting.messages).contains("Hello, Eve"));

    // Resources keep their URIs, each read from the backend that lists it (or whose template
    // fits it).
    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(
        uris.contains(&"test://static") && uris.contains(&"demo://binary"),
        "{uris:?}"
    );
    let read = |uri: &str| client.read_resource(ReadResourceRequestParams::new(uri.to_string()));
    let static_text = format!(
        "{:?}",
        read("test://static").await.expect("modern resource")
    );
    assert!(static_text.contains("static content"));
    let item = format!(
        "{:?}",
        read("demo://item/7").await.expect("templated resource")
    );
    assert!(item.contains("Item 7"), "{item}");
    drop(client);
    harness.stop().await;
}

#[tokio::test]
async fn discover_is_the_union_under_the_gateways_name() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    let discover = post_raw(
        &harness.url,
        &modern_request(1, "server/discover", json!({}), &no_caps()),
    )
    .await;
    let result = discover
        .result()
        .unwrap_or_else(|| panic!("{}", discover.body));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mrtr-gateway"
    );
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    for capability in ["tools", "prompts", "resources"] {
        assert!(result["capabilities"][capability].is_object(), "{result}");
    }
    let instructions = result["instructions"].as_str().expect("instructions");
    assert!(
        instructions.contains("[new] (tools and prompts named new__*)\nA 2026-07-28 test server"),
        "{instructions}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn what_no_backend_serves_is_refused_before_any_hears_it() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    for name in ["echo", "nope__echo", "old__", "__echo"] {
        let exchange = post_raw(
            &harness.url,
            &tool_call(1, name, json!({"text": "x"}), &no_caps()),
        )
        .await;
        let error = assert_rpc_error(&exchange, 200, -32602);
        assert_eq!(error["message"], format!("Unknown tool: {name}"), "{name}");
    }
    let unknown_uri = post_raw(
        &harness.url,
        &modern_request(
            2,
            "resources/read",
            json!({"uri": "nowhere://x"}),
            &no_caps(),
        ),
    )
    .await;
    let error = assert_rpc_error(&unknown_uri, 200, -32602);
    assert_eq!(error["data"]["uri"], "nowhere://x");
    let forged = |cursor: Value| {
        json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(cursor.to_string()))
    };
    let twice = forged(json!({"m": "tools/list", "p": [["legacy", null], ["legacy", null]]}));
    let other_list = forged(json!({"m": "prompts/list", "p": [["legacy", null]]}));
    let unknown = forged(json!({"m": "tools/list", "p": [["gone", null]]}));
    for cursor in [
        json!("bm90IG91cnM"),
        json!("!"),
        json!(7),
        twice,
        other_list,
        unknown,
    ] {
        let exchange = post_raw(
            &harness.url,
            &modern_request(3, "tools/list", json!({"cursor": cursor}), &no_caps()),
        )
        .await;
        assert_rpc_error(&exchange, 400, -32602);
    }
    assert!(!harness
        .backend_messages()
        .iter()
        .any(|m| m["method"] == "tools/call"));

    // A round's state answers its own backend's call only: the same retry sent under the
    // other backend's name is refused, and the held call still completes.
    let first = post_raw(
        &harness.url,
        &tool_call(4, "old__ask_name", json!({}), &all_caps()),
    )
    .await;
    let round = input_required(&first);
    let key = key_of(&round, "elicitation/create");
    let retry = |name: &str| {
        let mut body = tool_call(5, name, json!({}), &all_caps());
        body["params"]["requestState"] = json!(round.state);
        body["params"]["inputResponses"] =
            json!({ key.clone(): {"action": "accept", "content": {"name": "Ada"}} });
        body
    };
    let crossed = post_raw(&harness.url, &retry("new__ask_name")).await;
    assert_eq!(crossed.status, 400, "{}", crossed.body);
    let answered = post_raw(&harness.url, &retry("old__ask_name")).await;
    assert_eq!(result_text(&answered), "Hello, Ada!");
    harness.stop().await;
}

#[tokio::test]
async fn a_backend_that_is_down_is_left_out_and_its_tools_fail_clearly() {
    let harness = Harness::start_with(Backend::Stdio, |c| {
        with_dead_backend(c, OnBackendError::Omit)
    })
    .await;
    let tools = all_tools(&harness.url).await;
    assert!(tools.iter().any(|t| t["name"] == "old__echo"));
    // A page without one of the backends is not to be kept.
    let page = post_raw(
        &harness.url,
        &modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(page.result().expect("a page")["ttlMs"], 0, "{}", page.body);
    assert!(tools.iter().any(|t| t["name"] == "new__echo"));
    assert!(!tools
        .iter()
        .any(|t| t["name"].as_str().unwrap_or_default().starts_with("dead__")));
    let omitted = harness.metrics();
    assert!(
        omitted
            .lines()
            .any(|l| l.starts_with("mrtr_route_backend_failures_total")
                && l.contains("backend=\"dead\"")
                && l.contains("outcome=\"omitted\"")),
        "{omitted}"
    );
    let call = post_raw(
        &harness.url,
        &tool_call(2, "dead__echo", json!({"text": "x"}), &no_caps()),
    )
    .await;
    let error = assert_rpc_error(&call, 502, -32603);
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Backend unavailable"),
        "{error}"
    );
    harness.stop().await;

    let harness = Harness::start_with(Backend::Stdio, |c| {
        with_dead_backend(c, OnBackendError::Fail)
    })
    .await;
    let list = post_raw(
        &harness.url,
        &modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    let error = assert_rpc_error(&list, 502, -32603);
    assert_eq!(error["data"]["backend"], "dead");
    harness.stop().await;
}

#[tokio::test]
async fn the_policy_sees_exposed_names() {
    let audit_dir = tempfile::tempdir().expect("temp dir");
    let audit_file = audit_dir.path().join("audit.jsonl");
    let audit = toml::from_str(&format!("file = {:?}", audit_file.display().to_string()))
        .expect("an audit table");
    let harness = Harness::start_with(Backend::Stdio, |config| {
        two_eras(config);
        config.audit = Some(audit);
        config.mcp_route().policy = vec![PolicyRule {
            tools: vec!["old__*".into()],
            prompts: Vec::new(),
            resources: Vec::new(),
            when: None,
            effect: Effect::Allow,
            scopes: Vec::new(),
        }];
    })
    .await;
    let tools = all_tools(&harness.url).await;
    assert!(!tools.is_empty());
    assert!(tools
        .iter()
        .all(|t| t["name"].as_str().unwrap_or_default().starts_with("old__")));
    let list = post_raw(
        &harness.url,
        &modern_request(1, "tools/list", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(list.result().expect("a page")["cacheScope"], "private");
    let hidden = post_raw(
        &harness.url,
        &tool_call(2, "new__echo", json!({"text": "x"}), &no_caps()),
    )
    .await;
    let error = assert_rpc_error(&hidden, 200, -32602);
    assert_eq!(error["message"], "Unknown tool: new__echo");
    let allowed = post_raw(
        &harness.url,
        &tool_call(3, "old__echo", json!({"text": "y"}), &no_caps()),
    )
    .await;
    assert_eq!(result_text(&allowed), "y");
    harness.stop().await;
    // The audit log names what the client named.
    let records: Vec<(String, String)> = std::fs::read_to_string(&audit_file)
        .expect("the audit log")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON record"))
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                r["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            ("new__echo".to_string(), "denied".to_string()),
            ("old__echo".to_string(), "ok".to_string())
        ]
    );
}

#[tokio::test]
async fn a_2025_11_25_client_gets_the_same_route() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    let handler = naming(&["Ada", "Bob"]);
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        connect_legacy(&harness.url, handler.clone()),
    )
    .await
    .expect("initialized in time")
    .expect("a 2025-11-25 client initializes on a route over several backends");
    let info = client.peer_info().expect("initialized");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("mrtr-gateway")
    );
    assert!(info.capabilities.tools.is_some() && info.capabilities.resources.is_some());
    assert!(info
        .instructions
        .as_deref()
        .is_some_and(|i| i.contains("[new] (tools and prompts named new__*)")));

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"old__echo") && names.contains(&"new__echo"),
        "{names:?}"
    );
    assert_eq!(
        text_of(&client, "old__echo", json!({"text": "a"})).await,
        "a"
    );
    assert_eq!(
        text_of(&client, "new__echo", json!({"text": "b"})).await,
        "b"
    );
    // Each backend's rounds reach the client as server requests on its session.
    assert_eq!(
        text_of(&client, "old__ask_name", json!({})).await,
        "Hello, Ada!"
    );
    assert_eq!(
        text_of(&client, "new__ask_name", json!({})).await,
        "Hello, Bob!"
    );
    let asked: Vec<&str> = handler.recorded().iter().map(|r| r.method()).collect();
    assert_eq!(asked, ["elicitation/create", "elicitation/create"]);
    let unknown = client
        .call_tool(CallToolRequestParams::new("nope__echo"))
        .await
        .expect_err("no backend has the prefix nope");
    assert_eq!(jsonrpc_error(&unknown).map(|e| e.code.0), Some(-32602));
    let item = client
        .read_resource(ReadResourceRequestParams::new("demo://item/9"))
        .await
        .expect("templated resource");
    assert!(format!("{item:?}").contains("Item 9"));
    // The session follows the backends' list changes through one merged listen, counted as
    // the session, not in the caller's listens.
    harness
        .wait_for_backend("the session's listening session", |m| {
            m["method"] == "initialize"
        })
        .await;
    assert!(
        harness.metrics().lines().any(|l| l == "mrtr_listens 0"),
        "{}",
        harness.metrics()
    );
    drop(client);
    harness.stop().await;
}

#[tokio::test]
async fn one_listen_hears_every_backend() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    let client = connect_in_time(&harness.url, TestClientHandler::builder().build()).await;
    // `test://changing` is the modern backend's, `demo://item/7` fits the legacy backend's
    // template; `nowhere://x` is nobody's.
    let asked = SubscriptionFilter::builder()
        .tools_list_changed()
        .resource_subscription("test://changing")
        .resource_subscription("demo://item/7")
        .resource_subscription("nowhere://x")
        .build();
    let mut subscription =
        tokio::time::timeout(Duration::from_secs(10), client.peer().listen(asked))
            .await
            .expect("acknowledged in time")
            .expect("the listen is acknowledged");
    let acknowledged = subscription.acknowledged().clone();
    assert_eq!(acknowledged.tools_list_changed, Some(true));
    let mut subscribed = acknowledged.resource_subscriptions.unwrap_or_default();
    subscribed.sort();
    assert_eq!(subscribed, ["demo://item/7", "test://changing"]);
    // The legacy backend was asked for its own resource only.
    harness
        .wait_for_backend("resources/subscribe", |m| {
            m["method"] == "resources/subscribe" && m["params"]["uri"] == "demo://item/7"
        })
        .await;
    assert!(!harness
        .backend_messages()
        .iter()
        .any(|m| m["method"] == "resources/subscribe" && m["params"]["uri"] != "demo://item/7"));

    // Both backends' news on the one stream: the legacy backend's update and tool list change,
    // the modern backend's updates.
    let added = text_of(&client, "old__add_tool", json!({"name": "fresh_tool"})).await;
    assert!(!added.is_empty());
    let mut heard = std::collections::BTreeSet::new();
    for _ in 0..12 {
        match next_notification(&mut subscription).await {
            ServerNotification::ToolListChangedNotification(_) => heard.insert("tools".into()),
            ServerNotification::ResourceUpdatedNotification(n) => heard.insert(n.params.uri),
            other => panic!("unexpected {other:?}"),
        };
        if heard.len() == 3 {
            break;
        }
    }
    assert_eq!(
        heard.into_iter().collect::<Vec<String>>(),
        ["demo://item/7", "test://changing", "tools"]
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "old__fresh_tool"));

    // Shutdown ends the merged listen with its result.
    let stop = tokio::spawn(harness.stop());
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
    assert!(matches!(
        subscription.end(),
        Some(SubscriptionEnd::Graceful(_))
    ));
    stop.await.expect("stopped");
    let _ = client.cancel().await;
}

/// A fleet replica's route over the legacy backend (`old__`, a process per replica) and a
/// 2026-07-28 one (`new__`) at `modern_url`, which every replica shares: its `requestState`s
/// open wherever a retry lands, as a stateless server's must.
fn fleet_over_two_eras(modern_url: String) -> impl Fn(usize, &mut toml::Table) {
    move |_, config| {
        set(config, "backend.modern.transport", "http");
        set(config, "backend.modern.url", modern_url.clone());
        set(config, "backend.modern.era", "2026-07-28");
        let route = config
            .get_mut("route")
            .and_then(toml::Value::as_array_mut)
            .and_then(|routes| routes.first_mut())
            .and_then(toml::Value::as_table_mut)
            .expect("the fleet's route");
        route.remove("backend");
        route.insert(
            "backends".into(),
            toml::Value::Array(vec!["legacy".into(), "modern".into()]),
        );
        set(route, "prefixes.legacy", "old");
        set(route, "prefixes.modern", "new");
    }
}

#[tokio::test]
async fn a_fleet_behind_plain_round_robin_finishes_every_backends_rounds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let modern = HttpBackend::start_modern("127.0.0.1:0", &dir.path().join("modern.jsonl")).await;
    let fleet = Fleet::builder(Backend::Stdio)
        .configure(fleet_over_two_eras(modern.url.clone()))
        .start()
        .await;
    let handler = naming(&["Ada", "Bob", "Cy"]);
    let client = connect_in_time(fleet.proxy_url(), handler).await;
    assert_eq!(
        text_of(&client, "old__ask_name", json!({})).await,
        "Hello, Ada!"
    );
    assert_eq!(
        text_of(&client, "new__ask_name", json!({})).await,
        "Hello, Bob!"
    );
    assert_eq!(
        text_of(&client, "old__ask_name", json!({})).await,
        "Hello, Cy!"
    );
    // The legacy backend's rounds are held by the replica that started them: retries that
    // reached another one were forwarded to it.
    let forwarded = fleet
        .metric_total("mrtr_forwarded_retries_total", &[("result", "ok")])
        .await;
    assert!(forwarded > 0.0, "picks: {:?}", fleet.proxy.picks());
    fleet.wait_no_held().await;
    let _ = client.cancel().await;
    fleet.stop().await;
    modern.stop().await;
}

#[tokio::test]
async fn progress_and_cancellation_reach_each_backend() {
    let harness = Harness::start_with(Backend::Stdio, two_eras).await;
    // The modern backend's progress, through the relay, as SSE before the answer.
    let mut call = tool_call(1, "new__slow", json!({"ms": 300}), &no_caps());
    call["params"]["_meta"]["progressToken"] = json!("p-1");
    let slow = post_raw(&harness.url, &call).await;
    assert_eq!(result_text(&slow), "done", "{}", slow.body);
    let progress = slow.notifications();
    assert!(
        progress
            .iter()
            .any(|n| n["method"] == "notifications/progress"
                && n["params"]["progressToken"] == "p-1"),
        "{}",
        slow.body
    );
    // The legacy backend's, through the bridge.
    let mut call = tool_call(
        2,
        "old__countdown",
        json!({"from": 2, "delay_ms": 50}),
        &no_caps(),
    );
    call["params"]["_meta"]["progressToken"] = json!("p-2");
    let counted = post_raw(&harness.url, &call).await;
    assert!(counted
        .notifications()
        .iter()
        .any(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "p-2"));
    // A call given up by its client is cancelled on its backend under its own name.
    let url = harness.url.clone();
    let abandoned = tokio::spawn(async move {
        let call = tool_call(
            3,
            "old__countdown",
            json!({"from": 50, "delay_ms": 200}),
            &no_caps(),
        );
        post_raw(&url, &call).await
    });
    harness
        .wait_for_backend("the countdown", |m| {
            m["method"] == "tools/call" && m["params"]["arguments"]["from"] == 50
        })
        .await;
    abandoned.abort();
    harness
        .wait_for_backend("its cancellation", |m| {
            m["method"] == "notifications/cancelled"
        })
        .await;
    harness.stop().await;
}

#[tokio::test]
async fn a_backend_slower_to_start_than_list_timeout_is_ready_for_a_later_list() {
    let harness = Harness::start_with_env(
        Backend::Stdio,
        &[("LEGACY_BACKEND_START_DELAY_MS", "1500")],
        |config| {
            two_eras(config);
            config.mcp_route().list_timeout = Duration::from_millis(500);
        },
    )
    .await;
    let names = |tools: &[Value]| -> Vec<String> {
        tools
            .iter()
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect()
    };
    // The first list leaves the legacy backend out: its session is still starting.
    let first = all_tools(&harness.url).await;
    assert!(
        names(&first).iter().all(|n| n.starts_with("new__")),
        "{:?}",
        names(&first)
    );
    // Its start was not cut off with the list: a later list has it.
    let mut later = Vec::new();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        later = names(&all_tools(&harness.url).await);
        if later.iter().any(|n| n == "old__echo") {
            break;
        }
    }
    assert!(later.iter().any(|n| n == "old__echo"), "{later:?}");
    harness.stop().await;
}

#[tokio::test]
async fn a_route_over_several_backends_for_2025_11_25_sessions_only() {
    let harness = Harness::start_with(Backend::Stdio, |config| {
        two_eras(config);
        config.mcp_route().eras = vec![mrtr_gateway::config::Era::Legacy];
    })
    .await;
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        connect_legacy(&harness.url, TestClientHandler::builder().build()),
    )
    .await
    .expect("initialized in time")
    .expect("a 2025-11-25 session");
    assert_eq!(
        text_of(&client, "old__echo", json!({"text": "a"})).await,
        "a"
    );
    assert_eq!(
        text_of(&client, "new__echo", json!({"text": "b"})).await,
        "b"
    );
    // A 2026-07-28 request is refused there.
    let refused = post_raw(
        &harness.url,
        &tool_call(1, "old__echo", json!({"text": "x"}), &no_caps()),
    )
    .await;
    assert_rpc_error(&refused, 400, -32600);
    drop(client);
    harness.stop().await;
}
