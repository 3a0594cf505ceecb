//! SHA-256 as lower-case hex: how the gateway fingerprints tokens, principals' params and
//! answers without keeping them. A leaf.

use sha2::{Digest, Sha256};

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
