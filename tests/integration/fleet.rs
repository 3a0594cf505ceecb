//! Fleet forwarding: three gateway processes share one `requestState` key, and any of them can
//! finish a call another one holds. A retry that reaches a replica other than the call's owner
//! is forwarded, unchanged and one hop at most, to the owner's advertised address; the answer
//! comes back through the replica the client reached.
//!
//! The flows run through [`RoundRobin`](crate::support::fleet::RoundRobin), a proxy without
//! affinity, so retries land on other replicas than the one holding their call; the other
//! scenarios address replicas directly: duplicate and re-sent retries through two non-owners,
//! an owner killed, frozen or draining, and states that must never be forwarded (forged, owner
//! outside `allowed_peers`, already forwarded once), watched by a listener of the test's own
//! that must see no connection.

#![allow(deprecated)]

use std::time::{Duration, Instant};

use mrtr_gateway::state::generate_key;
use reqwest::header::HeaderValue;
use rmcp::model::{CallToolRequestParams, Root};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::fleet::{
    is_answer, open_state, post, post_with_headers, seal_naming, set, Fleet, PEER_TIMEOUT,
};
use crate::support::gateway::{Backend, TEST_STATE_KEY};
use crate::support::modern_client::{
    connect_in_time, connect_legacy, modern_request, retry_of, standard_headers, RawExchange,
    TestClientHandler,
};
use crate::support::rpc::{
    all_caps, assert_rpc_error, elicitation_caps, input_required, key_of, result_text, tool_call,
};

over_both_transports!(
    elicitation_sampling_and_roots_through_a_round_robin_proxy,
    parallel_and_sequential_rounds_through_a_round_robin_proxy,
    duplicate_retries_through_two_non_owners_get_one_outcome,
    a_retry_resent_through_another_non_owner_after_a_dropped_connection,
    a_killed_owner_is_reported_at_once,
    a_draining_owner_still_finishes_forwarded_retries,
    a_legacy_session_is_served_through_a_round_robin_proxy,
);

/// The forwarders' counter of forwarded retries, by `result`.
const FORWARDED: &str = "mrtr_forwarded_retries_total";

/// The `inputResponses` accepting the round's one elicitation with `content`.
fn accept(key: &str, content: Value) -> Value {
    json!({ key: {"action": "accept", "content": content} })
}

/// Asserts the forwarder's answer for an owner that is gone: HTTP 503, -32603,
/// `data.reason == "owner_unavailable"`, a message that says to start the call again, under the
/// retry's id.
#[track_caller]
fn assert_owner_unavailable(exchange: &RawExchange, id: Value) {
    let error = assert_rpc_error(exchange, 503, -32603);
    assert_eq!(
        error["data"]["reason"], "owner_unavailable",
        "{}",
        exchange.body
    );
    let message = error["message"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        message.contains("start") && message.contains("again"),
        "the message says the call must be started again: {}",
        exchange.body
    );
    assert_eq!(exchange.response().unwrap()["id"], id, "{}", exchange.body);
}

/// Asserts that nothing connected to `trap` (waiting 300 ms for a connection).
async fn assert_no_connection(trap: &TcpListener, what: &str) {
    if let Ok(accepted) = tokio::time::timeout(Duration::from_millis(300), trap.accept()).await {
        panic!(
            "{what} was forwarded: the test's listener got a connection from {:?}",
            accepted.map(|(_, peer)| peer)
        );
    }
}

async fn elicitation_sampling_and_roots_through_a_round_robin_proxy(kind: Backend) {
    let fleet = Fleet::start(kind).await;
    let handler = TestClientHandler::builder()
        .elicitation_form()
        .sampling()
        .roots()
        .elicit_accept(json!({"name": "Ada"}))
        .sampling_text("Paris is the capital.")
        .roots_list(vec![Root::new("file:///srv/project")])
        .build();
    let client = connect_in_time(fleet.proxy_url(), handler.clone()).await;
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
    let picks = fleet.proxy.picks();
    for replica in 0..fleet.replicas.len() {
        assert!(picks.contains(&replica), "replica {replica} in {picks:?}");
    }
    let forwarded = fleet.metric_total(FORWARDED, &[("result", "ok")]).await;
    assert!(
        forwarded > 0.0,
        "a retry landed on a replica that does not hold its call and was forwarded \
         (the proxy's picks: {picks:?})"
    );
    assert_eq!(
        fleet.answers().len(),
        3,
        "each answer reached the backend once"
    );
    fleet.wait_no_held().await;
    let _ = client.cancel().await;
    fleet.stop().await;
}

