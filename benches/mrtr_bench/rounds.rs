//! One elicitation exchange, both ways it can be done, plus the small admin-endpoint reads.
//!
//! - 2026-07-28 ([`gateway_round`]): `tools/call elicit` answers `input_required`; the retry
//!   carries `inputResponses` and the echoed `requestState` and gets the result. The two halves
//!   are separate ([`open_round`], [`finish_round`]) so that rounds can be held in between.
//!   Sent to a gateway (whose round is its own, or the backend's relayed), or to the fast
//!   backend directly, which answers 2026-07-28 too.
//! - 2025-11-25 ([`native_round`]): `tools/call elicit` opens an SSE stream whose first event
//!   is `elicitation/create`; the answer is POSTed on the same session and the result arrives
//!   on the stream. On the backend directly, or through a gateway whose backend is fixed to
//!   2026-07-28 (the reverse bridge asks the backend's question that way).
//!
//! Each function checks what it gets, so a wrong answer counts as an error.

use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::wire::{
    exchange, first_text, json_exchange, legacy_post, legacy_tool_call, modern_post,
    modern_tool_call, result_of, send, HttpClient, SseReader,
};
use crate::BenchResult;

const ELICIT_TOOL: &str = "elicit";
const ANSWERED_NAME: &str = "bench";
const EXPECTED_GREETING: &str = "Hello, bench!";

fn accepted_answer() -> Value {
    json!({"action": "accept", "content": {"name": ANSWERED_NAME}})
}

/// A call the gateway holds: the first request and what its retry must echo.
pub struct HeldRound {
    first: Value,
    key: String,
    state: String,
}

/// Sends the first `tools/call elicit` and returns the held round.
pub async fn open_round(client: &HttpClient, uri: &Uri, id: u64) -> BenchResult<HeldRound> {
    let first = modern_tool_call(id, ELICIT_TOOL, json!({}), json!({"elicitation": {}}));
    let request = modern_post(uri, "tools/call", Some(ELICIT_TOOL), first.to_string())?;
    let message = json_exchange(client, request).await?;
    let round = result_of(&message)?;
    if round["resultType"] != "input_required" {
        return Err(format!("expected input_required, got {round}").into());
    }
    let state = round["requestState"]
        .as_str()
        .ok_or("input_required without requestState")?
        .to_owned();
    let key = round["inputRequests"]
        .as_object()
        .and_then(|requests| {
            requests
                .iter()
                .find(|(_, request)| request["method"] == "elicitation/create")
        })
        .map(|(key, _)| key.clone())
        .ok_or("input_required without an elicitation/create")?;
    Ok(HeldRound { first, key, state })
}

/// Retries a held round with its answer and checks the final result. The retry's id is the
/// first request's plus one.
pub async fn finish_round(client: &HttpClient, uri: &Uri, round: &HeldRound) -> BenchResult<()> {
    let mut retry = round.first.clone();
    retry["id"] = json!(round.first["id"].as_u64().unwrap_or_default() + 1);
    retry["params"]["inputResponses"] = json!({ round.key.as_str(): accepted_answer() });
    retry["params"]["requestState"] = json!(round.state);
    let request = modern_post(uri, "tools/call", Some(ELICIT_TOOL), retry.to_string())?;
    let message = json_exchange(client, request).await?;
    let result = result_of(&message)?;
    if result["resultType"] != "complete" || first_text(result) != EXPECTED_GREETING {
        return Err(format!("unexpected final result {result}").into());
    }
    Ok(())
}

/// The whole 2026-07-28 exchange at `uri`: a gateway, or the backend directly.
pub async fn gateway_round(client: &HttpClient, uri: &Uri, id: u64) -> BenchResult<()> {
    let round = open_round(client, uri, id).await?;
    finish_round(client, uri, &round).await
}

