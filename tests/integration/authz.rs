//! Authorization: scopes (required by a route, or a policy rule's step-up, with the 403
//! challenge), the route's policy in CEL over the caller's claims (lists filtered, hidden items
//! unknown, retries of held rounds and listens checked again) for both eras, what backends are
//! told about the caller (identity headers and environment, RFC 8693 token exchange; never the
//! caller's token), and the audit log. Tokens are JWTs signed by a local issuer whose JWKS and
//! token endpoint run on loopback ([`Issuer`]).

use std::time::Duration;

use mrtr_gateway::config::{AuthConfig, Config, JwtConfig, PolicyRule, TokenExchangeConfig};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::issuer::{Exchanges, Issuer, AUDIENCE, CLIENT_ID, CLIENT_SECRET, ISSUER};
use crate::support::modern_client::{answer_only_input, modern_request, send_raw, RawExchange};
use crate::support::rpc::{assert_rpc_error, elicitation_caps, post_with_bearer};

const LEGACY: &str = "2025-11-25";

/// The README's example: readers use `echo`, `whoami` and `ask_name`; editors everything, once
/// their token carries `tools:all`.
const READERS_AND_EDITORS: &str = r#"
[[policy]]
tools = ["echo", "whoami", "ask_name"]
when = '"readers" in claims.groups'
[[policy]]
tools = ["*"]
when = '"editors" in claims.groups'
scopes = ["tools:all"]
"#;

#[derive(serde::Deserialize)]
struct Rules {
    #[serde(default)]
    policy: Vec<PolicyRule>,
}

fn rules(text: &str) -> Vec<PolicyRule> {
    toml::from_str::<Rules>(text).expect("policy rules").policy
}

/// `/mcp` takes JWTs from `issuer`, requiring `scopes`, under `policy`.
fn jwt_route(config: &mut Config, issuer: &Issuer, scopes: &[&str], policy: &str) {
    let route = config.mcp_route();
    route.auth = AuthConfig::Jwt(JwtConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: None,
        jwks_url: Some(issuer.jwks_url()),
        algorithms: Vec::new(),
        leeway: Duration::from_secs(30),
        jwks_refresh: Duration::from_secs(300),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    });
    route.authorization_servers = vec![ISSUER.into()];
    route.policy = rules(policy);
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    modern_request(
        id,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        &elicitation_caps(),
    )
}

fn list(id: i64) -> Value {
    modern_request(id, "tools/list", json!({}), &elicitation_caps())
}

/// Every tool `token`'s caller is shown, page after page (the backend lists 5 per page; a page
/// may come back with fewer, or none, once hidden ones are left out).
async fn listed_tools(url: &str, token: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..20 {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let body = modern_request(100 + page, "tools/list", params, &elicitation_caps());
        let exchange = post_with_bearer(url, Some(token), &body).await;
        let result = exchange
            .result()
            .unwrap_or_else(|| panic!("a result: {}", exchange.body));
        // Results that differ per caller are never for a shared cache.
        assert_eq!(result["cacheScope"], "private", "{}", exchange.body);
        names.extend(
            result["tools"]
                .as_array()
                .expect("tools")
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string()),
        );
        cursor = result["nextCursor"].as_str().map(String::from);
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "more than 20 pages");
    names.sort();
    names
}

/// The backend never heard of a call to `tool`.
fn never_called(h: &Harness, tool: &str) {
    assert!(
        !h.backend_messages()
            .iter()
            .any(|m| m["method"] == "tools/call" && m["params"]["name"] == tool),
        "the backend heard of {tool}"
    );
}

