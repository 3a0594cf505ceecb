//! Who may use what, and who the backends are told the caller is: the routes' policies
//! (`policy`), decided over the caller's facts (`crate::expr::Facts`).

mod policy;

pub use policy::{Decision, ItemKind, RoutePolicy};
