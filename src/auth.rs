//! Client authentication per route: who is calling. The principal keys backend sessions (a
//! session never serves two principals) and binds every `requestState`.
//!
//! Modes: `none` (one shared principal; only on a loopback listener unless explicitly allowed),
//! static bearer tokens (kept as SHA-256 digests), and JWT bearer tokens checked against a JWKS
//! (file or HTTPS URL, cached and refreshed) for issuer, audience, expiry and not-before with a
//! bounded clock skew. Principal = issuer + " " + subject.
//!
//! What the token says besides the principal makes the caller's [`Identity`]: its claims and
//! scopes (a JWT's `scope`, space-separated, or `scp`, a string or an array; a static token's
//! configured `scopes` and `claims`), which policy rules and identity expressions read, and the
//! token itself, which only a token exchange ever sends on.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::Mutex as AsyncMutex;

use crate::config::{AuthConfig, JwtConfig, ANONYMOUS, JWT_ALGORITHMS, MAX_LEEWAY};
use crate::http_client::HttpClient;
use crate::sync::RwLockRecovered;

const JWKS_MAX_BYTES: usize = 1024 * 1024;
/// Fastest re-fetch of a JWKS when a token names an unknown key (or `jwks_refresh`, if shorter).
const JWKS_MIN_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token")]
    Missing,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("cannot load signing keys: {0}")]
    Keys(String),
}

fn parse_algorithm(name: &str) -> Option<Algorithm> {
    match name {
        "RS256" => Some(Algorithm::RS256),
        "ES256" => Some(Algorithm::ES256),
        "EdDSA" => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// Who is calling, as the route's authentication established it. Cloned only for the backends
/// of a route over several (shared parts, no copies).
#[derive(Clone)]
pub(crate) struct Identity {
    /// Keys backend sessions and binds every `requestState`.
    pub principal: String,
    /// A JWT's claims, or a static token's configured ones (with `sub`): shared, not copied,
    /// by each request of a static token.
    pub claims: Arc<Map<String, Value>>,
    pub scopes: Arc<[String]>,
    /// The bearer token as presented; only a token exchange sends it on.
    pub token: Option<BearerSecret>,
}

impl Identity {
    /// The caller of a route without authentication.
    pub(crate) fn anonymous() -> Self {
        Self {
            principal: ANONYMOUS.to_string(),
            claims: Arc::default(),
            scopes: Arc::new([]),
            token: None,
        }
    }

    /// Of `required`, the scopes this caller's token does not carry.
    pub(crate) fn missing_scopes<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        required
            .iter()
            .filter(|scope| !self.scopes.contains(scope))
            .map(String::as_str)
            .collect()
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("principal", &self.principal)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// A caller's bearer token: never printed.
#[derive(Clone)]
pub(crate) struct BearerSecret(Arc<str>);

impl BearerSecret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BearerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerSecret(..)")
    }
}

/// A static token's principal, scopes and claims.
pub(crate) struct StaticIdentity {
    principal: String,
    claims: Arc<Map<String, Value>>,
    scopes: Arc<[String]>,
}

/// The authenticator of one route.
pub(crate) enum Authenticator {
    None,
    /// Static tokens by SHA-256 digest.
    Bearer(HashMap<String, StaticIdentity>),
    Jwt(Box<JwtVerifier>),
}

impl Authenticator {
    pub(crate) fn new(config: &AuthConfig, client: Option<HttpClient>) -> Result<Self, AuthError> {
        match config {
            AuthConfig::None => Ok(Self::None),
            AuthConfig::Bearer { tokens, .. } => {
                let mut by_digest = HashMap::new();
                for token in tokens {
                    let digest = match (&token.sha256, &token.token) {
                        (Some(d), None) => d.to_ascii_lowercase(),
                        (None, Some(t)) => token_digest(t),
                        _ => {
                            return Err(AuthError::Keys(format!(
                                "token of {} needs exactly one of sha256 and token",
                                token.principal
                            )))
                        }
                    };
                    let principal = format!("bearer {}", token.principal);
                    let mut claims = token.claims.clone();
                    claims
                        .entry("sub")
                        .or_insert_with(|| Value::String(token.principal.clone()));
                    by_digest.insert(
                        digest,
                        StaticIdentity {
                            principal,
                            claims: Arc::new(claims),
                            scopes: token.scopes.clone().into(),
                        },
                    );
                }
                Ok(Self::Bearer(by_digest))
            }
            AuthConfig::Jwt(jwt) => Ok(Self::Jwt(Box::new(JwtVerifier::new(jwt, client)?))),
        }
    }

    pub(crate) fn required(&self) -> bool {
        !matches!(self, Self::None)
    }

    /// The caller of a request, or why it is refused.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, AuthError> {
        match self {
            Self::Jwt(verifier) => {
                let token = bearer_token(headers)?;
                let (principal, claims) = verifier.verify(token).await?;
                Ok(Identity {
                    principal,
                    scopes: scopes_of(&claims).into(),
                    claims: Arc::new(claims),
                    token: Some(BearerSecret(token.into())),
                })
            }
            _ => self
                .authenticate_now(headers)
                .unwrap_or(Err(AuthError::Missing)),
        }
    }

    /// The answer of a mode that needs no I/O (`none`, `bearer`); `None` for `jwt`, whose
    /// keys may have to be fetched.
    pub(crate) fn authenticate_now(
        &self,
        headers: &HeaderMap,
    ) -> Option<Result<Identity, AuthError>> {
        match self {
            Self::None => Some(Ok(Identity::anonymous())),
            Self::Bearer(by_digest) => Some(bearer_token(headers).and_then(|token| {
                by_digest
                    .get(&token_digest(token))
                    .map(|known| Identity {
                        principal: known.principal.clone(),
                        claims: known.claims.clone(),
                        scopes: known.scopes.clone(),
                        token: Some(BearerSecret(token.into())),
                    })
                    .ok_or_else(|| AuthError::Invalid("unknown token".into()))
            })),
            Self::Jwt(_) => None,
        }
    }
}

