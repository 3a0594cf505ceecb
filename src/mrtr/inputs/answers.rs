//! A client's answers (`inputResponses`) checked against the inputs they answer, before
//! anything reaches the backend: the shape of each kind's result, and form content against the
//! elicitation's `requestedSchema`.

use serde_json::{json, Map, Value};

use super::{InputKind, PendingInput};
use crate::error::GatewayError;

impl PendingInput {
    fn requested_schema(&self) -> Option<&Value> {
        self.request.pointer("/params/requestedSchema")
    }

    fn is_url_mode(&self) -> bool {
        self.request.pointer("/params/mode").and_then(Value::as_str) == Some("url")
    }
}

/// [`validate_answer`] as the client hears a refusal: -32602 naming the input's key.
pub(crate) fn check_answer(input: &PendingInput, answer: &Value) -> Result<Value, GatewayError> {
    validate_answer(input, answer).map_err(|problem| GatewayError::InvalidParams {
        message: format!("inputResponses[\"{}\"] {problem}", input.key),
        data: Some(json!({ "key": input.key })),
    })
}

/// Checks one answer against the input it answers; returns the result to send the backend.
pub fn validate_answer(input: &PendingInput, answer: &Value) -> Result<Value, String> {
    let Value::Object(answer) = answer else {
        return Err("must be an object".into());
    };
    match input.kind {
        InputKind::Elicitation => validate_elicit_result(input, answer),
        InputKind::Sampling => validate_sampling_result(answer),
        InputKind::Roots => validate_roots_result(answer),
    }
}

fn validate_elicit_result(
    input: &PendingInput,
    answer: &Map<String, Value>,
) -> Result<Value, String> {
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .ok_or("\"action\" must be one of accept, decline, cancel")?;
    match action {
        "decline" | "cancel" => Ok(json!({ "action": action })),
        "accept" if input.is_url_mode() => Ok(json!({ "action": "accept" })),
        "accept" => {
            let content = match answer.get("content") {
                Some(Value::Object(c)) => c,
                None => &Map::new(),
                Some(_) => return Err("\"content\" must be an object".into()),
            };
            if let Some(schema) = input.requested_schema() {
                validate_content(schema, content)?;
            }
            Ok(json!({ "action": "accept", "content": content }))
        }
        other => Err(format!(
            "\"action\" must be one of accept, decline, cancel (got {other:?})"
        )),
    }
}

/// Form content against a flat `requestedSchema` (the primitive schemas the spec allows), no
/// stricter than a JSON Schema validator with the 2020-12 defaults: required fields, types,
/// `enum`/`oneOf`/`anyOf`, length, number and item bounds. Fields the schema does not name pass
/// unless it says `additionalProperties: false`; `format` is an annotation and refuses nothing
/// here (a backend that asserts formats refuses the answer itself).
fn validate_content(schema: &Value, content: &Map<String, Value>) -> Result<(), String> {
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !content.contains_key(name) {
                return Err(format!("content is missing required field {name:?}"));
            }
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in content {
        let Some(prop) = properties.get(name) else {
            if closed {
                return Err(format!(
                    "content field {name:?} is not in the requested schema"
                ));
            }
            continue;
        };
        validate_field(prop, value)
            .map_err(|problem| format!("content field {name:?} {problem}"))?;
    }
    Ok(())
}

fn allowed_strings(schema: &Value) -> Option<Vec<&str>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return Some(values.iter().filter_map(Value::as_str).collect());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            return Some(
                options
                    .iter()
                    .filter_map(|o| o.get("const").and_then(Value::as_str))
                    .collect(),
            );
        }
    }
    None
}

fn validate_field(prop: &Value, value: &Value) -> Result<(), String> {
    let bound = |key: &str| prop.get(key).and_then(Value::as_f64);
    match prop.get("type").and_then(Value::as_str) {
        Some("string") => {
            let s = value.as_str().ok_or("must be a string")?;
            let len = s.chars().count() as f64;
            if bound("minLength").is_some_and(|m| len < m) {
                return Err("is shorter than minLength".into());
            }
            if bound("maxLength").is_some_and(|m| len > m) {
                return Err("is longer than maxLength".into());
            }
            if let Some(allowed) = allowed_strings(prop) {
                if !allowed.contains(&s) {
                    return Err(format!("must be one of {allowed:?}"));
                }
            }
            Ok(())
        }
        Some(kind @ ("number" | "integer")) => {
            let n = value.as_f64().ok_or("must be a number")?;
            if kind == "integer" && n.fract() != 0.0 {
                return Err("must be an integer".into());
            }
            if bound("minimum").is_some_and(|m| n < m) {
                return Err("is below minimum".into());
            }
            if bound("maximum").is_some_and(|m| n > m) {
                return Err("is above maximum".into());
            }
            Ok(())
        }
        Some("boolean") => value
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| "must be a boolean".into()),
        Some("array") => {
            let items = value.as_array().ok_or("must be an array")?;
            let allowed = prop.get("items").and_then(allowed_strings);
            for item in items {
                let s = item.as_str().ok_or("must contain only strings")?;
                if let Some(allowed) = &allowed {
                    if !allowed.contains(&s) {
                        return Err(format!("items must be among {allowed:?}"));
                    }
                }
            }
            let count = items.len() as f64;
            if bound("minItems").is_some_and(|m| count < m) {
                return Err("has fewer items than minItems".into());
            }
            if bound("maxItems").is_some_and(|m| count > m) {
                return Err("has more items than maxItems".into());
            }
            Ok(())
        }
        // A schema the spec does not define: accept primitives only.
        _ => match value {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(()),
            _ => Err("must be a string, number or boolean".into()),
        },
    }
}

