//! The session pool: warm spares, idle reaping, and one session per capability profile.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{modern_request, post_raw};
use crate::support::rpc::{caps_from, no_caps, tool_call};

/// Waits (bounded) until the pool's stats satisfy `pred`.
async fn wait_for_stats(h: &Harness, what: &str, pred: impl Fn(mrtr_gateway::PoolStats) -> bool) {
    for _ in 0..100 {
        if pred(h.pool_stats()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pool never reached {what}: {:?}", h.pool_stats());
}

/// An `echo` call from a client declaring `caps` (JSON).
fn echo(id: i64, caps: Value) -> Value {
    tool_call(id, "echo", json!({"text": "x"}), &caps_from(caps))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_spares_are_kept_for_a_key_in_use() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        let pool = &mut c.legacy().pool;
        pool.min_idle = 2;
        pool.max_sessions = 4;
    })
    .await;
    assert_eq!(h.pool_stats().open, 0, "no session before first use");
    let first = post_raw(&h.url, &echo(1, json!({}))).await;
    assert_eq!(first.result_type(), Some("complete"));
    wait_for_stats(&h, "two idle spares", |s| s.idle == 2 && s.open == 2).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_closed_after_idle_timeout() {
    let h = Harness::start_with(Backend::Http, |c| {
        let pool = &mut c.legacy().pool;
        pool.min_idle = 0;
        pool.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let first = post_raw(&h.url, &echo(1, json!({}))).await;
    assert_eq!(first.result_type(), Some("complete"));
    assert_eq!(h.pool_stats().open, 1);
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
    let h = Harness::start_with(Backend::Stdio, |c| c.legacy().pool.max_sessions = 2).await;
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
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.legacy().pool.warm_profiles = vec![json!({}), json!({"elicitation": {}})];
    })
    .await;
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
        &modern_request(9, "server/discover", json!({}), &no_caps()),
    )
    .await;
    assert_eq!(
        discover.result().unwrap()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "legacy-backend"
    );
    assert_eq!(h.pool_stats().open, 2);
    // A call with a warm profile uses the spare: no new session.
    let call = post_raw(&h.url, &echo(1, json!({"elicitation": {}}))).await;
    assert_eq!(call.result_type(), Some("complete"));
    assert_eq!(h.pool_stats().open, 2);
    h.stop().await;
}
