//! The MRTR bridge against the legacy rmcp backend: server requests become `input_required`
//! rounds, retries resume the held call, and every hostile retry is refused before the backend
//! hears anything.

#![allow(deprecated)]

use std::time::Duration;

use mrtr_gateway::state::{principal_digest, KeyRing, StatePayload};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, Root};
use serde_json::{json, Value};

use crate::support::gateway::{
    one_session, static_roots, Backend, Harness, TestConfig, TEST_STATE_KEY,
};
use crate::support::modern_client::{
    connect_in_time, modern_request, post_raw, retry_of, TestClientHandler,
};
use crate::support::rpc::{
    all_caps, assert_rpc_error, caps_from, elicitation_caps, input_required, key_of,
    post_giving_up_after, result_text, tool_call, Round,
};

over_both_transports!(
    elicitation_sampling_and_roots_through_a_real_client,
    parallel_requests_share_one_round,
    a_lone_question_is_answered_before_the_settle_window,
    three_sequential_rounds,
    decline_and_cancel_reach_the_backend_as_sent,
    missing_answers_are_asked_again_and_extra_keys_ignored,
    hostile_retries_are_refused_before_the_backend_hears_anything,
    concurrent_duplicate_retries_redeem_once,
    a_retry_resent_after_its_answer_was_read_gets_the_same_outcome,
    abandoned_rounds_are_cancelled_on_the_backend,
    slow_calls_complete_through_state_only_rounds,
    undeclared_capabilities_are_never_surfaced,
);

/// Answers the backend received to its own requests.
fn answers(h: &Harness) -> Vec<Value> {
    h.backend_messages()
        .into_iter()
        .filter(|m| {
            m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some())
        })
        .collect()
}

async fn elicitation_sampling_and_roots_through_a_real_client(kind: Backend) {
    let h = Harness::start(kind).await;
    let handler = TestClientHandler::builder()
        .elicitation_form()
        .sampling()
        .roots()
        .elicit_accept(json!({"name": "Ada"}))
        .sampling_text("Paris is the capital.")
        .roots_list(vec![Root::new("file:///srv/project")])
        .build();
    let client = connect_in_time(&h.url, handler.clone()).await;
    let call = |name: &'static str, args: Value| {
        let mut params = CallToolRequestParams::new(name);
        if let Value::Object(args) = args {
            params = params.with_arguments(args);
        }
        client.call_tool(params)
    };
    let greeted = call("ask_name", json!({})).await.expect("ask_name");
    assert_eq!(greeted.content[0].as_text().unwrap().text, "Hello, Ada!");
    let summary = call("summarize", json!({"text": "France"}))
        .await
        .expect("summarize");
    assert!(summary.content[0]
        .as_text()
        .unwrap()
        .text
        .contains("Paris is the capital."));
    let roots = call("list_roots", json!({})).await.expect("list_roots");
    assert!(serde_json::to_string(&roots)
        .unwrap()
        .contains("file:///srv/project"));
    let asked: Vec<&str> = handler.recorded().iter().map(|r| r.method()).collect();
    assert_eq!(
        asked,
        ["elicitation/create", "sampling/createMessage", "roots/list"]
    );
    h.wait_no_held().await;
    let _ = client.cancel().await;
    h.stop().await;
}

/// The longest `settle_window` allowed: a round that comes back well before it was closed by
/// the backend's quiet gap (`settle_quiet`, `TEST_SETTLE_QUIET` in the tests), not by the
/// window.
const LONG_SETTLE_WINDOW: Duration = Duration::from_millis(450);

fn long_settle_window(config: &mut mrtr_gateway::config::Config) {
    config.mrtr.settle_window = LONG_SETTLE_WINDOW;
}