fn challenge(exchange: &RawExchange) -> String {
    exchange
        .headers
        .get("www-authenticate")
        .unwrap_or_else(|| panic!("a challenge: {}", exchange.body))
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_s_scopes_are_required_and_named_in_the_challenge_and_the_metadata() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(c, &issuer, &["mcp:use"], READERS_AND_EDITORS)
    })
    .await;
    let bare = issuer.token("alice", json!({"groups": ["readers"]}));
    let refused = post_with_bearer(&h.url, Some(&bare), &list(1)).await;
    assert_rpc_error(&refused, 403, -32600);
    let metadata_url = format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp",
        h.port()
    );
    assert_eq!(
        challenge(&refused),
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"mcp:use\", resource_metadata=\"{metadata_url}\""
        )
    );
    assert!(
        h.backend_methods().is_empty(),
        "nothing reached the backend"
    );

    let scoped = issuer.token("alice", json!({"groups": ["readers"], "scope": "mcp:use"}));
    let listed = post_with_bearer(&h.url, Some(&scoped), &list(2)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);

    let metadata: Value = reqwest::get(&metadata_url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        metadata["scopes_supported"],
        json!(["mcp:use", "tools:all"])
    );
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_see_and_use_only_their_tools_and_editors_step_up() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(c, &issuer, &[], READERS_AND_EDITORS)
    })
    .await;
    let reader = issuer.token("rita", json!({"groups": ["readers"]}));
    assert_eq!(
        listed_tools(&h.url, &reader).await,
        ["ask_name", "echo", "whoami"]
    );

    let echoed = post_with_bearer(
        &h.url,
        Some(&reader),
        &call(2, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(echoed.result_type(), Some("complete"), "{}", echoed.body);
    // A hidden tool is an unknown one, and the backend hears nothing of it.
    let hidden = post_with_bearer(&h.url, Some(&reader), &call(3, "pid", json!({}))).await;
    let error = assert_rpc_error(&hidden, 200, -32602);
    assert_eq!(error["message"], "Unknown tool: pid");
    never_called(&h, "pid");

    // An editor without the step-up scope sees every tool and is asked to step up.
    let editor = issuer.token("eddie", json!({"groups": ["editors"]}));
    let listed = listed_tools(&h.url, &editor).await;
    assert!(listed.contains(&"pid".to_string()), "{listed:?}");
    let step_up = post_with_bearer(&h.url, Some(&editor), &call(5, "pid", json!({}))).await;
    let error = assert_rpc_error(&step_up, 403, -32600);
    assert_eq!(error["data"]["scopes"], json!(["tools:all"]));
    assert!(
        challenge(&step_up).starts_with("Bearer error=\"insufficient_scope\", scope=\"tools:all\""),
        "{}",
        challenge(&step_up)
    );
    never_called(&h, "pid");
    let stepped = issuer.token(
        "eddie",
        json!({"groups": ["editors"], "scope": "tools:all"}),
    );
    let done = post_with_bearer(&h.url, Some(&stepped), &call(6, "pid", json!({}))).await;
    assert_eq!(done.result_type(), Some("complete"), "{}", done.body);

    // Nobody else sees anything.
    let stranger = issuer.token("sam", json!({"groups": []}));
    assert!(listed_tools(&h.url, &stranger).await.is_empty());
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_round_s_retry_is_decided_again() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(c, &issuer, &[], READERS_AND_EDITORS)
    })
    .await;
    let reader = issuer.token("rita", json!({"groups": ["readers"]}));
    let first = call(1, "ask_name", json!({}));
    let round = post_with_bearer(&h.url, Some(&reader), &first).await;
    assert_eq!(
        round.result_type(),
        Some("input_required"),
        "{}",
        round.body
    );
    let round = round.result().unwrap().clone();
    let retry = answer_only_input(
        &first,
        json!(2),
        &round,
        json!({"action": "accept", "content": {"name": "Rita"}}),
    );
    // The same principal, no longer a reader: the retry is refused, and nothing reaches the
    // backend; the call stays held.
    let demoted = issuer.token("rita", json!({"groups": []}));
    let refused = post_with_bearer(&h.url, Some(&demoted), &retry).await;
    assert_rpc_error(&refused, 200, -32602);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !h.backend_messages()
            .iter()
            .any(|m| m.get("result").is_some_and(|r| r.get("action").is_some())),
        "the backend heard the answer"
    );
    let done = post_with_bearer(&h.url, Some(&reader), &retry).await;
    assert_eq!(done.result_type(), Some("complete"), "{}", done.body);
    assert!(done.body.contains("Hello, Rita!"), "{}", done.body);
    h.stop().await;
    issuer.stop();
}

