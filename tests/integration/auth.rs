//! Client authentication: 401 with a resource metadata challenge, the metadata document, and
//! the principal binding sessions and `requestState`.

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use rmcp::model::ClientCapabilities;
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, Options};
use crate::support::modern_client::{
    modern_request, post_raw_with_headers, standard_headers, RawExchange,
};

fn caps() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {}})).unwrap()
}

fn bearer_route() -> Options {
    Options {
        route: format!(
            "auth = {{ mode = \"bearer\", tokens = [{{ principal = \"alice\", sha256 = {:?} }}, {{ principal = \"bob\", token = \"bob-secret\" }}] }}\nauthorization_servers = [\"https://auth.example\"]",
            mrtr_gateway::auth::token_digest("alice-secret")
        ),
        ..Options::default()
    }
}

async fn post_as(url: &str, token: Option<&str>, body: &Value) -> RawExchange {
    let mut headers: HeaderMap = standard_headers(body);
    if let Some(token) = token {
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
    }
    post_raw_with_headers(url, body, headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_token_get_401_with_a_challenge() {
    let h = Harness::start_with(Backend::Stdio, bearer_route()).await;
    let body = modern_request(1, "tools/list", json!({}), &caps());
    for token in [None, Some("wrong")] {
        let exchange = post_as(&h.url, token, &body).await;
        assert_eq!(exchange.status, 401, "{}", exchange.body);
        let challenge = exchange.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .to_string();
        let port = h.url.split(':').nth(2).unwrap().split('/').next().unwrap();
        assert!(
            challenge.starts_with(&format!(
                "Bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
            )),
            "{challenge}"
        );
        assert_eq!(challenge.contains("invalid_token"), token.is_some());
    }
    assert!(
        h.backend_methods().is_empty(),
        "nothing reached the backend"
    );

    let metadata: Value = reqwest::get(
        h.url
            .replace("/mcp", "/.well-known/oauth-protected-resource/mcp"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(metadata["resource"], h.url);
    assert_eq!(
        metadata["authorization_servers"],
        json!(["https://auth.example"])
    );

    let ok = post_as(&h.url, Some("alice-secret"), &body).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_principal_binds_sessions_and_request_state() {
    let h = Harness::start_with(Backend::Stdio, bearer_route()).await;
    let first = modern_request(1, "tools/call", json!({"name": "ask_name"}), &caps());
    let round = post_as(&h.url, Some("alice-secret"), &first).await;
    let result = round.result().expect("a round").clone();
    assert_eq!(result["resultType"], "input_required");
    let key = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let mut retry = first.clone();
    retry["id"] = json!(2);
    retry["params"]["inputResponses"] =
        json!({ key: {"action": "accept", "content": {"name": "Bob"}} });
    retry["params"]["requestState"] = result["requestState"].clone();

    let stolen = post_as(&h.url, Some("bob-secret"), &retry).await;
    assert_eq!(stolen.status, 400, "{}", stolen.body);
    assert_eq!(
        stolen.error().unwrap()["data"]["reason"],
        "principal_mismatch"
    );

    let done = post_as(&h.url, Some("alice-secret"), &retry).await;
    assert_eq!(done.result().unwrap()["content"][0]["text"], "Hello, Bob!");

    // Bob's call gets a session of its own.
    let bobs = post_as(
        &h.url,
        Some("bob-secret"),
        &modern_request(3, "tools/list", json!({}), &caps()),
    )
    .await;
    assert_eq!(bobs.status, 200);
    let sessions = h
        .backend_methods()
        .iter()
        .filter(|m| *m == "initialize")
        .count();
    assert_eq!(sessions, 2, "one backend session per principal");
    h.stop().await;
}
