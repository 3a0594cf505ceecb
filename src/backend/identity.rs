//! Who a backend session is for, as the backend is told: the values of `identity_headers`
//! (HTTP) and `identity_env` (stdio), evaluated for the caller when its session is keyed, and
//! the token the backend accepts for that caller (`token_exchange`), refreshed in place by
//! the caller's requests. Never the caller's own token.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::BackendError;

/// What a session tells its backend about the caller. Sessions differing in it are different
/// sessions: a caller whose claims changed gets a new one.
#[derive(Debug, Default)]
pub(crate) struct SessionIdentity {
    /// `identity_headers`, sent on every message of the session.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `identity_env`, set when the session's process starts.
    pub env: Vec<(String, String)>,
    /// `token_exchange`: the caller's token for this backend, sent as `Authorization`.
    pub credential: Option<Arc<Credential>>,
    /// SHA-256 over the headers and the environment: what the pool keys sessions by.
    fingerprint: String,
}

impl SessionIdentity {
    pub(crate) fn new(
        headers: Vec<(HeaderName, HeaderValue)>,
        env: Vec<(String, String)>,
        credential: Option<Arc<Credential>>,
    ) -> Self {
        let mut text = String::new();
        for (name, value) in &headers {
            text.push_str(name.as_str());
            text.push('\0');
            text.push_str(&String::from_utf8_lossy(value.as_bytes()));
            text.push('\0');
        }
        text.push('\u{1}');
        for (name, value) in &env {
            text.push_str(name);
            text.push('\0');
            text.push_str(value);
            text.push('\0');
        }
        Self {
            headers,
            env,
            credential,
            fingerprint: crate::digest::sha256_hex(text.as_bytes()),
        }
    }

    /// Nothing to tell: routes without identity settings. One value for every such request,
    /// made (and its fingerprint hashed) once.
    pub(crate) fn none() -> Arc<Self> {
        static NONE: LazyLock<Arc<SessionIdentity>> =
            LazyLock::new(|| Arc::new(SessionIdentity::new(Vec::new(), Vec::new(), None)));
        NONE.clone()
    }

    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// What every HTTP request of the session carries besides the protocol's own headers: the
    /// backend's static `headers`, then the caller's identity headers (the configuration
    /// check keeps their names apart).
    pub(crate) fn request_headers(
        &self,
        configured: &BTreeMap<String, String>,
    ) -> Result<HeaderMap, BackendError> {
        let mut headers = HeaderMap::new();
        for (name, value) in configured {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| BackendError::Connect(format!("header {name}: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| BackendError::Connect(format!("header {name}: {e}")))?;
            headers.insert(name, value);
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(headers)
    }
}

/// A caller's current `Authorization` value for one backend: every message reads it as it
/// is sent, and each of the caller's requests may have renewed it first.
#[derive(Debug)]
pub(crate) struct Credential(ArcSwap<HeaderValue>);

impl Credential {
    /// Made only from a token in hand: a session with a credential never sends without one.
    pub(crate) fn new(value: HeaderValue) -> Self {
        Self(ArcSwap::from_pointee(value))
    }

    pub(crate) fn set(&self, value: HeaderValue) {
        self.0.store(Arc::new(value));
    }

    pub(crate) fn current(&self) -> Arc<HeaderValue> {
        self.0.load_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_tells_identities_apart() {
        let header = |v: &'static str| {
            vec![(
                HeaderName::from_static("x-mcp-user"),
                HeaderValue::from_static(v),
            )]
        };
        let alice = SessionIdentity::new(header("alice"), Vec::new(), None);
        let again = SessionIdentity::new(header("alice"), Vec::new(), None);
        let bob = SessionIdentity::new(header("bob"), Vec::new(), None);
        let env = SessionIdentity::new(
            Vec::new(),
            vec![("X-MCP-USER".into(), "alice".into())],
            None,
        );
        assert_eq!(alice.fingerprint(), again.fingerprint());
        assert_ne!(alice.fingerprint(), bob.fingerprint());
        assert_ne!(alice.fingerprint(), env.fingerprint());
        assert_ne!(alice.fingerprint(), SessionIdentity::none().fingerprint());
    }
}
