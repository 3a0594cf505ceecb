//! JSON-RPC 2.0 message shapes shared by both sides: classification of incoming messages, error
//! objects, the codes both revisions use, and builders for responses and notifications.
//!
//! Payloads stay `serde_json::Value` so that fields the gateway does not know pass through as
//! they came. A peer's successful answer is decoded with its `result` kept as raw JSON
//! ([`decode`]): the gateway forwards it with only its top-level members split.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// Error codes the gateway reads or writes.
pub(crate) mod codes {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// 2025-11-25 "resource not found"; retired in 2026-07-28.
    pub(crate) const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
    /// 2025-11-25 URL elicitation required; retired in 2026-07-28.
    pub(crate) const LEGACY_URL_ELICITATION_REQUIRED: i64 = -32042;
    pub(crate) const HEADER_MISMATCH: i64 = -32020;
    pub(crate) const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// The range 2026-07-28 reserves for codes the spec defines.
    pub(crate) const RESERVED_MCP_LOW: i64 = -32099;
    pub(crate) const RESERVED_MCP_HIGH: i64 = -32020;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl JsonRpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Reads an `error` member leniently: a peer that sends a broken error object still fails
    /// the call, with what could be read of it.
    pub fn from_value(value: &Value) -> Self {
        let code = value
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(codes::INTERNAL_ERROR);
        let message = value
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("error without message")
            .to_string();
        Self {
            code,
            message,
            data: value.get("data").cloned(),
        }
    }

    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), json!(self.code));
        obj.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            obj.insert("data".into(), data.clone());
        }
        Value::Object(obj)
    }
}

/// One JSON-RPC message, classified by the members it has.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response {
        id: Value,
        outcome: Result<Value, JsonRpcError>,
    },
}

/// Why a JSON value is not a JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ShapeError {
    #[error("message must be a JSON object")]
    NotObject,
    #[error("\"jsonrpc\" must be \"2.0\"")]
    Version,
    #[error("\"method\" must be a string")]
    Method,
    #[error("\"id\" must be a string or an integer")]
    Id,
    #[error("\"params\" must be an object")]
    Params,
    #[error("a response must have exactly one of \"result\" and \"error\"")]
    Response,
}

/// True for ids JSON-RPC allows as request ids here: strings and integers (never null).
pub(crate) fn is_valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// One message read from a peer.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A successful answer, its `result` as the peer wrote it.
    Answer { id: Value, result: Box<RawValue> },
    /// Anything else, parsed whole (for [`Message::classify`]).
    Other(Value),
}

/// The members that tell a successful answer, borrowed from the text without parsing them.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Decodes what a peer sent: one message or a batch of them.
pub(crate) fn decode(text: &str) -> Result<Vec<Incoming>, serde_json::Error> {
    if text.trim_start().starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text)?;
        return items
            .into_iter()
            .map(|item| decode_one(item.get()))
            .collect();
    }
    Ok(vec![decode_one(text)?])
}

fn decode_one(text: &str) -> Result<Incoming, serde_json::Error> {
    if let Ok(peek) = serde_json::from_str::<Peek>(text) {
        if let (Some(jsonrpc), Some(id), None, Some(result), None) =
            (peek.jsonrpc, peek.id, peek.method, peek.result, peek.error)
        {
            let id: Value = serde_json::from_str(id.get())?;
            if jsonrpc.get() == "\"2.0\"" && is_valid_id(&id) {
                return Ok(Incoming::Answer {
                    id,
                    result: result.to_owned(),
                });
            }
        }
    }
    serde_json::from_str(text).map(Incoming::Other)
}

impl Message {
    pub(crate) fn classify(value: Value) -> Result<Self, ShapeError> {
        let Value::Object(mut obj) = value else {
            return Err(ShapeError::NotObject);
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(ShapeError::Version);
        }
        let id = obj.remove("id");
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else {
                return Err(ShapeError::Method);
            };
            let params = obj.remove("params");
            if params.as_ref().is_some_and(|p| !p.is_object()) {
                return Err(ShapeError::Params);
            }
            return match id {
                None => Ok(Self::Notification { method, params }),
                Some(id) if is_valid_id(&id) => Ok(Self::Request { id, method, params }),
                Some(_) => Err(ShapeError::Id),
            };
        }
        let id = id.ok_or(ShapeError::Response)?;
        match (obj.remove("result"), obj.remove("error")) {
            (Some(result), None) => Ok(Self::Response {
                id,
                outcome: Ok(result),
            }),
            (None, Some(error)) => Ok(Self::Response {
                id,
                outcome: Err(JsonRpcError::from_value(&error)),
            }),
            _ => Err(ShapeError::Response),
        }
    }
}

