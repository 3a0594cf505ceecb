//! `Mcp-Param-*` headers: tool arguments annotated with `x-mcp-header` in a tool's input schema
//! are mirrored in request headers, and a server must reject a request whose headers and body
//! disagree (400 / -32020). The gateway learns the annotations from the `tools/list` results it
//! relays, per route.

use dashmap::DashMap;
use http::HeaderMap;
use serde_json::Value;

use crate::error::GatewayError;
use crate::http_serve::{decode_header_value, header_str};

/// One annotated argument: where it sits in `arguments` and which header mirrors it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamHeader {
    /// `Mcp-Param-<name>`, lower-cased for lookup.
    header: String,
    /// The property path from `arguments`.
    path: Vec<String>,
}

fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The annotations of a tool, or `None` when any is invalid (the whole tool is then invalid).
pub(crate) fn annotations(tool: &Value) -> Option<Vec<ParamHeader>> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) -> Option<()> {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return Some(());
        };
        for (name, property) in properties {
            path.push(name.clone());
            if let Some(header) = property.get("x-mcp-header") {
                let header = header.as_str().filter(|h| is_token(h))?;
                let primitive = matches!(
                    property.get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "boolean")
                );
                if !primitive {
                    return None;
                }
                let lower = format!("mcp-param-{}", header.to_ascii_lowercase());
                if out.iter().any(|p| p.header == lower) {
                    return None;
                }
                out.push(ParamHeader {
                    header: lower,
                    path: path.clone(),
                });
            }
            walk(property, path, out)?;
            path.pop();
        }
        Some(())
    }
    let mut out = Vec::new();
    walk(tool.get("inputSchema")?, &mut Vec::new(), &mut out)?;
    Some(out)
}

/// What the gateway knows of each tool's annotated arguments, per route.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders {
    tools: DashMap<String, Vec<ParamHeader>>,
    /// The backend's tools generation the annotations were learned under: after a
    /// `notifications/tools/list_changed` they are forgotten until the next `tools/list`.
    generation: std::sync::atomic::AtomicU64,
}

impl ToolHeaders {
    /// Forgets what was learned under an older tools generation.
    fn follow(&self, tools_generation: u64) {
        use std::sync::atomic::Ordering;
        if self.generation.swap(tools_generation, Ordering::AcqRel) != tools_generation {
            self.tools.clear();
        }
    }

