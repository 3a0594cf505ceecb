//! Input requests as the client sees them: which server requests may be surfaced to this
//! request's client (capability gating), how they are named (keys) and cleaned into 2026-07-28
//! `InputRequest`s. The client's answers to them are checked in [`answers`] before anything
//! reaches the backend.

pub(crate) mod answers;

use std::collections::HashSet;

use serde_json::{json, Map, Value};

pub(crate) use self::answers::{check_answer, validate_answer};
use crate::jsonrpc::{codes, JsonRpcError};
/// `_meta` key by which a backend may name an input.
pub(crate) const INPUT_KEY_HINT: &str = "mrtr-gateway/inputKey";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Elicitation,
    Sampling,
    Roots,
}

impl InputKind {
    pub fn from_method(method: &str) -> Option<Self> {
        match method {
            "elicitation/create" => Some(Self::Elicitation),
            "sampling/createMessage" => Some(Self::Sampling),
            "roots/list" => Some(Self::Roots),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }
}

/// A server request surfaced to the client, waiting for its answer.
#[derive(Debug, Clone)]
pub struct PendingInput {
    pub key: String,
    /// The backend's JSON-RPC id of its request.
    pub backend_id: Value,
    pub kind: InputKind,
    /// The clean 2026-07-28 `InputRequest` (`{method, params}`).
    pub request: Value,
    /// The request as the backend sent it (method, params), to hand it back to the session
    /// if the call ends before a client saw it.
    pub original: (String, Option<Value>),
    /// Arrived while the session was idle: not this call's question.
    pub deferred: bool,
}

/// Whether a server request may be shown to this request's client.
pub enum Gate {
    /// Surface this clean request.
    Surface { kind: InputKind, request: Value },
    /// Not declared by the client: the backend gets `error`; `required` feeds -32021.
    Refuse {
        error: JsonRpcError,
        required: Value,
    },
}

fn declared<'a>(caps: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(caps, |v, k| v.get(*k))
        .filter(|v| v.is_object())
}

fn refuse(code: i64, message: &str, required: Value) -> Gate {
    Gate::Refuse {
        error: JsonRpcError::new(code, message),
        required,
    }
}

/// A 2026-07-28 backend's round checked against the capabilities declared on *this* client
/// request: `None` when every input request may reach the client, else the capabilities the
/// first one that may not needs (`{}` for one that is no input request at all).
pub(crate) fn undeclared(
    input_requests: &Map<String, Value>,
    client_caps: &Value,
) -> Option<Value> {
    input_requests.values().find_map(|request| {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match gate(method, request.get("params"), client_caps) {
            Some(Gate::Surface { .. }) => None,
            Some(Gate::Refuse { required, .. }) => Some(required),
            None => Some(json!({})),
        }
    })
}

/// Checks a server request against the capabilities declared on *this* client request and
/// builds the 2026-07-28 form of it (no `_meta`, `task`, `elicitationId`).
pub fn gate(method: &str, params: Option<&Value>, client_caps: &Value) -> Option<Gate> {
    let kind = InputKind::from_method(method)?;
    let mut clean = match params {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    };
    clean.remove("_meta");
    clean.remove("task");
    let gate = match kind {
        InputKind::Elicitation => {
            clean.remove("elicitationId");
            let url_mode = clean.get("mode").and_then(Value::as_str) == Some("url");
            match declared(client_caps, &["elicitation"]).and_then(Value::as_object) {
                None => refuse(
                    codes::METHOD_NOT_FOUND,
                    "Client does not support elicitation",
                    json!({"elicitation": {}}),
                ),
                Some(modes) => {
                    // `elicitation: {}` means form only.
                    let form_ok = modes.contains_key("form") || modes.is_empty();
                    let url_ok = modes.contains_key("url");
                    if url_mode && !url_ok {
                        refuse(
                            codes::INVALID_PARAMS,
                            "Client does not support URL-mode elicitation",
                            json!({"elicitation": {"url": {}}}),
                        )
                    } else if !url_mode && !form_ok {
                        refuse(
                            codes::INVALID_PARAMS,
                            "Client does not support form-mode elicitation",
                            json!({"elicitation": {"form": {}}}),
                        )
                    } else {
                        Gate::Surface {
                            kind,
                            request: json!({"method": method, "params": clean}),
                        }
                    }
                }
            }
        }
        InputKind::Sampling => {
            let uses_tools = clean.contains_key("tools") || clean.contains_key("toolChoice");
            match declared(client_caps, &["sampling"]) {
                None => refuse(
                    codes::METHOD_NOT_FOUND,
                    "Client does not support sampling",
                    json!({"sampling": {}}),
                ),
                Some(_)
                    if uses_tools && declared(client_caps, &["sampling", "tools"]).is_none() =>
                {
                    refuse(
                        codes::INVALID_PARAMS,
                        "Client does not support tools in sampling",
                        json!({"sampling": {"tools": {}}}),
                    )
                }
                Some(_) => {
                    let wide_context = matches!(
                        clean.get("includeContext").and_then(Value::as_str),
                        Some("thisServer" | "allServers")
                    );
                    if wide_context && declared(client_caps, &["sampling", "context"]).is_none() {
                        // A client may ignore includeContext; the gateway, as the backend's
                        // client, narrows it to what this client declared.
                        clean.insert("includeContext".into(), json!("none"));
                    }
                    Gate::Surface {
                        kind,
                        request: json!({"method": method, "params": clean}),
                    }
                }
            }
        }
        InputKind::Roots => match declared(client_caps, &["roots"]) {
            None => refuse(
                codes::METHOD_NOT_FOUND,
                "Client does not support roots",
                json!({"roots": {}}),
            ),
            Some(_) => Gate::Surface {
                kind,
                request: json!({"method": method}),
            },
        },
    };
    Some(gate)
}

