//! The routing of what a backend sends, against a real peer on loopback ([`TestPeer`]).

use std::sync::Arc;

use serde_json::{json, Value};

use super::queue::MAX_QUEUED_NOTICES;
use super::*;
use crate::backend::changes::{Change, Feeds};
use crate::backend::test_peer::{notification, progress, request, PeerCall, TestPeer, WAIT};
use crate::jsonrpc::codes;
use crate::metrics::Metrics;

async fn connect(peer: &TestPeer, extra: &str, capabilities: Value) -> Session {
    connect_with(peer, extra, capabilities, None, &Metrics::new()).await
}

async fn connect_with(
    peer: &TestPeer,
    extra: &str,
    capabilities: Value,
    changes: Option<Arc<Feed>>,
    metrics: &Metrics,
) -> Session {
    let per_backend = PerBackend {
        init_roots: Arc::default(),
        dropped: DroppedNotices::new(metrics, "peer"),
    };
    Session::connect(
        &peer.spec(extra),
        &SessionIdentity::default(),
        capabilities,
        None,
        &per_backend,
        changes,
    )
    .await
    .unwrap()
}

async fn next(call: &mut ActiveCall) -> CallEvent {
    tokio::time::timeout(WAIT, call.next_event())
        .await
        .expect("no event reached the call in time")
}

fn final_result(event: CallEvent) -> Value {
    match event {
        CallEvent::Final(Ok(result)) => serde_json::from_str(result.get()).unwrap(),
        other => panic!("expected the call's answer, got {other:?}"),
    }
}

fn elicitation() -> Value {
    json!({ "message": "Name?", "requestedSchema": { "type": "object", "properties": {} } })
}

/// Returns once the session has read everything the peer sent outside any call so far: the
/// standalone stream is read in order, and the session answers `ping` as it reads it.
async fn outside_read(peer: &mut TestPeer, barrier: &str) {
    peer.send_outside(request(barrier, "ping", json!({})));
    peer.answer_to(barrier).await.unwrap();
}

#[test]
fn what_no_client_sees_is_answered_locally() {
    assert_eq!(answer_locally("ping"), Ok(json!({})));
    assert_eq!(answer_locally("roots/list"), Ok(json!({ "roots": [] })));
    assert_eq!(
        answer_locally("elicitation/create"),
        Ok(json!({ "action": "cancel" }))
    );
    assert_eq!(
        answer_locally("sampling/createMessage").unwrap_err().code,
        -1
    );
    assert_eq!(
        answer_locally("tools/call").unwrap_err().code,
        codes::METHOD_NOT_FOUND
    );
}

#[tokio::test]
async fn an_answer_goes_to_the_request_of_its_id_whichever_stream_carries_it() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let first = session.request("tools/list", None, WAIT);
    let second = session.request("prompts/list", None, WAIT);
    let backend = async {
        let a = peer.next_call().await;
        let b = peer.next_call().await;
        // `b`'s answer travels on `a`'s stream, before `a`'s: only the id says whose it is.
        a.send(json!({ "jsonrpc": "2.0", "id": b.id, "result": { "for": b.method } }));
        let a_method = a.method.clone();
        a.answer(json!({ "for": a_method }));
        b
    };
    let (first, second, _b) = tokio::join!(first, second, backend);
    assert_eq!(first.unwrap().unwrap(), json!({ "for": "tools/list" }));
    assert_eq!(second.unwrap().unwrap(), json!({ "for": "prompts/list" }));
    assert!(session.is_reusable());
}