async fn parallel_requests_share_one_round(kind: Backend) {
    let h = Harness::start_with(kind, long_settle_window).await;
    // A session started for these capabilities first: its start waits for the backend's roots
    // question, which this backend never asks, and only the round is timed.
    let warm = tool_call(json!(0), "pid", json!({}), &all_caps());
    assert_eq!(
        post_raw(&h.url, &warm).await.result_type(),
        Some("complete")
    );
    let first = tool_call(json!(1), "parallel_inputs", json!({}), &all_caps());
    let started = std::time::Instant::now();
    let round = input_required(&post_raw(&h.url, &first).await);
    // The three questions come back to back, so the quiet gap closes the round on all three.
    assert_eq!(round.requests.len(), 3, "{:?}", round.requests);
    assert!(
        started.elapsed() < LONG_SETTLE_WINDOW,
        "the round waited for the window: {:?}",
        started.elapsed()
    );
    let elicit = key_of(&round, "elicitation/create");
    let sample = key_of(&round, "sampling/createMessage");
    let roots = key_of(&round, "roots/list");
    for request in round.requests.values() {
        let params = request.get("params").cloned().unwrap_or(json!({}));
        for hidden in ["_meta", "task", "elicitationId"] {
            assert!(params.get(hidden).is_none(), "{hidden} in {request}");
        }
        assert!(request.get("id").is_none() && request.get("jsonrpc").is_none());
    }
    assert_eq!(round.requests[&roots], json!({"method": "roots/list"}));

    let responses = json!({
        elicit.clone(): {"action": "accept", "content": {"name": "Grace"}},
        sample.clone(): {"role": "assistant", "content": {"type": "text", "text": "sampled!"}, "model": "m", "stopReason": "endTurn"},
        roots.clone(): {"roots": [{"uri": "file:///tmp/x", "name": "x"}]}
    });
    let done = post_raw(&h.url, &retry_of(&first, json!(2), responses, &round.state)).await;
    assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
    let body = done.body.clone();
    for expected in ["Grace", "sampled!", "file:///tmp/x"] {
        assert!(body.contains(expected), "{expected} in {body}");
    }
    assert_eq!(answers(&h).len(), 3, "each answer reached the backend once");
    h.wait_no_held().await;
    h.stop().await;
}

async fn a_lone_question_is_answered_before_the_settle_window(kind: Backend) {
    let h = Harness::start_with(kind, long_settle_window).await;
    for id in 1..=3 {
        let call = tool_call(json!(id), "ask_name", json!({}), &elicitation_caps());
        let started = std::time::Instant::now();
        let round = input_required(&post_raw(&h.url, &call).await);
        let took = started.elapsed();
        assert_eq!(round.requests.len(), 1, "{:?}", round.requests);
        // A generous bound: a round closed by the window takes all of it.
        assert!(
            took < LONG_SETTLE_WINDOW,
            "round {id} waited for the window: {took:?}"
        );
        let key = key_of(&round, "elicitation/create");
        let responses = json!({ key: {"action": "accept", "content": {"name": "Ada"}} });
        let done = post_raw(
            &h.url,
            &retry_of(&call, json!(id + 10), responses, &round.state),
        )
        .await;
        assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
        assert!(done.body.contains("Hello, Ada!"), "{}", done.body);
    }
    h.wait_no_held().await;
    h.stop().await;
}

async fn three_sequential_rounds(kind: Backend) {
    let h = Harness::start(kind).await;
    let first = tool_call(json!("r0"), "multi_round", json!({}), &elicitation_caps());
    let mut exchange = post_raw(&h.url, &first).await;
    let replies = [
        json!({"name": "Lin"}),
        json!({"age": 41}),
        json!({"city": "Oslo"}),
    ];
    let mut states = Vec::new();
    for (i, content) in replies.iter().enumerate() {
        let round = input_required(&exchange);
        assert_eq!(round.requests.len(), 1);
        let key = key_of(&round, "elicitation/create");
        states.push(round.state.clone());
        let responses = json!({ key: {"action": "accept", "content": content} });
        exchange = post_raw(
            &h.url,
            &retry_of(
                &first,
                json!(format!("r{}", i + 1)),
                responses,
                &round.state,
            ),
        )
        .await;
    }
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    assert_eq!(
        exchange.result().unwrap()["structuredContent"],
        json!({"name": "Lin", "age": 41, "city": "Oslo"})
    );
    assert_eq!(states.len(), 3);
    assert!(
        states[0] != states[1] && states[1] != states[2],
        "a new state every round"
    );
    h.wait_no_held().await;
    h.stop().await;
}

async fn decline_and_cancel_reach_the_backend_as_sent(kind: Backend) {
    let h = Harness::start(kind).await;
    for (id, action) in [(1, "decline"), (3, "cancel")] {
        let first = tool_call(json!(id), "ask_name", json!({}), &elicitation_caps());
        let round = input_required(&post_raw(&h.url, &first).await);
        let key = key_of(&round, "elicitation/create");
        let done = post_raw(
            &h.url,
            &retry_of(
                &first,
                json!(id + 1),
                json!({ key: {"action": action} }),
                &round.state,
            ),
        )
        .await;
        assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
        assert!(result_text(&done).contains(action), "{}", done.body);
    }
    let sent: Vec<Value> = answers(&h)
        .into_iter()
        .map(|a| a["result"].clone())
        .collect();
    assert_eq!(
        sent,
        vec![json!({"action": "decline"}), json!({"action": "cancel"})]
    );
    h.wait_no_held().await;
    h.stop().await;
}

