//! `subscriptions/listen` through the gateway, with rmcp's 2026-07-28 client (`Peer::listen`)
//! in front and the legacy backend behind: it declares `tools.listChanged` and
//! `resources.subscribe`, adds a tool at run time (`add_tool`) and updates a resource 100 ms
//! after it is subscribed to.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ServerNotification, SubscriptionFilter};
use rmcp::service::SubscriptionEnd;
use serde_json::json;

use mrtr_gateway::config::{AuthConfig, BearerToken};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{
    connect_in_time, connect_modern_with_config, modern_request, next_notification, post_raw,
    ModernClient, TestClientHandler,
};
use crate::support::rpc::{assert_rpc_error, no_caps};

over_both_transports!(
    listens_are_bounded_per_principal_and_counted,
    a_listen_hears_what_it_asked_for_tagged_with_its_id,
    the_last_listener_of_a_uri_unsubscribes_it,
    principals_hear_only_their_own_changes,
);

const ITEM: &str = "demo://item/7";

async fn a_listen_hears_what_it_asked_for_tagged_with_its_id(kind: Backend) {
    let h = Harness::start(kind).await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let asked = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resource_subscription(ITEM)
        .build();
    let mut subscription =
        tokio::time::timeout(Duration::from_secs(10), client.peer().listen(asked))
            .await
            .expect("acknowledged in time")
            .expect("the listen is acknowledged");
    // The backend offers no prompt list changes: not honoured.
    let acknowledged = subscription.acknowledged().clone();
    assert_eq!(acknowledged.tools_list_changed, Some(true));
    assert_eq!(acknowledged.prompts_list_changed, None);
    assert_eq!(
        acknowledged.resource_subscriptions,
        Some(vec![ITEM.to_string()])
    );
    // A second listen of the same client, on another resource only.
    let other = "demo://item/8";
    let mut narrow = client
        .peer()
        .listen(
            SubscriptionFilter::builder()
                .resource_subscription(other)
                .build(),
        )
        .await
        .expect("a second listen");
    h.wait_for_backend("resources/subscribe", |m| {
        m["method"] == "resources/subscribe" && m["params"]["uri"] == ITEM
    })
    .await;

    // The backend updates the subscribed resource on the listening session.
    let updated = next_notification(&mut subscription).await;
    let ServerNotification::ResourceUpdatedNotification(updated) = updated else {
        panic!("a resource update, not {updated:?}");
    };
    assert_eq!(updated.params.uri, ITEM);

    // A tool added through a call: the call's session hears the list change.
    let added = client
        .call_tool(
            CallToolRequestParams::new("add_tool")
                .with_arguments(json!({"name": "fresh_tool"}).as_object().unwrap().clone()),
        )
        .await
        .expect("add_tool");
    assert!(!added.is_error.unwrap_or(false));
    let changed = next_notification(&mut subscription).await;
    assert!(
        matches!(changed, ServerNotification::ToolListChangedNotification(_)),
        "{changed:?}"
    );
    // The second listen heard its own resource's update, and not the tool list change or
    // the first listen's resource.
    let ServerNotification::ResourceUpdatedNotification(own) = next_notification(&mut narrow).await
    else {
        panic!("the second listen's first notification is its resource's update");
    };
    assert_eq!(own.params.uri, other);
    let more = tokio::time::timeout(Duration::from_millis(500), narrow.next()).await;
    assert!(more.is_err(), "nothing it did not ask for: {more:?}");
    drop(narrow);
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "fresh_tool"));

    // Shutdown ends the listen with its result.
    let stop = tokio::spawn(h.stop());
    let end = tokio::time::timeout(Duration::from_secs(10), subscription.next())
        .await
        .expect("the listen ends in time");
    assert!(matches!(end, Ok(None)), "{end:?}");
    assert!(
        matches!(subscription.end(), Some(SubscriptionEnd::Graceful(_))),
        "{:?}",
        subscription.end()
    );
    stop.await.expect("stopped");
    let _ = client.cancel().await;
}

