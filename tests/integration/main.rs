//! Integration tests: the gateway between real peers, a 2026-07-28 rmcp client (or raw HTTP for
//! exact wire assertions) in front and the legacy rmcp test backend behind, over stdio and
//! Streamable HTTP.

#[path = "../support/mod.rs"]
#[macro_use]
mod support;

mod admin;
mod aggregate;
mod auth;
mod authz;
mod cli;
mod faults;
mod fleet;
mod forwarding;
mod legacy;
mod listen;
mod modern;
mod modern_fixture;
mod mrtr;
mod pool;
mod roots;
mod shutdown;
mod soak;
mod telemetry;
mod validation;