fn validate_sampling_result(answer: &Map<String, Value>) -> Result<Value, String> {
    match answer.get("role").and_then(Value::as_str) {
        Some("user" | "assistant") => {}
        _ => return Err("\"role\" must be \"user\" or \"assistant\"".into()),
    }
    if !answer.get("model").is_some_and(Value::is_string) {
        return Err("\"model\" must be a string".into());
    }
    let blocks_ok = match answer.get("content") {
        Some(Value::Object(block)) => block.get("type").is_some_and(Value::is_string),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .all(|b| b.get("type").is_some_and(Value::is_string)),
        _ => false,
    };
    if !blocks_ok {
        return Err("\"content\" must be a content block or an array of them".into());
    }
    if answer.get("stopReason").is_some_and(|r| !r.is_string()) {
        return Err("\"stopReason\" must be a string".into());
    }
    Ok(Value::Object(answer.clone()))
}

fn validate_roots_result(answer: &Map<String, Value>) -> Result<Value, String> {
    let roots = answer
        .get("roots")
        .and_then(Value::as_array)
        .ok_or("\"roots\" must be an array")?;
    for (i, root) in roots.iter().enumerate() {
        let uri = root
            .get("uri")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("roots[{i}].uri must be a string"))?;
        if !uri.starts_with("file://") {
            return Err(format!("roots[{i}].uri must be a file:// URI"));
        }
        if root.get("name").is_some_and(|n| !n.is_string()) {
            return Err(format!("roots[{i}].name must be a string"));
        }
    }
    Ok(Value::Object(answer.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elicitation(schema: Value) -> PendingInput {
        PendingInput {
            key: "k".into(),
            backend_id: json!(1),
            kind: InputKind::Elicitation,
            request: json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": schema}}),
            original: ("elicitation/create".into(), None),
            deferred: false,
        }
    }

    #[test]
    fn elicitation_answers_are_checked_against_the_schema() {
        let input = elicitation(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2},
                "age": {"type": "integer", "minimum": 0},
                "email": {"type": "string", "format": "email"},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
                "born": {"type": "string", "format": "date"}
            },
            "required": ["name"]
        }));
        let ok = json!({"action": "accept", "content": {"name": "Al", "age": 3, "email": "a@b.co", "color": "red", "tags": ["a"], "born": "2020-02-29"}});
        assert!(validate_answer(&input, &ok).is_ok());
        // `format` is an annotation, and fields the schema does not name pass (JSON Schema
        // 2020-12 defaults): the backend decides.
        let lenient = json!({"action": "accept", "content": {"name": "Al", "email": "nope", "born": "Alice", "extra": 1}});
        assert_eq!(
            validate_answer(&input, &lenient).unwrap(),
            json!({"action": "accept", "content": {"name": "Al", "email": "nope", "born": "Alice", "extra": 1}})
        );
        let closed = elicitation(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "additionalProperties": false
        }));
        assert!(validate_answer(
            &closed,
            &json!({"action": "accept", "content": {"name": "Al", "extra": 1}})
        )
        .is_err());
        assert!(validate_answer(
            &closed,
            &json!({"action": "accept", "content": {"name": "Al"}})
        )
        .is_ok());
        for bad in [
            json!({"action": "accept", "content": {}}),
            json!({"action": "accept", "content": {"name": 5}}),
            json!({"action": "accept", "content": {"name": "A"}}),
            json!({"action": "accept", "content": {"name": "Al", "age": 1.5}}),
            json!({"action": "accept", "content": {"name": "Al", "age": -1}}),
            json!({"action": "accept", "content": {"name": "Al", "email": 5}}),
            json!({"action": "accept", "content": {"name": "Al", "color": "green"}}),
            json!({"action": "accept", "content": {"name": "Al", "tags": ["a", "b", "a"]}}),
            json!({"action": "accept", "content": {"name": "Al", "tags": ["c"]}}),
            json!({"action": "accept", "content": {"name": "Al", "born": true}}),
            json!({"action": "maybe"}),
            json!(null),
            json!("accept"),
        ] {
            assert!(validate_answer(&input, &bad).is_err(), "{bad}");
        }
        assert_eq!(
            validate_answer(&input, &json!({"action": "decline", "content": {"x": 1}})).unwrap(),
            json!({"action": "decline"})
        );
    }

    #[test]
    fn sampling_and_roots_answers_are_checked() {
        let sampling = PendingInput {
            kind: InputKind::Sampling,
            ..elicitation(json!({}))
        };
        let ok = json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m", "stopReason": "endTurn"});
        assert_eq!(validate_answer(&sampling, &ok).unwrap(), ok);
        assert!(validate_answer(
            &sampling,
            &json!({"role": "assistant", "content": "hi", "model": "m"})
        )
        .is_err());
        assert!(validate_answer(
            &sampling,
            &json!({"role": "bot", "content": {"type": "text"}, "model": "m"})
        )
        .is_err());
        let roots = PendingInput {
            kind: InputKind::Roots,
            ..elicitation(json!({}))
        };
        assert!(validate_answer(
            &roots,
            &json!({"roots": [{"uri": "file:///tmp", "name": "t"}]})
        )
        .is_ok());
        assert!(validate_answer(&roots, &json!({"roots": [{"uri": "http://x"}]})).is_err());
        assert!(validate_answer(&roots, &json!({"roots": "x"})).is_err());
    }
}