async fn missing_answers_are_asked_again_and_extra_keys_ignored(kind: Backend) {
    let h = Harness::start(kind).await;
    let first = tool_call(json!(1), "parallel_inputs", json!({}), &all_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let elicit = key_of(&round, "elicitation/create");
    let sample = key_of(&round, "sampling/createMessage");
    let roots = key_of(&round, "roots/list");
    let partial = json!({
        elicit.clone(): {"action": "accept", "content": {"name": "Kim"}},
        roots.clone(): {"roots": []},
        "not_asked": {"anything": true}
    });
    let again =
        input_required(&post_raw(&h.url, &retry_of(&first, json!(2), partial, &round.state)).await);
    assert_eq!(
        again.requests.keys().collect::<Vec<_>>(),
        vec![&sample],
        "only the missing key"
    );
    let rest = json!({ sample: {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"} });
    let done = post_raw(&h.url, &retry_of(&first, json!(3), rest, &again.state)).await;
    assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
    assert_eq!(answers(&h).len(), 3);
    h.wait_no_held().await;
    h.stop().await;
}

fn forge(payload: &StatePayload, key: &str) -> String {
    KeyRing::from_base64(&[key]).unwrap().seal(payload)
}

async fn hostile_retries_are_refused_before_the_backend_hears_anything(kind: Backend) {
    let h = Harness::start_with(kind, |c| c.mrtr.max_rounds = 4).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let good = json!({ key.clone(): {"action": "accept", "content": {"name": "Eve"}} });
    let received = h.backend_messages().len();

    let refuse = |body: Value, reason: &'static str| {
        let url = h.url.clone();
        async move {
            let exchange = post_raw(&url, &body).await;
            let error = assert_rpc_error(&exchange, 400, -32602);
            assert_eq!(exchange.response().unwrap()["id"], body["id"]);
            if !reason.is_empty() {
                assert_eq!(error["data"]["reason"], reason, "{}", exchange.body);
            }
        }
    };

    // Every character of the token changed, one at a time.
    let token = round.state.clone();
    for i in 0..token.len() {
        let mut bytes = token.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        if tampered == token {
            continue;
        }
        let exchange = post_raw(
            &h.url,
            &retry_of(&first, json!(100 + i), good.clone(), &tampered),
        )
        .await;
        assert_eq!(exchange.status, 400, "position {i}");
        let reason = exchange.error().unwrap()["data"]["reason"].clone();
        assert!(
            reason == "tampered" || reason == "malformed",
            "position {i}: {reason}"
        );
    }
    refuse(
        retry_of(&first, json!(2), good.clone(), &token[..token.len() / 2]),
        "",
    )
    .await;
    refuse(
        retry_of(&first, json!(3), good.clone(), &format!("{token}AAAA")),
        "",
    )
    .await;
    refuse(
        retry_of(&first, json!(4), good.clone(), &format!("{token}-TAMPERED")),
        "malformed",
    )
    .await;

    let genuine = KeyRing::from_base64(&[TEST_STATE_KEY])
        .unwrap()
        .open(&token)
        .unwrap();
    let other_key = mrtr_gateway::state::generate_key();
    refuse(
        retry_of(&first, json!(5), good.clone(), &forge(&genuine, &other_key)),
        "tampered",
    )
    .await;
    let variants = [
        (
            StatePayload {
                principal: principal_digest("mallory"),
                ..genuine.clone()
            },
            "principal_mismatch",
        ),
        (
            StatePayload {
                expires_ms: 1,
                ..genuine.clone()
            },
            "expired",
        ),
        (
            StatePayload {
                route: "/other".into(),
                ..genuine.clone()
            },
            "request_mismatch",
        ),
        (
            StatePayload {
                round: 99,
                ..genuine.clone()
            },
            "round_limit",
        ),
        (
            StatePayload {
                owner: "another-replica".into(),
                owner_address: None,
                ..genuine.clone()
            },
            "consumed_or_unknown",
        ),
        (
            StatePayload {
                held_id: "00".repeat(16),
                ..genuine.clone()
            },
            "consumed_or_unknown",
        ),
    ];
    for (i, (payload, reason)) in variants.into_iter().enumerate() {
        refuse(
            retry_of(
                &first,
                json!(10 + i),
                good.clone(),
                &forge(&payload, TEST_STATE_KEY),
            ),
            reason,
        )
        .await;
    }
    // The state belongs to ask_name with these arguments, through tools/call.
    let other_tool = tool_call(json!(20), "summarize", json!({}), &elicitation_caps());
    refuse(
        retry_of(&other_tool, json!(20), good.clone(), &token),
        "request_mismatch",
    )
    .await;
    let other_args = tool_call(json!(21), "ask_name", json!({"x": 1}), &elicitation_caps());
    refuse(
        retry_of(&other_args, json!(21), good.clone(), &token),
        "request_mismatch",
    )
    .await;
    let mut other_method = modern_request(
        22,
        "prompts/get",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    other_method["params"]["requestState"] = json!(token);
    refuse(other_method, "request_mismatch").await;

    // Invalid answers name the key and leave the call redeemable.
    for bad in [
        json!({ key.clone(): {"action": "accept", "content": {"name": 42}} }),
        json!({ key.clone(): {"action": "accept", "content": {}} }),
        json!({ key.clone(): {"action": "accept", "content": {"name": ""}} }),
        json!({ key.clone(): {"action": "approve"} }),
        json!({ key.clone(): "accept" }),
        json!(null),
        json!([1]),
    ] {
        let exchange = post_raw(&h.url, &retry_of(&first, json!(30), bad.clone(), &token)).await;
        assert_rpc_error(&exchange, 400, -32602);
    }
    assert_eq!(
        h.backend_messages().len(),
        received,
        "the backend heard nothing"
    );
    assert_eq!(h.held(), 1, "the call is still held");

    let done = post_raw(&h.url, &retry_of(&first, json!(40), good.clone(), &token)).await;
    assert_eq!(result_text(&done), "Hello, Eve!");
    // The same retry again gets the kept outcome (`outcome_ttl`); other answers with the used
    // state are refused.
    let replay = post_raw(&h.url, &retry_of(&first, json!(41), good.clone(), &token)).await;
    assert_eq!(result_text(&replay), "Hello, Eve!");
    let other = json!({ key.clone(): {"action": "accept", "content": {"name": "Mallory"}} });
    refuse(
        retry_of(&first, json!(42), other, &token),
        "consumed_or_unknown",
    )
    .await;
    assert_eq!(answers(&h).len(), 1);
    h.wait_no_held().await;
    h.stop().await;
}

async fn a_retry_resent_after_its_answer_was_read_gets_the_same_outcome(kind: Backend) {
    let h = Harness::start(kind).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let bo = json!({ key.clone(): {"action": "accept", "content": {"name": "Bo"}} });
    let done = post_raw(
        &h.url,
        &retry_of(&first, json!(2), bo.clone(), &round.state),
    )
    .await;
    assert_eq!(result_text(&done), "Hello, Bo!");
    // The client lost that response: the same retry again gets the same outcome, under its id.
    let again = post_raw(&h.url, &retry_of(&first, json!(3), bo, &round.state)).await;
    assert_eq!(result_text(&again), "Hello, Bo!", "{}", again.body);
    assert_eq!(again.response().unwrap()["id"], 3);
    // Other answers with the used state are still refused.
    let al = json!({ key: {"action": "accept", "content": {"name": "Al"}} });
    let other = post_raw(&h.url, &retry_of(&first, json!(4), al, &round.state)).await;
    assert_eq!(
        assert_rpc_error(&other, 400, -32602)["data"]["reason"],
        "consumed_or_unknown"
    );
    assert_eq!(answers(&h).len(), 1, "the backend heard the answer once");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_outcome_is_forgotten_after_outcome_ttl() {
    let h = Harness::start_with(Backend::Stdio, |c| c.mrtr.outcome_ttl = Duration::ZERO).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let bo = json!({ key: {"action": "accept", "content": {"name": "Bo"}} });
    let done = post_raw(
        &h.url,
        &retry_of(&first, json!(2), bo.clone(), &round.state),
    )
    .await;
    assert_eq!(result_text(&done), "Hello, Bo!");
    // The sweeper runs at least every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = post_raw(&h.url, &retry_of(&first, json!(3), bo, &round.state)).await;
    assert_eq!(
        assert_rpc_error(&again, 400, -32602)["data"]["reason"],
        "consumed_or_unknown"
    );
    assert_eq!(answers(&h).len(), 1);
    h.stop().await;
}

async fn concurrent_duplicate_retries_redeem_once(kind: Backend) {
    let h = Harness::start(kind).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let good = json!({ key: {"action": "accept", "content": {"name": "Bo"}} });
    let mut tasks = Vec::new();
    for i in 0..64 {
        let url = h.url.clone();
        let body = retry_of(&first, json!(1000 + i), good.clone(), &round.state);
        tasks.push(tokio::spawn(async move { post_raw(&url, &body).await }));
    }
    let mut completed = 0;
    for task in tasks {
        let exchange = task.await.unwrap();
        match exchange.status {
            200 => {
                assert_eq!(result_text(&exchange), "Hello, Bo!");
                completed += 1;
            }
            400 => assert_eq!(
                exchange.error().unwrap()["data"]["reason"],
                "consumed_or_unknown"
            ),
            other => panic!("unexpected {other}: {}", exchange.body),
        }
    }
    assert!(completed >= 1);
    assert_eq!(
        answers(&h).len(),
        1,
        "the backend got the answer exactly once"
    );
    h.wait_no_held().await;
    h.stop().await;
}

async fn abandoned_rounds_are_cancelled_on_the_backend(kind: Backend) {
    let h = Harness::start_with(kind, |c| c.mrtr.held_ttl = Duration::from_millis(400)).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    assert_eq!(h.held(), 1);
    let call = h
        .wait_for_backend("the ask_name call", |m| m["params"]["name"] == "ask_name")
        .await;
    let cancelled_answer = h
        .wait_for_backend("a cancel answer", |m| {
            m["result"] == json!({"action": "cancel"})
        })
        .await;
    assert!(cancelled_answer.get("id").is_some());
    let cancelled = h
        .wait_for_backend("notifications/cancelled", |m| {
            m["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(cancelled["params"]["requestId"], call["id"]);
    h.wait_no_held().await;

    let late = post_raw(&h.url, &retry_of(&first, json!(2), json!({}), &round.state)).await;
    assert_eq!(late.error().unwrap()["data"]["reason"], "expired");
    h.stop().await;
}

async fn slow_calls_complete_through_state_only_rounds(kind: Backend) {
    let h = Harness::start_with(kind, |c| c.mrtr.round_wait = Duration::from_millis(200)).await;
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 900}),
        &elicitation_caps(),
    );
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let mut exchange = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(2),
            json!({ key: {"action": "accept", "content": {"name": "Sam"}} }),
            &round.state,
        ),
    )
    .await;
    let mut state_only_rounds = 0;
    for id in 3..30 {
        if exchange.result_type() == Some("complete") {
            break;
        }
        let round = input_required(&exchange);
        assert!(round.requests.is_empty(), "a state-only round");
        state_only_rounds += 1;
        exchange = post_raw(
            &h.url,
            &retry_of(&first, json!(id), json!({}), &round.state),
        )
        .await;
    }
    assert_eq!(result_text(&exchange), "Done for \"Sam\" after 900 ms.");
    assert!(state_only_rounds >= 2, "{state_only_rounds}");
    h.wait_no_held().await;
    h.stop().await;
}

async fn undeclared_capabilities_are_never_surfaced(kind: Backend) {
    let h = Harness::start(kind).await;
    // A backend that asks anyway is refused; the call fails; the client learns what it lacks.
    let first = tool_call(
        json!(1),
        "force_elicit",
        json!({}),
        &caps_from(json!({"sampling": {}})),
    );
    let exchange = post_raw(&h.url, &first).await;
    assert_eq!(
        assert_rpc_error(&exchange, 400, -32021)["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    let refused = answers(&h);
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].get("error").is_some(),
        "the backend got an error, not an answer"
    );

    // The backend sessions are initialized with this client's capabilities, so a well-behaved
    // backend does not even ask: URL mode for a form-only client is a tool error here.
    let url_first = tool_call(json!(2), "elicit_url", json!({}), &elicitation_caps());
    let exchange = post_raw(&h.url, &url_first).await;
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    assert_eq!(exchange.result().unwrap()["isError"], true);
    // Only three methods may be interrupted: a list never is.
    let listed = post_raw(
        &h.url,
        &modern_request(3, "tools/list", json!({}), &all_caps()),
    )
    .await;
    assert_eq!(listed.result_type(), Some("complete"));
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_inputs_can_be_answered_up_front() {
    let h = Harness::start(Backend::Stdio).await;
    let caps = elicitation_caps();
    let first = tool_call(json!(1), "keyed_elicit", json!({}), &caps);
    let round = input_required(&post_raw(&h.url, &first).await);
    assert_eq!(round.requests.keys().collect::<Vec<_>>(), vec!["user_name"]);
    let done = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(2),
            json!({"user_name": {"action": "accept", "content": {"name": "Zed"}}}),
            &round.state,
        ),
    )
    .await;
    assert_eq!(done.result_type(), Some("complete"));

    let mut eager = tool_call(json!(3), "keyed_elicit", json!({}), &caps);
    eager["params"]["inputResponses"] =
        json!({"user_name": {"action": "accept", "content": {"name": "Zed"}}});
    let exchange = post_raw(&h.url, &eager).await;
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    assert!(exchange.body.contains("Zed"));
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_while_a_call_is_held_gives_a_clear_error() {
    let h = Harness::start_with(Backend::Stdio, one_session).await;
    let pid_call = tool_call(json!(1), "pid", json!({}), &elicitation_caps());
    let pid: i32 = result_text(&post_raw(&h.url, &pid_call).await)
        .parse()
        .unwrap();
    let first = tool_call(json!(2), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    crate::support::signal::send(pid, libc::SIGKILL);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(3),
            json!({ key: {"action": "accept", "content": {"name": "X"}} }),
            &round.state,
        ),
    )
    .await;
    assert!(
        retry.error_code().is_some(),
        "a clear error: {}",
        retry.body
    );
    assert!(retry.status >= 400, "{}", retry.body);
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_elicitation_required_becomes_a_round_and_reissues_the_call() {
    let h = Harness::start_with(Backend::Stdio, one_session).await;
    // Without URL-mode support the client learns what it lacks.
    let form_only = tool_call(json!(1), "needs_url", json!({}), &elicitation_caps());
    let exchange = post_raw(&h.url, &form_only).await;
    assert_eq!(
        assert_rpc_error(&exchange, 400, -32021)["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );

    let first = tool_call(
        json!(2),
        "needs_url",
        json!({}),
        &caps_from(json!({"elicitation": {"url": {}}})),
    );
    let round = input_required(&post_raw(&h.url, &first).await);
    assert_eq!(round.requests.len(), 2, "{:?}", round.requests);
    let url_of = |key: &String| round.requests[key]["params"]["url"].clone();
    let (key, other) = {
        let mut keys: Vec<_> = round.requests.keys().cloned().collect();
        keys.sort_by_key(|k| url_of(k).to_string());
        (keys[0].clone(), keys[1].clone())
    };
    let request = &round.requests[&key];
    assert_eq!(request["params"]["mode"], "url");
    assert_eq!(
        request["params"]["url"],
        "https://auth.example/connect?elicitationId=conn-1"
    );
    assert!(request["params"].get("elicitationId").is_none());
    let calls_before = h.backend_method_count("tools/call");
    // One URL visited: the next round asks for the other one alone.
    let partial = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(3),
            json!({ key.clone(): {"action": "accept"} }),
            &round.state,
        ),
    )
    .await;
    let again = input_required(&partial);
    assert_eq!(again.requests.len(), 1, "{:?}", again.requests);
    assert_eq!(
        again.requests.values().next().unwrap()["params"]["url"],
        url_of(&other)
    );
    assert_eq!(h.backend_method_count("tools/call"), calls_before);
    let done = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(4),
            json!({ key_of(&again, "elicitation/create"): {"action": "accept"} }),
            &again.state,
        ),
    )
    .await;
    assert_eq!(result_text(&done), "Connected.", "{}", done.body);
    let calls_after = h.backend_method_count("tools/call");
    assert_eq!(
        calls_after,
        calls_before + 1,
        "the original call was issued again"
    );
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_the_backend_withdrew_is_never_answered() {
    let h = Harness::start(Backend::Stdio).await;
    let first = tool_call(
        json!(1),
        "impatient_elicit",
        json!({"ms": 200}),
        &elicitation_caps(),
    );
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    // The backend withdraws its question after 200 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let done = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(2),
            json!({ key: {"action": "accept", "content": {"name": "Late"}} }),
            &round.state,
        ),
    )
    .await;
    assert_eq!(
        result_text(&done),
        "The question timed out.",
        "{}",
        done.body
    );
    assert!(answers(&h).is_empty(), "no answer to a withdrawn question");
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_resent_after_a_broken_connection_gets_the_same_outcome() {
    let h = Harness::start(Backend::Http).await;
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 800}),
        &elicitation_caps(),
    );
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let retry = retry_of(
        &first,
        json!(2),
        json!({ key: {"action": "accept", "content": {"name": "Ann"}} }),
        &round.state,
    );
    let broken = post_giving_up_after(&h.url, &retry, Duration::from_millis(200)).await;
    assert!(broken.is_err(), "the first retry's connection broke");
    let mut again = retry.clone();
    again["id"] = json!(3);
    let exchange = post_raw(&h.url, &again).await;
    assert_eq!(
        result_text(&exchange),
        "Done for \"Ann\" after 800 ms.",
        "{}",
        exchange.body
    );
    assert_eq!(exchange.response().unwrap()["id"], 3);
    assert_eq!(answers(&h).len(), 1, "the answer reached the backend once");
    h.wait_no_held().await;
    h.stop().await;
}

