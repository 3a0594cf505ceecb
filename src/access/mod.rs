//! Who may use what, and who the backends are told the caller is: the routes' policies
//! (`policy`), decided over the caller's facts (`crate::expr::Facts`); and one request's caller
//! under its route's rules (`caller`): what it may use and see, and the identity headers,
//! environment and exchanged token its backend sessions carry.

mod caller;
mod policy;

pub(crate) use caller::{denial_reason, BackendCredentials, CallerAccess, RouteAccess};
pub use policy::{Decision, ItemKind, RoutePolicy};
