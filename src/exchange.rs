//! Token exchange (RFC 8693) for HTTP backends: the caller's bearer token is exchanged at an
//! authorization server for one the backend accepts, so the caller's own token never reaches a
//! backend. This module owns the exchange request, the reading of its answer, and the cache of
//! exchanged tokens per principal, with one exchange in flight per principal at a time.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use dashmap::DashMap;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;
use tokio::sync::Mutex as AsyncMutex;

use crate::config::TokenExchangeConfig;
use crate::http_client::HttpClient;
use crate::metrics::Metrics;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The largest answer read from the token endpoint: a token answer is a few KiB.
const ANSWER_MAX_BYTES: usize = 64 * 1024;
/// How long a token whose answer gave no `expires_in` is used.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);
/// The longest a token is kept, whatever `expires_in` says (and no `Instant` overflow).
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);
/// A token is refreshed this long before it expires at most (or 10% of its lifetime, if less).
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(30);
/// Principals with a cache entry per backend; past it expired entries are dropped first.
const MAX_PRINCIPALS: usize = 10_000;
/// The longest text of the authorization server's kept in an error.
const MAX_REASON_CHARS: usize = 200;

/// Why no token could be had for a backend. The texts reach clients: they name the backend and
/// what went wrong, never a token or the client secret.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// The backend's `token_exchange` cannot be used.
    #[error("token exchange for backend {backend} is misconfigured: {reason}")]
    Config { backend: String, reason: String },
    /// The authorization server answered with an OAuth error (HTTP 400, 401 or 403).
    #[error("the authorization server refused the token exchange for backend {backend}: {error}{}",
        description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Rejected {
        backend: String,
        error: String,
        description: Option<String>,
    },
    /// The authorization server could not be reached, or its answer was not usable.
    #[error("token exchange for backend {backend} failed: {reason}")]
    Unavailable { backend: String, reason: String },
}

impl ExchangeError {
    /// The metric outcome of a call that ended with this error.
    fn outcome(&self) -> &'static str {
        match self {
            Self::Rejected { .. } => "rejected",
            Self::Config { .. } | Self::Unavailable { .. } => "unavailable",
        }
    }
}

/// A token the backend accepts, for one principal.
pub(crate) struct ExchangedToken {
    /// `Bearer <access_token>`, marked sensitive.
    authorization: HeaderValue,
    /// When the authorization server said the token expires.
    pub(crate) expires_at: Instant,
    /// When the cache stops handing it out: shortly before `expires_at`.
    refresh_at: Instant,
}

impl ExchangedToken {
    /// `Authorization`'s value for the backend's requests, marked sensitive.
    pub(crate) fn authorization(&self) -> &HeaderValue {
        &self.authorization
    }

    fn is_fresh(&self, now: Instant) -> bool {
        now < self.refresh_at
    }
}