/// The same exchange as a 2025-11-25 client does it on `session`: directly on the backend, or
/// through a gateway's reverse bridge.
pub async fn native_round(
    client: &HttpClient,
    uri: &Uri,
    session: &HeaderValue,
    id: u64,
) -> BenchResult<()> {
    let call = legacy_tool_call(id, ELICIT_TOOL, json!({}));
    let response = send(client, legacy_post(uri, Some(session), call.to_string())?).await?;
    if response.status() != StatusCode::OK {
        return Err(format!("tools/call elicit: HTTP {}", response.status()).into());
    }
    let mut events = SseReader::new(response.into_body());
    let ask = events
        .next_message()
        .await?
        .ok_or("stream ended before elicitation/create")?;
    if ask["method"] != "elicitation/create" {
        return Err(format!("expected elicitation/create, got {ask}").into());
    }
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": accepted_answer()});
    let (status, _, _) =
        exchange(client, legacy_post(uri, Some(session), answer.to_string())?).await?;
    if status != StatusCode::ACCEPTED {
        return Err(format!("answer POST: HTTP {status}").into());
    }
    let done = events
        .next_message()
        .await?
        .ok_or("stream ended before the result")?;
    if done["id"] != json!(id) || first_text(result_of(&done)?) != EXPECTED_GREETING {
        return Err(format!("unexpected final message {done}").into());
    }
    Ok(())
}

/// GET on an admin path; returns the status and the body.
pub async fn admin_get(
    client: &HttpClient,
    admin: std::net::SocketAddr,
    path: &str,
) -> BenchResult<(StatusCode, String)> {
    let request = Request::get(format!("http://{admin}{path}")).body(Full::default())?;
    let (status, _, body) = exchange(client, request).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Held calls according to the gateway's `/status`.
pub async fn held_calls(client: &HttpClient, admin: std::net::SocketAddr) -> BenchResult<u64> {
    let (status, body) = admin_get(client, admin, "/status").await?;
    if status != StatusCode::OK {
        return Err(format!("/status: HTTP {status}").into());
    }
    let status: Value = serde_json::from_str(&body)?;
    status["held_calls"]
        .as_u64()
        .ok_or_else(|| format!("/status without held_calls: {body}").into())
}

/// Polls `/readyz` until it answers 200, for at most `limit`.
pub async fn wait_ready(
    client: &HttpClient,
    admin: std::net::SocketAddr,
    limit: std::time::Duration,
) -> BenchResult<()> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if let Ok((StatusCode::OK, _)) = admin_get(client, admin, "/readyz").await {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(format!("gateway not ready within {limit:?}").into())
}

/// Held-call slots and pool sessions beyond the rounds a scenario holds (warm-up, readiness probe).
const HEADROOM: usize = 64;
/// Rounds completed before a memory baseline, so that lazily built state already exists.
const WARMUP_ROUNDS: u64 = 16;

/// A fast backend and a gateway in front of it, sized for `rounds` held rounds that expire after
/// `held_ttl_s`, ready and warmed up.
pub struct HeldSetup {
    pub backend: crate::procs::BackendProcess,
    pub gateway: crate::procs::GatewayProcess,
    pub admin: std::net::SocketAddr,
    pub uri: Uri,
    pub client: HttpClient,
}

pub async fn start_for_held_rounds(rounds: usize, held_ttl_s: u64) -> BenchResult<HeldSetup> {
    let backend = crate::procs::BackendProcess::start()?;
    let mut config = crate::gateway_config::HttpGatewayConfig::new(backend.url());
    config.max_sessions = rounds + HEADROOM;
    config.max_held = rounds + HEADROOM;
    config.held_ttl_s = held_ttl_s;
    config.admin = true;
    let gateway =
        crate::procs::GatewayProcess::start(&config.to_toml(), std::time::Duration::from_secs(30))?;
    let admin = gateway
        .admin
        .ok_or("the gateway did not report its admin address")?;
    let uri: Uri = gateway.url().parse()?;
    let client = crate::wire::new_client();
    wait_ready(&client, admin, std::time::Duration::from_secs(20)).await?;
    for n in 0..WARMUP_ROUNDS {
        gateway_round(&client, &uri, 1 + 2 * n).await?;
    }
    Ok(HeldSetup {
        backend,
        gateway,
        admin,
        uri,
        client,
    })
}
