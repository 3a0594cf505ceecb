//! The protocol's vocabulary, in one leaf every layer may use: the revisions on each side, the
//! `io.modelcontextprotocol/*` `_meta` keys, log levels, the client methods the front knows
//! with what each of them may do, and the eras an endpoint serves ([`Era`]). Nothing here depends on another module of the crate.

use serde::Deserialize;

/// Revisions the front speaks.
pub(crate) const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28"];

/// The gateway as an MCP implementation: its `clientInfo` to backends, and its `serverInfo`
/// where it answers for several backends.
pub(crate) fn gateway_implementation() -> serde_json::Value {
    serde_json::json!({
        "name": "mrtr-gateway",
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// The revision the gateway asks its backends for.
pub(crate) const BACKEND_PROTOCOL_VERSION: &str = "2025-11-25";

/// The session-based revisions: what a backend may answer `initialize` with (their messages are
/// compatible for what the gateway forwards), and what a 2025-11-25 client's session may carry
/// in `MCP-Protocol-Version`.
pub(crate) const LEGACY_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The header naming the revision of a request (both eras).
pub(crate) const PROTOCOL_VERSION_HEADER: http::HeaderName =
    http::HeaderName::from_static("mcp-protocol-version");

/// The header naming a 2025-11-25 session, on both sides (a client's is the gateway's own).
pub(crate) const SESSION_ID_HEADER: http::HeaderName =
    http::HeaderName::from_static("mcp-session-id");

/// The prefix of the `_meta` keys 2026-07-28 reserves; none of them reach a 2025 backend.
pub(crate) const META_PREFIX: &str = "io.modelcontextprotocol/";
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// RFC 5424 levels, lowest first.
pub(crate) const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A level's place in [`LOG_LEVELS`]; `None` for a name that is not a level.
pub(crate) fn log_level_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

/// A client request's method, as the front distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Discover,
    /// The 2025 handshake: a 2026 server answers it with the versions it supports.
    Initialize,
    ToolsList,
    ToolsCall,
    PromptsList,
    PromptsGet,
    ResourcesList,
    ResourcesRead,
    ResourcesTemplatesList,
    CompletionComplete,
    /// A long-lived SSE stream of list changes and resource updates.
    SubscriptionsListen,
    /// Anything else: answered "method not found".
    Other,
}

impl Method {
    /// Every method with a name of its own, for lookups and metric labels.
    const NAMED: [Method; 11] = [
        Method::Discover,
        Method::Initialize,
        Method::ToolsList,
        Method::ToolsCall,
        Method::PromptsList,
        Method::PromptsGet,
        Method::ResourcesList,
        Method::ResourcesRead,
        Method::ResourcesTemplatesList,
        Method::CompletionComplete,
        Method::SubscriptionsListen,
    ];

    pub fn parse(name: &str) -> Self {
        Self::NAMED
            .into_iter()
            .find(|m| m.as_str() == name)
            .unwrap_or(Method::Other)
    }

    /// The wire name; `"other"` for [`Method::Other`] (the metric label of unknown methods).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Discover => "server/discover",
            Method::Initialize => "initialize",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
            Method::PromptsList => "prompts/list",
            Method::PromptsGet => "prompts/get",
            Method::ResourcesList => "resources/list",
            Method::ResourcesRead => "resources/read",
            Method::ResourcesTemplatesList => "resources/templates/list",
            Method::CompletionComplete => "completion/complete",
            Method::SubscriptionsListen => "subscriptions/listen",
            Method::Other => "other",
        }
    }

    /// The label of this method in metrics: bounded, so `initialize` counts as "other" too.
    pub fn label(self) -> &'static str {
        match self {
            Method::Initialize => "other",
            m => m.as_str(),
        }
    }

    /// Methods the gateway forwards to the backend.
    pub fn is_forwarded(self) -> bool {
        !matches!(
            self,
            Method::Discover | Method::Initialize | Method::SubscriptionsListen | Method::Other
        )
    }

    /// Methods that may answer `input_required` (and so be held and retried).
    pub fn is_interruptible(self) -> bool {
        matches!(
            self,
            Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead
        )
    }

    /// Whether the result lists tools, prompts, resources or resource templates.
    pub fn is_list(self) -> bool {
        matches!(
            self,
            Method::ToolsList
                | Method::PromptsList
                | Method::ResourcesList
                | Method::ResourcesTemplatesList
        )
    }

    /// Methods whose complete results must carry `ttlMs` and `cacheScope`.
    pub fn is_cacheable(self) -> bool {
        matches!(
            self,
            Method::Discover
                | Method::ToolsList
                | Method::PromptsList
                | Method::ResourcesList
                | Method::ResourcesTemplatesList
                | Method::ResourcesRead
        )
    }

    /// The param that names the request's target, mirrored in the `Mcp-Name` header.
    pub fn name_param(self) -> Option<&'static str> {
        match self {
            Method::ToolsCall | Method::PromptsGet => Some("name"),
            Method::ResourcesRead => Some("uri"),
            _ => None,
        }
    }

    /// The backend capability a forwarded method needs; without it the method does not exist
    /// there.
    pub fn required_backend_capability(self) -> Option<&'static str> {
        match self {
            Method::ToolsList | Method::ToolsCall => Some("tools"),
            Method::PromptsList | Method::PromptsGet => Some("prompts"),
            Method::ResourcesList | Method::ResourcesRead | Method::ResourcesTemplatesList => {
                Some("resources")
            }
            Method::CompletionComplete => Some("completions"),
            _ => None,
        }
    }
}

/// A protocol era an endpoint serves (the revision that defines it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Era {
    /// Stateless requests with per-request `_meta`; server questions become MRTR rounds.
    #[serde(rename = "2026-07-28")]
    Modern,
    /// `initialize` and a session per client, proxied to a dedicated backend session.
    #[serde(rename = "2025-11-25")]
    Legacy,
}

impl Era {
    /// The metric label: the revision's date.
    pub fn label(self) -> &'static str {
        match self {
            Self::Modern => "2026-07-28",
            Self::Legacy => "2025-11-25",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_round_trip_and_unknown_ones_are_other() {
        for method in Method::NAMED {
            assert_eq!(Method::parse(method.as_str()), method);
        }
        assert_eq!(Method::parse("evil/method"), Method::Other);
        assert_eq!(Method::parse("other"), Method::Other);
        assert_eq!(Method::Initialize.label(), "other");
    }

    #[test]
    fn method_sets() {
        assert!(Method::ToolsCall.is_interruptible() && Method::ToolsCall.is_forwarded());
        assert!(!Method::ToolsList.is_interruptible() && Method::ToolsList.is_cacheable());
        assert!(!Method::Discover.is_forwarded() && Method::Discover.is_cacheable());
        assert!(!Method::Other.is_forwarded());
        assert_eq!(
            Method::CompletionComplete.required_backend_capability(),
            Some("completions")
        );
        assert_eq!(log_level_rank("warning"), Some(3));
        assert_eq!(log_level_rank("loud"), None);
    }
}