/// A JWT's scopes: `scope` (space-separated, RFC 8693 §4.2) or `scp` (a string or an array,
/// as some issuers write it).
pub(crate) fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let words = |text: &str| text.split_whitespace().map(String::from).collect();
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(scope)), _) => words(scope),
        (_, Some(Value::String(scp))) => words(scp),
        (_, Some(Value::Array(scp))) => scp
            .iter()
            .filter_map(Value::as_str)
            // A scope is one non-empty word (RFC 6749 §3.3); any other entry grants nothing.
            .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The bearer token of `Authorization`.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthError> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or(AuthError::Missing)
}

struct KeySet {
    /// Keys by `kid`; keys without one under "".
    keys: HashMap<String, (DecodingKey, Vec<Algorithm>)>,
    fetched: Instant,
}

pub(crate) struct JwtVerifier {
    issuer: String,
    audience: String,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    refresh: Duration,
    source: JwksSource,
    keys: RwLock<Arc<KeySet>>,
    fetching: AsyncMutex<()>,
}

enum JwksSource {
    File,
    Url {
        url: http::Uri,
        client: Box<HttpClient>,
    },
}

fn key_set(set: &JwkSet, allowed: &[Algorithm]) -> Result<KeySet, AuthError> {
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        // Only asymmetric keys: an HMAC key in a JWKS would let anyone holding it mint tokens.
        let algorithms: Vec<Algorithm> = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => vec![Algorithm::RS256],
            AlgorithmParameters::EllipticCurve(_) => vec![Algorithm::ES256],
            AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
            _ => continue,
        }
        .into_iter()
        .filter(|a| allowed.contains(a))
        .collect();
        if algorithms.is_empty() {
            continue;
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| AuthError::Keys(e.to_string()))?;
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        keys.insert(kid, (key, algorithms));
    }
    if keys.is_empty() {
        return Err(AuthError::Keys("the JWKS has no usable key".into()));
    }
    Ok(KeySet {
        keys,
        fetched: Instant::now(),
    })
}

