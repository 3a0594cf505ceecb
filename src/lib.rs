//! mrtr-gateway: a Model Context Protocol gateway that serves 2026-07-28 clients in front of
//! unmodified 2025-11-25 servers.
//!
//! Data flows one way: `front` (2026-07-28 Streamable HTTP server, a stack of tower layers) →
//! `mrtr` (multi round-trip bridge: call setup, held calls, `requestState`) → `backend`
//! (2025-11-25 client over stdio or Streamable HTTP). A 2025-11-25 client at the same endpoint
//! takes `legacy` instead of `mrtr`: its session proxied to a backend session of its own. Below
//! them: `fleet` (forwarding to the replica that holds a call or session), used by both eras;
//! `auth`; `access` (who may use which tools, prompts and resources); [`config`] (the file
//! format); and the leaves any layer may use: `error` (the one mapping of failures onto JSON-RPC
//! codes and HTTP statuses), `protocol` (the vocabulary of both revisions), `jsonrpc` (message
//! shapes), `http_serve` (bodies, responses and SSE as both eras serve them), `expr` (CEL
//! expressions over the caller), `http_client`, `digest`, `sync`, `metrics` and [`telemetry`].
//! Imports run down only: front > legacy > mrtr, fleet > backend, auth, access > config >
//! leaves. [`demo`] is the built-in demo legacy server.
//!
//! The public surface is what the binary and the integration tests use; what the fuzz targets
//! and benchmarks reach inside is in `internals` (doc-hidden, not an API).

// What a module offers the others is `pub(crate)`; `pub` is the public surface alone.
#![warn(unreachable_pub)]
// No panicking shortcut on a request path; tests may use them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod demo;
pub mod telemetry;

pub(crate) mod access;
pub(crate) mod audit;
pub(crate) mod auth;
pub(crate) mod backend;
pub(crate) mod digest;
pub(crate) mod error;
pub(crate) mod exchange;
pub(crate) mod expr;
pub(crate) mod fleet;
pub(crate) mod front;
pub(crate) mod http_client;
pub(crate) mod http_serve;
pub(crate) mod jsonrpc;
pub(crate) mod legacy;
pub(crate) mod metrics;
pub(crate) mod mrtr;
pub(crate) mod protocol;
pub(crate) mod sync;

pub use auth::{b64url, token_digest};
pub use backend::pool::{Pool, PoolStats};
pub use front::{start, Gateway, RunningGateway, StartError};

/// `requestState` as operators (key generation) and tests (states forged with a known key) use
/// it.
pub mod state {
    pub use crate::mrtr::state::{generate_key, principal_digest, KeyError, KeyRing, StatePayload};
}

/// What the fuzz targets (`--cfg fuzzing`, set by cargo-fuzz) and the micro benchmarks (cargo
/// feature `internal-benches`) exercise inside the crate. Not an API: hidden from the docs, and
/// compiled always, so that what it names counts as reachable and nothing else does.
#[doc(hidden)]
pub mod internals {
    pub use crate::access::{Decision, ItemKind, RoutePolicy};
    pub use crate::expr::{Expr, ExprError, Facts};
    pub use crate::front::request::parse;
    pub use crate::front::translate::stamp_result;
    pub use crate::http_serve::body::check_media_types;
    pub use crate::http_serve::headers::decode_header_value;
    pub use crate::jsonrpc::raw as raw_json;
    pub use crate::mrtr::held::HeldTable;
    pub use crate::mrtr::inputs::answers::validate_answer;
    pub use crate::mrtr::inputs::{gate, Gate, InputKind, PendingInput};
    pub use crate::mrtr::state::{now_ms, params_digest, random_id};
    pub use crate::protocol::Method;

    /// The bearer token of an `Authorization` header value, as authentication reads it.
    pub fn bearer_token_of(authorization: &[u8]) -> Option<String> {
        let value = http::HeaderValue::from_bytes(authorization).ok()?;
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, value);
        crate::auth::bearer_token(&headers).ok().map(String::from)
    }

    /// The scopes a JWT's claims (as JSON) carry.
    pub fn scopes_of_claims(claims: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
        crate::auth::scopes_of(claims)
    }

    /// The `insufficient_scope` challenge a 403 carries, if it can be written as a header.
    pub fn insufficient_scope_challenge(metadata_url: &str, scopes: Vec<String>) -> Option<String> {
        let error = crate::error::GatewayError::InsufficientScope { scopes };
        let mut response = crate::http_serve::error_response(None, &error);
        crate::http_serve::scope_challenge(metadata_url, &error, &mut response);
        let challenge = response.headers().get(http::header::WWW_AUTHENTICATE)?;
        Some(challenge.to_str().ok()?.to_string())
    }
}