#[tokio::test]
async fn a_server_request_during_a_call_goes_to_that_call_and_its_answer_to_the_backend() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({ "elicitation": {} })).await;
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "ask" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    assert_eq!(backend.method, "tools/call");
    assert_eq!(backend.id, json!(call.backend_id()));

    backend.send(request("q1", "elicitation/create", elicitation()));
    match next(&mut call).await {
        CallEvent::ServerRequest {
            id,
            method,
            params,
            deferred,
        } => {
            assert_eq!(id, json!("q1"));
            assert_eq!(method, "elicitation/create");
            assert_eq!(params, Some(elicitation()));
            assert!(!deferred);
        }
        other => panic!("expected the backend's question, got {other:?}"),
    }
    call.respond(json!("q1"), Ok(json!({ "action": "decline" })))
        .unwrap();
    let answer = peer.answer_to("q1").await.unwrap();
    assert_eq!(answer["result"], json!({ "action": "decline" }));

    backend.answer(json!({ "content": [] }));
    assert_eq!(
        final_result(next(&mut call).await),
        json!({ "content": [] })
    );
    assert!(session.is_reusable());
}

/// A call asking one question, its `ServerRequest` taken: what the tests of lost answers share.
async fn call_with_a_question(peer: &mut TestPeer, session: &Session) -> (ActiveCall, PeerCall) {
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "ask" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    backend.send(request("q1", "elicitation/create", elicitation()));
    match next(&mut call).await {
        CallEvent::ServerRequest { id, .. } => assert_eq!(id, json!("q1")),
        other => panic!("expected the question, got {other:?}"),
    }
    (call, backend)
}

#[tokio::test]
async fn an_answer_that_cannot_be_delivered_ends_its_call_at_once_and_withdraws_it() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({ "elicitation": {} })).await;
    let (mut call, backend) = call_with_a_question(&mut peer, &session).await;
    let call_id = json!(call.backend_id());

    // The server closes the connection the answer went out on, as when it shuts an idle
    // keep-alive connection at the instant the gateway reuses it: it may have read the answer,
    // so the answer is not sent again.
    peer.lose_one_way(1);
    call.respond(
        json!("q1"),
        Ok(json!({ "action": "accept", "content": {} })),
    )
    .unwrap();
    // Not the backend's own timeout on its question, with nothing to show meanwhile.
    match next(&mut call).await {
        CallEvent::Failed(BackendError::Connect(reason)) => assert!(
            reason.contains("answer to the backend's request \"q1\" could not be delivered"),
            "{reason}"
        ),
        other => panic!("expected the call to fail, got {other:?}"),
    }
    let cancelled = peer
        .posted(|m| {
            assert!(
                !(m["id"] == "q1" && m.get("method").is_none()),
                "the answer was sent twice"
            );
            m["method"] == "notifications/cancelled"
        })
        .await
        .expect("the call is withdrawn on the backend");
    assert_eq!(cancelled["params"]["requestId"], call_id);
    assert!(
        !session.is_reusable(),
        "a session that lost an answer is not lent again"
    );
    drop(backend);
}

#[tokio::test]
async fn progress_and_logs_go_to_the_call_active_on_the_session_from_any_stream() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let params = json!({ "name": "slow", "_meta": { "progressToken": "t1" } });
    let mut call = session
        .start_call("tools/call", Some(params), true)
        .unwrap();
    let backend = peer.next_call().await;
    assert_eq!(
        backend.params.as_ref().unwrap()["_meta"]["progressToken"],
        "t1"
    );

    backend.send(progress("t1", 1));
    backend.send(notification(
        "notifications/message",
        json!({ "level": "info", "data": "working" }),
    ));
    match next(&mut call).await {
        CallEvent::Progress(p) => assert_eq!(p, json!({ "progressToken": "t1", "progress": 1 })),
        other => panic!("expected progress, got {other:?}"),
    }
    match next(&mut call).await {
        CallEvent::Log(l) => assert_eq!(l["data"], "working"),
        other => panic!("expected a log message, got {other:?}"),
    }
    // Whose a notification is cannot be told from where it came (on stdio everything shares
    // stdout): one on the standalone stream belongs to the active call too.
    peer.send_outside(progress("t1", 2));
    match next(&mut call).await {
        CallEvent::Progress(p) => assert_eq!(p["progress"], 2),
        other => panic!("expected progress, got {other:?}"),
    }
    backend.answer(json!({}));
    assert_eq!(final_result(next(&mut call).await), json!({}));
}