async fn parallel_and_sequential_rounds_through_a_round_robin_proxy(kind: Backend) {
    let fleet = Fleet::start(kind).await;
    let url = fleet.proxy_url().to_string();
    // Retries the proxy sent to a replica other than the one holding their call.
    let mut retries_elsewhere = 0;

    let first = tool_call(json!(1), "parallel_inputs", json!({}), &all_caps());
    let round = input_required(&post(&url, &first).await);
    let owner = fleet.owner_of(&round.state);
    assert_eq!(
        owner,
        fleet.proxy.last_pick(),
        "the replica that took the call holds it"
    );
    assert_eq!(round.requests.len(), 3, "{:?}", round.requests);
    let elicit = key_of(&round, "elicitation/create");
    let sample = key_of(&round, "sampling/createMessage");
    let roots = key_of(&round, "roots/list");
    let responses = json!({
        elicit: {"action": "accept", "content": {"name": "Grace"}},
        sample: {"role": "assistant", "content": {"type": "text", "text": "sampled!"}, "model": "m", "stopReason": "endTurn"},
        roots: {"roots": [{"uri": "file:///tmp/x", "name": "x"}]}
    });
    let done = post(&url, &retry_of(&first, json!(2), responses, &round.state)).await;
    if fleet.proxy.last_pick() != owner {
        retries_elsewhere += 1;
    }
    assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
    assert_eq!(done.response().unwrap()["id"], 2);
    for expected in ["Grace", "sampled!", "file:///tmp/x"] {
        assert!(done.body.contains(expected), "{expected} in {}", done.body);
    }
    assert_eq!(
        fleet.answers().len(),
        3,
        "each answer reached the backend once"
    );

    let first = tool_call(json!("r0"), "multi_round", json!({}), &elicitation_caps());
    let mut exchange = post(&url, &first).await;
    let owner = fleet.proxy.last_pick();
    let replies = [
        json!({"name": "Lin"}),
        json!({"age": 41}),
        json!({"city": "Oslo"}),
    ];
    let mut states = Vec::new();
    for (i, content) in replies.into_iter().enumerate() {
        let round = input_required(&exchange);
        assert_eq!(round.requests.len(), 1);
        assert_eq!(
            fleet.owner_of(&round.state),
            owner,
            "round {i}: the call stays with the replica that took it"
        );
        let key = key_of(&round, "elicitation/create");
        states.push(round.state.clone());
        let retry = retry_of(
            &first,
            json!(format!("r{}", i + 1)),
            accept(&key, content),
            &round.state,
        );
        exchange = post(&url, &retry).await;
        if fleet.proxy.last_pick() != owner {
            retries_elsewhere += 1;
        }
    }
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    assert_eq!(exchange.response().unwrap()["id"], "r3");
    assert_eq!(
        exchange.result().unwrap()["structuredContent"],
        json!({"name": "Lin", "age": 41, "city": "Oslo"})
    );
    assert!(
        states[0] != states[1] && states[1] != states[2],
        "a new state every round"
    );
    assert_eq!(
        fleet.answers().len(),
        6,
        "each answer reached the backend once"
    );

    assert!(
        retries_elsewhere >= 1,
        "a retry landed on a non-owner: {:?}",
        fleet.proxy.picks()
    );
    assert_eq!(
        fleet.metric_total(FORWARDED, &[("result", "ok")]).await,
        retries_elsewhere as f64,
        "each retry that landed on a non-owner was forwarded once"
    );
    assert!(
        fleet
            .metric_total("mrtr_forward_duration_seconds_count", &[])
            .await
            >= retries_elsewhere as f64,
        "every forward was timed"
    );
    fleet.wait_no_held().await;
    fleet.stop().await;
}

