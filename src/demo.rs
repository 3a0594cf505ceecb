//! The built-in demo backend: a small MCP server that speaks revision
//! 2025-11-25, written with the official Rust SDK (`rmcp`).
//!
//! This module owns [`DemoServer`] (its tools, resources, prompt, completion
//! and logging level) and [`run_stdio`], which serves it over stdin/stdout.
//! Several tools make the server-to-client requests a legacy server may send
//! (elicitation, sampling, roots), so the gateway's bridging can be tried
//! against a real SDK server without installing one.
//!
//! The server's parts live in submodules: its tools (`tools`), the rest of
//! what it answers (`handler`: resources, the prompt, completion), the
//! logging level (`logging`), requests to the client (`client_request`) and
//! the stdio loop (`stdio`).

// rmcp marks sampling, roots and logging deprecated because revision
// 2026-07-28 deprecates them; this server speaks 2025-11-25, where they are
// current features. The allowance covers the submodules too.
#![allow(deprecated)]

mod client_request;
mod handler;
mod logging;
mod stdio;
mod tools;

use std::sync::{Arc, Mutex};

use rmcp::{handler::server::router::tool::ToolRouter, model::LoggingLevel};

pub use client_request::{ask_client, AskError};
pub use stdio::{run_stdio, DemoError};

/// A legacy (2025-11-25) MCP server with a handful of friendly tools, two
/// text resources and one prompt.
///
/// Every request it sends to the client goes through the peer of the request
/// being handled, so on Streamable HTTP it travels on that request's stream.
#[derive(Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<Self>,
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl Default for DemoServer {
    fn default() -> Self {
        Self::new()
    }
}

impl DemoServer {
    /// Creates a server with no logging level set yet.
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            log_level: Arc::new(Mutex::new(None)),
        }
    }
}
