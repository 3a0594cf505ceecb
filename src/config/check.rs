//! The cross-field rules of each section, checked after `${NAME}` expansion. Every error names
//! the key it is about (`server.max_connections`, `route[0].auth`, `backend.b.url`, ...); a rule
//! on two keys at once names the first and both in its message (`held_ttl and round_wait`).
//!
//! One file per concern: the listener's and legacy sessions' limits (`server`), routes and their
//! auth (`routes`), their `[[route.policy]]` rules (`policy`), backends (`backends`), what
//! backends are told about callers (`identity`), the audit queue (`server`), and multi-round
//! calls with the fleet that shares their keys (`mrtr`).

mod backends;
mod identity;
mod mrtr;
mod policy;
mod routes;
mod server;
#[cfg(test)]
mod tests;

pub(super) use backends::check_backends;
pub(super) use identity::check_identity;
pub(super) use mrtr::{check_fleet, check_mrtr};
pub(super) use policy::check_policy;
pub(super) use routes::{check_auth, check_routes};
pub(super) use server::{check_audit, check_legacy, check_server};
