//! Roots stay with the flow that gave them, against a legacy rmcp backend that asks `roots/list`
//! right after `initialized` and again after `notifications/roots/list_changed`, and uses the
//! roots in every call (`open_path`, like server-filesystem: the client's roots replace the
//! configured one). The clients are rmcp clients pinned to 2026-07-28 that answer the gateway's
//! rounds with their own roots. Also: a retry refused for its answers frees the session.

#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, Root};
use serde_json::{json, Value};

use mrtr_gateway::config::Config;

use crate::support::gateway::{one_session, static_roots, Backend, Harness, TestConfig};
use crate::support::modern_client::{
    connect_in_time, modern_request, post_raw, retry_of, ModernClient, TestClientHandler,
};
use crate::support::rpc::{
    assert_rpc_error, caps_from, elicitation_caps, input_required, key_of, result_text, tool_call,
};

over_both_transports!(
    a_first_call_runs_under_the_roots_its_client_gave,
    one_flows_roots_never_reach_another,
    static_roots_hold_from_the_first_call,
    calls_that_cannot_ask_never_get_a_flows_roots,
    a_question_withdrawn_on_an_idle_session_is_asked_again,
    a_question_withdrawn_during_the_round_fails_the_call_safely,
    a_refused_retry_frees_the_session_within_the_grace,
);

/// What the backend uses until a client gives roots (server-filesystem's command-line directory).
const CONFIGURED_ROOT: &str = "file:///srv/configured";

/// The environment of a backend that asks for roots at initialization and uses
/// [`CONFIGURED_ROOT`] until it has some.
const ROOTS_BACKEND_ENV: [(&str, &str); 2] = [
    ("LEGACY_BACKEND_ROOTS_ON_INIT", "1"),
    ("LEGACY_BACKEND_DEFAULT_ROOT", CONFIGURED_ROOT),
];

/// A gateway in front of the roots backend ([`ROOTS_BACKEND_ENV`]).
async fn start_roots_backend(kind: Backend, configure: impl FnOnce(&mut Config)) -> Harness {
    Harness::start_with_env(kind, &ROOTS_BACKEND_ENV, configure).await
}

fn rooted_client(root: &str) -> TestClientHandler {
    TestClientHandler::builder()
        .roots()
        .roots_list(vec![Root::new(root)])
        .build()
}

