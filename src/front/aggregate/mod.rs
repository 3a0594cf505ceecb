//! A route over several backends (`backends = [...]`): one endpoint whose tools and prompts are
//! every backend's, each under `PREFIX__NAME` ([`names`]), whose resources keep their URIs and
//! go to the backend that lists them ([`resources`]), and whose lists and `server/discover`
//! are the backends' merged ([`merge`]).
//!
//! Each backend is served as a route of its own ([`Member`]: its pool, what it is told about
//! callers, the relay or the bridge, its `requestState` bound to it): a use of one item is
//! renamed and handed to that backend's route, so rounds, retries, the fleet's forwarding,
//! cancellation and progress are a one-backend route's. The route's policy and audit run before,
//! on the names the route exposes (`Dispatch::apply`).

mod listen;
mod local;
mod merge;
mod names;
mod part;
mod resources;

pub(crate) use self::local::AggregateServer;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{HeaderMap, Response};
use serde_json::Value;
use tokio_util::task::TaskTracker;

use self::resources::Resources;
use super::listen::Listens;
use super::request::McpRequest;
use super::route::Route;
use crate::access::CallerAccess;
use crate::config::{OnBackendError, RouteConfig, NAME_SEPARATOR};
use crate::error::GatewayError;
use crate::http_serve::Body;
use crate::metrics::Metrics;
use crate::mrtr::quota::Quota;
use crate::mrtr::ForwardedCall;
use crate::protocol::{Era, Method};

/// One backend of a route over several, served as a route of its own.
pub(crate) struct Member {
    /// The backend's name (`[backend.NAME]`).
    pub name: String,
    /// What its tool and prompt names start with: its prefix and the separator.
    pub prefix: String,
    /// The backend's own route: its pool, its rules for what it is told about callers.
    pub route: Arc<Route>,
    /// A late part of the backend's is finishing in the background.
    pub finishing: Arc<AtomicBool>,
}

/// Applying one request on a route, as the front's innermost service does: what a route over
/// several backends asks of it for each backend's part. (The dispatch stands above this module
/// and implements it.)
pub(crate) trait ApplyOn: Send + Sync {
    /// `request` applied on `route`; `listens` instead of the dispatch's own, if given.
    fn apply_on<'a>(
        &'a self,
        route: Arc<Route>,
        listens: Option<Arc<Listens>>,
        request: McpRequest,
        caller: Arc<CallerAccess>,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Response<Body>, GatewayError>>;

    /// The same, shared: for a part that may outlive the request that started it.
    fn to_shared(&self) -> Arc<dyn ApplyOn>;
}

/// The backends of a route over several, and what routes a request to one of them.
pub(crate) struct Aggregate {
    members: Vec<Member>,
    /// A tool's or prompt's prefix (without the separator) to its backend.
    by_prefix: HashMap<String, usize>,
    resources: Resources,
    on_error: OnBackendError,
    /// Longest one backend may take over its part of a merged answer.
    list_timeout: Duration,
    /// The route's own: its merged answers are stamped with its hints.
    config: RouteConfig,
    metrics: Arc<Metrics>,
    /// The gateway's listens: the route's listen takes its place there.
    listens: Arc<Listens>,
    /// When the backends' resources were last listed to learn URIs; held while listing, so
    /// reads of unknown URIs at once wait for one listing.
    learned_at: tokio::sync::Mutex<Option<std::time::Instant>>,
    /// Late parts finishing in the background; each ends on its own or at the drain.
    late_parts: TaskTracker,
    /// What the backends' own listens (and the route's 2025-11-25 sessions') are opened with:
    /// no limit, the gateway's drain.
    member_listens: Arc<Listens>,
}

impl Aggregate {
    pub(crate) fn new(
        config: &RouteConfig,
        members: Vec<Member>,
        metrics: Arc<Metrics>,
        listens: &Arc<Listens>,
    ) -> Self {
        let by_prefix = members
            .iter()
            .enumerate()
            .map(|(i, member)| (config.prefix_of(&member.name).to_string(), i))
            .collect();
        let configured = config
            .resource_prefixes
            .iter()
            .filter_map(|(name, prefix)| {
                let i = members.iter().position(|m| &m.name == name)?;
                Some((prefix.clone(), i))
            })
            .collect();
        Self {
            members,
            by_prefix,
            resources: Resources::new(configured),
            on_error: config.on_backend_error,
            list_timeout: config.list_timeout,
            config: config.clone(),
            metrics,
            listens: listens.clone(),
            learned_at: tokio::sync::Mutex::new(None),
            late_parts: TaskTracker::new(),
            member_listens: Arc::new(Listens {
                quota: Arc::new(Quota::new(usize::MAX, usize::MAX)),
                keep_alive: listens.keep_alive,
                drain: listens.drain.clone(),
            }),
        }
    }