impl JwtVerifier {
    fn new(config: &JwtConfig, client: Option<HttpClient>) -> Result<Self, AuthError> {
        let algorithms: Vec<Algorithm> = if config.algorithms.is_empty() {
            JWT_ALGORITHMS
                .iter()
                .filter_map(|a| parse_algorithm(a))
                .collect()
        } else {
            config
                .algorithms
                .iter()
                .map(|a| {
                    parse_algorithm(a)
                        .ok_or_else(|| AuthError::Keys(format!("unsupported algorithm {a}")))
                })
                .collect::<Result<_, _>>()?
        };
        let (source, initial) = match (&config.jwks_file, &config.jwks_url) {
            (Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| AuthError::Keys(format!("{}: {e}", path.display())))?;
                let set: JwkSet = serde_json::from_str(&text)
                    .map_err(|e| AuthError::Keys(format!("{}: {e}", path.display())))?;
                (JwksSource::File, key_set(&set, &algorithms)?)
            }
            (None, Some(url)) => {
                let url: http::Uri = url
                    .parse()
                    .map_err(|e| AuthError::Keys(format!("jwks_url: {e}")))?;
                let client = client.ok_or_else(|| AuthError::Keys("no HTTP client".into()))?;
                // Fetched on first use; until then no token verifies.
                let empty = KeySet {
                    keys: HashMap::new(),
                    fetched: Instant::now() - config.jwks_refresh.max(JWKS_MIN_REFRESH) * 2,
                };
                (
                    JwksSource::Url {
                        url,
                        client: Box::new(client),
                    },
                    empty,
                )
            }
            _ => {
                return Err(AuthError::Keys(
                    "exactly one of jwks_file and jwks_url is required".into(),
                ))
            }
        };
        Ok(Self {
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            algorithms,
            leeway: config.leeway.min(MAX_LEEWAY),
            refresh: config.jwks_refresh,
            source,
            keys: RwLock::new(Arc::new(initial)),
            fetching: AsyncMutex::new(()),
        })
    }

    fn current(&self) -> Arc<KeySet> {
        self.keys.read_recovered().clone()
    }

    /// Re-fetches a JWKS URL when stale (or `force`d by an unknown key id), at most every 30 s.
    async fn refresh(&self, force: bool) {
        let JwksSource::Url { url, client } = &self.source else {
            return;
        };
        let _guard = self.fetching.lock().await;
        let age = self.current().fetched.elapsed();
        if age < self.refresh.min(JWKS_MIN_REFRESH) || (!force && age < self.refresh) {
            return;
        }
        match fetch_jwks(client, url)
            .await
            .and_then(|set| key_set(&set, &self.algorithms))
        {
            Ok(set) => *self.keys.write_recovered() = Arc::new(set),
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refresh failed; keeping the previous keys");
                // A failed fetch counts as an attempt: no retry storm while the issuer is down.
                let mut keys = self.keys.write_recovered();
                *keys = Arc::new(KeySet {
                    keys: keys.keys.clone(),
                    fetched: Instant::now(),
                });
            }
        }
    }

    /// The principal and every claim of a valid token.
    async fn verify(&self, token: &str) -> Result<(String, Map<String, Value>), AuthError> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::Invalid(format!(
                "algorithm {:?} not accepted",
                header.alg
            )));
        }
        let kid = header.kid.clone().unwrap_or_default();
        self.refresh(false).await;
        if !self.current().keys.contains_key(&kid) {
            self.refresh(true).await;
        }
        let keys = self.current();
        let (key, algorithms) = keys
            .keys
            .get(&kid)
            .ok_or_else(|| AuthError::Invalid("unknown signing key".into()))?;
        if !algorithms.contains(&header.alg) {
            return Err(AuthError::Invalid(
                "algorithm does not match the key".into(),
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?
            .claims;
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| AuthError::Invalid(format!("the {name} claim is not a string")))
        };
        let principal = format!("{} {}", text("iss")?, text("sub")?);
        Ok((principal, claims))
    }
}