/// `open_path` of `uri`: `Ok` with the text when the backend opened it, `Err` when it denied it.
async fn open(client: &ModernClient, uri: &str) -> Result<String, String> {
    let params = CallToolRequestParams::new("open_path").with_arguments(
        json!({ "uri": uri })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let result: CallToolResult =
        tokio::time::timeout(Duration::from_secs(20), client.call_tool(params))
            .await
            .expect("open_path answered in time")
            .expect("open_path completes");
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    if result.is_error == Some(true) {
        Err(text)
    } else {
        Ok(text)
    }
}

fn roots_asked(handler: &TestClientHandler) -> usize {
    handler
        .recorded()
        .iter()
        .filter(|r| r.method() == "roots/list")
        .count()
}

async fn a_first_call_runs_under_the_roots_its_client_gave(kind: Backend) {
    let h = start_roots_backend(kind, one_session).await;
    let a = rooted_client("file:///srv/a");
    let client = connect_in_time(&h.url, a.clone()).await;

    let outside = open(&client, &format!("{CONFIGURED_ROOT}/notes.txt")).await;
    assert!(
        outside.as_ref().is_err_and(|e| e.contains("denied")),
        "the first call already runs under the client's roots: {outside:?}"
    );
    assert_eq!(
        roots_asked(&a),
        1,
        "the backend's question went to the client"
    );
    // On the wire: the roots answer reached the backend before the call did.
    let messages = h.backend_messages();
    let call_at = messages
        .iter()
        .position(|m| m["method"] == "tools/call")
        .expect("the backend got the call");
    let roots_answer_at = messages
        .iter()
        .position(|m| m["result"]["roots"][0]["uri"] == "file:///srv/a")
        .expect("the backend got the client's roots");
    assert!(roots_answer_at < call_at, "{messages:?}");

    assert_eq!(
        open(&client, "file:///srv/a/notes.txt").await,
        Ok("opened file:///srv/a/notes.txt".into())
    );
    h.wait_no_held().await;
    let _ = client.cancel().await;
    h.stop().await;
}

async fn one_flows_roots_never_reach_another(kind: Backend) {
    // One session for everybody: client B gets the session client A used.
    let h = start_roots_backend(kind, one_session).await;
    let a = rooted_client("file:///srv/a");
    let b = rooted_client("file:///srv/b");
    let client_a = connect_in_time(&h.url, a.clone()).await;
    let client_b = connect_in_time(&h.url, b.clone()).await;

    assert!(open(&client_a, "file:///srv/a/1.txt").await.is_ok());
    assert_eq!(
        open(&client_b, "file:///srv/b/2.txt").await,
        Ok("opened file:///srv/b/2.txt".into()),
        "B reads its own root"
    );
    let leaked = open(&client_b, "file:///srv/a/1.txt").await;
    assert!(
        leaked.as_ref().is_err_and(|e| e.contains("denied")),
        "B must not read A's root: {leaked:?}"
    );
    let back = open(&client_a, "file:///srv/b/2.txt").await;
    assert!(back.is_err(), "nor A B's: {back:?}");
    assert!(open(&client_a, "file:///srv/a/1.txt").await.is_ok());
    // Each flow was asked for its roots, all on the one session (asked again each time).
    assert_eq!(roots_asked(&a), 3);
    assert_eq!(roots_asked(&b), 2);
    assert_eq!(
        h.backend_method_count("initialize"),
        1,
        "one backend session served both"
    );
    assert!(h
        .backend_methods()
        .iter()
        .any(|m| m == "notifications/roots/list_changed"));
    h.wait_no_held().await;
    let _ = client_a.cancel().await;
    let _ = client_b.cancel().await;
    h.stop().await;
}

async fn static_roots_hold_from_the_first_call(kind: Backend) {
    let h = start_roots_backend(kind, static_roots).await;
    let rooted = rooted_client("file:///srv/a");
    let client = connect_in_time(&h.url, rooted.clone()).await;
    assert_eq!(
        open(&client, "file:///srv/static/s.txt").await,
        Ok("opened file:///srv/static/s.txt".into()),
        "the static roots apply to the first call"
    );
    assert!(open(&client, "file:///srv/a/s.txt").await.is_err());
    assert!(open(&client, &format!("{CONFIGURED_ROOT}/s.txt"))
        .await
        .is_err());
    assert_eq!(roots_asked(&rooted), 0, "no client is asked for roots");

    // A client that declares no roots gets the static ones too.
    let plain = TestClientHandler::builder().build();
    let plain_client = connect_in_time(&h.url, plain).await;
    assert!(open(&plain_client, "file:///srv/static/t.txt")
        .await
        .is_ok());
    assert!(open(&plain_client, &format!("{CONFIGURED_ROOT}/t.txt"))
        .await
        .is_err());
    let _ = client.cancel().await;
    let _ = plain_client.cancel().await;
    h.stop().await;
}

async fn calls_that_cannot_ask_never_get_a_flows_roots(kind: Backend) {
    // The one session holds client A's roots after its call; a list call cannot ask its client
    // for roots, so it gets a fresh session (the held one is closed to make room) and succeeds.
    let h = start_roots_backend(kind, |c| {
        let pool = &mut c.legacy().pool;
        pool.max_sessions = 1;
        pool.queue_wait = Duration::from_secs(5);
    })
    .await;
    let a = rooted_client("file:///srv/a");
    let client = connect_in_time(&h.url, a).await;
    assert!(open(&client, "file:///srv/a/1.txt").await.is_ok());
    assert_eq!(h.backend_method_count("initialize"), 1);
    let listed = post_raw(
        &h.url,
        &modern_request(9, "tools/list", json!({}), &caps_from(json!({"roots": {}}))),
    )
    .await;
    assert_eq!(listed.result_type(), Some("complete"), "{}", listed.body);
    assert_eq!(
        h.backend_method_count("initialize"),
        2,
        "the list call did not run on the session holding A's roots"
    );
    // A flow still gets its own roots on the new session.
    assert!(open(&client, "file:///srv/a/2.txt").await.is_ok());
    h.wait_no_held().await;
    let _ = client.cancel().await;
    h.stop().await;
}

/// A gateway with `max_sessions` in front of the roots backend, which withdraws its first roots
/// question after `first_question_ms`.
async fn start_withdrawing_backend(
    kind: Backend,
    max_sessions: usize,
    first_question_ms: &str,
) -> Harness {
    let mut env = ROOTS_BACKEND_ENV.to_vec();
    env.push(("LEGACY_BACKEND_FIRST_ROOTS_TIMEOUT_MS", first_question_ms));
    Harness::start_with_env(kind, &env, |c| c.legacy().pool.max_sessions = max_sessions).await
}

async fn a_question_withdrawn_on_an_idle_session_is_asked_again(kind: Backend) {
    // The backend gives up on its first roots question while the session is idle; the gateway
    // has it ask again, so the next call's client is still asked before the call runs.
    let h = start_withdrawing_backend(kind, 1, "200").await;
    let a = rooted_client("file:///srv/a");
    let client = connect_in_time(&h.url, a.clone()).await;
    h.wait_for_backend("notifications/roots/list_changed", |m| {
        m["method"] == "notifications/roots/list_changed"
    })
    .await;
    // The question asked again has no time limit; give it ample time to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let outside = open(&client, &format!("{CONFIGURED_ROOT}/x.txt")).await;
    assert!(
        outside.is_err(),
        "ran under the configured root: {outside:?}"
    );
    assert_eq!(roots_asked(&a), 1);
    assert!(open(&client, "file:///srv/a/x.txt").await.is_ok());
    assert_eq!(
        h.backend_method_count("initialize"),
        1,
        "the question asked again served the calls, on the same session"
    );
    h.wait_no_held().await;
    let _ = client.cancel().await;
    h.stop().await;
}

async fn a_question_withdrawn_during_the_round_fails_the_call_safely(kind: Backend) {
    // The client answers the roots round after the backend gave up on the question: the call is
    // not sent (it would run under roots nobody gave it); the client is told to send it again,
    // and the next flow gets its own roots.
    // Room for a second session: the next flow must still get the first one back, asked again.
    let h = start_withdrawing_backend(kind, 2, "1500").await;
    let roots = caps_from(json!({"roots": {}}));
    let first = tool_call(
        json!(1),
        "open_path",
        json!({"uri": "file:///srv/configured/y.txt"}),
        &roots,
    );
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "roots/list");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let answer = json!({ key: {"roots": [{"uri": "file:///srv/a"}]} });
    let late = post_raw(&h.url, &retry_of(&first, json!(2), answer, &round.state)).await;
    assert_eq!(late.status, 503, "{}", late.body);
    assert!(late.body.contains("withdrew"), "{}", late.body);
    assert!(
        !h.backend_messages()
            .iter()
            .any(|m| m["method"] == "tools/call"),
        "the call never reached the backend"
    );
    // The returned session is asked again off the request path; a call that came sooner
    // would start another session rather than wait for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = tool_call(
        json!(3),
        "open_path",
        json!({"uri": "file:///srv/configured/y.txt"}),
        &roots,
    );
    let round = input_required(&post_raw(&h.url, &again).await);
    let key = key_of(&round, "roots/list");
    let answer = json!({ key: {"roots": [{"uri": "file:///srv/a"}]} });
    let done = post_raw(&h.url, &retry_of(&again, json!(4), answer, &round.state)).await;
    assert!(
        result_text(&done).starts_with("denied"),
        "the next flow runs under its own roots: {}",
        done.body
    );
    assert_eq!(
        h.backend_method_count("initialize"),
        1,
        "the session was asked again, not replaced"
    );
    h.wait_no_held().await;
    h.stop().await;
}

