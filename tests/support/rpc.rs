//! Small builders and checks of 2026-07-28 JSON-RPC exchanges shared by the integration tests:
//! client capability sets, `tools/call` bodies, MRTR rounds, result text and error responses.

#![allow(dead_code)]

use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION};
use rmcp::model::ClientCapabilities;
use serde_json::{json, Map, Value};

use crate::support::modern_client::{
    modern_request, post_raw_with_headers, standard_headers, RawExchange,
};

/// Client capabilities parsed from their JSON form, e.g. `{"roots": {}}`.
pub fn caps_from(value: Value) -> ClientCapabilities {
    serde_json::from_value(value).expect("capabilities")
}

/// A client that declares no capabilities (`clientCapabilities: {}`).
pub fn no_caps() -> ClientCapabilities {
    ClientCapabilities::default()
}

/// A client that declares a bare `elicitation: {}` (form mode only).
pub fn elicitation_caps() -> ClientCapabilities {
    caps_from(json!({"elicitation": {}}))
}

/// A client that declares every input kind: form and URL elicitation, sampling and roots.
pub fn all_caps() -> ClientCapabilities {
    caps_from(json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}))
}

/// A `tools/call` request of tool `name` with `arguments`, from a client declaring `capabilities`.
pub fn tool_call(
    id: impl Into<Value>,
    name: &str,
    arguments: Value,
    capabilities: &ClientCapabilities,
) -> Value {
    modern_request(
        id,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
        capabilities,
    )
}

/// The text of the first content block of the exchange's result.
#[track_caller]
pub fn result_text(exchange: &RawExchange) -> String {
    exchange
        .result()
        .unwrap_or_else(|| panic!("a result: {}", exchange.body))["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("text content: {}", exchange.body))
        .to_string()
}

/// Asserts that `exchange` is a JSON-RPC error response with HTTP `status` and error `code`, and
/// returns its `error` object for further checks (`data`, `message`). A 429 or 503 must carry
/// `Retry-After`.
#[track_caller]
pub fn assert_rpc_error(exchange: &RawExchange, status: u16, code: i64) -> &Value {
    assert_eq!(exchange.status, status, "HTTP status of {}", exchange.body);
    if status == 429 || status == 503 {
        let retry_after = exchange.headers.get("retry-after");
        assert!(
            retry_after
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.parse::<u32>().is_ok()),
            "a {status} carries Retry-After (seconds): {retry_after:?}"
        );
    }
    assert_eq!(
        exchange.error_code(),
        Some(code),
        "JSON-RPC error code of {}",
        exchange.body
    );
    exchange.error().expect("a JSON-RPC error")
}

/// One `input_required` round: its `requestState` and its input requests by key.
pub struct Round {
    pub state: String,
    pub requests: Map<String, Value>,
}

/// Asserts that `exchange` is an `input_required` round (HTTP 200, no caching fields, the server
/// info in `_meta`) and returns it.
#[track_caller]
pub fn input_required(exchange: &RawExchange) -> Round {
    assert_eq!(exchange.status, 200, "{}", exchange.body);
    let result = exchange
        .result()
        .unwrap_or_else(|| panic!("a result: {}", exchange.body));
    assert_eq!(result["resultType"], "input_required", "{}", exchange.body);
    assert!(result.get("ttlMs").is_none() && result.get("cacheScope").is_none());
    assert!(result["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
    Round {
        state: result["requestState"]
            .as_str()
            .expect("requestState")
            .to_string(),
        requests: result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    }
}

/// The key of the round's input request with this `method`.
#[track_caller]
pub fn key_of(round: &Round, method: &str) -> String {
    round
        .requests
        .iter()
        .find(|(_, r)| r["method"] == method)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| panic!("no {method} in {:?}", round.requests))
}

/// POSTs `body` with the standard headers and, when given, `Authorization: Bearer TOKEN`.
pub async fn post_with_bearer(url: &str, token: Option<&str>, body: &Value) -> RawExchange {
    let mut headers = standard_headers(body);
    if let Some(token) = token {
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).expect("token header value"),
        );
    }
    post_raw_with_headers(url, body, headers).await
}

/// POSTs `body` from a client that gives up after `patience`: the connection is closed then,
/// before a slow answer arrives.
pub async fn post_giving_up_after(
    url: &str,
    body: &Value,
    patience: Duration,
) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::builder()
        .timeout(patience)
        .build()
        .expect("HTTP client")
        .post(url)
        .headers(standard_headers(body))
        .body(body.to_string())
        .send()
        .await
}

/// Starts `ask_name` at `url`: the first request, and the `input_required` round it gets.
pub async fn ask_name_round(url: &str) -> (Value, Value) {
    let first = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    let round = crate::support::modern_client::post_raw(url, &first).await;
    let result = round.result().expect("a result").clone();
    assert_eq!(result["resultType"], "input_required", "{}", round.body);
    (first, result)
}
