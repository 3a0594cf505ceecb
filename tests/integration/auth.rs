//! Client authentication: 401 with a resource metadata challenge, the metadata document, and
//! the principal binding sessions and `requestState`.

use std::time::Duration;

use mrtr_gateway::config::Config;
use mrtr_gateway::config::{AuthConfig, BearerToken, JwtConfig};
use serde_json::{json, Value};

use crate::support::gateway::{Backend, Harness, TestConfig};
use crate::support::modern_client::{answer_only_input, modern_request};
use crate::support::rpc::{assert_rpc_error, elicitation_caps, post_with_bearer};

/// Bearer tokens on `/mcp`: alice's by digest, bob's in the clear; one authorization server.
fn bearer_route(config: &mut Config) {
    let route = config.mcp_route();
    route.auth = AuthConfig::Bearer {
        tokens: vec![
            BearerToken {
                principal: "alice".into(),
                sha256: Some(mrtr_gateway::token_digest("alice-secret")),
                token: None,
                scopes: Vec::new(),
                claims: Default::default(),
            },
            BearerToken {
                principal: "bob".into(),
                sha256: None,
                token: Some("bob-secret".into()),
                scopes: Vec::new(),
                claims: Default::default(),
            },
        ],
        scopes: Vec::new(),
    };
    route.authorization_servers = vec!["https://auth.example".into()];
}

/// One principal cannot take every session of a backend: past its share (a quarter of
/// `max_sessions`) its calls get 429 at once, and another principal is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_past_its_share_of_sessions_is_refused_and_others_are_served() {
    let h = Harness::start_with(Backend::Stdio, |c| {
        bearer_route(c);
        c.legacy().pool.max_sessions = 8;
        // A call that had to wait for a session would fail fast with 503.
        c.legacy().pool.queue_wait = Duration::from_millis(300);
    })
    .await;
    let ask = |id: i64| {
        modern_request(
            id,
            "tools/call",
            json!({"name": "ask_name"}),
            &elicitation_caps(),
        )
    };
    for id in 1..=2 {
        let round = post_with_bearer(&h.url, Some("alice-secret"), &ask(id)).await;
        assert_eq!(
            round.result_type(),
            Some("input_required"),
            "{}",
            round.body
        );
    }
    let refused = post_with_bearer(&h.url, Some("alice-secret"), &ask(3)).await;
    let error = assert_rpc_error(&refused, 429, -32603);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("2 sessions") && m.contains("share")),
        "{error}"
    );
    assert_eq!(refused.headers["retry-after"], "1");
    for id in 4..=6 {
        let call = modern_request(
            id,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "bob"}}),
            &elicitation_caps(),
        );
        let answer = post_with_bearer(&h.url, Some("bob-secret"), &call).await;
        assert_eq!(answer.result_type(), Some("complete"), "{}", answer.body);
    }
    assert_eq!(h.held(), 2, "alice's rounds are still held");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_token_get_401_with_a_challenge() {
    let h = Harness::start_with(Backend::Stdio, bearer_route).await;
    let body = modern_request(1, "tools/list", json!({}), &elicitation_caps());
    for token in [None, Some("wrong")] {
        let exchange = post_with_bearer(&h.url, token, &body).await;
        assert_eq!(exchange.status, 401, "{}", exchange.body);
        let challenge = exchange.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .to_string();
        let port = h.port();
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

    let ok = post_with_bearer(&h.url, Some("alice-secret"), &body).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_principal_binds_sessions_and_request_state() {
    let h = Harness::start_with(Backend::Stdio, bearer_route).await;
    let first = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    let round = post_with_bearer(&h.url, Some("alice-secret"), &first).await;
    let result = round.result().expect("a round").clone();
    assert_eq!(result["resultType"], "input_required");
    let retry = answer_only_input(
        &first,
        json!(2),
        &result,
        json!({"action": "accept", "content": {"name": "Bob"}}),
    );

    let stolen = post_with_bearer(&h.url, Some("bob-secret"), &retry).await;
    assert_eq!(stolen.status, 400, "{}", stolen.body);
    assert_eq!(
        stolen.error().unwrap()["data"]["reason"],
        "principal_mismatch"
    );

    let done = post_with_bearer(&h.url, Some("alice-secret"), &retry).await;
    assert_eq!(done.result().unwrap()["content"][0]["text"], "Hello, Bob!");

    // Bob's call gets a session of its own.
    let bobs = post_with_bearer(
        &h.url,
        Some("bob-secret"),
        &modern_request(3, "tools/list", json!({}), &elicitation_caps()),
    )
    .await;
    assert_eq!(bobs.status, 200);
    assert_eq!(
        h.backend_method_count("initialize"),
        2,
        "one backend session per principal"
    );
    h.stop().await;
}

/// JWT bearer tokens checked against a JWKS fetched over HTTP; a key published later is picked
/// up when a token names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_are_checked_against_a_fetched_jwks() {
    use std::sync::{Arc, Mutex};

    use base64::Engine;
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use jsonwebtoken::{Algorithm, EncodingKey, Header};

    // RFC 8032 test 1.
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let mut der = unhex("302e020100300506032b657004220420");
    der.extend(unhex(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    ));
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(der)
    );
    let signing = EncodingKey::from_ed_pem(pem.as_bytes()).unwrap();
    let public = mrtr_gateway::b64url(&unhex(
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    ));
    // The JWKS first publishes the key as "old"; later also as "new".
    let kids = Arc::new(Mutex::new(vec!["old".to_string()]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let served = kids.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (served, public) = (served.clone(), public.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    let keys: Vec<Value> = served
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|kid| json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": public}))
                        .collect();
                    let body = json!({"keys": keys}).to_string();
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from(body),
                        )))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let h = Harness::start_with(Backend::Stdio, |c| {
        c.mcp_route().auth = AuthConfig::Jwt(JwtConfig {
            issuer: "https://issuer.example".into(),
            audience: "https://gw.example/mcp".into(),
            jwks_file: None,
            jwks_url: Some(jwks_url),
            algorithms: Vec::new(),
            // The default leeway.
            leeway: Duration::from_secs(30),
            jwks_refresh: Duration::from_millis(200),
            scopes: Vec::new(),
        });
    })
    .await;
    let now = jsonwebtoken::get_current_timestamp();
    let token = |kid: &str, sub: &str| {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.into());
        let claims = json!({"iss": "https://issuer.example", "aud": "https://gw.example/mcp", "sub": sub, "exp": now + 300});
        jsonwebtoken::encode(&header, &claims, &signing).unwrap()
    };
    let body = modern_request(1, "tools/list", json!({}), &elicitation_caps());
    assert_eq!(
        post_with_bearer(&h.url, Some(&token("old", "alice")), &body)
            .await
            .status,
        200
    );
    assert_eq!(
        post_with_bearer(&h.url, Some(&token("new", "alice")), &body)
            .await
            .status,
        401,
        "unknown key"
    );

    // The issuer publishes "new"; a token naming it makes the gateway fetch again (no more
    // often than jwks_refresh, here 200 ms).
    kids.lock().unwrap().push("new".into());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let exchange = post_with_bearer(&h.url, Some(&token("new", "bob")), &body).await;
    assert_eq!(exchange.status, 200, "{}", exchange.body);
    let mut tampered = token("old", "alice");
    tampered.push('x');
    assert_eq!(
        post_with_bearer(&h.url, Some(&tampered), &body)
            .await
            .status,
        401
    );
    h.stop().await;
    server.abort();
}