fn valid_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The key of a new input: the backend's hint when valid and unused, else `<kind>-<n>`.
pub(crate) fn assign_key(
    params: Option<&Value>,
    kind: InputKind,
    used: &HashSet<String>,
    counter: &mut u32,
) -> String {
    if let Some(hint) = params
        .and_then(|p| p.pointer(&format!("/_meta/{}", INPUT_KEY_HINT.replace('/', "~1"))))
        .and_then(Value::as_str)
    {
        if valid_key(hint) && !used.contains(hint) {
            return hint.to_string();
        }
    }
    loop {
        *counter += 1;
        let key = format!("{}-{}", kind.as_str(), counter);
        if !used.contains(&key) {
            return key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_round_is_checked_against_this_requests_capabilities() {
        let round = |requests: Value| requests.as_object().cloned().unwrap_or_default();
        let elicit = json!({"name": {"method": "elicitation/create",
            "params": {"message": "m", "requestedSchema": {"type": "object"}}}});
        let sample = json!({"a": {"method": "sampling/createMessage",
            "params": {"messages": [], "maxTokens": 1}}});
        assert_eq!(
            undeclared(&round(elicit.clone()), &json!({"elicitation": {}})),
            None
        );
        assert_eq!(
            undeclared(&round(elicit), &json!({"sampling": {}})),
            Some(json!({"elicitation": {}}))
        );
        assert_eq!(
            undeclared(&round(sample), &json!({"elicitation": {}})),
            Some(json!({"sampling": {}}))
        );
        let not_input = json!({"x": {"method": "tools/call", "params": {}}});
        assert_eq!(undeclared(&round(not_input), &json!({})), Some(json!({})));
    }

    #[test]
    fn gating_follows_this_requests_capabilities() {
        let form = json!({"message": "m", "requestedSchema": {"type": "object"}, "_meta": {"x": 1}, "task": {}});
        let url = json!({"mode": "url", "message": "m", "url": "https://e.example", "elicitationId": "e1"});
        match gate(
            "elicitation/create",
            Some(&form),
            &json!({"elicitation": {}}),
        ) {
            Some(Gate::Surface { request, .. }) => {
                assert_eq!(
                    request,
                    json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {"type": "object"}}})
                );
            }
            _ => panic!("form allowed by elicitation: {{}}"),
        }
        assert!(
            matches!(gate("elicitation/create", Some(&url), &json!({"elicitation": {}})), Some(Gate::Refuse { required, .. }) if required == json!({"elicitation": {"url": {}}}))
        );
        match gate(
            "elicitation/create",
            Some(&url),
            &json!({"elicitation": {"url": {}}}),
        ) {
            Some(Gate::Surface { request, .. }) => {
                assert!(request["params"].get("elicitationId").is_none())
            }
            _ => panic!("url allowed"),
        }
        assert!(matches!(
            gate(
                "elicitation/create",
                Some(&form),
                &json!({"elicitation": {"url": {}}})
            ),
            Some(Gate::Refuse { .. })
        ));
        assert!(
            matches!(gate("sampling/createMessage", Some(&json!({"tools": []})), &json!({"sampling": {}})), Some(Gate::Refuse { required, .. }) if required == json!({"sampling": {"tools": {}}}))
        );
        assert!(matches!(
            gate("roots/list", None, &json!({})),
            Some(Gate::Refuse { .. })
        ));
        match gate(
            "sampling/createMessage",
            Some(&json!({"includeContext": "allServers", "maxTokens": 5})),
            &json!({"sampling": {}}),
        ) {
            Some(Gate::Surface { request, .. }) => {
                assert_eq!(request["params"]["includeContext"], "none")
            }
            _ => panic!("sampling allowed"),
        }
        assert!(gate("ping", None, &json!({})).is_none());
    }

    #[test]
    fn keys_use_valid_unique_hints() {
        let mut used = HashSet::new();
        let mut n = 0;
        let hinted = json!({"_meta": {"mrtr-gateway/inputKey": "user_name"}});
        assert_eq!(
            assign_key(Some(&hinted), InputKind::Elicitation, &used, &mut n),
            "user_name"
        );
        used.insert("user_name".to_string());
        assert_eq!(
            assign_key(Some(&hinted), InputKind::Elicitation, &used, &mut n),
            "elicitation-1"
        );
        let bad = json!({"_meta": {"mrtr-gateway/inputKey": "has space"}});
        assert_eq!(
            assign_key(Some(&bad), InputKind::Roots, &used, &mut n),
            "roots-2"
        );
    }
}