async fn duplicate_retries_through_two_non_owners_get_one_outcome(kind: Backend) {
    let fleet = Fleet::start(kind).await;
    // The backend works a while after the answer, so the second retry arrives while the first
    // is still being served.
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 400}),
        &elicitation_caps(),
    );
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    let answer = accept(&key, json!({"name": "Bo"}));
    let [a, b] = fleet.non_owners(0);
    let to_a = retry_of(&first, json!(2), answer.clone(), &round.state);
    let to_b = retry_of(&first, json!(3), answer, &round.state);
    let (from_a, from_b) = tokio::join!(post(fleet.url(a), &to_a), post(fleet.url(b), &to_b));
    for (exchange, id) in [(&from_a, 2), (&from_b, 3)] {
        assert_eq!(
            exchange.result_type(),
            Some("complete"),
            "{}",
            exchange.body
        );
        assert_eq!(result_text(exchange), "Done for \"Bo\" after 400 ms.");
        assert_eq!(exchange.response().unwrap()["id"], id, "{}", exchange.body);
    }
    assert_eq!(
        from_a.result().unwrap()["content"],
        from_b.result().unwrap()["content"],
        "one outcome"
    );
    assert_eq!(
        fleet.answers().len(),
        1,
        "the backend got the answer exactly once"
    );
    fleet.wait_no_held().await;
    fleet.stop().await;
}

async fn a_retry_resent_through_another_non_owner_after_a_dropped_connection(kind: Backend) {
    let fleet = Fleet::start(kind).await;
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 1500}),
        &elicitation_caps(),
    );
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    let retry = retry_of(
        &first,
        json!(2),
        accept(&key, json!({"name": "Ann"})),
        &round.state,
    );
    let [a, b] = fleet.non_owners(0);

    // The client drops the first retry's connection once the owner's backend has the answer,
    // while the backend is still working.
    let pending = tokio::spawn({
        let url = fleet.url(a).to_string();
        let retry = retry.clone();
        async move { post(&url, &retry).await }
    });
    fleet
        .wait_for_backend("the answer of the first retry", is_answer)
        .await;
    pending.abort();
    let dropped = pending.await;
    assert!(
        dropped.as_ref().is_err_and(|e| e.is_cancelled()),
        "the first retry was still unanswered when its connection was dropped: {dropped:?}"
    );

    let mut again = retry.clone();
    again["id"] = json!(3);
    let exchange = post(fleet.url(b), &again).await;
    assert_eq!(
        result_text(&exchange),
        "Done for \"Ann\" after 1500 ms.",
        "{}",
        exchange.body
    );
    assert_eq!(exchange.response().unwrap()["id"], 3);
    assert_eq!(
        fleet.answers().len(),
        1,
        "the answer reached the backend once"
    );
    fleet.wait_no_held().await;
    fleet.stop().await;
}

async fn a_killed_owner_is_reported_at_once(kind: Backend) {
    let mut fleet = Fleet::start(kind).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    fleet.kill(0).await;

    let [a, _] = fleet.non_owners(0);
    let retry = retry_of(
        &first,
        json!(2),
        accept(&key, json!({"name": "Kay"})),
        &round.state,
    );
    let started = Instant::now();
    let exchange = post(fleet.url(a), &retry).await;
    let elapsed = started.elapsed();
    assert_owner_unavailable(&exchange, json!(2));
    assert!(
        elapsed < PEER_TIMEOUT + Duration::from_secs(1),
        "answered within peer_timeout + 1 s: {elapsed:?}"
    );
    assert_eq!(
        fleet
            .metric(a, FORWARDED, &[("result", "owner_unavailable")])
            .await,
        1.0
    );
    assert!(fleet.answers().is_empty(), "no backend heard the answer");
    fleet.stop().await;
}