pub(crate) fn request(id: Value, method: &str, params: Option<Value>) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), json!("2.0"));
    obj.insert("id".into(), id);
    obj.insert("method".into(), json!(method));
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    Value::Object(obj)
}

pub(crate) fn notification(method: &str, params: Option<Value>) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), json!("2.0"));
    obj.insert("method".into(), json!(method));
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    Value::Object(obj)
}

/// A result's top-level members, each kept as the backend wrote it: stamping adds and replaces
/// members without building a tree of the rest (`content`, `structuredContent`, `contents`).
/// Sorted by name, as a `serde_json::Value` object is.
pub(crate) type RawObject = BTreeMap<String, Box<RawValue>>;

/// A value as raw JSON.
pub fn raw(value: &Value) -> Box<RawValue> {
    // A `Value` always serializes; `null` stands in for the impossible failure.
    serde_json::value::to_raw_value(value).unwrap_or_default()
}

/// A success response serialized with its result as given: a [`RawObject`] is written member
/// by member, without becoming a `Value` first.
#[derive(Serialize)]
pub(crate) struct ResultMessage<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: R,
}

pub(crate) fn result_message<R: Serialize>(id: &Value, result: R) -> ResultMessage<'_, R> {
    ResultMessage {
        jsonrpc: "2.0",
        id,
        result,
    }
}

/// How many bytes `message` takes written as compact JSON, counted without writing it.
pub(crate) fn written_len(message: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail, and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut count, message);
    count.0
}

pub(crate) fn result_response(id: Value, result: Value) -> Value {
    // Built by moving the values in: `json!` would copy `result` through serialization.
    let mut obj = Map::with_capacity(3);
    obj.insert("jsonrpc".into(), Value::from("2.0"));
    obj.insert("id".into(), id);
    obj.insert("result".into(), result);
    Value::Object(obj)
}

/// An error response; `id` is null when the request's id could not be read (JSON-RPC 2.0 §5).
pub(crate) fn error_response(id: Option<Value>, error: &JsonRpcError) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), json!("2.0"));
    obj.insert("id".into(), id.unwrap_or(Value::Null));
    obj.insert("error".into(), error.to_value());
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_kind() {
        let req = Message::classify(json!({"jsonrpc":"2.0","id":"a","method":"m","params":{}}));
        assert!(matches!(req, Ok(Message::Request { .. })));
        let note = Message::classify(json!({"jsonrpc":"2.0","method":"m"}));
        assert!(matches!(note, Ok(Message::Notification { .. })));
        let ok = Message::classify(json!({"jsonrpc":"2.0","id":1,"result":{}}));
        assert!(matches!(ok, Ok(Message::Response { outcome: Ok(_), .. })));
        let err = Message::classify(
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}),
        );
        match err {
            Ok(Message::Response {
                outcome: Err(e), ..
            }) => assert_eq!(e.code, -32601),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_bad_shapes() {
        assert_eq!(Message::classify(json!([])), Err(ShapeError::NotObject));
        assert_eq!(
            Message::classify(json!({"jsonrpc":"1.0","method":"m"})),
            Err(ShapeError::Version)
        );
        assert_eq!(
            Message::classify(json!({"jsonrpc":"2.0","id":null,"method":"m"})),
            Err(ShapeError::Id)
        );
        assert_eq!(
            Message::classify(json!({"jsonrpc":"2.0","id":1.5,"method":"m"})),
            Err(ShapeError::Id)
        );
        assert_eq!(
            Message::classify(json!({"jsonrpc":"2.0","id":1,"method":"m","params":[1]})),
            Err(ShapeError::Params)
        );
        assert_eq!(
            Message::classify(json!({"jsonrpc":"2.0","id":1,"result":{},"error":{}})),
            Err(ShapeError::Response)
        );
    }

    #[test]
    fn written_len_counts_what_a_response_takes_on_the_wire() {
        let id = json!("srv-1");
        let result = json!({"action": "accept", "content": {"name": "Zoë", "n": [1, 2.5]}});
        let written = serde_json::to_vec(&result_response(id.clone(), result.clone())).unwrap();
        assert_eq!(written_len(&result_message(&id, &result)), written.len());
    }
}