async fn roots_seen_by_backend(
    h: &Harness,
    caps: &ClientCapabilities,
    answer: Option<&str>,
) -> String {
    // The session starts on a list call; the backend asks for roots right after `initialized`,
    // outside any interruptible call.
    let listed = post_raw(&h.url, &modern_request(50, "tools/list", json!({}), caps)).await;
    assert_eq!(listed.result_type(), Some("complete"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for id in 0..6 {
        let first = tool_call(json!(id), "known_roots", json!({}), caps);
        let mut exchange = post_raw(&h.url, &first).await;
        if exchange.result_type() == Some("input_required") {
            let round = input_required(&exchange);
            let key = key_of(&round, "roots/list");
            let roots =
                json!({"roots": [{"uri": answer.expect("no roots round expected"), "name": "w"}]});
            exchange = post_raw(
                &h.url,
                &retry_of(&first, json!(100 + id), json!({ key: roots }), &round.state),
            )
            .await;
        }
        let seen = result_text(&exchange);
        if seen != "none yet" {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    "none yet".into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_requests_are_deferred_to_the_next_call_by_default() {
    let h = Harness::start_with_env(
        Backend::Stdio,
        &[("LEGACY_BACKEND_ROOTS_ON_INIT", "1")],
        one_session,
    )
    .await;
    let seen = roots_seen_by_backend(
        &h,
        &caps_from(json!({"roots": {}})),
        Some("file:///work/space"),
    )
    .await;
    assert!(seen.contains("file:///work/space"), "{seen}");
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_roots_can_be_answered_from_configuration() {
    let h = Harness::start_with_env(
        Backend::Http,
        &[("LEGACY_BACKEND_ROOTS_ON_INIT", "1")],
        static_roots,
    )
    .await;
    let seen = roots_seen_by_backend(&h, &caps_from(json!({"roots": {}})), None).await;
    assert!(seen.contains("file:///srv/static"), "{seen}");
    h.stop().await;
}

/// A backend that answers POSTs with JSON sends its questions on the standalone GET stream; with
/// one call active on the session they still belong to that call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_on_the_get_stream_belong_to_the_active_call() {
    let h = Harness::start(Backend::HttpJson).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let done = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(2),
            json!({ key: {"action": "accept", "content": {"name": "Get"}} }),
            &round.state,
        ),
    )
    .await;
    assert_eq!(result_text(&done), "Hello, Get!", "{}", done.body);
    h.wait_no_held().await;
    h.stop().await;
}

/// After the answers, the resumed call reports progress under the retry's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_after_a_retry_uses_the_retrys_token() {
    let h = Harness::start(Backend::Stdio).await;
    let mut first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 200}),
        &elicitation_caps(),
    );
    first["params"]["_meta"]["progressToken"] = json!("first-token");
    let round = input_required(&post_raw(&h.url, &first).await);
    let key = key_of(&round, "elicitation/create");
    let mut retry = retry_of(
        &first,
        json!(2),
        json!({ key: {"action": "accept", "content": {"name": "Pat"}} }),
        &round.state,
    );
    retry["params"]["_meta"]["progressToken"] = json!("retry-token");
    let done = post_raw(&h.url, &retry).await;
    assert_eq!(
        done.content_type(),
        Some("text/event-stream"),
        "{}",
        done.body
    );
    let tokens: Vec<Value> = done
        .notifications()
        .iter()
        .map(|n| n["params"]["progressToken"].clone())
        .collect();
    assert_eq!(tokens, vec![json!("retry-token"); 4], "{}", done.body);
    assert_eq!(result_text(&done), "Done for \"Pat\" after 200 ms.");
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_calls_are_bounded_per_client() {
    let h = Harness::start_with(Backend::Stdio, |c| c.mrtr.max_held_per_principal = 1).await;
    let caps = elicitation_caps();
    let first = tool_call(json!(1), "ask_name", json!({}), &caps);
    let round = input_required(&post_raw(&h.url, &first).await);
    let second = post_raw(&h.url, &tool_call(json!(2), "ask_name", json!({}), &caps)).await;
    assert_rpc_error(&second, 429, -32603);
    assert_eq!(h.held(), 1);
    // The refused call's backend question was answered as cancelled, never invented.
    h.wait_for_backend("the refused round's cancel", |m| {
        m["result"] == json!({"action": "cancel"})
    })
    .await;
    let key = key_of(&round, "elicitation/create");
    let done = post_raw(
        &h.url,
        &retry_of(
            &first,
            json!(3),
            json!({ key: {"action": "accept", "content": {"name": "One"}} }),
            &round.state,
        ),
    )
    .await;
    assert_eq!(result_text(&done), "Hello, One!");
    h.wait_no_held().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_without_restart() {
    use mrtr_gateway::state::generate_key;
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("keys");
    let (old, new) = (generate_key(), generate_key());
    std::fs::write(&keys_file, format!("{old}\n")).unwrap();
    let h = Harness::start_with(Backend::Stdio, |c| {
        // The keys come from the file alone, not the fixed test key.
        c.mrtr.keys.clear();
        c.mrtr.keys_file = Some(keys_file.clone());
        c.legacy().pool.max_sessions = 4;
    })
    .await;
    let caps = elicitation_caps();
    let answer = |round: &Round| json!({ key_of(round, "elicitation/create"): {"action": "accept", "content": {"name": "Rot"}} });
    let first_a = tool_call(json!(1), "ask_name", json!({}), &caps);
    let first_b = tool_call(json!(2), "ask_name", json!({"again": true}), &caps);
    let round_a = input_required(&post_raw(&h.url, &first_a).await);
    let round_b = input_required(&post_raw(&h.url, &first_b).await);

    // Rotate in: the new key seals, the old one still opens (as on SIGHUP).
    std::fs::write(&keys_file, format!("{new}\n{old}\n")).unwrap();
    h.gateway.as_ref().unwrap().gateway().reload_keys().unwrap();
    let fresh = input_required(
        &post_raw(
            &h.url,
            &tool_call(json!(3), "ask_name", json!({"x": 1}), &caps),
        )
        .await,
    );
    assert!(
        KeyRing::from_base64(&[new.as_str()])
            .unwrap()
            .open(&fresh.state)
            .is_ok(),
        "sealed with the new key"
    );
    let done = post_raw(
        &h.url,
        &retry_of(&first_a, json!(4), answer(&round_a), &round_a.state),
    )
    .await;
    assert_eq!(result_text(&done), "Hello, Rot!", "{}", done.body);

    // Retire the old key by changing the file alone: states it sealed stop opening.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(&keys_file, format!("{new}\n")).unwrap();
    // A probe sealed with the old key for no held call tells when the reload happened.
    let mut probe = KeyRing::from_base64(&[old.as_str()])
        .unwrap()
        .open(&round_b.state)
        .unwrap();
    probe.held_id = "00".repeat(16);
    let probe = forge(&probe, &old);
    let mut reloaded = false;
    for _ in 0..60 {
        let exchange = post_raw(
            &h.url,
            &retry_of(&first_b, json!(5), answer(&round_b), &probe),
        )
        .await;
        if exchange.error().unwrap()["data"]["reason"] == "tampered" {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the changed keys_file was read again");
    let refused = post_raw(
        &h.url,
        &retry_of(&first_b, json!(6), answer(&round_b), &round_b.state),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.error().unwrap()["data"]["reason"], "tampered");
    h.stop().await;
}

/// A call cancelled by its client may still ask a question later; it must never reach the next
/// caller of that backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_calls_late_question_never_reaches_the_next_caller() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        let pool = &mut c.legacy().pool;
        pool.max_sessions = 1;
        pool.queue_wait = Duration::from_secs(5);
    })
    .await;
    let caps = elicitation_caps();
    let stubborn = tool_call(json!(1), "stubborn_question", json!({"ms": 500}), &caps);
    let gave_up = post_giving_up_after(&h.url, &stubborn, Duration::from_millis(150)).await;
    assert!(gave_up.is_err());
    // The next caller's call spans the moment the cancelled call asks its question.
    let next = post_raw(
        &h.url,
        &tool_call(json!(2), "sleep", json!({"ms": 1000}), &caps),
    )
    .await;
    assert_eq!(next.result_type(), Some("complete"), "{}", next.body);
    assert_eq!(result_text(&next), "Slept 1000 ms.");
    let again = post_raw(
        &h.url,
        &tool_call(json!(3), "echo", json!({"text": "x"}), &caps),
    )
    .await;
    assert_eq!(again.result_type(), Some("complete"), "{}", again.body);
    assert_eq!(h.held(), 0);
    h.stop().await;
}