async fn a_draining_owner_still_finishes_forwarded_retries(kind: Backend) {
    let mut fleet = Fleet::builder(kind)
        .configure(|_, config| set(config, "server.drain_timeout", "20s"))
        .start()
        .await;
    let first = tool_call(json!("r0"), "multi_round", json!({}), &elicitation_caps());
    let mut exchange = post(fleet.url(0), &first).await;
    let round = input_required(&exchange);
    assert_eq!(fleet.owner_of(&round.state), 0);

    fleet.terminate(0);
    // The drain has begun once the owner turns new requests away.
    let list = modern_request(100, "tools/list", json!({}), &elicitation_caps());
    let mut draining = false;
    for _ in 0..100 {
        if post(fleet.url(0), &list).await.status == 503 {
            draining = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(draining, "the owner drains after SIGTERM");
    let new_call = post(
        fleet.url(0),
        &tool_call(json!(101), "ask_name", json!({}), &elicitation_caps()),
    )
    .await;
    assert_eq!(new_call.status, 503, "{}", new_call.body);

    let [a, b] = fleet.non_owners(0);
    let replies = [
        json!({"name": "Lin"}),
        json!({"age": 41}),
        json!({"city": "Oslo"}),
    ];
    for (i, (content, via)) in replies.into_iter().zip([a, b, a]).enumerate() {
        let round = input_required(&exchange);
        assert_eq!(
            fleet.owner_of(&round.state),
            0,
            "round {i} is still held by the draining owner"
        );
        let key = key_of(&round, "elicitation/create");
        let retry = retry_of(
            &first,
            json!(format!("r{}", i + 1)),
            accept(&key, content),
            &round.state,
        );
        exchange = post(fleet.url(via), &retry).await;
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
    assert_eq!(
        fleet.metric(a, FORWARDED, &[("result", "ok")]).await
            + fleet.metric(b, FORWARDED, &[("result", "ok")]).await,
        3.0,
        "every retry was forwarded to the draining owner"
    );
    // Nothing is held any more: the owner ends its drain well before drain_timeout.
    let status = fleet.wait_exit(0, Duration::from_secs(10)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the drained owner exits by itself: {status:?}"
    );
    fleet.stop().await;
}

/// Forwarding only ever goes to a replica of the fleet, once: a state that does not open with
/// the fleet's key, one naming an owner outside `allowed_peers`, ones bound to another principal
/// or method, and one on a request that was already forwarded are refused where they arrive, and the owner they name (a listener of the
/// test's own) sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_disallowed_and_already_forwarded_states_are_never_forwarded() {
    let fleet = Fleet::builder(Backend::Http)
        .configure(|index, config| {
            if index == 1 {
                set(
                    config,
                    "fleet.allowed_peers",
                    vec![toml::Value::from("127.0.0.2/32")],
                );
            }
        })
        .start()
        .await;
    let trap = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let trap_addr = trap.local_addr().expect("trap address").to_string();
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    let eve = accept(&key, json!({"name": "Eve"}));
    let genuine = open_state(&round.state);

    // Sealed with another key. Replica 2 forwards to any owner, so only the integrity check
    // stands between this state and the listener.
    let forged = seal_naming(&genuine, "elsewhere", &trap_addr, &generate_key());
    let exchange = post(
        fleet.url(2),
        &retry_of(&first, json!(2), eve.clone(), &forged),
    )
    .await;
    assert_eq!(
        assert_rpc_error(&exchange, 400, -32602)["data"]["reason"],
        "tampered",
        "{}",
        exchange.body
    );
    assert_no_connection(&trap, "a forged state").await;

    // Sealed with the fleet's key, naming an owner outside replica 1's allowed_peers.
    let outside = seal_naming(&genuine, "elsewhere", &trap_addr, TEST_STATE_KEY);
    let exchange = post(
        fleet.url(1),
        &retry_of(&first, json!(3), eve.clone(), &outside),
    )
    .await;
    assert_eq!(
        assert_rpc_error(&exchange, 400, -32602)["data"]["reason"],
        "owner_not_allowed",
        "{}",
        exchange.body
    );
    assert_no_connection(&trap, "a state naming an owner outside allowed_peers").await;
    assert_eq!(
        fleet
            .metric(1, FORWARDED, &[("result", "owner_not_allowed")])
            .await,
        1.0
    );

    // Sealed with the fleet's key and naming the listener, but bound to another principal, or
    // to another method: refused where it lands, as the owner would refuse it.
    let mut others = genuine.clone();
    others.principal = mrtr_gateway::state::principal_digest("someone-else");
    let mut other_method = genuine.clone();
    other_method.method = "prompts/get".into();
    for (n, mismatched) in [others, other_method].iter().enumerate() {
        let state = seal_naming(mismatched, "elsewhere", &trap_addr, TEST_STATE_KEY);
        let exchange = post(
            fleet.url(2),
            &retry_of(&first, json!(10 + n), eve.clone(), &state),
        )
        .await;
        assert_eq!(
            assert_rpc_error(&exchange, 400, -32602)["data"]["reason"],
            "consumed_or_unknown",
            "{}",
            exchange.body
        );
        assert_no_connection(&trap, "a state bound to another principal or method").await;
    }

    // The same state on a request another replica already forwarded: one hop at most.
    let body = retry_of(&first, json!(4), eve.clone(), &outside);
    let mut headers = standard_headers(&body);
    headers.insert("mrtr-forwarded-by", HeaderValue::from_static("x"));
    let exchange = post_with_headers(fleet.url(2), &body, headers).await;
    match exchange.status {
        503 => assert_owner_unavailable(&exchange, json!(4)),
        400 => assert_eq!(
            assert_rpc_error(&exchange, 400, -32602)["data"]["reason"],
            "consumed_or_unknown",
            "{}",
            exchange.body
        ),
        other => panic!("an error, 503 or 400, not {other}: {}", exchange.body),
    }
    assert_no_connection(&trap, "an already forwarded retry").await;

    // None of that reached the call, which its owner still finishes.
    assert!(fleet.answers().is_empty(), "the backend heard no answer");
    let done = post(fleet.url(0), &retry_of(&first, json!(5), eve, &round.state)).await;
    assert_eq!(result_text(&done), "Hello, Eve!", "{}", done.body);
    assert_eq!(fleet.answers().len(), 1);
    fleet.wait_no_held().await;
    fleet.stop().await;
}

/// An owner that accepts the connection but does not answer (frozen with SIGSTOP, as a paused
/// or throttled pod) is reported within peer_timeout as not answering, with what to do: send
/// the same retry again. Never "start again": once the owner resumes it may finish the call,
/// and the re-sent retry then gets that outcome, the tool having run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_is_reported_as_not_answering_and_the_same_retry_finishes_later() {
    let fleet = Fleet::start(Backend::Http).await;
    let first = tool_call(json!(1), "ask_name", json!({}), &elicitation_caps());
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    fleet.signal(0, libc::SIGSTOP);

    let retry = retry_of(
        &first,
        json!(2),
        accept(&key, json!({"name": "Ice"})),
        &round.state,
    );
    let started = Instant::now();
    let exchange = post(fleet.url(1), &retry).await;
    let elapsed = started.elapsed();
    let error = assert_rpc_error(&exchange, 503, -32603);
    assert_eq!(
        error["data"]["reason"], "owner_not_answering",
        "{}",
        exchange.body
    );
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("send the same request again") && !message.contains("start it again"),
        "the message says to send the same retry again: {message}"
    );
    assert!(
        elapsed < PEER_TIMEOUT + Duration::from_secs(1),
        "answered within peer_timeout + 1 s: {elapsed:?}"
    );
    assert_eq!(
        fleet
            .metric(1, FORWARDED, &[("result", "owner_not_answering")])
            .await,
        1.0
    );

    // The owner resumes. The retry it had taken in may now reach the backend: the client that
    // followed the message sends the same retry again and gets the call's one outcome.
    fleet.signal(0, libc::SIGCONT);
    let again = post(fleet.url(2), &retry).await;
    assert_eq!(result_text(&again), "Hello, Ice!", "{}", again.body);
    assert_eq!(fleet.answers().len(), 1, "the tool ran once");
    fleet.wait_no_held().await;
    fleet.stop().await;
}

