//! Shared test support: the in-process gateway harness and the 2026-07-28 client.

pub mod gateway;
pub mod modern_client;
