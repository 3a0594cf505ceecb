//! The capability profile a backend session declares at `initialize`: what its callers
//! declared that the gateway can broker, in a canonical form, so sessions of the same profile
//! are interchangeable.

use serde_json::{json, Map, Value};

use crate::backend::BackendSpec;
use crate::config::UnsolicitedPolicy;

/// The capabilities a backend session declares at `initialize`, derived from what a 2026-07-28
/// request declared: only the brokerable ones, in a canonical form (`elicitation: {}` means form).
pub(super) fn capability_profile(client_capabilities: &Value) -> Value {
    let mut out = Map::new();
    if let Some(elicitation) = client_capabilities
        .get("elicitation")
        .and_then(Value::as_object)
    {
        let mut modes = Map::new();
        let form = elicitation.contains_key("form") || !elicitation.contains_key("url");
        if form {
            modes.insert("form".into(), json!({}));
        }
        if elicitation.contains_key("url") {
            modes.insert("url".into(), json!({}));
        }
        out.insert("elicitation".into(), Value::Object(modes));
    }
    if let Some(sampling) = client_capabilities
        .get("sampling")
        .and_then(Value::as_object)
    {
        let mut sub = Map::new();
        for key in ["tools", "context"] {
            if sampling.contains_key(key) {
                sub.insert(key.into(), json!({}));
            }
        }
        out.insert("sampling".into(), Value::Object(sub));
    }
    if client_capabilities
        .get("roots")
        .is_some_and(Value::is_object)
    {
        // listChanged is the gateway's own (sessions say it when they may be asked again), so it
        // is no part of the profile.
        out.insert("roots".into(), json!({}));
    }
    Value::Object(out)
}

/// The profile of a request that declared `client_capabilities`, with `roots` always declared
/// when the gateway answers roots itself (`unsolicited = "static"`).
pub(super) fn profile_for(spec: &BackendSpec, client_capabilities: &Value) -> Value {
    let mut profile = capability_profile(client_capabilities);
    if spec.config.unsolicited == UnsolicitedPolicy::Static {
        if let Value::Object(map) = &mut profile {
            map.insert("roots".into(), json!({}));
        }
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::pool::PoolKey;

    #[test]
    fn profiles_are_canonical() {
        assert_eq!(capability_profile(&json!({})), json!({}));
        assert_eq!(
            capability_profile(&json!({"elicitation": {}})),
            json!({"elicitation": {"form": {}}})
        );
        assert_eq!(
            capability_profile(&json!({"elicitation": {"url": {}}})),
            json!({"elicitation": {"url": {}}})
        );
        assert_eq!(
            capability_profile(&json!({
                "roots": {"listChanged": true},
                "sampling": {"tools": {}, "x": 1},
                "experimental": {"a": {}},
                "extensions": {"io.example/x": {}}
            })),
            json!({"roots": {}, "sampling": {"tools": {}}})
        );
        let a = PoolKey::new(
            "p",
            &capability_profile(&json!({"sampling": {}, "roots": {}})),
        );
        let b = PoolKey::new(
            "p",
            &capability_profile(&json!({"roots": {}, "sampling": {}})),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            PoolKey::new(
                "q",
                &capability_profile(&json!({"roots": {}, "sampling": {}}))
            )
        );
    }
}