/// A forwarded retry whose answer takes longer than half of peer_timeout: the owner starts an
/// SSE response at once, so the forwarder does not take it for a dead owner, and the result
/// arrives as the stream's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_forwarded_answer_arrives_as_a_stream() {
    let fleet = Fleet::start(Backend::Http).await;
    let slow_ms = (PEER_TIMEOUT.as_millis() as u64) * 3 / 4 + 500;
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({ "ms": slow_ms }),
        &elicitation_caps(),
    );
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    let retry = retry_of(
        &first,
        json!(2),
        accept(&key, json!({"name": "Sol"})),
        &round.state,
    );
    let exchange = post(fleet.url(1), &retry).await;
    assert_eq!(exchange.status, 200, "{}", exchange.body);
    assert_eq!(
        exchange.content_type(),
        Some("text/event-stream"),
        "{}",
        exchange.body
    );
    assert!(
        exchange.body.starts_with(": keep-alive"),
        "{}",
        exchange.body
    );
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    assert_eq!(
        result_text(&exchange),
        format!("Done for \"Sol\" after {slow_ms} ms.")
    );
    assert_eq!(
        fleet.metric(1, FORWARDED, &[("result", "ok")]).await,
        1.0,
        "forwarded, not refused as unavailable"
    );
    assert_eq!(fleet.answers().len(), 1);
    fleet.wait_no_held().await;
    fleet.stop().await;
}

