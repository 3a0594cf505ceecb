//! Field-level translation between the revisions: request params on their way to a 2025-11-25
//! backend, results and notifications on their way to a 2026-07-28 client, and the capabilities
//! `server/discover` reports.

use serde_json::{json, Map, Value};

use super::validate::{META_SERVER_INFO, SUPPORTED_VERSIONS};
use crate::config::RouteConfig;

/// Methods whose complete results must carry `ttlMs` and `cacheScope`.
pub fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Methods that may answer `input_required` (and so be held and retried).
pub fn is_interruptible(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// Methods the gateway forwards to the backend.
pub fn is_forwarded(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "tools/call"
            | "prompts/list"
            | "prompts/get"
            | "resources/list"
            | "resources/read"
            | "resources/templates/list"
            | "completion/complete"
    )
}

/// The backend capability a forwarded method needs; without it the method does not exist there.
pub fn required_backend_capability(method: &str) -> Option<&'static str> {
    match method.split('/').next() {
        Some("tools") => Some("tools"),
        Some("prompts") => Some("prompts"),
        Some("resources") => Some("resources"),
        Some("completion") => Some("completions"),
        _ => None,
    }
}

/// Params for the backend: 2026-only `_meta` keys, MRTR fields and `task` removed, the progress token
/// replaced by the gateway's own, `arguments` defaulted for `tools/call`. Everything else,
/// trace context and unknown keys included, passes unchanged.
pub fn backend_params(
    method: &str,
    mut params: Map<String, Value>,
    backend_progress_token: Option<&str>,
    trace_headers: &[(&'static str, String)],
) -> Value {
    params.remove("inputResponses");
    params.remove("requestState");
    // A 2026 client's `task` belongs to the tasks extension; to a 2025 server it would ask for a
    // 2025 task, which the gateway does not run.
    params.remove("task");
    let mut meta = match params.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
    meta.remove("progressToken");
    if let Some(token) = backend_progress_token {
        meta.insert("progressToken".into(), json!(token));
    }
    // Trace context in `_meta` wins; the HTTP headers are the fallback.
    if !meta.contains_key("traceparent") {
        for (name, value) in trace_headers {
            meta.insert((*name).into(), json!(value));
        }
    }
    if !meta.is_empty() {
        params.insert("_meta".into(), Value::Object(meta));
    }
    if method == "tools/call" && !params.contains_key("arguments") {
        params.insert("arguments".into(), json!({}));
    }
    Value::Object(params)
}

/// Adds what 2026-07-28 requires of every complete result: `resultType`, the server's identity
/// in `_meta`, cache hints where required; and removes 2025-only tool fields.
pub fn stamp_result(
    method: &str,
    result: Value,
    route: &RouteConfig,
    server_info: Option<&Value>,
    retry: bool,
) -> Value {
    let mut result = match result {
        Value::Object(map) => map,
        // A 2025 result is always an object; anything else is kept under a key, not dropped.
        other => {
            let mut map = Map::new();
            map.insert("value".into(), other);
            map
        }
    };
    result.insert("resultType".into(), json!("complete"));
    if let Some(info) = server_info {
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), info.clone());
        }
    }
    if is_cacheable(method) {
        // Results of retries must not be cached, yet the fields are required.
        let (ttl, scope) = if retry {
            (0, "private")
        } else {
            (route.ttl_ms, route.cache_scope.as_str())
        };
        result.insert("ttlMs".into(), json!(ttl));
        result.insert("cacheScope".into(), json!(scope));
    }
    if method == "tools/list" {
        if let Some(Value::Array(tools)) = result.get_mut("tools") {
            // A tool that requires 2025 tasks cannot be called without them: hide it.
            tools.retain(|tool| {
                tool.pointer("/execution/taskSupport")
                    .and_then(Value::as_str)
                    != Some("required")
            });
            for tool in tools.iter_mut() {
                if let Value::Object(tool) = tool {
                    tool.remove("execution");
                }
            }
        }
    }
    Value::Object(result)
}

