//! One route's access rules, built when the gateway starts ([`RouteAccess`]), and one request's
//! caller as they see it ([`CallerAccess`]): whether it may use an item (else the error a
//! client gets: an unknown name for a hidden item, 403 for a missing step-up scope), which items
//! of a list it sees, whether it hears of a resource, and what the backend is told about it.
//! Both eras ask the same questions here.

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::policy::{Decision, ItemKind, RoutePolicy};
use crate::auth::Identity;
use crate::backend::identity::{Credential, SessionIdentity};
use crate::config::{BackendConfig, RouteConfig};
use crate::error::GatewayError;
use crate::exchange::{ExchangeError, TokenExchange};
use crate::expr::{Expr, Facts};
use crate::protocol::{Era, Method};

/// Principals whose backend credential is remembered before dead entries are swept.
const CREDENTIALS_SWEEP_AT: usize = 10_000;

/// A backend's token exchange and each principal's credential for it, shared by every route
/// to the backend (as its sessions are): a token renewed by a request on any route reaches
/// every session of that principal.
pub(crate) struct BackendCredentials {
    exchange: TokenExchange,
    by_principal: DashMap<String, Weak<Credential>>,
}

impl BackendCredentials {
    pub(crate) fn new(exchange: TokenExchange) -> Self {
        Self {
            exchange,
            by_principal: DashMap::new(),
        }
    }

    /// The caller's credential for the backend, its token exchanged (or renewed) first when due.
    async fn for_caller(&self, identity: &Identity) -> Result<Arc<Credential>, GatewayError> {
        let subject = identity.token.as_ref().ok_or_else(|| {
            GatewayError::IdentityUnavailable("no caller token to exchange".into())
        })?;
        let token = self
            .exchange
            .token_for(&identity.principal, subject.expose())
            .await
            .map_err(|error| match error {
                ExchangeError::Rejected { .. } => GatewayError::ExchangeRefused(error.to_string()),
                _ => GatewayError::ExchangeFailed(error.to_string()),
            })?;
        let value = token.authorization().clone();
        if self.by_principal.len() >= CREDENTIALS_SWEEP_AT {
            self.by_principal.retain(|_, c| c.strong_count() > 0);
        }
        // One entry per principal, looked up and replaced under its shard's lock: two first
        // requests at once share one credential.
        let mut entry = self
            .by_principal
            .entry(identity.principal.clone())
            .or_default();
        if let Some(credential) = entry.upgrade() {
            credential.set(value);
            return Ok(credential);
        }
        let credential = Arc::new(Credential::new(value));
        *entry = Arc::downgrade(&credential);
        Ok(credential)
    }
}

/// A route's rules: required scopes, policy, and what its backend is told about callers.
pub(crate) struct RouteAccess {
    required_scopes: Vec<String>,
    policy: Option<RoutePolicy>,
    identity_headers: Vec<(HeaderName, Expr)>,
    identity_env: Vec<(String, Expr)>,
    /// The backend's, shared with its other routes.
    exchange: Option<Arc<BackendCredentials>>,
}