/// A client that closes its connection while a forwarded answer is still coming closes the
/// forwarded one: the forwarder stops relaying at once, long before the answer would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closing_its_connection_closes_the_forwarded_one() {
    let mut fleet = Fleet::start(Backend::Http).await;
    let first = tool_call(
        json!(1),
        "slow_question",
        json!({"ms": 6000}),
        &elicitation_caps(),
    );
    let round = input_required(&post(fleet.url(0), &first).await);
    assert_eq!(fleet.owner_of(&round.state), 0);
    let key = key_of(&round, "elicitation/create");
    let retry = retry_of(
        &first,
        json!(2),
        accept(&key, json!({"name": "Kai"})),
        &round.state,
    );
    let started = Instant::now();
    let client = reqwest::Client::new();
    let mut response = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .post(fleet.url(1))
            .headers(standard_headers(&retry))
            .json(&retry)
            .send(),
    )
    .await
    .expect("the forwarded answer starts in time")
    .expect("the forwarded answer starts");
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "a slow answer starts as a stream"
    );
    let keep_alive = response.chunk().await.expect("a first chunk");
    assert!(keep_alive.is_some_and(|c| c.starts_with(b": keep-alive")));
    assert_eq!(fleet.status(1).await["forwarding"], 1, "being relayed");
    drop(response);
    drop(client);
    let mut relaying = 1;
    for _ in 0..100 {
        relaying = fleet.status(1).await["forwarding"].as_u64().unwrap_or(1);
        if relaying == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        relaying, 0,
        "the forward ended with the client's connection"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "before the answer would have come: {:?}",
        started.elapsed()
    );
    fleet.kill(0).await;
    fleet.stop().await;
}

/// A 2025-11-25 client's session lives on the replica that took its `initialize`; its requests,
/// its answers to the backend's questions and its GET stream that land elsewhere are forwarded
/// there.
async fn a_legacy_session_is_served_through_a_round_robin_proxy(kind: Backend) {
    let fleet = Fleet::start(kind).await;
    let handler = TestClientHandler::builder()
        .elicitation_form()
        .sampling()
        .elicit_accept(json!({"name": "Grace"}))
        .sampling_text("Rome is the capital.")
        .build();
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        connect_legacy(fleet.proxy_url(), handler.clone()),
    )
    .await
    .expect("initialized in time")
    .expect("a legacy client initializes through the proxy");
    for _ in 0..2 {
        let greeted = client
            .call_tool(CallToolRequestParams::new("ask_name"))
            .await
            .expect("ask_name");
        assert_eq!(greeted.content[0].as_text().unwrap().text, "Hello, Grace!");
        let mut summarize = CallToolRequestParams::new("summarize");
        summarize = summarize.with_arguments(
            json!({"text": "Italy"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let summary = client.call_tool(summarize).await.expect("summarize");
        assert!(summary.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("Rome is the capital."));
    }
    let asked: Vec<&str> = handler.recorded().iter().map(|r| r.method()).collect();
    assert_eq!(
        asked,
        [
            "elicitation/create",
            "sampling/createMessage",
            "elicitation/create",
            "sampling/createMessage"
        ]
    );
    let picks = fleet.proxy.picks();
    for replica in 0..fleet.replicas.len() {
        assert!(picks.contains(&replica), "replica {replica} in {picks:?}");
    }
    let forwarded = fleet
        .metric_total("mrtr_requests_total", &[("outcome", "forwarded")])
        .await;
    assert!(
        forwarded >= 2.0,
        "session requests reached replicas that do not hold the session and were forwarded \
         (the proxy's picks: {picks:?})"
    );
    assert_eq!(
        fleet.metric_total("mrtr_legacy_sessions", &[]).await,
        1.0,
        "one session, on one replica"
    );
    let _ = client.cancel().await;
    fleet.stop().await;
}