fn legacy_headers(session: Option<&str>, token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    if let Some(session) = session {
        headers.insert("mcp-session-id", HeaderValue::from_str(session).unwrap());
        headers.insert("mcp-protocol-version", HeaderValue::from_static(LEGACY));
    }
    headers
}

/// A 2025-11-25 session of `token`'s caller: its id.
async fn legacy_session(url: &str, token: &str) -> String {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    });
    let init = send_raw(
        reqwest::Method::POST,
        url,
        legacy_headers(None, token),
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(init.status, 200, "{}", init.body);
    let session = init.headers["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send_raw(
        reqwest::Method::POST,
        url,
        legacy_headers(Some(&session), token),
        initialized.to_string().into_bytes(),
    )
    .await;
    session
}

async fn legacy_post(url: &str, session: &str, token: &str, body: Value) -> RawExchange {
    send_raw(
        reqwest::Method::POST,
        url,
        legacy_headers(Some(session), token),
        body.to_string().into_bytes(),
    )
    .await
}

/// The response to request `id` among a legacy exchange's messages.
fn response(exchange: &RawExchange, id: i64) -> Value {
    exchange
        .messages
        .iter()
        .find(|m| m["id"] == id && m.get("method").is_none())
        .cloned()
        .unwrap_or_else(|| panic!("a response to {id}: {}", exchange.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_meets_the_same_policy() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Http, |c| {
        jwt_route(c, &issuer, &[], READERS_AND_EDITORS)
    })
    .await;
    let reader = issuer.token("rita", json!({"groups": ["readers"]}));
    let session = legacy_session(&h.url, &reader).await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..20 {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let listed = legacy_post(
            &h.url,
            &session,
            &reader,
            json!({"jsonrpc": "2.0", "id": 100 + page, "method": "tools/list", "params": params}),
        )
        .await;
        let result = response(&listed, 100 + page)["result"].clone();
        names.extend(
            result["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string()),
        );
        cursor = result["nextCursor"].as_str().map(String::from);
        if cursor.is_none() {
            break;
        }
    }
    names.sort();
    assert_eq!(names, ["ask_name", "echo", "whoami"]);
    let hidden = legacy_post(
        &h.url,
        &session,
        &reader,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}),
    )
    .await;
    assert_rpc_error(&hidden, 200, -32602);
    never_called(&h, "pid");
    // A resource the policy does not name is not found, in this era's code.
    let read = legacy_post(
        &h.url,
        &session,
        &reader,
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "demo://item/7"}}),
    )
    .await;
    let error = assert_rpc_error(&read, 200, -32002);
    assert_eq!(error["data"]["uri"], "demo://item/7");
    let allowed = legacy_post(
        &h.url,
        &session,
        &reader,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "ok"}}}),
    )
    .await;
    assert!(
        response(&allowed, 4).get("result").is_some(),
        "{}",
        allowed.body
    );
    // The editor on the same endpoint is asked to step up, with the challenge.
    let editor = issuer.token("eddie", json!({"groups": ["editors"]}));
    let editor_session = legacy_session(&h.url, &editor).await;
    let step_up = legacy_post(
        &h.url,
        &editor_session,
        &editor,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}),
    )
    .await;
    assert_rpc_error(&step_up, 403, -32600);
    assert!(challenge(&step_up).contains("scope=\"tools:all\""));
    never_called(&h, "pid");
    h.stop().await;
    issuer.stop();
}

/// An HTTP backend told who calls: an identity header, and an exchanged token as its only
/// `Authorization`; one exchange per principal while the token is fresh.
fn identity_backend(config: &mut Config, issuer: &Issuer) {
    jwt_route(config, issuer, &[], "");
    let backend = config.legacy();
    backend
        .identity_headers
        .insert("X-MCP-User".into(), "claims.sub".into());
    backend
        .identity_headers
        .insert("X-MCP-Principal".into(), "principal".into());
    backend.token_exchange = Some(TokenExchangeConfig {
        endpoint: issuer.token_url(),
        client_id: CLIENT_ID.into(),
        client_secret: CLIENT_SECRET.into(),
        audience: Some("https://backend.example".into()),
        resource: None,
        scopes: vec!["backend:read".into()],
        timeout: Duration::from_secs(5),
    });
}