impl fmt::Debug for ExchangedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangedToken")
            .field("access_token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// How long before its expiry a token of this lifetime is refreshed: 30 s or a tenth of the
/// lifetime, whichever is smaller, so a short-lived token is still used for most of its life.
fn refresh_margin(lifetime: Duration) -> Duration {
    MAX_REFRESH_MARGIN.min(lifetime / 10)
}

/// One principal's cache entry. The lock is held across that principal's exchange only: callers
/// for the same principal queue on it and take the fresh token, or the failure, it leaves.
#[derive(Default)]
struct Slot {
    /// Exchanges concluded; a caller that saw it change while it waited shares their failure.
    attempts: AtomicU64,
    state: AsyncMutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    token: Option<Arc<ExchangedToken>>,
    failure: Option<ExchangeError>,
}

/// The token exchange of one backend.
pub(crate) struct TokenExchange {
    backend: String,
    endpoint: http::Uri,
    /// `Basic …` of the client credentials, marked sensitive.
    client_authorization: HeaderValue,
    client_secret: String,
    audience: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
    timeout: Duration,
    client: HttpClient,
    metrics: Arc<Metrics>,
    cache: DashMap<String, Arc<Slot>>,
}

impl fmt::Debug for TokenExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenExchange")
            .field("backend", &self.backend)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl TokenExchange {
    pub(crate) fn new(
        backend: &str,
        config: &TokenExchangeConfig,
        client: HttpClient,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ExchangeError> {
        let misconfigured = |reason: &str| ExchangeError::Config {
            backend: backend.to_string(),
            reason: reason.to_string(),
        };
        let endpoint: http::Uri = config
            .endpoint
            .parse()
            .map_err(|_| misconfigured("endpoint is not a URI"))?;
        if !matches!(endpoint.scheme_str(), Some("http" | "https")) || endpoint.host().is_none() {
            return Err(misconfigured("endpoint must be an http or https URL"));
        }
        // client_secret_basic (RFC 6749 §2.3.1): each part form-encoded before base64.
        let credentials = format!(
            "{}:{}",
            form_urlencoded::byte_serialize(config.client_id.as_bytes()).collect::<String>(),
            form_urlencoded::byte_serialize(config.client_secret.as_bytes()).collect::<String>()
        );
        let mut client_authorization = HeaderValue::try_from(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        ))
        .map_err(|_| misconfigured("client credentials do not fit a header"))?;
        client_authorization.set_sensitive(true);
        let scope = (!config.scopes.is_empty()).then(|| config.scopes.join(" "));
        Ok(Self {
            backend: backend.to_string(),
            endpoint,
            client_authorization,
            client_secret: config.client_secret.clone(),
            audience: config.audience.clone(),
            resource: config.resource.clone(),
            scope,
            timeout: config.timeout,
            client,
            metrics,
            cache: DashMap::new(),
        })
    }

    /// A token for `principal`'s calls to the backend: the cached one while fresh, else one
    /// exchanged for `subject_token` (the caller's bearer token).
    pub(crate) async fn token_for(
        &self,
        principal: &str,
        subject_token: &str,
    ) -> Result<Arc<ExchangedToken>, ExchangeError> {
        let slot = self.slot(principal);
        let seen = slot.attempts.load(Ordering::Acquire);
        let mut state = slot.state.lock().await;
        if let Some(token) = state.token.as_ref().filter(|t| t.is_fresh(Instant::now())) {
            self.count("cached");
            return Ok(Arc::clone(token));
        }
        if slot.attempts.load(Ordering::Acquire) != seen {
            // The exchange this caller waited for failed: its answer is this caller's too,
            // rather than one more request to a failing server. Later callers try again.
            if let Some(error) = &state.failure {
                self.count(error.outcome());
                return Err(error.clone());
            }
        }
        let result = match tokio::time::timeout(self.timeout, self.exchange(subject_token)).await {
            Ok(result) => result,
            Err(_) => Err(self.unavailable("the authorization server did not answer in time")),
        };
        let result = match result {
            // A server that cannot answer now does not end a token still valid: it is used
            // until it expires (its refresh point only said to renew it early).
            Err(ExchangeError::Unavailable { .. })
                if state
                    .token
                    .as_ref()
                    .is_some_and(|t| Instant::now() < t.expires_at) =>
            {
                let kept = state.token.clone();
                if let Err(error) = &result {
                    tracing::warn!(backend = %self.backend, %error, "token exchange failed; the current token is used until it expires");
                }
                kept.ok_or_else(|| self.unavailable("no token"))
            }
            result => result,
        };
        match &result {
            Ok(token) => {
                if !state.token.as_ref().is_some_and(|t| Arc::ptr_eq(t, token)) {
                    state.token = Some(Arc::clone(token));
                    self.count("exchanged");
                } else {
                    self.count("cached");
                }
                state.failure = None;
            }
            Err(error) => {
                state.token = None;
                state.failure = Some(error.clone());
                self.count(error.outcome());
                // A refusal is the caller's token's affair; an unreachable server the operator's.
                if matches!(error, ExchangeError::Rejected { .. }) {
                    tracing::debug!(backend = %self.backend, %error, "token exchange refused");
                } else {
                    tracing::warn!(backend = %self.backend, %error, "token exchange failed");
                }
            }
        }
        slot.attempts.fetch_add(1, Ordering::AcqRel);
        result
    }

    /// The principal's cache entry, made if new. The map's shard is locked only for the lookup.
    fn slot(&self, principal: &str) -> Arc<Slot> {
        if let Some(slot) = self.cache.get(principal) {
            return Arc::clone(&slot);
        }
        if self.cache.len() >= MAX_PRINCIPALS {
            self.prune();
        }
        Arc::clone(&self.cache.entry(principal.to_string()).or_default())
    }

    /// Makes room in a full cache: entries with no fresh token go first, then, if that is not
    /// enough, any entry not in an exchange (its principal's next call exchanges again).
    fn prune(&self) {
        let now = Instant::now();
        self.cache.retain(|_, slot| {
            idle(slot).is_none_or(|state| state.token.as_ref().is_some_and(|t| t.is_fresh(now)))
        });
        let mut excess = (self.cache.len() + 1).saturating_sub(MAX_PRINCIPALS);
        if excess > 0 {
            self.cache.retain(|_, slot| {
                if excess > 0 && idle(slot).is_some() {
                    excess -= 1;
                    return false;
                }
                true
            });
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics
            .token_exchanges
            .with_label_values(&[self.backend.as_str(), outcome])
            .inc();
    }

    fn unavailable(&self, reason: impl Into<String>) -> ExchangeError {
        ExchangeError::Unavailable {
            backend: self.backend.clone(),
            reason: reason.into(),
        }
    }

    /// One request to the token endpoint and the reading of its answer.
    async fn exchange(&self, subject_token: &str) -> Result<Arc<ExchangedToken>, ExchangeError> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.clone())
            .header(AUTHORIZATION, self.client_authorization.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::from(self.form(subject_token))))
            .map_err(|_| self.unavailable("the request could not be built"))?;
        let started = Instant::now();
        let response = self.client.request(request).await.map_err(|e| {
            // The connection error's chain names addresses and causes, never the request.
            let cause = std::error::Error::source(&e)
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            self.unavailable(format!(
                "the authorization server could not be reached{cause}"
            ))
        })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), ANSWER_MAX_BYTES)
            .collect()
            .await
            .map_err(|_| {
                self.unavailable(format!(
                    "HTTP {}: the answer could not be read or exceeds {} KiB",
                    status.as_u16(),
                    ANSWER_MAX_BYTES / 1024
                ))
            })?
            .to_bytes();
        let answer: Option<Value> = serde_json::from_slice(&body).ok();
        match status {
            StatusCode::OK => self.issued(answer, started),
            StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(self.refusal(status, answer.as_ref(), subject_token))
            }
            _ => Err(self.unavailable(format!("HTTP {}", status.as_u16()))),
        }
    }

    /// The request's body.
    fn form(&self, subject_token: &str) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", GRANT_TYPE)
            .append_pair("subject_token", subject_token)
            .append_pair("subject_token_type", ACCESS_TOKEN_TYPE)
            .append_pair("requested_token_type", ACCESS_TOKEN_TYPE);
        if let Some(audience) = &self.audience {
            form.append_pair("audience", audience);
        }
        if let Some(resource) = &self.resource {
            form.append_pair("resource", resource);
        }
        if let Some(scope) = &self.scope {
            form.append_pair("scope", scope);
        }
        form.finish()
    }

    /// The token of a 200 answer.
    fn issued(
        &self,
        answer: Option<Value>,
        started: Instant,
    ) -> Result<Arc<ExchangedToken>, ExchangeError> {
        // serde's messages are not used: they may quote the answer, which holds the token.
        let Some(Value::Object(mut answer)) = answer else {
            return Err(self.unavailable("the answer is not a JSON object"));
        };
        let access_token = match answer.remove("access_token") {
            Some(Value::String(token)) if !token.is_empty() => token,
            _ => return Err(self.unavailable("the answer has no access_token")),
        };
        match answer.get("token_type").and_then(Value::as_str) {
            Some(kind) if kind.eq_ignore_ascii_case("bearer") || kind == "N_A" => {}
            Some(kind) => {
                return Err(
                    self.unavailable(format!("token_type {:?} is not Bearer", clip(kind, 40)))
                )
            }
            None => return Err(self.unavailable("the answer has no token_type")),
        }
        let lifetime = answer
            .get("expires_in")
            .and_then(|v| match v {
                Value::Number(n) => n.as_f64(),
                // Some servers send it as a string.
                Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .map_or(DEFAULT_LIFETIME, |d| d.min(MAX_LIFETIME));
        let mut authorization = HeaderValue::try_from(format!("Bearer {access_token}"))
            .map_err(|_| self.unavailable("the access_token does not fit a header"))?;
        authorization.set_sensitive(true);
        // Timed from the request: the server's clock started before the answer arrived.
        let expires_at = started + lifetime;
        Ok(Arc::new(ExchangedToken {
            authorization,
            expires_at,
            refresh_at: expires_at - refresh_margin(lifetime),
        }))
    }

    /// The error of an HTTP 400, 401 or 403 answer.
    fn refusal(
        &self,
        status: StatusCode,
        answer: Option<&Value>,
        subject_token: &str,
    ) -> ExchangeError {
        let text = |key: &str| {
            answer
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .map(|s| self.scrub(s, subject_token))
                .filter(|s| !s.is_empty())
        };
        match text("error") {
            Some(error) => ExchangeError::Rejected {
                backend: self.backend.clone(),
                error,
                description: text("error_description"),
            },
            None => self.unavailable(format!("HTTP {}", status.as_u16())),
        }
    }

    /// The authorization server's text as kept in an error: the characters RFC 6749 allows in
    /// it (printable ASCII but `"` and `\`), clipped, any echo of a secret taken out.
    fn scrub(&self, text: &str, subject_token: &str) -> String {
        let mut text = text.to_string();
        for secret in [subject_token, self.client_secret.as_str()] {
            if !secret.is_empty() {
                text = text.replace(secret, "[redacted]");
            }
        }
        let kept: String = text
            .chars()
            .filter(|c| matches!(c, ' '..='~') && !matches!(c, '"' | '\\'))
            .collect();
        clip(&kept, MAX_REASON_CHARS).to_string()
    }
}

/// The entry's state, unless an exchange holds it.
fn idle(slot: &Slot) -> Option<tokio::sync::MutexGuard<'_, SlotState>> {
    slot.state.try_lock().ok()
}

/// At most `max` characters of `text`.
fn clip(text: &str, max: usize) -> &str {
    text.char_indices()
        .nth(max)
        .map_or(text, |(end, _)| &text[..end])
}

#[cfg(test)]
mod tests;
