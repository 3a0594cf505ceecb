//! A local authorization server for the authorization tests, on 127.0.0.1: it signs JWTs
//! (Ed25519, RFC 8032's first test key), publishes their key at `/jwks.json`, and exchanges
//! tokens at `/token` (RFC 8693, client_secret_basic), recording every exchange it was asked
//! for. It can be told to refuse exchanges (`invalid_grant`) or to fail (HTTP 503).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

pub const ISSUER: &str = "https://issuer.example";
pub const AUDIENCE: &str = "https://gw.example/mcp";
pub const CLIENT_ID: &str = "gateway";
pub const CLIENT_SECRET: &str = "gateway-secret";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// What the token endpoint answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Exchanges {
    Grant,
    Refuse,
    Fail,
}

/// One exchange the endpoint was asked for: the form fields and the client it authenticated.
#[derive(Debug, Clone)]
pub struct ExchangeRequest {
    pub client: Option<(String, String)>,
    pub form: HashMap<String, String>,
}

pub struct Issuer {
    pub base: String,
    signing: EncodingKey,
    pub exchanges: Arc<Mutex<Vec<ExchangeRequest>>>,
    mode: Arc<Mutex<Exchanges>>,
    /// `expires_in` of the tokens it issues.
    lifetime: Arc<AtomicU64>,
    server: JoinHandle<()>,
}

impl Issuer {
    pub async fn start() -> Issuer {
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
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let mode = Arc::new(Mutex::new(Exchanges::Grant));
        let lifetime = Arc::new(AtomicU64::new(300));
        let issued = Arc::new(AtomicU32::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = (exchanges.clone(), mode.clone(), lifetime.clone(), issued);
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (state, public) = (state.clone(), public.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (state, public) = (state.clone(), public.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(serve(request, &state, &public).await)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Issuer {
            base,
            signing,
            exchanges,
            mode,
            lifetime,
            server,
        }
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks.json", self.base)
    }

    pub fn token_url(&self) -> String {
        format!("{}/token", self.base)
    }

    /// A token for `sub` with these extra claims (e.g. `groups`, `scope`).
    pub fn token(&self, sub: &str, extra: Value) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let mut claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + 300});
        for (key, value) in extra.as_object().unwrap() {
            claims[key] = value.clone();
        }
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(&header, &claims, &self.signing).unwrap()
    }

    pub fn set_mode(&self, mode: Exchanges) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn set_lifetime(&self, seconds: u64) {
        self.lifetime.store(seconds, Ordering::SeqCst);
    }

    pub fn exchanges(&self) -> Vec<ExchangeRequest> {
        self.exchanges.lock().unwrap().clone()
    }

    pub fn stop(self) {
        self.server.abort();
    }
}

type State = (
    Arc<Mutex<Vec<ExchangeRequest>>>,
    Arc<Mutex<Exchanges>>,
    Arc<AtomicU64>,
    Arc<AtomicU32>,
);

async fn serve(
    request: hyper::Request<hyper::body::Incoming>,
    (exchanges, mode, lifetime, issued): &State,
    public: &str,
) -> hyper::Response<Full<Bytes>> {
    let respond = |status: u16, body: Value| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    if request.uri().path() == "/jwks.json" {
        return respond(
            200,
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": public}]}),
        );
    }
    let client = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|pair| {
            let (id, secret) = pair.split_once(':')?;
            Some((id.to_string(), secret.to_string()))
        });
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let form: HashMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
    exchanges.lock().unwrap().push(ExchangeRequest {
        client: client.clone(),
        form: form.clone(),
    });
    if client != Some((CLIENT_ID.into(), CLIENT_SECRET.into())) {
        return respond(401, json!({"error": "invalid_client"}));
    }
    match *mode.lock().unwrap() {
        Exchanges::Refuse => {
            return respond(
                400,
                json!({"error": "invalid_grant", "error_description": "the subject token is not accepted"}),
            )
        }
        Exchanges::Fail => return respond(503, json!({"error": "temporarily_unavailable"})),
        Exchanges::Grant => {}
    }
    let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
    respond(
        200,
        json!({
            "access_token": format!("exchanged-{n}"),
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": lifetime.load(Ordering::SeqCst),
        }),
    )
}
