//! The stdio echo backend: a minimal 2025-11-25 server over stdio (newline-delimited JSON-RPC)
//! that every stdio-to-HTTP proxy of M8 runs, the gateway included.
//!
//! It runs as this bench binary started again with [`SERVE_STDIO_BACKEND_FLAG`], one process
//! per session of whoever spawned it. It reads and answers one line at a time and does as
//! little as possible per request, so that the proxy in front of it is what is measured.
//!
//! - `initialize` returns protocol `2025-11-25` and the `tools` capability.
//! - Notifications and responses (the client's answers) get no reply.
//! - `tools/list` lists `echo` and `large`; `ping` answers `{}`.
//! - `tools/call echo {text}` answers `text`, the same result as the fast HTTP backend's echo.
//! - `tools/call large` answers [`crate::backend::large_text`] (256 KiB), like the HTTP backend.
//! - Other requests get -32601; the process exits when stdin closes.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

use crate::backend::{large_text, passthrough_tools};
use crate::wire::LEGACY_VERSION;
use crate::BenchResult;

/// The hidden argument that turns the bench binary into the stdio echo backend.
pub const SERVE_STDIO_BACKEND_FLAG: &str = "--serve-stdio-backend";

/// Entry point of the child process: serves stdin/stdout until stdin closes.
pub fn serve_child() -> BenchResult<()> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    // The `large` answer minus its id, serialized once: `{"jsonrpc":"2.0","id":ID` goes before.
    let large_tail = {
        let message = json!({"result": text_result(&large_text())}).to_string();
        format!(",{}", &message[1..])
    };
    // Bounded by stdin: whoever spawned the process closes it to end the session.
    for line in stdin.lock().lines() {
        let line = line?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id") else {
            continue;
        };
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            continue;
        };
        if method == "tools/call" && message["params"]["name"] == "large" {
            writeln!(stdout, "{{\"jsonrpc\":\"2.0\",\"id\":{id}{large_tail}")?;
        } else {
            writeln!(stdout, "{}", answer(id.clone(), method, &message["params"]))?;
        }
        stdout.flush()?;
    }
    Ok(())
}

/// The answer to request `id` (every request but `tools/call large`).
fn answer(id: Value, method: &str, params: &Value) -> Value {
    let result = match method {
        "initialize" => json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mrtr-bench-stdio-backend", "version": "0.1.0"},
        }),
        "ping" => json!({}),
        "tools/list" => json!({ "tools": passthrough_tools() }),
        "tools/call" => match params["name"].as_str() {
            Some("echo") => text_result(params["arguments"]["text"].as_str().unwrap_or_default()),
            _ => return error(id, -32602, "Unknown tool"),
        },
        other => return error(id, -32601, &format!("Method not found: {other}")),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}