#[tokio::test]
async fn notifications_outside_any_call_reach_no_later_call_and_changes_reach_the_feed() {
    let mut peer = TestPeer::start().await;
    let feed = Feeds::default().of("someone");
    let mut changes = feed.subscribe();
    let session = connect_with(&peer, "", json!({}), Some(feed), &Metrics::new()).await;
    peer.send_outside(progress("t0", 1));
    peer.send_outside(notification(
        "notifications/message",
        json!({ "level": "error", "data": "idle" }),
    ));
    peer.send_outside(notification("notifications/tools/list_changed", json!({})));
    outside_read(&mut peer, "barrier").await;
    assert_eq!(changes.try_recv().unwrap(), Change::ToolsListChanged);

    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    // A list change during a call is the principal's, not the call's.
    backend.send(notification(
        "notifications/resources/list_changed",
        json!({}),
    ));
    backend.answer(json!({ "done": true }));
    assert_eq!(final_result(next(&mut call).await), json!({ "done": true }));
    assert_eq!(changes.recv().await.unwrap(), Change::ResourcesListChanged);
    assert!(call.try_next_event().is_none());
}

#[tokio::test]
async fn answers_to_ids_nobody_waits_for_are_ignored() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    backend.send(json!({ "jsonrpc": "2.0", "id": 9999, "result": { "stale": true } }));
    backend.send(json!({ "jsonrpc": "2.0", "id": "not-ours", "result": {} }));
    backend.send(json!({
        "jsonrpc": "2.0", "id": 9998, "error": { "code": -32000, "message": "late" }
    }));
    backend.answer(json!({ "fresh": true }));
    assert_eq!(
        final_result(next(&mut call).await),
        json!({ "fresh": true })
    );
    assert!(session.is_alive());
    assert!(session.is_reusable());
}

#[tokio::test]
async fn the_backend_s_ping_is_answered_by_the_session_not_the_call() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    backend.send(request("p1", "ping", json!({})));
    assert_eq!(peer.answer_to("p1").await.unwrap()["result"], json!({}));
    backend.answer(json!({}));
    assert_eq!(final_result(next(&mut call).await), json!({}));
}

#[tokio::test]
async fn a_withdrawn_server_request_is_reported_to_the_call() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({ "elicitation": {} })).await;
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "ask" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    backend.send(request("q1", "elicitation/create", elicitation()));
    backend.send(notification(
        "notifications/cancelled",
        json!({ "requestId": "q1", "reason": "gave up" }),
    ));
    assert!(matches!(
        next(&mut call).await,
        CallEvent::ServerRequest { .. }
    ));
    match next(&mut call).await {
        CallEvent::ServerRequestCancelled { id } => assert_eq!(id, json!("q1")),
        other => panic!("expected the withdrawal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_request_outside_any_call_waits_for_the_next_interruptible_call() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({ "elicitation": {} })).await;
    peer.send_outside(request("e1", "elicitation/create", elicitation()));
    outside_read(&mut peer, "barrier").await;

    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    // Its prelude: the question first, the call only once it is answered.
    assert!(call.is_unsent());
    match next(&mut call).await {
        CallEvent::ServerRequest { id, deferred, .. } => {
            assert_eq!(id, json!("e1"));
            assert!(deferred);
        }
        other => panic!("expected the deferred question, got {other:?}"),
    }
    call.respond(json!("e1"), Ok(json!({ "action": "decline" })))
        .unwrap();
    assert_eq!(
        peer.answer_to("e1").await.unwrap()["result"]["action"],
        "decline"
    );
    call.send().unwrap();
    let backend = peer.next_call().await;
    assert_eq!(backend.method, "tools/call");
    backend.answer(json!({}));
    assert_eq!(final_result(next(&mut call).await), json!({}));
}

#[tokio::test]
async fn under_the_error_policy_a_server_request_outside_any_call_is_refused() {
    let mut peer = TestPeer::start().await;
    let _session = connect(
        &peer,
        "unsolicited = \"error\"",
        json!({ "elicitation": {} }),
    )
    .await;
    peer.send_outside(request("e1", "elicitation/create", elicitation()));
    let answer = peer.answer_to("e1").await.unwrap();
    assert_eq!(answer["error"]["code"], codes::METHOD_NOT_FOUND);
}

#[tokio::test]
async fn a_call_whose_stream_ends_unanswered_fails() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let mut call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    drop(peer.next_call().await);
    match next(&mut call).await {
        CallEvent::Failed(BackendError::Connect(reason)) => {
            assert!(reason.contains("without answering"), "{reason}")
        }
        other => panic!("expected the call to fail, got {other:?}"),
    }
}

