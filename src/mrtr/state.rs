//! `requestState`: the sealed, opaque token a client echoes to resume a held call.
//!
//! Format: base64url(version ‖ key id ‖ nonce ‖ AES-256-GCM(payload)), with version and key id as
//! associated data. The payload binds the held entry to its owner instance, route, principal,
//! method, salient params, round and expiry. A key ring seals with its first key and opens with
//! any key it holds, so keys rotate without invalidating states in flight.

use std::time::{SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use aes_gcm::{AeadCore, Aes256Gcm, Key, Nonce};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

// The key format is configuration's, so validation and the ring decode keys the same way.
use crate::config::decode_keys;
pub use crate::config::KeyError;
use crate::digest::sha256_hex;
use crate::error::StateRejection;
use crate::protocol::Method;

/// First byte of a `requestState` token (authenticated with it, so no token passes as another kind).
const VERSION: u8 = 1;
/// First byte of a legacy session id ([`KeyRing::seal_bytes`] with this purpose).
pub(crate) const SESSION_ID_VERSION: u8 = 2;
/// First byte of a relayed round's state: a modern backend's own `requestState`, sealed.
pub(crate) const RELAY_STATE_VERSION: u8 = 3;
/// Longest relayed state accepted: it carries the backend's state, which may be large.
pub(crate) const MAX_RELAY_TOKEN_LEN: usize = 1024 * 1024;
const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 12;
/// Longest token accepted, so a hostile one costs nothing to reject.
const MAX_TOKEN_LEN: usize = 4096;

struct RingKey {
    id: [u8; KEY_ID_LEN],
    cipher: Aes256Gcm,
}

/// Sealing and opening keys; the first one seals.
pub struct KeyRing {
    keys: Vec<RingKey>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// A new random key, base64 (for `mrtr-gateway keygen` and ephemeral rings).
pub fn generate_key() -> String {
    STANDARD.encode(Aes256Gcm::generate_key(OsRng))
}

impl KeyRing {
    /// Keys as base64 strings, the sealing key first.
    pub fn from_base64<S: AsRef<str>>(keys: &[S]) -> Result<Self, KeyError> {
        let keys = decode_keys(keys)?
            .iter()
            .map(|bytes| {
                let digest = Sha256::digest(bytes);
                let mut id = [0u8; KEY_ID_LEN];
                id.copy_from_slice(&digest[..KEY_ID_LEN]);
                RingKey {
                    id,
                    cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(bytes)),
                }
            })
            .collect();
        Ok(Self { keys })
    }

    /// A ring with one random key: enough while held calls live in this process only.
    pub fn ephemeral() -> Self {
        let key = generate_key();
        match Self::from_base64(&[key]) {
            Ok(ring) => ring,
            // A freshly generated key always has the right length.
            Err(_) => unreachable!("generated key is valid"),
        }
    }

    pub fn seal(&self, payload: &StatePayload) -> String {
        self.seal_bytes(VERSION, &serde_json::to_vec(payload).unwrap_or_default())
    }

    /// Opens a token, checking integrity only; binding checks are the caller's.
    pub fn open(&self, token: &str) -> Result<StatePayload, StateRejection> {
        let plaintext = self.open_bytes(VERSION, token)?;
        serde_json::from_slice(&plaintext).map_err(|_| StateRejection::Malformed)
    }

    /// Seals `plaintext` for one purpose (its first byte, authenticated with the rest).
    pub fn seal_bytes(&self, purpose: u8, plaintext: &[u8]) -> String {
        let key = &self.keys[0];
        // A CSPRNG seeded from the OS (ChaCha, reseeded), without a system call per nonce.
        let nonce = Aes256Gcm::generate_nonce(&mut rand::thread_rng());
        let mut header = [0u8; 1 + KEY_ID_LEN];
        header[0] = purpose;
        header[1..].copy_from_slice(&key.id);
        let ciphertext = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: &header,
                },
            )
            .unwrap_or_default();
        let mut token = Vec::with_capacity(header.len() + NONCE_LEN + ciphertext.len());
        token.extend_from_slice(&header);
        token.extend_from_slice(&nonce);
        token.extend_from_slice(&ciphertext);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// Opens a token sealed for `purpose` by any key of the ring.
    pub fn open_bytes(&self, purpose: u8, token: &str) -> Result<Vec<u8>, StateRejection> {
        let longest = if purpose == RELAY_STATE_VERSION {
            MAX_RELAY_TOKEN_LEN
        } else {
            MAX_TOKEN_LEN
        };
        if token.len() > longest {
            return Err(StateRejection::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| StateRejection::Malformed)?;
        if bytes.len() < 1 + KEY_ID_LEN + NONCE_LEN + 16 || bytes[0] != purpose {
            return Err(StateRejection::Malformed);
        }
        let (header, rest) = bytes.split_at(1 + KEY_ID_LEN);
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let key = self
            .keys
            .iter()
            .find(|k| k.id == header[1..])
            .ok_or(StateRejection::Tampered)?;
        key.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: header,
                },
            )
            .map_err(|_| StateRejection::Tampered)
    }
}

/// What a `requestState` binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePayload {
    /// Held-entry id (128-bit random, hex).
    #[serde(rename = "h")]
    pub held_id: String,
    /// Instance that holds the call.
    #[serde(rename = "o")]
    pub owner: String,
    /// With `[fleet]`: where the other replicas reach that instance (`HOST:PORT`). Trusted only
    /// because the state opened.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub owner_address: Option<String>,
    /// Route path the call came through.
    #[serde(rename = "b")]
    pub route: String,
    /// SHA-256 of the principal (hex, 128 bits).
    #[serde(rename = "p")]
    pub principal: String,
    #[serde(rename = "m")]
    pub method: String,
    /// SHA-256 of the salient params (hex).
    #[serde(rename = "d")]
    pub params_digest: String,
    #[serde(rename = "r")]
    pub round: u32,
    /// Expiry, milliseconds since the Unix epoch.
    #[serde(rename = "e")]
    pub expires_ms: u64,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// The first 128 bits of the principal's SHA-256, hex: what a state binds instead of the name.
