//! Gating server requests and validating client answers with hostile JSON on both sides: the
//! gateway must decide, never crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::internals::{gate, validate_answer, Gate, InputKind, PendingInput};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let caps = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}});
    for method in ["elicitation/create", "sampling/createMessage", "roots/list"] {
        // The input as a backend's request params, then as a client's answer to it.
        if let Some(Gate::Surface { kind, request }) = gate(method, Some(&value), &caps) {
            let input = PendingInput {
                key: "k".into(),
                backend_id: json!(1),
                kind,
                request,
                original: (method.into(), Some(value.clone())),
                deferred: false,
            };
            let _ = validate_answer(&input, &value);
            if let Some(answer) = value.get("answer") {
                let _ = validate_answer(&input, answer);
            }
        }
    }
    let schema_input = PendingInput {
        key: "k".into(),
        backend_id: json!(1),
        kind: InputKind::Elicitation,
        request: json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": value.get("schema").cloned().unwrap_or(json!({}))}}),
        original: ("elicitation/create".into(), None),
        deferred: false,
    };
    let _ = validate_answer(&schema_input, &value);
});