async fn a_refused_retry_frees_the_session_within_the_grace(kind: Backend) {
    // One session, a long held_ttl: only the grace can give the session back in time. The
    // README's bound is grace + 1 s (the sweeper's period); the next call may wait twice that,
    // for a loaded machine, and without the grace it would wait held_ttl (50 s).
    let h = Harness::start_with(kind, |c| {
        let pool = &mut c.legacy().pool;
        pool.max_sessions = 1;
        pool.queue_wait = Duration::from_secs(4);
        c.mrtr.held_ttl = Duration::from_secs(50);
        c.mrtr.refused_retry_grace = Duration::from_secs(1);
    })
    .await;
    let caps = elicitation_caps();
    let first = tool_call(json!(1), "ask_name", json!({}), &caps);
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let bad = json!({ key: {"action": "accept", "content": {"name": 42}} });
    let state = round.state;
    let refused = post_raw(&h.url, &retry_of(&first, json!(2), bad, &state)).await;
    assert_rpc_error(&refused, 400, -32602);
    assert_eq!(h.held(), 1, "held for a corrected retry, during the grace");

    let next = tool_call(json!(3), "echo", json!({"text": "free"}), &caps);
    let echoed = post_raw(&h.url, &next).await;
    assert_eq!(echoed.status, 200, "{}", echoed.body);
    assert_eq!(result_text(&echoed), "free", "{}", echoed.body);
    assert_eq!(h.held(), 0);
    let cancelled: Vec<Value> = h
        .backend_messages()
        .into_iter()
        .filter(|m| m["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "the abandoned call was cancelled");
    h.stop().await;
}
