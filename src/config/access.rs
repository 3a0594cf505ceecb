//! What a route lets callers use and what its backends are told about them: `[[route.policy]]`
//! rules, a backend's `token_exchange`, and `[audit]`. The checks are in `check::policy`,
//! `check::identity` and `check::server`.

use std::time::Duration;

use serde::Deserialize;

use super::defaults;

/// One `[[route.policy]]` rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// Globs on tool names (`*` any run of characters, `?` one).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Globs on prompt names.
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Globs on resource URIs (and resource templates' `uriTemplate`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// A CEL condition over `principal`, `claims`, `scopes`, `method` and `name`; absent: true.
    #[serde(default)]
    pub when: Option<String>,
    /// Step-up: scopes the token must also carry to use what this rule allows.
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub effect: Effect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    #[default]
    Allow,
    Deny,
}

/// `token_exchange` of an HTTP backend: the caller's token exchanged (RFC 8693) for one the
/// backend accepts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenExchangeConfig {
    /// The authorization server's token endpoint.
    pub endpoint: String,
    pub client_id: String,
    /// Typically `"${SECRET}"`.
    pub client_secret: String,
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Longest wait for the token endpoint.
    #[serde(default = "defaults::token_exchange_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// `[audit]`: one JSON line per call and per refusal.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// A file appended to, or `"-"` for standard output.
    pub file: String,
    /// Whether records carry the call's arguments.
    #[serde(default)]
    pub arguments: bool,
    /// Records waiting to be written; past it new ones are dropped and counted.
    #[serde(default = "defaults::audit_queue")]
    pub queue: usize,
}
