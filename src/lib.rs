//! mrtr-gateway: a Model Context Protocol gateway that serves 2026-07-28 clients in front of
//! unmodified 2025-11-25 servers.
//!
//! Data flows one way: [`front`] (2026-07-28 Streamable HTTP server) → [`mrtr`] (multi
//! round-trip bridge: held calls, `requestState`) → [`backend`] (2025-11-25 client over stdio or
//! Streamable HTTP). [`config`] holds the file format, [`error`] the one
//! mapping of failures onto JSON-RPC codes and HTTP statuses, [`jsonrpc`] the message shapes, and
//! [`demo`] the built-in demo legacy server, [`telemetry`] logs and trace export.

pub mod auth;
pub mod backend;
pub mod config;
pub mod demo;
pub mod digest;
pub mod error;
pub mod front;
pub mod http_client;
pub mod jsonrpc;
pub mod metrics;
pub mod mrtr;
pub mod protocol;
pub mod telemetry;

pub use front::{start, Gateway, RunningGateway, StartError};
