//! The token exchange against a real local authorization server (hyper on 127.0.0.1).

use std::convert::Infallible;
use std::sync::Mutex;

use http::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use super::*;

const SECRET: &str = "s3cr&t pass";
const SUBJECT: &str = "caller-token-abc";
const ISSUED: &str = "backend-token-xyz";

/// What the server received.
struct Seen {
    authorization: String,
    content_type: String,
    accept: String,
    form: Vec<(String, String)>,
}

/// A token endpoint that answers every request alike, after `delay`.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn token_server(status: u16, answer: &str, delay: Duration) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer = Bytes::from(answer.to_string());
    let recorded = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        // Dropped with the accept loop: every connection ends with the server.
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let recorded = Arc::clone(&recorded);
            let answer = answer.clone();
            connections.spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let recorded = Arc::clone(&recorded);
                    let answer = answer.clone();
                    async move {
                        let header = |name| {
                            request
                                .headers()
                                .get(name)
                                .map(|v: &HeaderValue| v.to_str().unwrap().to_string())
                                .unwrap_or_default()
                        };
                        let authorization = header(AUTHORIZATION);
                        let content_type = header(CONTENT_TYPE);
                        let accept = header(ACCEPT);
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let form = form_urlencoded::parse(&body).into_owned().collect();
                        recorded.lock().unwrap().push(Seen {
                            authorization,
                            content_type,
                            accept,
                            form,
                        });
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header(CONTENT_TYPE, "application/json")
                                .body(Full::new(answer))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server { url, seen, task }
}

impl Server {
    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn config(endpoint: &str, extra: &str) -> TokenExchangeConfig {
    toml::from_str(&format!(
        "endpoint = {endpoint:?}\nclient_id = \"gateway id\"\nclient_secret = {SECRET:?}\n{extra}"
    ))
    .unwrap()
}

fn exchange_at(endpoint: &str, extra: &str) -> (TokenExchange, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let exchange = TokenExchange::new(
        "b",
        &config(endpoint, extra),
        crate::http_client::new_client().unwrap(),
        Arc::clone(&metrics),
    )
    .unwrap();
    (exchange, metrics)
}

fn ok_answer(expires_in: u64) -> String {
    json!({
        "access_token": ISSUED,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "issued_token_type": ACCESS_TOKEN_TYPE,
    })
    .to_string()
}

fn counted(metrics: &Metrics, outcome: &str) -> u64 {
    metrics
        .token_exchanges
        .with_label_values(&["b", outcome])
        .get()
}

/// Neither the secret nor any token appears in a text shown or logged.
fn assert_clean(text: &str) {
    for secret in [SECRET, SUBJECT, ISSUED, "s3cr"] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[tokio::test]
async fn the_request_carries_basic_credentials_and_every_form_field() {
    let server = token_server(200, &ok_answer(3600), Duration::ZERO).await;
    let (exchange, metrics) = exchange_at(
        &server.url,
        "audience = \"https://backend.example\"\nresource = \"https://backend.example/mcp\"\nscopes = [\"read\", \"write\"]",
    );
    let token = exchange.token_for("alice", SUBJECT).await.unwrap();
    assert_eq!(token.authorization(), &format!("Bearer {ISSUED}"));
    assert_eq!(token.authorization(), &format!("Bearer {ISSUED}"));
    assert!(token.authorization().is_sensitive());
    assert_eq!(counted(&metrics, "exchanged"), 1);

    let seen = server.seen.lock().unwrap();
    let seen = &seen[0];
    // "gateway id" and "s3cr&t pass", each form-encoded, then base64.
    let expected = base64::engine::general_purpose::STANDARD.encode("gateway+id:s3cr%26t+pass");
    assert_eq!(seen.authorization, format!("Basic {expected}"));
    assert_eq!(seen.content_type, "application/x-www-form-urlencoded");
    assert_eq!(seen.accept, "application/json");
    let field = |name: &str| {
        let values: Vec<&str> = seen
            .form
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(values.len(), 1, "{name}");
        values[0].to_string()
    };
    assert_eq!(field("grant_type"), GRANT_TYPE);
    assert_eq!(field("subject_token"), SUBJECT);
    assert_eq!(field("subject_token_type"), ACCESS_TOKEN_TYPE);
    assert_eq!(field("requested_token_type"), ACCESS_TOKEN_TYPE);
    assert_eq!(field("audience"), "https://backend.example");
    assert_eq!(field("resource"), "https://backend.example/mcp");
    assert_eq!(field("scope"), "read write");
    assert_eq!(seen.form.len(), 7);
}

#[tokio::test]
async fn optional_fields_are_left_out_when_not_configured() {
    let server = token_server(200, &ok_answer(3600), Duration::ZERO).await;
    let (exchange, _) = exchange_at(&server.url, "");
    exchange.token_for("alice", SUBJECT).await.unwrap();
    let seen = server.seen.lock().unwrap();
    let names: Vec<&str> = seen[0].form.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "grant_type",
            "subject_token",
            "subject_token_type",
            "requested_token_type"
        ]
    );
}

