//! Names on a route over several backends: a tool or prompt is exposed as `PREFIX__NAME`, and a
//! use of it reaches its backend under `NAME`. Resources keep their URIs.

use serde_json::{Map, Value};

use crate::mrtr::ForwardedCall;
use crate::protocol::Method;

/// The list member and the key of each item's name that a list method's names are in; `None`
/// for resources, which keep their URIs.
pub(super) fn named_items(method: Method) -> Option<(&'static str, &'static str)> {
    match method {
        Method::ToolsList => Some(("tools", "name")),
        Method::PromptsList => Some(("prompts", "name")),
        _ => None,
    }
}

/// The items of a list result, the key they are under.
pub(super) fn items_key(method: Method) -> Option<&'static str> {
    match method {
        Method::ToolsList => Some("tools"),
        Method::PromptsList => Some("prompts"),
        Method::ResourcesList => Some("resources"),
        Method::ResourcesTemplatesList => Some("resourceTemplates"),
        _ => None,
    }
}

/// One backend's list items with their names exposed (`prefix` ends with the separator). An
/// item without a string name cannot be used by any name: left out.
pub(super) fn expose_items(method: Method, prefix: &str, items: &mut Vec<Value>) {
    let Some((_, key)) = named_items(method) else {
        return;
    };
    items.retain_mut(|item| {
        let Some(Value::String(name)) = item.get_mut(key) else {
            return false;
        };
        name.insert_str(0, prefix);
        true
    });
}

/// A call or prompt renamed to the name its backend knows.
pub(super) fn rename_target(call: &mut ForwardedCall, original: &str) {
    call.target = Some(original.to_string());
    call.params
        .insert("name".into(), Value::String(original.to_string()));
}

/// A prompt completion's `ref.name` renamed to the name its backend knows.
pub(super) fn rename_completion_prompt(call: &mut ForwardedCall, original: &str) {
    if let Some(Value::Object(reference)) = call.params.get_mut("ref") {
        reference.insert("name".into(), Value::String(original.to_string()));
    }
}

/// A backend's `instructions`, labelled with the backend they are for.
pub(super) fn labelled_instructions(parts: &[(String, String)]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    let labelled: Vec<String> = parts
        .iter()
        .map(|(prefix, text)| format!("[{prefix}] (tools and prompts named {prefix}__*)\n{text}"))
        .collect();
    Some(labelled.join("\n\n"))
}

/// The `instructions` of a result, if it has them as a string.
pub(super) fn instructions_of(result: &Map<String, Value>) -> Option<&str> {
    result.get("instructions").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_and_prompts_get_the_prefix_resources_keep_their_uris() {
        let mut tools = vec![
            json!({"name": "echo", "x": 1}),
            json!({"title": "nameless"}),
        ];
        expose_items(Method::ToolsList, "fs__", &mut tools);
        assert_eq!(tools, vec![json!({"name": "fs__echo", "x": 1})]);
        let mut resources = vec![json!({"uri": "file:///a"})];
        expose_items(Method::ResourcesList, "fs__", &mut resources);
        assert_eq!(resources, vec![json!({"uri": "file:///a"})]);
    }

    #[test]
    fn instructions_are_labelled_by_backend() {
        assert_eq!(labelled_instructions(&[]), None);
        let text = labelled_instructions(&[
            ("fs".into(), "Read files.".into()),
            ("tickets".into(), "File tickets.".into()),
        ])
        .unwrap();
        assert_eq!(
            text,
            "[fs] (tools and prompts named fs__*)\nRead files.\n\n[tickets] (tools and prompts named tickets__*)\nFile tickets."
        );
    }
}
