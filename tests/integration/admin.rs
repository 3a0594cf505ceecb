//! The admin listener: liveness, readiness, metrics and status, read while real calls run.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness};
use crate::support::modern_client::{modern_request, post_raw};
use crate::support::rpc::elicitation_caps;

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("admin endpoint answers");
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_metrics_and_status() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.server.admin_listen = Some(([127, 0, 0, 1], 0).into());
    })
    .await;
    let admin = format!(
        "http://{}",
        h.gateway
            .as_ref()
            .unwrap()
            .admin_addr()
            .expect("admin listener")
    );
    assert_eq!(get(&format!("{admin}/healthz")).await.0, 200);
    let mut ready = 0;
    for _ in 0..100 {
        ready = get(&format!("{admin}/readyz")).await.0;
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ready, 200, "ready once the backend initialized a session");

    let first = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    let round = post_raw(&h.url, &first).await;
    assert_eq!(round.result_type(), Some("input_required"));
    let (_, metrics) = get(&format!("{admin}/metrics")).await;
    assert!(metrics.contains("mrtr_held_calls 1"), "{metrics}");
    assert!(
        metrics.contains("mrtr_input_requests_total{kind=\"elicitation\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("mrtr_requests_total{method=\"tools/call\",outcome=\"input_required\",route=\"/mcp\"} 1"), "{metrics}");
    let (_, status) = get(&format!("{admin}/status")).await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["held_calls"], 1);
    assert!(status["backends"]["legacy"]["sessions"].as_u64().unwrap() >= 1);

    let mut tampered = first.clone();
    tampered["id"] = json!(2);
    tampered["params"]["requestState"] = json!("not-a-state");
    tampered["params"]["inputResponses"] = json!({});
    assert_eq!(post_raw(&h.url, &tampered).await.status, 400);
    let (_, metrics) = get(&format!("{admin}/metrics")).await;
    assert!(
        metrics.contains("mrtr_redemptions_total{result=\"malformed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mrtr_backend_session_starts_total{backend=\"legacy\",result=\"ok\"}"),
        "{metrics}"
    );
    // Labels never carry principals, arguments or states.
    assert!(!metrics.contains("not-a-state") && !metrics.contains("anonymous"));
    h.stop().await;
}
