//! The `auth` table of a route: which clients may call it and how they prove it. The checks of
//! tokens themselves are the authenticator's (`auth.rs`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The principal of routes without authentication (and of warm and probe sessions).
pub const ANONYMOUS: &str = "anonymous";

/// Longest clock skew accepted between the gateway and token issuers.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// JWT signature algorithms the gateway verifies.
pub const JWT_ALGORITHMS: &[&str] = &["RS256", "ES256", "EdDSA"];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
pub enum AuthConfig {
    /// No authentication: every request is the same principal.
    #[default]
    None,
    /// Static bearer tokens.
    Bearer {
        tokens: Vec<BearerToken>,
        /// Scopes every request to the route needs (else 403 `insufficient_scope`).
        #[serde(default)]
        scopes: Vec<String>,
    },
    /// JWT bearer tokens.
    Jwt(JwtConfig),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BearerToken {
    pub principal: String,
    /// Hex SHA-256 of the token (preferred: the file then holds no secret).
    #[serde(default)]
    pub sha256: Option<String>,
    /// The token itself, typically `"${ENV_VAR}"`; hashed when loaded.
    #[serde(default)]
    pub token: Option<String>,
    /// The scopes this token carries.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Claims policy rules and identity expressions see as `claims` (`sub` is the principal
    /// unless given).
    #[serde(default)]
    pub claims: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    pub issuer: String,
    pub audience: String,
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Accepted algorithms: any of RS256, ES256, EdDSA (default: all three).
    #[serde(default)]
    pub algorithms: Vec<String>,
    #[serde(default = "super::defaults::jwt_leeway", with = "humantime_serde")]
    pub leeway: Duration,
    /// How often a JWKS URL is fetched again.
    #[serde(default = "super::defaults::jwks_refresh", with = "humantime_serde")]
    pub jwks_refresh: Duration,
    /// Scopes every request to the route needs (else 403 `insufficient_scope`).
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl AuthConfig {
    /// The scopes every request needs.
    pub fn required_scopes(&self) -> &[String] {
        match self {
            Self::None => &[],
            Self::Bearer { scopes, .. } => scopes,
            Self::Jwt(jwt) => &jwt.scopes,
        }
    }
}