impl RouteAccess {
    /// Compiles the route's policy and its backend's identity expressions (`check-config`
    /// refused any that do not compile, naming them).
    pub(crate) fn new(
        route: &RouteConfig,
        backend: &BackendConfig,
        exchange: Option<Arc<BackendCredentials>>,
    ) -> Result<Self, String> {
        let policy = RoutePolicy::compile(&route.policy)?;
        let identity_headers = backend
            .identity_headers
            .iter()
            .map(|(name, source)| {
                let header = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("identity_headers.{name}: {e}"))?;
                let expr =
                    Expr::compile(source).map_err(|e| format!("identity_headers.{name}: {e}"))?;
                Ok((header, expr))
            })
            .collect::<Result<_, String>>()?;
        let identity_env = backend
            .identity_env
            .iter()
            .map(|(name, source)| {
                let expr =
                    Expr::compile(source).map_err(|e| format!("identity_env.{name}: {e}"))?;
                Ok((name.clone(), expr))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            required_scopes: route.auth.required_scopes().to_vec(),
            policy,
            identity_headers,
            identity_env,
            exchange,
        })
    }

    /// The rules of a route over several backends: its scopes and policy, applied to the names
    /// it exposes. What each backend is told is its own route's ([`Self::for_one_of_many`]).
    pub(crate) fn for_many(route: &RouteConfig) -> Result<Self, String> {
        Ok(Self {
            required_scopes: route.auth.required_scopes().to_vec(),
            policy: RoutePolicy::compile(&route.policy)?,
            identity_headers: Vec::new(),
            identity_env: Vec::new(),
            exchange: None,
        })
    }

    /// One backend's rules on a route over several: what the backend is told about callers.
    /// The route's policy is not among them: the route decided it already, on exposed names.
    pub(crate) fn for_one_of_many(
        route: &RouteConfig,
        backend: &BackendConfig,
        exchange: Option<Arc<BackendCredentials>>,
    ) -> Result<Self, String> {
        let mut rules = Self::new(route, backend, exchange)?;
        rules.policy = None;
        Ok(rules)
    }

    /// Every scope the route's auth and policy name: the metadata's `scopes_supported`.
    pub(crate) fn scopes_supported(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self.required_scopes.clone();
        if let Some(policy) = &self.policy {
            scopes.extend(policy.scopes_named().map(String::from));
        }
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// The request's caller as the rules see it; its facts are built once, if anything reads
    /// them.
    pub(crate) fn caller(self: &Arc<Self>, identity: Identity) -> CallerAccess {
        let reads_facts = self.policy.is_some()
            || !self.identity_headers.is_empty()
            || !self.identity_env.is_empty();
        let facts = reads_facts
            .then(|| Facts::new(&identity.principal, &identity.claims, &identity.scopes));
        CallerAccess {
            rules: self.clone(),
            identity,
            facts,
        }
    }
}

/// One request's caller under its route's rules.
pub(crate) struct CallerAccess {
    rules: Arc<RouteAccess>,
    identity: Identity,
    facts: Option<Facts>,
}

/// What a method uses, if it uses one named item.
fn item_used(
    method: Method,
    target: Option<&str>,
    params: &Map<String, Value>,
) -> Option<(ItemKind, String)> {
    let named = |kind| target.map(|name| (kind, name.to_string()));
    match method {
        Method::ToolsCall => named(ItemKind::Tool),
        Method::PromptsGet => named(ItemKind::Prompt),
        Method::ResourcesRead => named(ItemKind::Resource),
        Method::CompletionComplete => {
            let reference = params.get("ref")?;
            match reference.get("type").and_then(Value::as_str)? {
                "ref/prompt" => Some((
                    ItemKind::Prompt,
                    reference.get("name")?.as_str()?.to_string(),
                )),
                "ref/resource" => Some((
                    ItemKind::Resource,
                    reference.get("uri")?.as_str()?.to_string(),
                )),
                _ => None,
            }
        }
        _ => None,
    }
}

impl CallerAccess {
    pub(crate) fn principal(&self) -> &str {
        &self.identity.principal
    }

    fn decide(&self, method: Method, kind: ItemKind, name: &str) -> Decision {
        match (&self.rules.policy, &self.facts) {
            (Some(policy), Some(facts)) => policy.decide(facts, method.as_str(), kind, name),
            _ => Decision::Allow,
        }
    }

    /// Whether this request may use what it names: a hidden item is an unknown name, a step-up
    /// the token lacks is [`GatewayError::InsufficientScope`] with every scope the use needs.
    /// `params` are the request's (a completion names its prompt or resource there).
    pub(crate) fn may_use(
        &self,
        method: Method,
        target: Option<&str>,
        params: &Map<String, Value>,
        era: Era,
    ) -> Result<(), GatewayError> {
        if self.rules.policy.is_none() {
            return Ok(());
        }
        let Some((kind, name)) = item_used(method, target, params) else {
            // Under a policy, a use whose item cannot be read is not passed on unjudged.
            return match method {
                Method::ToolsCall
                | Method::PromptsGet
                | Method::ResourcesRead
                | Method::CompletionComplete => Err(GatewayError::InvalidParams {
                    message: format!(
                        "{} names no tool, prompt or resource this gateway can read",
                        method.as_str()
                    ),
                    data: None,
                }),
                _ => Ok(()),
            };
        };
        match self.decide(method, kind, &name) {
            Decision::Allow => Ok(()),
            Decision::Hidden => Err(hidden(method, kind, &name, era)),
            Decision::StepUp(scopes) => {
                let mut needed = self.rules.required_scopes.clone();
                for scope in scopes {
                    if !needed.contains(&scope) {
                        needed.push(scope);
                    }
                }
                Err(GatewayError::InsufficientScope { scopes: needed })
            }
        }
    }