async fn the_last_listener_of_a_uri_unsubscribes_it(kind: Backend) {
    let h = Harness::start(kind).await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let filter = || {
        SubscriptionFilter::builder()
            .resource_subscription(ITEM)
            .build()
    };
    let first = client.peer().listen(filter()).await.expect("first listen");
    let second = client.peer().listen(filter()).await.expect("second listen");
    h.wait_for_backend("resources/subscribe", |m| {
        m["method"] == "resources/subscribe"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        h.backend_method_count("resources/subscribe"),
        1,
        "one subscription for both"
    );
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        h.backend_method_count("resources/unsubscribe"),
        0,
        "another listener still wants it"
    );
    drop(second);
    h.wait_for_backend("resources/unsubscribe", |m| {
        m["method"] == "resources/unsubscribe" && m["params"]["uri"] == ITEM
    })
    .await;
    let _ = client.cancel().await;
    h.stop().await;
}

/// A client of the bearer-authenticated `/mcp` with this token.
async fn client_with_token(url: &str, token: &str) -> ModernClient {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    tokio::time::timeout(
        Duration::from_secs(20),
        connect_modern_with_config(config, TestClientHandler::builder().build()),
    )
    .await
    .expect("connect in time")
    .expect("connects")
}

async fn principals_hear_only_their_own_changes(kind: Backend) {
    let h = Harness::start_with(kind, |config| {
        config.mcp_route().auth = AuthConfig::Bearer {
            tokens: ["alice", "bob"]
                .into_iter()
                .map(|name| BearerToken {
                    principal: name.into(),
                    sha256: None,
                    token: Some(format!("{name}-secret")),
                    scopes: Vec::new(),
                    claims: Default::default(),
                })
                .collect(),
            scopes: Vec::new(),
        };
    })
    .await;
    let alice = client_with_token(&h.url, "alice-secret").await;
    let bob = client_with_token(&h.url, "bob-secret").await;
    let tools = || SubscriptionFilter::builder().tools_list_changed().build();
    let mut alice_hears = alice.peer().listen(tools()).await.expect("alice listens");
    let mut bob_hears = bob.peer().listen(tools()).await.expect("bob listens");
    bob.call_tool(
        CallToolRequestParams::new("add_tool")
            .with_arguments(json!({"name": "bobs_tool"}).as_object().unwrap().clone()),
    )
    .await
    .expect("add_tool");
    let heard = next_notification(&mut bob_hears).await;
    assert!(
        matches!(heard, ServerNotification::ToolListChangedNotification(_)),
        "{heard:?}"
    );
    let alice_heard = tokio::time::timeout(Duration::from_millis(700), alice_hears.next()).await;
    assert!(
        alice_heard.is_err(),
        "alice hears nothing of bob's sessions: {alice_heard:?}"
    );
    drop((alice_hears, bob_hears));
    let _ = alice.cancel().await;
    let _ = bob.cancel().await;
    h.stop().await;
}

async fn listens_are_bounded_per_principal_and_counted(kind: Backend) {
    let h = Harness::start_with(kind, |config| config.server.max_listens_per_principal = 2).await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let tools = || SubscriptionFilter::builder().tools_list_changed().build();
    let first = client.peer().listen(tools()).await.expect("first listen");
    let second = client.peer().listen(tools()).await.expect("second listen");
    let gateway = h.gateway.as_ref().expect("running").gateway().clone();
    assert_eq!(gateway.open_listens(), 2);
    let third = modern_request(
        9,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        &no_caps(),
    );
    let refused = post_raw(&h.url, &third).await;
    let error = assert_rpc_error(&refused, 429, -32603);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("Too many listens")),
        "{}",
        refused.body
    );
    drop(first);
    let mut open = 2;
    for _ in 0..100 {
        open = gateway.open_listens();
        if open == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open, 1, "a closed listen gives its place back");
    let bad = modern_request(
        10,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": "yes"}}),
        &no_caps(),
    );
    assert_rpc_error(&post_raw(&h.url, &bad).await, 400, -32602);
    drop(second);
    let _ = client.cancel().await;
    h.stop().await;
}

/// `server/discover` after a tool list change reports the `InitializeResult` of a session
/// started after it, not the cached one from before: over HTTP the backend's sessions share the
/// tools added at run time, and a new session's instructions count them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_after_a_list_change_describes_the_backend_since() {
    let h = Harness::start(Backend::Http).await;
    let discover = || async {
        let answer = post_raw(
            &h.url,
            &modern_request("d", "server/discover", json!({}), &no_caps()),
        )
        .await;
        answer.result().expect("discovered")["instructions"]
            .as_str()
            .expect("instructions")
            .to_string()
    };
    let before = discover().await;
    assert!(!before.contains("added"), "{before}");
    assert_eq!(discover().await, before, "cached while nothing changed");

    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    client
        .call_tool(
            CallToolRequestParams::new("add_tool")
                .with_arguments(json!({"name": "later_tool"}).as_object().unwrap().clone()),
        )
        .await
        .expect("add_tool");
    assert!(matches!(
        next_notification(&mut subscription).await,
        ServerNotification::ToolListChangedNotification(_)
    ));
    let after = discover().await;
    assert!(after.contains("(1 tools added)"), "{after}");
    drop(subscription);
    let _ = client.cancel().await;
    h.stop().await;
}

