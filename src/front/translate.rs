//! Field-level translation of what reaches a 2026-07-28 client: results stamped with what the
//! revision requires, and the capabilities `server/discover` reports. (Params on their way to a
//! 2025-11-25 backend are the bridge's: `mrtr::setup`.)

use serde_json::{json, Map, Value};

use crate::config::RouteConfig;
use crate::protocol::{Method, META_SERVER_INFO, SUPPORTED_VERSIONS};

/// Adds what 2026-07-28 requires of every complete result: `resultType`, the server's identity
/// in `_meta`, cache hints where required; and removes 2025-only tool fields.
pub fn stamp_result(
    method: Method,
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
    if method.is_cacheable() {
        // Results of retries must not be cached, yet the fields are required.
        let (ttl, scope) = if retry {
            (0, "private")
        } else {
            (route.ttl_ms, route.cache_scope.as_str())
        };
        result.insert("ttlMs".into(), json!(ttl));
        result.insert("cacheScope".into(), json!(scope));
    }
    if method == Method::ToolsList {
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
/// 2026 tasks extension is another protocol). `listChanged` and `resources.subscribe` are kept:
/// `subscriptions/listen` delivers them.
pub fn discover_capabilities(backend: &Value) -> Value {
    let mut out = Map::new();
    for key in ["tools", "prompts", "resources"] {
        let Some(offered) = backend.get(key).and_then(Value::as_object) else {
            continue;
        };
        let mut kept = Map::new();
        for flag in ["listChanged", "subscribe"] {
            if key != "resources" && flag == "subscribe" {
                continue;
            }
            if offered.get(flag) == Some(&Value::Bool(true)) {
                kept.insert(flag.into(), Value::Bool(true));
            }
        }
        out.insert(key.into(), Value::Object(kept));
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
        Method::Discover,
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
            eras: vec![crate::config::Era::Modern, crate::config::Era::Legacy],
        }
    }

    #[test]
    fn results_are_stamped() {
        let info = json!({"name": "legacy", "version": "1"});
        let out = stamp_result(
            Method::ToolsList,
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

        let call = stamp_result(
            Method::ToolsCall,
            json!({"content": []}),
            &route(),
            None,
            false,
        );
        assert_eq!(call, json!({"content": [], "resultType": "complete"}));

        let read = stamp_result(
            Method::ResourcesRead,
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
            json!({
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "logging": {}
            })
        );
        assert_eq!(out["instructions"], "be nice");
        assert_eq!(out["ttlMs"], 5);
        assert_eq!(out["resultType"], "complete");
        assert_eq!(out["_meta"][META_SERVER_INFO]["name"], "legacy");
    }
}
