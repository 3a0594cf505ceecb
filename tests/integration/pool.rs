//! The session pool: warm spares, idle reaping, and one session per capability profile.

use std::time::Duration;

use rmcp::model::ClientCapabilities;
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, Options};
use crate::support::modern_client::{modern_request, post_raw};

fn pool(h: &Harness) -> mrtr_gateway::backend::pool::PoolStats {
    h.gateway.as_ref().expect("running").gateway().pools()[0].stats()
}

async fn wait_for_stats(
    h: &Harness,
    what: &str,
    pred: impl Fn(mrtr_gateway::backend::pool::PoolStats) -> bool,
) {
    for _ in 0..100 {
        if pred(pool(h)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pool never reached {what}: {:?}", pool(h));
}

fn echo(id: i64, caps: Value) -> Value {
    let caps: ClientCapabilities = serde_json::from_value(caps).unwrap();
    modern_request(
        id,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
        &caps,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_spares_are_kept_for_a_key_in_use() {
    let options = Options {
        pool: "min_idle = 2\nmax_sessions = 4".into(),
        ..Options::default()
    };
    let h = Harness::start_with(Backend::Stdio, options).await;
    assert_eq!(pool(&h).open, 0, "no session before first use");
    let first = post_raw(&h.url, &echo(1, json!({}))).await;
    assert_eq!(first.result_type(), Some("complete"));
    wait_for_stats(&h, "two idle spares", |s| s.idle == 2 && s.open == 2).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_closed_after_idle_timeout() {
    let options = Options {
        pool: "min_idle = 0\nidle_timeout = \"300ms\"".into(),
        ..Options::default()
    };
    let h = Harness::start_with(Backend::Http, options).await;
    let first = post_raw(&h.url, &echo(1, json!({}))).await;
    assert_eq!(first.result_type(), Some("complete"));
    assert_eq!(pool(&h).open, 1);
    wait_for_stats(&h, "no session", |s| s.open == 0 && s.idle == 0).await;
    // The polite close of an HTTP session is a DELETE; the next call starts a new session.
    let again = post_raw(&h.url, &echo(2, json!({}))).await;
    assert_eq!(again.result_type(), Some("complete"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_capability_profile_gets_its_own_session() {
    let h = Harness::start(Backend::Stdio).await;
    for (id, caps) in [
        (1, json!({})),
        (2, json!({"elicitation": {}, "roots": {}})),
        (3, json!({"roots": {}, "elicitation": {"form": {}}})),
    ] {
        let exchange = post_raw(&h.url, &echo(id, caps)).await;
        assert_eq!(
            exchange.result_type(),
            Some("complete"),
            "{}",
            exchange.body
        );
    }
    let declared: Vec<Value> = h
        .backend_messages()
        .into_iter()
        .filter(|m| m["method"] == "initialize")
        .map(|m| m["params"]["capabilities"].clone())
        .collect();
    assert_eq!(
        declared,
        vec![
            json!({}),
            json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}})
        ],
        "one session per normalized profile, declaring exactly it (listChanged is the \
         gateway's: it tells a session's backend to ask for roots again)"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_evicts_one_idle_session_of_another_profile() {
    let options = Options {
        pool: "max_sessions = 2".into(),
        ..Options::default()
    };
    let h = Harness::start_with(Backend::Stdio, options).await;
    for (id, caps) in [(1, json!({})), (2, json!({"roots": {}}))] {
        assert_eq!(
            post_raw(&h.url, &echo(id, caps)).await.result_type(),
            Some("complete")
        );
    }
    wait_for_stats(&h, "two idle sessions", |s| s.idle == 2).await;
    let third = post_raw(&h.url, &echo(3, json!({"sampling": {}}))).await;
    assert_eq!(third.result_type(), Some("complete"));
    wait_for_stats(&h, "one evicted, two open", |s| s.open == 2 && s.idle == 2).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_profiles_are_started_with_the_gateway() {
    let options = Options {
        pool: "warm_profiles = [{}, { elicitation = {} }]".into(),
        ..Options::default()
    };
    let h = Harness::start_with(Backend::Stdio, options).await;
    wait_for_stats(&h, "two warm sessions", |s| s.idle == 2 && s.open == 2).await;
    let initialized: Vec<Value> = h
        .backend_messages()
        .into_iter()
        .filter(|m| m["method"] == "initialize")
        .map(|m| m["params"]["capabilities"].clone())
        .collect();
    assert_eq!(initialized.len(), 2);
    assert!(
        initialized.contains(&json!({"elicitation": {"form": {}}})),
        "{initialized:?}"
    );
    // Warm spares make the backend known: discover needs no new session.
    let discover = post_raw(
        &h.url,
        &modern_request(
            9,
            "server/discover",
            json!({}),
            &ClientCapabilities::default(),
        ),
    )
    .await;
    assert_eq!(
        discover.result().unwrap()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "legacy-backend"
    );
    assert_eq!(pool(&h).open, 2);
    // A call with a warm profile uses the spare: no new session.
    let call = post_raw(&h.url, &echo(1, json!({"elicitation": {}}))).await;
    assert_eq!(call.result_type(), Some("complete"));
    assert_eq!(pool(&h).open, 2);
    h.stop().await;
}