/// The backend behind a listen goes away and comes back at the same address: the listening
/// session is started again, its URI subscribed again, and the client's stream, open all along,
/// hears the new session's update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_outlives_its_backend_session() {
    use crate::support::gateway::HttpBackend;

    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("backend.jsonl");
    let backend = HttpBackend::start("127.0.0.1:0", false, &log).await;
    let url = backend.url.clone();
    let address = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("an address")
        .to_string();
    let h = Harness::start_url(&url, |_| {}).await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let filter = SubscriptionFilter::builder()
        .resource_subscription(ITEM)
        .build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    assert!(matches!(
        next_notification(&mut subscription).await,
        ServerNotification::ResourceUpdatedNotification(_)
    ));
    backend.stop().await;
    let again = HttpBackend::start(&address, false, &log).await;
    // The new session subscribes again, and the backend updates the resource once more.
    let updated = next_notification(&mut subscription).await;
    assert!(
        matches!(updated, ServerNotification::ResourceUpdatedNotification(_)),
        "{updated:?}"
    );
    let subscribes = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("\"resources/subscribe\""))
        .count();
    assert_eq!(subscribes, 2, "subscribed on each listening session");
    drop(subscription);
    let _ = client.cancel().await;
    h.stop().await;
    again.stop().await;
}

/// The stdio process behind a listen exits after each update it sends: the listening session is
/// started again (a new process), its URI subscribed again, and the client's stream, open all
/// along, hears the new process's update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_outlives_its_stdio_backend_process() {
    let h = Harness::start(Backend::Stdio).await;
    let client = connect_in_time(&h.url, TestClientHandler::builder().build()).await;
    let vanishing = "demo://item/7?then=exit";
    let filter = SubscriptionFilter::builder()
        .resource_subscription(vanishing)
        .build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    for update in 1..=2 {
        let heard = next_notification(&mut subscription).await;
        let ServerNotification::ResourceUpdatedNotification(heard) = heard else {
            panic!("update {update}: a resource update, not {heard:?}");
        };
        assert_eq!(heard.params.uri, vanishing);
    }
    // Each process exits after its update: two updates, two processes, two subscriptions.
    let subscribes = h
        .backend_messages()
        .iter()
        .filter(|m| m["method"] == "resources/subscribe" && m["params"]["uri"] == vanishing)
        .count();
    assert!(
        subscribes >= 2,
        "subscribed again by the new process: {subscribes}"
    );
    drop(subscription);
    let _ = client.cancel().await;
    h.stop().await;
}

/// An idle listen gets keep-alive comments after its acknowledgement; a log level asked for on
/// the listen brings no log onto its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_listen_gets_keep_alives_and_never_logs() {
    use crate::support::modern_client::standard_headers;

    let h = Harness::start_with(Backend::Stdio, |config| {
        config.server.sse_keep_alive = Duration::from_millis(100);
    })
    .await;
    let mut listen = modern_request(
        "listen-1",
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        &no_caps(),
    );
    listen["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
    let mut response = reqwest::Client::new()
        .post(&h.url)
        .headers(standard_headers(&listen))
        .json(&listen)
        .send()
        .await
        .expect("the listen starts");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while seen.matches(": keep-alive").count() < 2 {
            match response.chunk().await {
                Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => break,
            }
        }
    })
    .await;
    assert!(read.is_ok(), "two keep-alives in time: {seen}");
    let (acknowledgement, rest) = seen.split_once("\n\n").expect("a first event");
    assert!(
        acknowledgement.contains("notifications/subscriptions/acknowledged")
            && acknowledgement.contains("\"listen-1\""),
        "{acknowledgement}"
    );
    assert!(!rest.contains("notifications/message"), "{seen}");
    drop(response);
    h.stop().await;
}
