//! A bounded soak on loopback: 2,000 MRTR flows from 32 concurrent clients while the backend's
//! processes are killed twice. Every flow ends in a result or a clear JSON-RPC error, none hangs,
//! and the held table and the sessions return to their baseline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{
    answer_only_input, modern_request, standard_headers, RawExchange,
};
use crate::support::rpc::elicitation_caps;

const FLOWS: usize = 2_000;
const CLIENTS: usize = 32;

/// PIDs of the backend processes this harness started (their environment names its log).
fn backend_pids(h: &Harness) -> Vec<i32> {
    let marker = format!("LEGACY_BACKEND_LOG={}", h.backend_log.display());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ
            .split(|b| *b == 0)
            .any(|var| var == marker.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> Option<RawExchange> {
    let response = client
        .post(url)
        .headers(standard_headers(body))
        .body(body.to_string())
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.ok()?;
    let messages = serde_json::from_str(&text).into_iter().collect();
    Some(RawExchange {
        status,
        headers,
        body: text,
        messages,
    })
}

#[derive(Default)]
struct Tally {
    completed: AtomicUsize,
    clear_errors: AtomicUsize,
    hangs: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_flows_survive_backend_kills() {
    let h = Arc::new(
        Harness::start_with(Backend::Stdio, |c| {
            let pool = &mut c.legacy().pool;
            pool.max_sessions = 40;
            pool.idle_timeout = Duration::from_secs(1);
            pool.queue_wait = Duration::from_secs(20);
            c.mrtr.held_ttl = Duration::from_secs(10);
        })
        .await,
    );
    let started = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Tally::default());
    let caps = elicitation_caps();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    let mut workers = Vec::new();
    for worker in 0..CLIENTS {
        let (h, started, tally, caps, client) = (
            h.clone(),
            started.clone(),
            tally.clone(),
            caps.clone(),
            client.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let n = started.fetch_add(1, Ordering::Relaxed);
                if n >= FLOWS {
                    return;
                }
                let first = modern_request(
                    json!(format!("w{worker}-{n}")),
                    "tools/call",
                    json!({"name": "ask_name"}),
                    &caps,
                );
                let Some(round) = post(&client, &h.url, &first).await else {
                    tally.hangs.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let Some(result) = round
                    .result()
                    .filter(|r| r["resultType"] == "input_required")
                else {
                    assert!(
                        round.error_code().is_some(),
                        "neither round nor error: {}",
                        round.body
                    );
                    tally.clear_errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let retry = answer_only_input(
                    &first,
                    json!(format!("w{worker}-{n}-r")),
                    result,
                    json!({"action": "accept", "content": {"name": "Soak"}}),
                );
                match post(&client, &h.url, &retry).await {
                    None => {
                        tally.hangs.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(done)
                        if done
                            .result()
                            .is_some_and(|r| r["content"][0]["text"] == "Hello, Soak!") =>
                    {
                        tally.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(done) => {
                        assert!(
                            done.error_code().is_some(),
                            "neither result nor error: {}",
                            done.body
                        );
                        tally.clear_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    // Kill every backend process twice during the run.
    let killer = {
        let (h, tally) = (h.clone(), tally.clone());
        tokio::spawn(async move {
            let mut kills = 0;
            for threshold in [FLOWS / 4, FLOWS / 2] {
                for _ in 0..600 {
                    let done = tally.completed.load(Ordering::Relaxed)
                        + tally.clear_errors.load(Ordering::Relaxed);
                    if done >= threshold {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                for pid in backend_pids(&h) {
                    crate::support::signal::send(pid, libc::SIGKILL);
                    kills += 1;
                }
            }
            kills
        })
    };
    for worker in workers {
        worker.await.unwrap();
    }
    let kills = killer.await.unwrap();

    let completed = tally.completed.load(Ordering::Relaxed);
    let errors = tally.clear_errors.load(Ordering::Relaxed);
    let hangs = tally.hangs.load(Ordering::Relaxed);
    eprintln!("soak: {completed} completed, {errors} clear errors, {hangs} hangs, {kills} processes killed");
    assert_eq!(hangs, 0, "no flow hangs");
    assert_eq!(completed + errors, FLOWS);
    assert!(kills >= 2, "the backend was killed during the run");
    assert!(completed > FLOWS / 2, "most flows complete");

    h.wait_no_held().await;
    for _ in 0..100 {
        if h.pool_stats().open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(h.pool_stats().open, 0, "sessions return to their baseline");
    match Arc::try_unwrap(h) {
        Ok(h) => h.stop().await,
        Err(_) => panic!("harness still shared"),
    }
}
