//! Leases and the pool's accounting, with sessions of a real peer on loopback ([`TestPeer`]).

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::backend::test_peer::{TestPeer, WAIT};
use crate::config::ANONYMOUS;

fn pool(peer: &TestPeer, extra: &str) -> Pool {
    Pool::new(
        peer.spec(extra),
        Arc::new(Metrics::new()),
        CancellationToken::new(),
    )
    .expect("a pool")
}

async fn lease(pool: &Pool, principal: &str) -> Result<Lease, PoolError> {
    let profile = json!({});
    pool.acquire(&PoolKey::new(principal, &profile), &profile, Purpose::Plain)
        .await
}

#[tokio::test]
async fn a_dropped_lease_gives_its_session_back_for_the_next_caller() {
    let peer = TestPeer::start().await;
    let pool = pool(&peer, "");
    let first = lease(&pool, "p").await.unwrap();
    let number = first.number();
    assert_eq!(pool.stats(), PoolStats { open: 1, idle: 0 });
    drop(first);
    assert_eq!(pool.stats(), PoolStats { open: 1, idle: 1 });
    assert!(pool.inner.in_use.get("p").is_none());

    let again = lease(&pool, "p").await.unwrap();
    assert_eq!(again.number(), number);
    assert_eq!(pool.stats(), PoolStats { open: 1, idle: 0 });
}

#[tokio::test]
async fn a_lease_whose_call_was_cancelled_gives_no_session_back() {
    let mut peer = TestPeer::start().await;
    let pool = pool(&peer, "");
    let first = lease(&pool, "p").await.unwrap();
    let number = first.number();
    let call = first
        .start_call("tools/call", Some(json!({ "name": "x" })), false)
        .unwrap();
    let _backend = peer.next_call().await;
    drop(call);
    drop(first);
    assert_eq!(pool.stats().idle, 0);
    let next = lease(&pool, "p").await.unwrap();
    assert_ne!(next.number(), number);
}

#[tokio::test]
async fn a_principal_past_its_share_is_refused_until_a_lease_ends() {
    let peer = TestPeer::start().await;
    let pool = pool(&peer, "pool = { max_sessions_per_principal = 1 }");
    let held = lease(&pool, "p").await.unwrap();
    match lease(&pool, "p").await {
        Err(PoolError::PrincipalShare { share: 1, .. }) => {}
        Err(e) => panic!("expected the share refusal, got {e}"),
        Ok(_) => panic!("a second session was lent past the principal's share"),
    }
    // Another principal is not refused.
    drop(lease(&pool, "q").await.unwrap());
    drop(held);
    drop(lease(&pool, "p").await.unwrap());
}

/// Without authentication every caller is one principal, with no share: only `max_sessions`
/// bounds it.
#[tokio::test]
async fn a_waiting_caller_gets_the_session_given_back() {
    let peer = TestPeer::start().await;
    let pool = Arc::new(pool(&peer, "pool = { max_sessions = 1 }"));
    let held = lease(&pool, ANONYMOUS).await.unwrap();
    let number = held.number();
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { lease(&pool, ANONYMOUS).await.map(|lease| lease.number()) }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "a second session was opened past max_sessions"
    );
    drop(held);
    let got = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
    assert_eq!(got.unwrap(), number);
}

#[tokio::test]
async fn a_caller_that_waits_past_queue_wait_gets_a_clear_error() {
    let peer = TestPeer::start().await;
    let pool = pool(&peer, "pool = { max_sessions = 1, queue_wait = \"100ms\" }");
    let _held = lease(&pool, ANONYMOUS).await.unwrap();
    match lease(&pool, ANONYMOUS).await {
        Err(PoolError::QueueTimeout { .. }) => {}
        Err(e) => panic!("expected the queue timeout, got {e}"),
        Ok(_) => panic!("a second session was lent past max_sessions"),
    }
}
