//! The roots backend: a minimal 2025-11-25 server over stdio that uses roots the way
//! server-filesystem does, for M5.
//!
//! It runs as this bench binary started again with [`SERVE_ROOTS_BACKEND_FLAG`] and a
//! configured root (a `file://` URI, like server-filesystem's command-line directory), one
//! process per gateway session. It reads and answers one line at a time, so everything it was
//! sent before a request has been applied when the request is handled.
//!
//! - `initialize` returns protocol `2025-11-25` and the `tools` capability, and remembers
//!   whether the client declared `roots`.
//! - After `notifications/initialized`, and after every `notifications/roots/list_changed`, a
//!   client that declared `roots` is asked `roots/list`; a non-empty answer replaces the roots in
//!   force (the configured one until then).
//! - `tools/call open {uri}` answers `opened <uri>` when the URI lies inside the roots in force,
//!   and an error result `denied <uri>` otherwise.
//! - `ping` answers `{}`; other requests get -32601.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

use crate::BenchResult;

/// The hidden argument that turns the bench binary into the roots backend.
pub const SERVE_ROOTS_BACKEND_FLAG: &str = "--serve-roots-backend";

/// The tool M5 calls.
pub const OPEN_TOOL: &str = "open";

struct RootsServer {
    roots: Vec<String>,
    client_has_roots: bool,
    asked: u64,
}

/// Entry point of the child process: serves stdin/stdout until stdin closes.
pub fn serve_child(configured_root: &str) -> BenchResult<()> {
    let mut server = RootsServer {
        roots: vec![configured_root.to_owned()],
        client_has_roots: false,
        asked: 0,
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    // Bounded by stdin: the gateway closes it to end the session.
    for line in stdin.lock().lines() {
        let line = line?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        for reply in server.handle(&message) {
            writeln!(stdout, "{reply}")?;
        }
        stdout.flush()?;
    }
    Ok(())
}

impl RootsServer {
    fn handle(&mut self, message: &Value) -> Vec<Value> {
        let id = message.get("id").cloned();
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            // The answer to our roots/list.
            let given: Vec<String> = message["result"]["roots"]
                .as_array()
                .map(|roots| {
                    roots
                        .iter()
                        .filter_map(|root| root["uri"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if !given.is_empty() {
                self.roots = given;
            }
            return Vec::new();
        };
        match (method, id) {
            ("initialize", Some(id)) => {
                self.client_has_roots = message["params"]["capabilities"].get("roots").is_some();
                vec![json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": crate::wire::LEGACY_VERSION,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "mrtr-bench-roots-backend", "version": "0.1.0"},
                }})]
            }
            ("notifications/initialized" | "notifications/roots/list_changed", None) => {
                if !self.client_has_roots {
                    return Vec::new();
                }
                self.asked += 1;
                vec![
                    json!({"jsonrpc": "2.0", "id": format!("roots-{}", self.asked), "method": "roots/list"}),
                ]
            }
            ("tools/list", Some(id)) => {
                vec![json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{
                    "name": OPEN_TOOL,
                    "description": "Open a file:// URI inside the roots in force.",
                    "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]},
                }]}})]
            }
            ("tools/call", Some(id)) => {
                let uri = message["params"]["arguments"]["uri"]
                    .as_str()
                    .unwrap_or_default();
                let inside = self.roots.iter().any(|root| {
                    let root = root.trim_end_matches('/');
                    uri == root || uri.starts_with(&format!("{root}/"))
                });
                let (text, is_error) = if inside {
                    (format!("opened {uri}"), false)
                } else {
                    (format!("denied {uri}"), true)
                };
                vec![json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": text}],
                    "isError": is_error,
                }})]
            }
            ("ping", Some(id)) => vec![json!({"jsonrpc": "2.0", "id": id, "result": {}})],
            (other, Some(id)) => vec![json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32601, "message": format!("Method not found: {other}"),
            }})],
            (_, None) => Vec::new(),
        }
    }
}