/// An `InputRequiredResult` gets the server's identity and nothing else: no cache hints.
pub fn stamp_interim(result: Value, server_info: Option<&Value>) -> Value {
    let mut result = match result {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    if let Some(info) = server_info {
        let mut meta = Map::with_capacity(1);
        meta.insert(META_SERVER_INFO.into(), info.clone());
        result.insert("_meta".into(), Value::Object(meta));
    }
    Value::Object(result)
}

/// `InitializeResult.capabilities` as a 2026-07-28 server states them. Tasks are dropped (the
/// 2026 tasks extension is another protocol); subscriptions and list-change notices are not
/// offered, as the gateway does not serve `subscriptions/listen`.
pub fn discover_capabilities(backend: &Value) -> Value {
    let mut out = Map::new();
    for key in ["tools", "prompts", "resources"] {
        if backend.get(key).is_some_and(Value::is_object) {
            out.insert(key.into(), json!({}));
        }
    }
    for key in ["completions", "logging", "experimental"] {
        if let Some(v) = backend.get(key).filter(|v| v.is_object()) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

pub fn discover_result(init: &Value, route: &RouteConfig) -> Value {
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
    result.insert(
        "capabilities".into(),
        discover_capabilities(init.get("capabilities").unwrap_or(&Value::Null)),
    );
    if let Some(instructions) = init.get("instructions").filter(|v| v.is_string()) {
        result.insert("instructions".into(), instructions.clone());
    }
    stamp_result(
        "server/discover",
        Value::Object(result),
        route,
        init.get("serverInfo"),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CacheScope;

    fn route() -> RouteConfig {
        RouteConfig {
            path: "/mcp".into(),
            backend: "b".into(),
            ttl_ms: 5,
            cache_scope: CacheScope::Public,
            auth: Default::default(),
            resource: None,
            authorization_servers: Vec::new(),
        }
    }

    #[test]
    fn params_lose_2026_fields_and_keep_the_rest() {
        let params = json!({
            "name": "t",
            "inputResponses": {},
            "requestState": "x",
            "task": {"ttl": 60000},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": 7,
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "com.example/custom": 1
            },
            "extra": true
        });
        let Value::Object(map) = params else {
            unreachable!()
        };
        let out = backend_params(
            "tools/call",
            map,
            Some("g-1"),
            &[(
                "traceparent",
                "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01".into(),
            )],
        );
        assert_eq!(
            out,
            json!({
                "name": "t",
                "arguments": {},
                "extra": true,
                "_meta": {
                    "progressToken": "g-1",
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                    "com.example/custom": 1
                }
            })
        );
    }

    #[test]
    fn trace_headers_fill_in_missing_trace_context() {
        let out = backend_params(
            "tools/list",
            Map::new(),
            None,
            &[
                (
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
                ),
                ("tracestate", "v=1".into()),
            ],
        );
        assert_eq!(
            out["_meta"]["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(out["_meta"]["tracestate"], "v=1");
        assert_eq!(
            backend_params("tools/list", Map::new(), None, &[]),
            json!({})
        );
    }

    #[test]
    fn results_are_stamped() {
        let info = json!({"name": "legacy", "version": "1"});
        let out = stamp_result(
            "tools/list",
            json!({"tools": [
                {"name": "a", "execution": {"taskSupport": "optional"}},
                {"name": "b", "execution": {"taskSupport": "required"}}
            ]}),
            &route(),
            Some(&info),
            false,
        );
        assert_eq!(out["resultType"], "complete");
        assert_eq!(out["ttlMs"], 5);
        assert_eq!(out["cacheScope"], "public");
        assert_eq!(out["_meta"][META_SERVER_INFO], info);
        assert_eq!(out["tools"], json!([{"name": "a"}]));

        let call = stamp_result("tools/call", json!({"content": []}), &route(), None, false);
        assert_eq!(call, json!({"content": [], "resultType": "complete"}));

        let read = stamp_result(
            "resources/read",
            json!({"contents": []}),
            &route(),
            None,
            true,
        );
        assert_eq!(
            (read["ttlMs"].clone(), read["cacheScope"].clone()),
            (json!(0), json!("private"))
        );
    }

    #[test]
    fn discover_translates_capabilities() {
        let init = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "logging": {},
                "tasks": {"list": {}}
            },
            "serverInfo": {"name": "legacy", "version": "1"},
            "instructions": "be nice"
        });
        let out = discover_result(&init, &route());
        assert_eq!(out["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(
            out["capabilities"],
            json!({"tools": {}, "resources": {}, "logging": {}})
        );
        assert_eq!(out["instructions"], "be nice");
        assert_eq!(out["ttlMs"], 5);
        assert_eq!(out["resultType"], "complete");
        assert_eq!(out["_meta"][META_SERVER_INFO]["name"], "legacy");
    }
}