#[tokio::test]
async fn dropping_an_unanswered_call_cancels_it_and_the_session_is_not_lent_again() {
    let mut peer = TestPeer::start().await;
    let session = connect(&peer, "", json!({})).await;
    let call = session
        .start_call("tools/call", Some(json!({ "name": "x" })), true)
        .unwrap();
    let backend = peer.next_call().await;
    drop(call);
    let cancelled = peer
        .posted(|m| m["method"] == "notifications/cancelled")
        .await
        .unwrap();
    assert_eq!(cancelled["params"]["requestId"], backend.id);
    assert!(session.is_alive());
    assert!(!session.is_reusable());
}

/// A call held for its client's retry takes none of its events; a backend that keeps sending
/// notifications meanwhile must not stop the session's reader. What the call must see still
/// reaches it; the notices past its room are dropped and counted.
#[tokio::test]
async fn a_held_call_s_unread_notifications_do_not_stall_the_session() {
    const FLOOD: usize = 1000;
    let mut peer = TestPeer::start().await;
    let metrics = Metrics::new();
    let session = connect_with(&peer, "", json!({ "elicitation": {} }), None, &metrics).await;
    let params = json!({ "name": "slow", "_meta": { "progressToken": "t1" } });
    let mut call = session
        .start_call("tools/call", Some(params), true)
        .unwrap();
    let backend = peer.next_call().await;
    for n in 0..FLOOD {
        backend.send(progress("t1", n as u64));
    }
    backend.send(notification(
        "notifications/message",
        json!({ "level": "info", "data": "still working" }),
    ));
    // After the flood, on the same stream: the backend's ping, then a question for the client.
    backend.send(request("p1", "ping", json!({})));
    backend.send(request("q1", "elicitation/create", elicitation()));
    let pong = peer.answer_to("p1").await;
    assert!(
        pong.is_ok(),
        "the session stopped reading: the backend's ping went unanswered ({})",
        pong.unwrap_err()
    );
    // The gateway's own requests on the session are still answered.
    session.request("ping", None, WAIT).await.unwrap().unwrap();

    // The call, resumed: the notices it had room for, in order, then the question.
    let mut kept = Vec::new();
    loop {
        match next(&mut call).await {
            CallEvent::Progress(p) => kept.push(p["progress"].as_u64().unwrap()),
            CallEvent::ServerRequest { id, .. } => {
                assert_eq!(id, json!("q1"));
                break;
            }
            other => panic!("expected progress or the question, got {other:?}"),
        }
    }
    assert_eq!(kept, (0..MAX_QUEUED_NOTICES as u64).collect::<Vec<_>>());
    let dropped = |kind| {
        metrics
            .backend_events_dropped
            .with_label_values(&["peer", kind])
            .get()
    };
    assert_eq!(dropped("progress"), (FLOOD - MAX_QUEUED_NOTICES) as u64);
    assert_eq!(dropped("log"), 1);

    // Taken events make room again; the answer comes last.
    backend.send(progress("t1", 5000));
    backend.answer(json!({ "done": true }));
    match next(&mut call).await {
        CallEvent::Progress(p) => assert_eq!(p["progress"], 5000),
        other => panic!("expected progress, got {other:?}"),
    }
    assert_eq!(final_result(next(&mut call).await), json!({ "done": true }));
    assert_eq!(dropped("progress"), (FLOOD - MAX_QUEUED_NOTICES) as u64);
}
