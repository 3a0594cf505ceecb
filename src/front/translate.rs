//! Field-level translation of what reaches a 2026-07-28 client: results stamped with what the
//! revision requires (a relayed modern backend's results only with what the gateway answers for
//! itself), and the capabilities `server/discover` reports. (Params on their way to a
//! 2025-11-25 backend are the bridge's: `mrtr::setup`.)

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::config::RouteConfig;
use crate::jsonrpc::{raw, RawObject};
use crate::protocol::{Method, META_SERVER_INFO, SUPPORTED_VERSIONS};

/// Adds what 2026-07-28 requires of every complete result: `resultType`, the server's identity
/// in `_meta`, cache hints where required; and removes 2025-only tool fields. Only `_meta`
/// and, for `tools/list`, `tools` are parsed into values.
pub fn stamp_result(
    method: Method,
    result: &RawValue,
    route: &RouteConfig,
    server_info: Option<&Value>,
    retry: bool,
) -> RawObject {
    let mut result: RawObject = match serde_json::from_str(result.get()) {
        Ok(members) => members,
        // A 2025 result is always an object; anything else is kept under a key, not dropped.
        Err(_) => RawObject::from([("value".to_owned(), result.to_owned())]),
    };
    put(&mut result, "resultType", &"complete");
    if let Some(info) = server_info {
        let meta = match result.get("_meta") {
            None => Some(Map::new()),
            Some(raw) => match serde_json::from_str(raw.get()) {
                Ok(Value::Object(meta)) => Some(meta),
                // Not an object: left as it is.
                _ => None,
            },
        };
        if let Some(mut meta) = meta {
            meta.insert(META_SERVER_INFO.into(), info.clone());
            put(&mut result, "_meta", &meta);
        }
    }
    if method.is_cacheable() {
        // Results of retries must not be cached, yet the fields are required.
        let (ttl, scope) = if retry {
            (0, "private")
        } else if !route.policy.is_empty() {
            // What a caller sees depends on who it is: no shared cache may keep it.
            (route.ttl_ms, "private")
        } else {
            (route.ttl_ms, route.cache_scope.as_str())
        };
        put(&mut result, "ttlMs", &ttl);
        put(&mut result, "cacheScope", &scope);
    }
    if method == Method::ToolsList {
        let tools = result
            .get("tools")
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
        if let Some(Value::Array(mut tools)) = tools {
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
            put(&mut result, "tools", &tools);
        }
    }
    result
}

/// A 2026-07-28 backend's complete result, relayed: as it is, with what the gateway answers
/// for itself. `server/discover` names the revisions this endpoint speaks; what a caller sees
/// under a policy is private to it; results of retries are not cached; and hints a backend
/// left out are the route's.
pub(crate) fn relay_result(
    method: Method,
    result: &RawValue,
    route: &RouteConfig,
    retry: bool,
) -> RawObject {
    let mut result: RawObject = match serde_json::from_str(result.get()) {
        Ok(members) => members,
        Err(_) => RawObject::from([("value".to_owned(), result.to_owned())]),
    };
    if !result.contains_key("resultType") {
        put(&mut result, "resultType", &"complete");
    }
    if method == Method::Discover {
        put(&mut result, "supportedVersions", SUPPORTED_VERSIONS);
    }
    if method.is_cacheable() {
        if retry {
            put(&mut result, "ttlMs", &0);
            put(&mut result, "cacheScope", &"private");
        } else {
            if !route.policy.is_empty() {
                put(&mut result, "cacheScope", &"private");
            }
            if !result.contains_key("ttlMs") {
                put(&mut result, "ttlMs", &route.ttl_ms);
            }
            if !result.contains_key("cacheScope") {
                put(&mut result, "cacheScope", &route.cache_scope.as_str());
            }
        }
    }
    result
}

