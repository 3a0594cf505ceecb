//! Hostile policy rules and item names: the input is `[[policy]]` tables, then a last line that
//! names an item. Rules that compile decide every kind of item for a fixed caller, and the name
//! as an identity expression yields a text or an error: never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::internals::{Expr, Facts, ItemKind, RoutePolicy};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (rules, name) = text.rsplit_once('\n').unwrap_or((text, ""));
    let Value::Object(claims) = json!({
        "sub": "alice",
        "groups": ["readers", "editors"],
        "level": 3,
        "org": {"id": "acme", "tags": [1, 2.5, null, true]}
    }) else {
        return;
    };
    let facts = Facts::new("alice", &claims, &["read".to_string(), "tools:all".to_string()]);
    if let Ok(Some(policy)) = RoutePolicy::from_toml(rules) {
        for kind in [ItemKind::Tool, ItemKind::Prompt, ItemKind::Resource] {
            for method in ["tools/call", "tools/list"] {
                let _ = policy.decide(&facts, method, kind, name);
            }
        }
        let _ = policy.scopes_named().count();
    }
    if let Ok(expr) = Expr::compile(name) {
        let _ = expr.text(&facts);
        let _ = expr.test(&facts, "prompts/get", name);
    }
});