    /// The same caller under one backend's rules on a route over several
    /// ([`RouteAccess::for_one_of_many`]).
    pub(crate) fn under(&self, rules: &Arc<RouteAccess>) -> CallerAccess {
        rules.caller(self.identity.clone())
    }

    /// Whether list results are filtered for this caller.
    pub(crate) fn filters_lists(&self) -> bool {
        self.rules.policy.is_some()
    }

    /// Whether the caller sees `name` in a list (allowed, or allowed after a step-up).
    fn lists(&self, method: Method, kind: ItemKind, name: &str) -> bool {
        !matches!(self.decide(method, kind, name), Decision::Hidden)
    }

    /// Leaves out of a list result what the caller may not see. `false` when the method's
    /// result is not a list this filters.
    pub(crate) fn filter_list(&self, method: Method, result: &mut Map<String, Value>) -> bool {
        if self.rules.policy.is_none() {
            return false;
        }
        let (member, kind, key) = match method {
            Method::ToolsList => ("tools", ItemKind::Tool, "name"),
            Method::PromptsList => ("prompts", ItemKind::Prompt, "name"),
            Method::ResourcesList => ("resources", ItemKind::Resource, "uri"),
            Method::ResourcesTemplatesList => {
                ("resourceTemplates", ItemKind::Resource, "uriTemplate")
            }
            _ => return false,
        };
        if let Some(Value::Array(items)) = result.get_mut(member) {
            // An item without its name cannot be matched by any rule: hidden.
            items.retain(|item| {
                item.get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|name| self.lists(method, kind, name))
            });
        }
        true
    }

    /// Whether the caller may hear of changes to the resource `uri` (`resources/updated`).
    pub(crate) fn hears_of(&self, uri: &str) -> bool {
        self.rules.policy.is_none() || self.lists(Method::ResourcesRead, ItemKind::Resource, uri)
    }

    /// What the backend is told about this caller: identity headers and environment evaluated,
    /// and its exchanged token renewed when due.
    pub(crate) async fn session_identity(&self) -> Result<Arc<SessionIdentity>, GatewayError> {
        let rules = &self.rules;
        if rules.identity_headers.is_empty()
            && rules.identity_env.is_empty()
            && rules.exchange.is_none()
        {
            return Ok(SessionIdentity::none());
        }
        let mut headers = Vec::with_capacity(rules.identity_headers.len());
        let mut env = Vec::with_capacity(rules.identity_env.len());
        if let Some(facts) = &self.facts {
            for (name, expr) in &rules.identity_headers {
                let text = expr.text(facts).map_err(|e| {
                    GatewayError::IdentityUnavailable(format!("identity_headers.{name}: {e}"))
                })?;
                let value = HeaderValue::from_str(&text).map_err(|_| {
                    GatewayError::IdentityUnavailable(format!(
                        "identity_headers.{name}: the value is not a valid header value"
                    ))
                })?;
                headers.push((name.clone(), value));
            }
            for (name, expr) in &rules.identity_env {
                let text = expr.text(facts).map_err(|e| {
                    GatewayError::IdentityUnavailable(format!("identity_env.{name}: {e}"))
                })?;
                if text.contains('\0') {
                    return Err(GatewayError::IdentityUnavailable(format!(
                        "identity_env.{name}: the value contains a NUL byte"
                    )));
                }
                env.push((name.clone(), text));
            }
        }
        let credential = match &rules.exchange {
            None => None,
            Some(exchange) => Some(exchange.for_caller(&self.identity).await?),
        };
        Ok(Arc::new(SessionIdentity::new(headers, env, credential)))
    }
}

/// Why a use was refused, for the audit log: what the caller was told may be an unknown name.
pub(crate) fn denial_reason(refusal: &GatewayError) -> String {
    match refusal {
        GatewayError::InsufficientScope { .. } => refusal.to_string(),
        _ => format!("hidden by the route's policy ({refusal})"),
    }
}

/// What a caller gets for a hidden item: what the backend answers for a name it lacks.
fn hidden(method: Method, kind: ItemKind, name: &str, era: Era) -> GatewayError {
    let as_method = match kind {
        ItemKind::Tool => Method::ToolsCall,
        ItemKind::Prompt => Method::PromptsGet,
        ItemKind::Resource => Method::ResourcesRead,
    };
    tracing::debug!(
        method = method.as_str(),
        name,
        "hidden by the route's policy"
    );
    GatewayError::unknown_item(as_method, name, era)
}

#[cfg(test)]
mod tests;