#[tokio::test]
async fn a_fresh_token_is_served_from_the_cache_per_principal() {
    let server = token_server(200, &ok_answer(3600), Duration::ZERO).await;
    let (exchange, metrics) = exchange_at(&server.url, "");
    let first = exchange.token_for("alice", SUBJECT).await.unwrap();
    let second = exchange
        .token_for("alice", "another-caller-token")
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(server.requests(), 1);
    assert_eq!(counted(&metrics, "cached"), 1);
    // Another principal has a token of its own.
    exchange.token_for("bob", SUBJECT).await.unwrap();
    assert_eq!(server.requests(), 2);
}

#[test]
fn the_refresh_margin_is_30_s_or_a_tenth_of_the_lifetime() {
    assert_eq!(
        refresh_margin(Duration::from_secs(3600)),
        Duration::from_secs(30)
    );
    assert_eq!(
        refresh_margin(Duration::from_secs(300)),
        Duration::from_secs(30)
    );
    assert_eq!(
        refresh_margin(Duration::from_secs(100)),
        Duration::from_secs(10)
    );
    assert_eq!(
        refresh_margin(Duration::from_secs(1)),
        Duration::from_millis(100)
    );
    assert_eq!(refresh_margin(Duration::ZERO), Duration::ZERO);
}

#[tokio::test]
async fn an_expired_token_is_exchanged_again_and_no_expires_in_means_a_minute() {
    let server = token_server(200, &ok_answer(0), Duration::ZERO).await;
    let (exchange, _) = exchange_at(&server.url, "");
    exchange.token_for("alice", SUBJECT).await.unwrap();
    exchange.token_for("alice", SUBJECT).await.unwrap();
    assert_eq!(server.requests(), 2);

    let answer = json!({"access_token": ISSUED, "token_type": "N_A"}).to_string();
    let server = server_with(&answer).await;
    let (exchange, _) = exchange_at(&server.url, "");
    let before = Instant::now();
    let token = exchange.token_for("alice", SUBJECT).await.unwrap();
    assert!(token.expires_at >= before + DEFAULT_LIFETIME);
    assert!(token.expires_at <= Instant::now() + DEFAULT_LIFETIME);
    exchange.token_for("alice", SUBJECT).await.unwrap();
    assert_eq!(server.requests(), 1);
}

async fn server_with(answer: &str) -> Server {
    token_server(200, answer, Duration::ZERO).await
}

#[tokio::test]
async fn concurrent_callers_of_one_principal_share_one_exchange() {
    let server = token_server(200, &ok_answer(3600), Duration::from_millis(200)).await;
    let (exchange, metrics) = exchange_at(&server.url, "");
    let exchange = Arc::new(exchange);
    let mut calls = JoinSet::new();
    for i in 0..10 {
        let exchange = Arc::clone(&exchange);
        let principal = if i < 5 { "alice" } else { "bob" };
        calls.spawn(async move { exchange.token_for(principal, SUBJECT).await.unwrap() });
    }
    while let Some(token) = calls.join_next().await {
        assert_eq!(token.unwrap().authorization(), &format!("Bearer {ISSUED}"));
    }
    assert_eq!(server.requests(), 2);
    assert_eq!(counted(&metrics, "exchanged"), 2);
    assert_eq!(counted(&metrics, "cached"), 8);

    // Ten for one principal: one request.
    let one = token_server(200, &ok_answer(3600), Duration::from_millis(200)).await;
    let (exchange, _) = exchange_at(&one.url, "");
    let exchange = Arc::new(exchange);
    let mut calls = JoinSet::new();
    for _ in 0..10 {
        let exchange = Arc::clone(&exchange);
        calls.spawn(async move { exchange.token_for("alice", SUBJECT).await.unwrap() });
    }
    while let Some(token) = calls.join_next().await {
        token.unwrap();
    }
    assert_eq!(one.requests(), 1);
}

#[tokio::test]
async fn callers_waiting_on_a_failed_exchange_share_its_failure() {
    let server = token_server(503, "", Duration::from_millis(200)).await;
    let (exchange, metrics) = exchange_at(&server.url, "");
    let exchange = Arc::new(exchange);
    let mut calls = JoinSet::new();
    for _ in 0..5 {
        let exchange = Arc::clone(&exchange);
        calls.spawn(async move { exchange.token_for("alice", SUBJECT).await.unwrap_err() });
    }
    while let Some(error) = calls.join_next().await {
        assert!(matches!(error.unwrap(), ExchangeError::Unavailable { .. }));
    }
    assert_eq!(server.requests(), 1);
    assert_eq!(counted(&metrics, "unavailable"), 5);
}

async fn failure(status: u16, answer: &str) -> ExchangeError {
    let server = token_server(status, answer, Duration::ZERO).await;
    let (exchange, _) = exchange_at(&server.url, "");
    let error = exchange.token_for("alice", SUBJECT).await.unwrap_err();
    assert_clean(&error.to_string());
    assert_clean(&format!("{error:?}"));
    error
}

