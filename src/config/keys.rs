//! What a configured `requestState` key is: standard base64 of exactly [`KEY_LEN`] bytes,
//! surrounding whitespace ignored. Validation and the key ring both decode with
//! [`decode_keys`], so the rule lives in one place.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Length of an AES-256-GCM key.
pub(super) const KEY_LEN: usize = 32;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key {index}: not valid base64")]
    Encoding { index: usize },
    #[error("key {index}: must be exactly {KEY_LEN} bytes (got {len})")]
    Length { index: usize, len: usize },
    #[error("no sealing key")]
    Empty,
}

/// Decodes a key set, the sealing key first; an empty set has no sealing key.
pub fn decode_keys<S: AsRef<str>>(keys: &[S]) -> Result<Vec<[u8; KEY_LEN]>, KeyError> {
    if keys.is_empty() {
        return Err(KeyError::Empty);
    }
    keys.iter()
        .enumerate()
        .map(|(index, encoded)| decode_key(index, encoded.as_ref()))
        .collect()
}

/// Decodes the key at `index` of its set (the index only names it in errors).
fn decode_key(index: usize, encoded: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let bytes = STANDARD
        .decode(encoded.trim())
        .map_err(|_| KeyError::Encoding { index })?;
    let len = bytes.len();
    bytes
        .try_into()
        .map_err(|_| KeyError::Length { index, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_base64_of_32_bytes() {
        let key = STANDARD.encode([7u8; KEY_LEN]);
        assert_eq!(
            decode_keys(&[format!(" {key}\n")]),
            Ok(vec![[7u8; KEY_LEN]])
        );
    }

    #[test]
    fn bad_keys_are_named_by_index() {
        let good = STANDARD.encode([1u8; KEY_LEN]);
        assert_eq!(
            decode_keys(&[good.as_str(), "c2hvcnQ="]),
            Err(KeyError::Length { index: 1, len: 5 })
        );
        assert_eq!(
            decode_keys(&[good.as_str(), "***"]),
            Err(KeyError::Encoding { index: 1 })
        );
        assert_eq!(decode_keys::<&str>(&[]), Err(KeyError::Empty));
        assert_eq!(
            KeyError::Length { index: 1, len: 5 }.to_string(),
            "key 1: must be exactly 32 bytes (got 5)"
        );
    }
}