/// What the `whoami` tool saw, from a 2026-07-28 answer.
fn whoami(exchange: &RawExchange) -> Value {
    assert_eq!(
        exchange.result_type(),
        Some("complete"),
        "{}",
        exchange.body
    );
    exchange.result().unwrap()["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_backend_is_told_who_calls_and_never_gets_the_caller_s_token() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Http, |c| identity_backend(c, &issuer)).await;
    let alice = issuer.token("alice", json!({}));
    let seen = whoami(&post_with_bearer(&h.url, Some(&alice), &call(1, "whoami", json!({}))).await);
    assert_eq!(seen["headers"]["x-mcp-user"], "alice");
    assert_eq!(
        seen["headers"]["x-mcp-principal"],
        format!("{ISSUER} alice")
    );
    assert_eq!(seen["headers"]["authorization"], "Bearer exchanged-1");
    let again =
        whoami(&post_with_bearer(&h.url, Some(&alice), &call(2, "whoami", json!({}))).await);
    assert_eq!(
        again["headers"]["authorization"], "Bearer exchanged-1",
        "cached"
    );

    let exchanges = issuer.exchanges();
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(
        exchanges[0].client,
        Some((CLIENT_ID.to_string(), CLIENT_SECRET.to_string())),
        "client_secret_basic"
    );
    let form = &exchanges[0].form;
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(form["subject_token"], alice);
    assert_eq!(form["audience"], "https://backend.example");
    assert_eq!(form["scope"], "backend:read");

    // A 2025-11-25 session of bob's: his own exchange and headers.
    let bob = issuer.token("bob", json!({}));
    let session = legacy_session(&h.url, &bob).await;
    let answered = legacy_post(
        &h.url,
        &session,
        &bob,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}),
    )
    .await;
    let seen = response(&answered, 3)["result"]["structuredContent"].clone();
    assert_eq!(seen["headers"]["x-mcp-user"], "bob");
    assert_eq!(seen["headers"]["authorization"], "Bearer exchanged-2");

    // No message of any session carried a caller's token.
    let log = std::fs::read_to_string(&h.backend_log).unwrap_or_default();
    assert!(!log.contains(&alice) && !log.contains(&bob));
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchanged_token_near_its_end_is_renewed_for_the_sessions_already_open() {
    let issuer = Issuer::start().await;
    // One session for everybody: the renewed token must reach the session already open.
    let h = Harness::start_with(Backend::Http, |c| {
        identity_backend(c, &issuer);
        c.legacy().pool.max_sessions = 1;
    })
    .await;
    issuer.set_lifetime(1);
    let alice = issuer.token("alice", json!({}));
    let first =
        whoami(&post_with_bearer(&h.url, Some(&alice), &call(1, "whoami", json!({}))).await);
    assert_eq!(first["headers"]["authorization"], "Bearer exchanged-1");
    // Past the token's refresh point (a tenth of its second before its end).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second =
        whoami(&post_with_bearer(&h.url, Some(&alice), &call(2, "whoami", json!({}))).await);
    assert_eq!(second["headers"]["authorization"], "Bearer exchanged-2");
    assert_eq!(issuer.exchanges().len(), 2);
    assert_eq!(h.pool_stats().open, 1, "the same session");
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_failed_exchange_fails_the_call_before_the_backend() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Http, |c| identity_backend(c, &issuer)).await;
    issuer.set_mode(Exchanges::Refuse);
    let carol = issuer.token("carol", json!({}));
    let refused = post_with_bearer(&h.url, Some(&carol), &call(1, "whoami", json!({}))).await;
    let error = assert_rpc_error(&refused, 403, -32600);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("invalid_grant"), "{message}");
    assert!(
        !message.contains(&carol) && !message.contains(CLIENT_SECRET),
        "{message}"
    );
    issuer.set_mode(Exchanges::Fail);
    let failed = post_with_bearer(&h.url, Some(&carol), &call(2, "whoami", json!({}))).await;
    assert_rpc_error(&failed, 502, -32603);
    never_called(&h, "whoami");
    issuer.set_mode(Exchanges::Grant);
    let served = post_with_bearer(&h.url, Some(&carol), &call(3, "whoami", json!({}))).await;
    assert_eq!(whoami(&served)["headers"]["x-mcp-user"], "carol");
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_backend_is_told_who_calls_in_its_environment() {
    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(c, &issuer, &[], "");
        c.legacy()
            .identity_env
            .insert("MCP_USER".into(), "claims.sub".into());
        c.legacy()
            .identity_env
            .insert("MCP_GROUPS".into(), "claims.groups[0]".into());
    })
    .await;
    for (id, user, group) in [(1, "alice", "readers"), (2, "bob", "editors")] {
        let token = issuer.token(user, json!({"groups": [group]}));
        let seen =
            whoami(&post_with_bearer(&h.url, Some(&token), &call(id, "whoami", json!({}))).await);
        assert_eq!(seen["env"]["MCP_USER"], user);
        assert_eq!(seen["env"]["MCP_GROUPS"], group);
    }
    // A 2025-11-25 session is told who called when it started; once the caller's claims tell
    // otherwise, the session ends (404) and a new one is told anew.
    let reader = issuer.token("carol", json!({"groups": ["readers"]}));
    let session = legacy_session(&h.url, &reader).await;
    let whoami_call = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}});
    let seen = legacy_post(&h.url, &session, &reader, whoami_call(4)).await;
    assert_eq!(
        response(&seen, 4)["result"]["structuredContent"]["env"]["MCP_GROUPS"],
        "readers"
    );
    let promoted = issuer.token("carol", json!({"groups": ["editors"]}));
    let ended = legacy_post(&h.url, &session, &promoted, whoami_call(5)).await;
    assert_rpc_error(&ended, 404, -32600);
    let session = legacy_session(&h.url, &promoted).await;
    let seen = legacy_post(&h.url, &session, &promoted, whoami_call(6)).await;
    assert_eq!(
        response(&seen, 6)["result"]["structuredContent"]["env"]["MCP_GROUPS"],
        "editors"
    );

    // A caller the expression cannot describe is refused, never served anonymously.
    let nameless = issuer.token("nobody", json!({}));
    let refused = post_with_bearer(&h.url, Some(&nameless), &call(3, "whoami", json!({}))).await;
    let error = assert_rpc_error(&refused, 403, -32600);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("identity_env.MCP_GROUPS"),
        "{error}"
    );
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_is_not_told_of_hidden_resources() {
    use crate::support::modern_client::{connect_modern_with_config, TestClientHandler};
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let issuer = Issuer::start().await;
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(
            c,
            &issuer,
            &[],
            "[[policy]]\nresources = [\"demo://item/7\"]\ntools = [\"*\"]\n",
        )
    })
    .await;
    let token = issuer.token("alice", json!({}));
    let config = StreamableHttpClientTransportConfig::with_uri(h.url.as_str()).auth_header(token);
    let client = connect_modern_with_config(config, TestClientHandler::builder().build())
        .await
        .expect("connects");
    let asked = SubscriptionFilter::builder()
        .resource_subscription("demo://item/7")
        .resource_subscription("demo://item/8")
        .build();
    let mut subscription =
        tokio::time::timeout(Duration::from_secs(10), client.peer().listen(asked))
            .await
            .expect("acknowledged in time")
            .expect("the listen is acknowledged");
    assert_eq!(
        subscription.acknowledged().resource_subscriptions,
        Some(vec!["demo://item/7".to_string()])
    );
    let heard = tokio::time::timeout(Duration::from_secs(10), subscription.next())
        .await
        .expect("in time")
        .expect("a notification")
        .expect("open");
    let ServerNotification::ResourceUpdatedNotification(updated) = heard else {
        panic!("a resource update, not {heard:?}");
    };
    assert_eq!(updated.params.uri, "demo://item/7");
    assert!(
        !h.backend_messages()
            .iter()
            .any(|m| m["method"] == "resources/subscribe" && m["params"]["uri"] == "demo://item/8"),
        "the backend heard of the hidden resource"
    );
    let more = tokio::time::timeout(Duration::from_millis(500), subscription.next()).await;
    assert!(more.is_err(), "nothing of the hidden resource: {more:?}");
    let _ = client.cancel().await;
    h.stop().await;
    issuer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_every_call_and_refusal_without_tokens() {
    let issuer = Issuer::start().await;
    let audit_dir = tempfile::tempdir().unwrap();
    let audit_file = audit_dir.path().join("audit.jsonl");
    let h = Harness::start_with(Backend::Stdio, |c| {
        jwt_route(c, &issuer, &[], READERS_AND_EDITORS);
        c.audit = Some(
            toml::from_str(&format!("file = {:?}", audit_file.display().to_string())).unwrap(),
        );
    })
    .await;
    let reader = issuer.token("rita", json!({"groups": ["readers"]}));
    let traced = {
        let mut body = call(1, "echo", json!({"text": "secret argument"}));
        body["params"]["_meta"]["traceparent"] =
            json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        body
    };
    post_with_bearer(&h.url, Some(&reader), &traced).await;
    post_with_bearer(&h.url, Some(&reader), &call(2, "pid", json!({}))).await;
    let forged = format!("{reader}x");
    let unauthenticated =
        post_with_bearer(&h.url, Some(&forged), &call(9, "echo", json!({}))).await;
    assert_eq!(unauthenticated.status, 401);
    let first = call(3, "ask_name", json!({}));
    let round = post_with_bearer(&h.url, Some(&reader), &first).await;
    let round = round.result().unwrap().clone();
    let retry = answer_only_input(
        &first,
        json!(4),
        &round,
        json!({"action": "accept", "content": {"name": "Rita"}}),
    );
    post_with_bearer(&h.url, Some(&reader), &retry).await;
    let session = legacy_session(&h.url, &reader).await;
    legacy_post(
        &h.url,
        &session,
        &reader,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}),
    )
    .await;
    h.stop().await;

    let text = std::fs::read_to_string(&audit_file).unwrap();
    assert!(!text.contains(&reader), "no token in the log");
    // The refusal at the door: no principal, its method and name from the request's headers.
    let (refusal, text) = {
        let mut lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("\"principal\":null"))
            .unwrap_or_else(|| panic!("the 401 is recorded: {text}"));
        let refusal: Value = serde_json::from_str(lines.remove(at)).unwrap();
        (refusal, lines.join("\n"))
    };
    assert_eq!(refusal["outcome"], "denied");
    assert_eq!(refusal["method"], "tools/call");
    assert_eq!(refusal["name"], "echo");
    assert_eq!(refusal["era"], "2026-07-28");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .starts_with("Unauthorized"),
        "{refusal}"
    );
    assert!(
        !text.contains("secret argument"),
        "no arguments unless asked for"
    );
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(String, String, String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["era"].as_str().unwrap().to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
                r["rounds"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("2026-07-28", "echo", "ok", 0),
        ("2026-07-28", "pid", "denied", 0),
        ("2026-07-28", "ask_name", "input_required", 1),
        ("2026-07-28", "ask_name", "ok", 1),
        ("2025-11-25", "echo", "ok", 0),
    ]
    .map(|(era, name, outcome, rounds)| {
        (
            era.to_string(),
            name.to_string(),
            outcome.to_string(),
            rounds,
        )
    });
    assert_eq!(summary, expected, "{text}");
    for record in &records {
        assert_eq!(record["principal"], format!("{ISSUER} rita"));
        assert_eq!(record["route"], "/mcp");
        assert_eq!(record["method"], "tools/call");
        assert!(record["time"].as_str().unwrap().ends_with('Z'), "{record}");
        assert!(record["duration_ms"].is_u64(), "{record}");
        assert!(record.get("trace_id").is_some(), "{record}");
    }
    assert_eq!(records[0]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(records[1]["trace_id"], Value::Null);
    issuer.stop();
}