#[tokio::test]
async fn errors_are_mapped_and_name_no_secret() {
    let rejected = failure(
        400,
        r#"{"error": "invalid_grant", "error_description": "subject token expired"}"#,
    )
    .await;
    assert!(
        matches!(&rejected, ExchangeError::Rejected { error, description: Some(d), .. }
            if error == "invalid_grant" && d == "subject token expired"),
        "{rejected:?}"
    );
    assert_eq!(
        rejected.to_string(),
        "the authorization server refused the token exchange for backend b: invalid_grant \
         (subject token expired)"
    );
    let unauthorized = failure(401, r#"{"error": "invalid_client"}"#).await;
    assert_eq!(
        unauthorized.to_string(),
        "the authorization server refused the token exchange for backend b: invalid_client"
    );
    // A description echoing the caller's token or the secret is cleaned.
    let echo = failure(
        400,
        &json!({"error": "invalid_request", "error_description": format!("bad {SUBJECT} {SECRET}")})
            .to_string(),
    )
    .await;
    assert!(matches!(echo, ExchangeError::Rejected { .. }), "{echo:?}");

    let server_error = failure(500, r#"{"error": "server_error"}"#).await;
    assert_eq!(
        server_error.to_string(),
        "token exchange for backend b failed: HTTP 500"
    );
    let not_oauth = failure(403, "<html>forbidden</html>").await;
    assert!(
        matches!(not_oauth, ExchangeError::Unavailable { .. }),
        "{not_oauth:?}"
    );
    for answer in [
        "{not json".to_string(),
        json!({"token_type": "Bearer"}).to_string(),
        json!({"access_token": "", "token_type": "Bearer"}).to_string(),
        json!({"access_token": ISSUED}).to_string(),
        json!({"access_token": ISSUED, "token_type": "mac"}).to_string(),
        json!({"access_token": format!("{ISSUED}\n"), "token_type": "bearer"}).to_string(),
    ] {
        let error = failure(200, &answer).await;
        assert!(
            matches!(error, ExchangeError::Unavailable { .. }),
            "{answer}: {error:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_or_slow_server_is_unavailable() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", closed.local_addr().unwrap());
    drop(closed);
    let (exchange, metrics) = exchange_at(&url, "");
    let error = exchange.token_for("alice", SUBJECT).await.unwrap_err();
    assert!(
        matches!(error, ExchangeError::Unavailable { .. }),
        "{error:?}"
    );
    assert_clean(&error.to_string());
    assert_eq!(counted(&metrics, "unavailable"), 1);

    let slow = token_server(200, &ok_answer(3600), Duration::from_secs(5)).await;
    let (exchange, _) = exchange_at(&slow.url, "timeout = \"100ms\"");
    let error = exchange.token_for("alice", SUBJECT).await.unwrap_err();
    assert!(
        error.to_string().contains("did not answer in time"),
        "{error}"
    );
}

#[tokio::test]
async fn a_failed_exchange_is_not_cached() {
    let server = token_server(400, r#"{"error": "invalid_grant"}"#, Duration::ZERO).await;
    let (exchange, metrics) = exchange_at(&server.url, "");
    for _ in 0..2 {
        assert!(matches!(
            exchange.token_for("alice", SUBJECT).await,
            Err(ExchangeError::Rejected { .. })
        ));
    }
    assert_eq!(server.requests(), 2);
    assert_eq!(counted(&metrics, "rejected"), 2);
}

#[tokio::test]
async fn tokens_and_the_exchange_show_no_secret() {
    let server = token_server(200, &ok_answer(3600), Duration::ZERO).await;
    let (exchange, _) = exchange_at(&server.url, "");
    let token = exchange.token_for("alice", SUBJECT).await.unwrap();
    assert_clean(&format!("{token:?}"));
    assert_clean(&format!("{exchange:?}"));
    assert_clean(&format!("{:?}", token.authorization()));
}

#[tokio::test]
async fn the_endpoint_must_be_an_http_url() {
    for endpoint in ["not a uri", "/token", "ftp://as.example/token"] {
        let result = TokenExchange::new(
            "b",
            &config(endpoint, ""),
            crate::http_client::new_client().unwrap(),
            Arc::new(Metrics::new()),
        );
        assert!(
            matches!(result, Err(ExchangeError::Config { .. })),
            "{endpoint}"
        );
    }
}

#[tokio::test]
async fn a_full_cache_drops_stale_entries_first() {
    let server = token_server(200, &ok_answer(3600), Duration::ZERO).await;
    let (exchange, _) = exchange_at(&server.url, "");
    exchange.token_for("fresh", SUBJECT).await.unwrap();
    for i in 0..MAX_PRINCIPALS {
        exchange.cache.insert(format!("empty {i}"), Arc::default());
    }
    exchange.token_for("new", SUBJECT).await.unwrap();
    assert!(exchange.cache.len() <= MAX_PRINCIPALS);
    assert!(exchange.cache.contains_key("fresh"));
    assert!(exchange.cache.contains_key("new"));
}