pub fn principal_digest(principal: &str) -> String {
    hex::encode(&Sha256::digest(principal.as_bytes())[..16])
}

/// Digest of what identifies the request: name and arguments, or uri (`target`). `_meta`,
/// `inputResponses` and `requestState` are not part of it. The bytes are those of the sorted
/// JSON object `{"arguments", "name"}` or `{"uri"}` (serde_json maps are sorted), so the digest
/// is canonical.
pub fn params_digest(method: Method, target: Option<&str>, arguments: Option<&Value>) -> String {
    // Fields in sorted order, borrowed: the same bytes as the sorted JSON object, without copying
    // the arguments.
    #[derive(Serialize)]
    struct Call<'a> {
        arguments: &'a Value,
        name: Option<&'a str>,
    }
    #[derive(Serialize)]
    struct Read<'a> {
        uri: Option<&'a str>,
    }
    // An empty map does not allocate.
    let no_arguments = Value::Object(serde_json::Map::new());
    let salient = match method {
        Method::ResourcesRead => serde_json::to_vec(&Read { uri: target }),
        _ => serde_json::to_vec(&Call {
            arguments: arguments.unwrap_or(&no_arguments),
            name: target,
        }),
    };
    sha256_hex(&salient.unwrap_or_default())
}

/// A fresh 128-bit id, hex.
pub fn random_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> StatePayload {
        StatePayload {
            held_id: random_id(),
            owner: "i".into(),
            owner_address: Some("10.0.0.7:8080".into()),
            route: "/mcp".into(),
            principal: principal_digest("alice"),
            method: "tools/call".into(),
            params_digest: params_digest(Method::ToolsCall, None, None),
            round: 1,
            expires_ms: now_ms() + 1000,
        }
    }

    #[test]
    fn seal_then_open_round_trips() {
        let ring = KeyRing::ephemeral();
        let p = payload();
        assert_eq!(ring.open(&ring.seal(&p)).unwrap(), p);
    }

    #[test]
    fn every_flipped_byte_is_rejected() {
        let ring = KeyRing::ephemeral();
        let token = ring.seal(&payload());
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 0x01;
            let err = ring.open(&URL_SAFE_NO_PAD.encode(&bad)).unwrap_err();
            assert!(
                matches!(err, StateRejection::Tampered | StateRejection::Malformed),
                "byte {i}"
            );
        }
        for cut in [1, 2, 3, 10] {
            let err = ring.open(&token[..token.len() - cut]).unwrap_err();
            assert!(matches!(
                err,
                StateRejection::Tampered | StateRejection::Malformed
            ));
        }
        let extended = format!("{token}AAAA");
        assert!(ring.open(&extended).is_err());
        assert_eq!(ring.open("%%%"), Err(StateRejection::Malformed));
        assert_eq!(ring.open(""), Err(StateRejection::Malformed));
    }

    #[test]
    fn rotation_keeps_old_states_openable() {
        let old = generate_key();
        let new = generate_key();
        let before = KeyRing::from_base64(std::slice::from_ref(&old)).unwrap();
        let token = before.seal(&payload());
        let after = KeyRing::from_base64(&[new.clone(), old]).unwrap();
        assert!(after.open(&token).is_ok());
        let retired = KeyRing::from_base64(&[new]).unwrap();
        assert_eq!(retired.open(&token), Err(StateRejection::Tampered));
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(
            KeyRing::from_base64(&["c2hvcnQ="]),
            Err(KeyError::Length { index: 0, len: 5 })
        ));
        assert!(matches!(
            KeyRing::from_base64(&["***"]),
            Err(KeyError::Encoding { index: 0 })
        ));
        assert!(matches!(
            KeyRing::from_base64::<&str>(&[]),
            Err(KeyError::Empty)
        ));
    }

    #[test]
    fn params_digest_is_the_digest_of_the_sorted_salient_json() {
        let arguments = serde_json::json!({"z": [1, {"b": 2, "a": 1}], "y": "é"});
        let canonical = serde_json::json!({"name": "t", "arguments": arguments}).to_string();
        assert_eq!(
            params_digest(Method::ToolsCall, Some("t"), Some(&arguments)),
            sha256_hex(canonical.as_bytes())
        );
        assert_eq!(
            params_digest(Method::ResourcesRead, Some("file:///a"), None),
            sha256_hex(br#"{"uri":"file:///a"}"#)
        );
        assert_eq!(
            params_digest(Method::ToolsCall, None, None),
            sha256_hex(br#"{"arguments":{},"name":null}"#)
        );
    }

    #[test]
    fn params_digest_ignores_order_and_sees_every_argument() {
        let a = serde_json::json!({"x": 1, "y": 2});
        let b: Value = serde_json::from_str(r#"{"y": 2, "x": 1}"#).unwrap();
        assert_eq!(
            params_digest(Method::ToolsCall, Some("t"), Some(&a)),
            params_digest(Method::ToolsCall, Some("t"), Some(&b))
        );
        let c = serde_json::json!({"x": 2, "y": 2});
        assert_ne!(
            params_digest(Method::ToolsCall, Some("t"), Some(&a)),
            params_digest(Method::ToolsCall, Some("t"), Some(&c))
        );
        assert_ne!(
            params_digest(Method::ToolsCall, Some("t"), Some(&a)),
            params_digest(Method::PromptsGet, Some("u"), Some(&a))
        );
    }
}