    /// Listens without limits: its backends' (the route's listen took its place), and those
    /// of its 2025-11-25 sessions (each counted in `[legacy]` as a session).
    pub(crate) fn unlimited_listens(&self) -> Arc<Listens> {
        self.member_listens.clone()
    }

    /// Longest one request may take: the longest any backend allows.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.members
            .iter()
            .filter_map(|m| m.route.pool().ok())
            .map(|pool| pool.request_timeout())
            .max()
            .unwrap_or(self.list_timeout)
    }

    /// The backend serving an exposed tool or prompt name (`method` its use), and the name it
    /// knows; none is the unknown-name error.
    fn named<'a>(
        &self,
        method: Method,
        exposed: &'a str,
    ) -> Result<(&Member, &'a str), GatewayError> {
        exposed
            .split_once(NAME_SEPARATOR)
            .filter(|(_, original)| !original.is_empty())
            .and_then(|(prefix, original)| {
                let member = &self.members[*self.by_prefix.get(prefix)?];
                Some((member, original))
            })
            .ok_or_else(|| GatewayError::unknown_item(method, exposed, Era::Modern))
    }

    /// The backend a use of one item goes to (a call, a prompt, a resource read, a completion),
    /// the call renamed to the name that backend knows. The route's policy allowed it already.
    pub(super) async fn member_for(
        &self,
        via: &dyn ApplyOn,
        call: &mut ForwardedCall,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<&Member, GatewayError> {
        match call.method {
            Method::ToolsCall | Method::PromptsGet => {
                let exposed = call.target.clone().unwrap_or_default();
                let (member, original) = self.named(call.method, &exposed)?;
                names::rename_target(call, original);
                Ok(member)
            }
            Method::ResourcesRead => {
                let uri = call.target.clone().unwrap_or_default();
                self.owner_of(via, &uri, caller, headers).await
            }
            Method::CompletionComplete => self.completion_owner(via, call, caller, headers).await,
            _ => Err(GatewayError::method_not_found(call.method.as_str())),
        }
    }

    /// A use of one of a backend's items failed: counted and logged when the backend failed.
    pub(super) fn note_use(
        &self,
        member: &Member,
        method: Method,
        answer: &Result<Response<Body>, GatewayError>,
    ) {
        if let Err(error) = answer {
            if error.is_backend_failure() {
                self.count_failure(member, method, "call_failed", error);
            }
        }
    }

    /// The backend a resource URI belongs to: configured by prefix, or learned from the
    /// backends' lists (listed again once if the URI is new to this replica).
    async fn owner_of(
        &self,
        via: &dyn ApplyOn,
        uri: &str,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<&Member, GatewayError> {
        if let Some(i) = self.resources.owner(uri) {
            return Ok(&self.members[i]);
        }
        self.learn_resources(via, caller, headers).await;
        match self.resources.owner(uri) {
            Some(i) => Ok(&self.members[i]),
            None => Err(GatewayError::unknown_item(
                Method::ResourcesRead,
                uri,
                Era::Modern,
            )),
        }
    }

    /// `completion/complete`: a prompt's by its exposed name (renamed), a resource template's by
    /// its URI.
    async fn completion_owner(
        &self,
        via: &dyn ApplyOn,
        call: &mut ForwardedCall,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<&Member, GatewayError> {
        let reference = call.params.get("ref").cloned().unwrap_or(Value::Null);
        let text = |key: &str| reference.get(key).and_then(Value::as_str).map(String::from);
        match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let exposed = text("name").unwrap_or_default();
                let (member, original) = self.named(Method::PromptsGet, &exposed)?;
                names::rename_completion_prompt(call, original);
                Ok(member)
            }
            Some("ref/resource") => {
                let uri = text("uri").unwrap_or_default();
                self.owner_of(via, &uri, caller, headers).await
            }
            _ => Err(GatewayError::invalid_params(
                "ref must be a ref/prompt with a name or a ref/resource with a uri",
            )),
        }
    }

    /// A backend's failed part: counted and logged.
    fn count_failure(&self, member: &Member, method: Method, outcome: &str, error: &GatewayError) {
        self.metrics
            .member_failures
            .with_label_values(&[&self.config.path, &member.name, method.as_str(), outcome])
            .inc();
        tracing::warn!(
            route = %self.config.path,
            backend = %member.name,
            method = method.as_str(),
            outcome,
            error = %error,
            "a backend of the route failed its part"
        );
    }
}