    /// Records the annotations of the tools in a `tools/list` result, listed under this tools
    /// generation.
    pub(crate) fn learn(&self, result: &Value, tools_generation: u64) {
        self.follow(tools_generation);
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            match annotations(tool) {
                Some(list) if !list.is_empty() => {
                    self.tools.insert(name.to_string(), list);
                }
                _ => {
                    self.tools.remove(name);
                }
            }
        }
    }

    /// Checks the `Mcp-Param-*` headers of a `tools/call` against its arguments.
    pub(crate) fn check(
        &self,
        tool: &str,
        arguments: Option<&Value>,
        headers: &HeaderMap,
        tools_generation: u64,
    ) -> Result<(), GatewayError> {
        self.follow(tools_generation);
        let Some(annotated) = self.tools.get(tool) else {
            return Ok(());
        };
        for param in annotated.iter() {
            let value = arguments
                .and_then(|args| param.path.iter().try_fold(args, |v, key| v.get(key)))
                .filter(|v| !v.is_null());
            let header =
                match header_str(headers, param.header.as_str())? {
                    None => None,
                    Some(raw) => Some(decode_header_value(raw.trim()).map_err(|e| {
                        GatewayError::HeaderMismatch(format!("{}: {e}", param.header))
                    })?),
                };
            match (value, header) {
                (None, None) | (None, Some(_)) => {}
                (Some(_), None) => {
                    return Err(GatewayError::HeaderMismatch(format!(
                        "missing {} header for argument {}",
                        param.header,
                        param.path.join(".")
                    )))
                }
                (Some(value), Some(header)) => {
                    if !same_value(value, &header) {
                        return Err(GatewayError::HeaderMismatch(format!(
                            "{} header value '{header}' does not match body value {value}",
                            param.header
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Header text against the body value: strings as they are, integers numerically, booleans as
/// `true`/`false`.
fn same_value(body: &Value, header: &str) -> bool {
    match body {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_f64(), header.parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn tool() -> Value {
        json!({"name": "weather", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "days": {"type": "integer", "x-mcp-header": "Days"},
            "opts": {"type": "object", "properties": {"metric": {"type": "boolean", "x-mcp-header": "Metric"}}}
        }}})
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn annotations_are_read_and_invalid_ones_refused() {
        assert_eq!(annotations(&tool()).unwrap().len(), 3);
        let bad = [
            json!({"inputSchema": {"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}}),
            json!({"inputSchema": {"properties": {"a": {"type": "string", "x-mcp-header": "has space"}}}}),
            json!({"inputSchema": {"properties": {"a": {"type": "string", "x-mcp-header": ""}}}}),
            json!({"inputSchema": {"properties": {
                "a": {"type": "string", "x-mcp-header": "X"},
                "b": {"type": "string", "x-mcp-header": "x"}
            }}}),
        ];
        for tool in bad {
            assert!(annotations(&tool).is_none(), "{tool}");
        }
    }

    #[test]
    fn headers_must_mirror_annotated_arguments() {
        let cache = ToolHeaders::default();
        cache.learn(&json!({"tools": [tool()]}), 0);
        let args = json!({"region": "Hello", "days": 3, "opts": {"metric": true}});
        let ok = headers(&[
            ("mcp-param-region", "=?base64?SGVsbG8=?="),
            ("mcp-param-days", "3.0"),
            ("mcp-param-metric", "true"),
        ]);
        assert!(cache.check("weather", Some(&args), &ok, 0).is_ok());
        for bad in [
            headers(&[
                ("mcp-param-region", "=?base64?SGVsbG8?="),
                ("mcp-param-days", "3"),
                ("mcp-param-metric", "true"),
            ]),
            headers(&[
                ("mcp-param-region", "=?base64?SGVs!!!bG8=?="),
                ("mcp-param-days", "3"),
                ("mcp-param-metric", "true"),
            ]),
            headers(&[("mcp-param-days", "3"), ("mcp-param-metric", "true")]),
            headers(&[
                ("mcp-param-region", "Hello"),
                ("mcp-param-days", "4"),
                ("mcp-param-metric", "true"),
            ]),
            headers(&[
                ("mcp-param-region", "Hello"),
                ("mcp-param-days", "3"),
                ("mcp-param-metric", "True"),
            ]),
        ] {
            assert!(
                matches!(
                    cache.check("weather", Some(&args), &bad, 0),
                    Err(GatewayError::HeaderMismatch(_))
                ),
                "{bad:?}"
            );
        }
        // Without the sentinel wrapper the value is literal.
        let literal = json!({"region": "=?base64?SGVsbG8="});
        assert!(cache
            .check(
                "weather",
                Some(&literal),
                &headers(&[("mcp-param-region", "=?base64?SGVsbG8=")]),
                0
            )
            .is_ok());
        // Absent arguments need no header; unknown tools are not checked.
        assert!(cache
            .check("weather", Some(&json!({})), &HeaderMap::new(), 0)
            .is_ok());
        assert!(cache
            .check("other", Some(&args), &HeaderMap::new(), 0)
            .is_ok());
        // After a tool list change the annotations are forgotten until the next list.
        assert!(cache
            .check("weather", Some(&args), &HeaderMap::new(), 1)
            .is_ok());
        cache.learn(&json!({"tools": [tool()]}), 1);
        assert!(cache
            .check("weather", Some(&args), &HeaderMap::new(), 1)
            .is_err());
    }
}