async fn fetch_jwks(client: &HttpClient, url: &http::Uri) -> Result<JwkSet, AuthError> {
    let request = Request::builder()
        .method(Method::GET)
        .uri(url.clone())
        .header("accept", "application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|e| AuthError::Keys(e.to_string()))?;
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .map_err(|_| AuthError::Keys("JWKS fetch timed out".into()))?
        .map_err(|e| AuthError::Keys(e.to_string()))?;
    if response.status() != StatusCode::OK {
        return Err(AuthError::Keys(format!(
            "JWKS fetch: HTTP {}",
            response.status()
        )));
    }
    let body = Limited::new(response.into_body(), JWKS_MAX_BYTES)
        .collect()
        .await
        .map_err(|e| AuthError::Keys(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| AuthError::Keys(e.to_string()))
}

/// Digest a token the way `sha256` entries store it (for configuration tooling and tests).
pub fn token_digest(token: &str) -> String {
    crate::digest::sha256_hex(token.as_bytes())
}

/// Base64url without padding, as JWKs encode key material.
pub fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    // RFC 8032, test 1.
    const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn signing_key() -> EncodingKey {
        let mut der = unhex("302e020100300506032b657004220420");
        der.extend(unhex(SEED));
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        EncodingKey::from_ed_pem(pem.as_bytes()).unwrap()
    }

    fn verifier(dir: &tempfile::TempDir) -> Authenticator {
        let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": b64url(&unhex(PUBLIC))}]});
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, jwks.to_string()).unwrap();
        let config: AuthConfig = toml::from_str(&format!(
            "mode = \"jwt\"\nissuer = \"https://issuer.example\"\naudience = \"https://gw.example/mcp\"\njwks_file = {:?}\n",
            path.display().to_string()
        ))
        .unwrap();
        Authenticator::new(&config, None).unwrap()
    }

    fn token(claims: serde_json::Value, kid: &str) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &claims, &signing_key()).unwrap()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[tokio::test]
    async fn jwt_claims_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let auth = verifier(&dir);
        let now = jsonwebtoken::get_current_timestamp();
        let good = json!({"iss": "https://issuer.example", "aud": "https://gw.example/mcp", "sub": "alice", "exp": now + 60});
        assert_eq!(
            auth.authenticate(&bearer(&token(good.clone(), "k1")))
                .await
                .unwrap()
                .principal,
            "https://issuer.example alice"
        );
        let mut cases = Vec::new();
        for (field, value) in [
            ("iss", json!("https://evil")),
            ("aud", json!("other")),
            ("exp", json!(now - 600)),
            ("nbf", json!(now + 600)),
        ] {
            let mut claims = good.clone();
            claims[field] = value;
            cases.push(token(claims, "k1"));
        }
        let mut no_sub = good.clone();
        no_sub.as_object_mut().unwrap().remove("sub");
        cases.push(token(no_sub, "k1"));
        cases.push(token(good.clone(), "unknown"));
        let valid = token(good.clone(), "k1");
        let (head, rest) = valid.split_once('.').unwrap();
        cases.push(format!("{head}.{}", rest.replacen('e', "f", 1)));
        for case in cases {
            assert!(
                matches!(
                    auth.authenticate(&bearer(&case)).await,
                    Err(AuthError::Invalid(_))
                ),
                "{case}"
            );
        }
        assert!(matches!(
            auth.authenticate(&HeaderMap::new()).await,
            Err(AuthError::Missing)
        ));
    }

    #[tokio::test]
    async fn static_tokens_are_compared_by_digest() {
        let config: AuthConfig = toml::from_str(&format!(
            "mode = \"bearer\"\ntokens = [{{ principal = \"ci\", sha256 = {:?} }}, {{ principal = \"ops\", token = \"s3cret\" }}]\n",
            token_digest("t0ken")
        ))
        .unwrap();
        let auth = Authenticator::new(&config, None).unwrap();
        assert_eq!(
            auth.authenticate(&bearer("t0ken")).await.unwrap().principal,
            "bearer ci"
        );
        assert_eq!(
            auth.authenticate(&bearer("s3cret"))
                .await
                .unwrap()
                .principal,
            "bearer ops"
        );
        assert!(auth.authenticate(&bearer("nope")).await.is_err());
        assert!(matches!(
            auth.authenticate(&HeaderMap::new()).await,
            Err(AuthError::Missing)
        ));
    }

    #[tokio::test]
    async fn scopes_come_from_scope_or_scp_and_claims_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let auth = verifier(&dir);
        let now = jsonwebtoken::get_current_timestamp();
        let base = json!({"iss": "https://issuer.example", "aud": "https://gw.example/mcp", "sub": "alice", "exp": now + 60, "groups": ["editors"]});
        let cases = [
            (
                json!({"scope": "tools:read  tools:all"}),
                vec!["tools:read", "tools:all"],
            ),
            (json!({"scp": "tools:read"}), vec!["tools:read"]),
            (json!({"scp": ["a", "b", 3]}), vec!["a", "b"]),
            // An empty or spaced entry is not a scope.
            (json!({"scp": ["", "a b", "c"]}), vec!["c"]),
            // `scope` wins over `scp`.
            (json!({"scope": "x", "scp": ["y"]}), vec!["x"]),
            (json!({"scope": 7}), vec![]),
            (json!({}), vec![]),
        ];
        for (extra, expected) in cases {
            let mut claims = base.clone();
            for (k, v) in extra.as_object().unwrap() {
                claims[k] = v.clone();
            }
            let token = token(claims, "k1");
            let identity = auth.authenticate(&bearer(&token)).await.unwrap();
            assert_eq!(*identity.scopes, expected, "{extra}");
            assert_eq!(identity.claims["groups"], json!(["editors"]));
            assert_eq!(identity.token.as_ref().unwrap().expose(), token);
            assert!(!format!("{identity:?}").contains(&token));
        }
        let mut numeric_sub = base.clone();
        numeric_sub["sub"] = json!(42);
        assert!(matches!(
            auth.authenticate(&bearer(&token(numeric_sub, "k1"))).await,
            Err(AuthError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn static_tokens_carry_their_scopes_and_claims() {
        let config: AuthConfig = toml::from_str(
            "mode = \"bearer\"\ntokens = [{ principal = \"ci\", token = \"t\", scopes = [\"tools:all\"], claims = { groups = [\"editors\"] } }, { principal = \"ops\", token = \"o\", claims = { sub = \"operator\" } }]\n",
        )
        .unwrap();
        let auth = Authenticator::new(&config, None).unwrap();
        let ci = auth.authenticate(&bearer("t")).await.unwrap();
        assert_eq!(*ci.scopes, ["tools:all"]);
        assert_eq!(ci.claims["groups"], json!(["editors"]));
        assert_eq!(ci.claims["sub"], json!("ci"));
        let ops = auth.authenticate(&bearer("o")).await.unwrap();
        assert!(ops.scopes.is_empty());
        assert_eq!(ops.claims["sub"], json!("operator"));
        assert_eq!(ops.principal, "bearer ops");
    }
}