/// Sets one member of a raw result.
fn put(result: &mut RawObject, key: &str, value: &(impl Serialize + ?Sized)) {
    // Serializing a number, a string or a `Value` cannot fail.
    if let Ok(raw) = serde_json::value::to_raw_value(value) {
        result.insert(key.to_owned(), raw);
    }
}

/// An `InputRequiredResult` gets the server's identity and nothing else: no cache hints.
pub(crate) fn stamp_interim(result: Value, server_info: Option<&Value>) -> Value {
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
pub(crate) fn discover_capabilities(backend: &Value) -> Value {
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

pub(crate) fn discover_result(init: &Value, route: &RouteConfig) -> RawObject {
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
    result.insert(
        "capabilities".into(),
        discover_capabilities(init.get("capabilities").unwrap_or(&Value::Null)),
    );
    if let Some(instructions) = init.get("instructions").filter(|v| v.is_string()) {
        result.insert("instructions".into(), instructions.clone());
    }
    let result = raw(&Value::Object(result));
    stamp_result(
        Method::Discover,
        &result,
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
            backends: Vec::new(),
            prefixes: Default::default(),
            resource_prefixes: Default::default(),
            on_backend_error: Default::default(),
            list_timeout: std::time::Duration::from_secs(5),
            ttl_ms: 5,
            cache_scope: CacheScope::Public,
            auth: Default::default(),
            resource: None,
            authorization_servers: Vec::new(),
            eras: vec![crate::config::Era::Modern, crate::config::Era::Legacy],
            policy: Vec::new(),
        }
    }

    #[test]
    fn results_are_stamped() {
        let info = json!({"name": "legacy", "version": "1"});
        let stamp = |method, result: Value, info: Option<&Value>, retry| {
            serde_json::to_value(stamp_result(method, &raw(&result), &route(), info, retry))
                .unwrap()
        };
        let out = stamp(
            Method::ToolsList,
            json!({"tools": [
                {"name": "a", "execution": {"taskSupport": "optional"}},
                {"name": "b", "execution": {"taskSupport": "required"}}
            ]}),
            Some(&info),
            false,
        );
        assert_eq!(out["resultType"], "complete");
        assert_eq!(out["ttlMs"], 5);
        assert_eq!(out["cacheScope"], "public");
        assert_eq!(out["_meta"][META_SERVER_INFO], info);
        assert_eq!(out["tools"], json!([{"name": "a"}]));

        let call = stamp(Method::ToolsCall, json!({"content": []}), None, false);
        assert_eq!(call, json!({"content": [], "resultType": "complete"}));

        // What is not stamped passes through byte for byte.
        let written = r#"{"content":[{"type":"text","text":"a\u0041 1.0e3"}],"x":1.50}"#;
        let raw_result = RawValue::from_string(written.to_owned()).unwrap();
        let kept = stamp_result(Method::ToolsCall, &raw_result, &route(), Some(&info), false);
        assert_eq!(
            kept["content"].get(),
            r#"[{"type":"text","text":"a\u0041 1.0e3"}]"#
        );
        assert_eq!(kept["x"].get(), "1.50");
        let meta: Value = serde_json::from_str(kept["_meta"].get()).unwrap();
        assert_eq!(meta[META_SERVER_INFO], info);
        // A _meta the backend sent keeps its members.
        let with_meta = stamp(
            Method::ToolsCall,
            json!({"content": [], "_meta": {"k": 1}}),
            Some(&info),
            false,
        );
        assert_eq!(with_meta["_meta"]["k"], 1);
        assert_eq!(with_meta["_meta"][META_SERVER_INFO], info);
        // Anything but an object is kept under a key.
        assert_eq!(
            stamp(Method::ToolsCall, json!([1]), None, false),
            json!({"value": [1], "resultType": "complete"})
        );

        let read = stamp(Method::ResourcesRead, json!({"contents": []}), None, true);
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
        let out = serde_json::to_value(discover_result(&init, &route())).unwrap();
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
