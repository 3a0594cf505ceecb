//! Call setup, owned by the bridge: one entry point ([`Bridge::call`]) takes a forwarded request
//! from the front and owns everything up to its first answer — redeeming a retry, leasing a
//! session fit for the method, checking the backend offers the method, applying the log level,
//! starting the backend call with params fit for a 2025-11-25 server, and the driver's first
//! step. The front hands the bridge a route's pool and never leases a session or starts a call.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::call::{CallDriver, LeasedCall, RequestScope, Settle};
use super::state::params_digest;
use super::{Bridge, CallBinding, Event, Outcome, Redeemed, Started};
use crate::backend::identity::SessionIdentity;
use crate::backend::pool::{Pool, PoolKey, Purpose};
use crate::error::GatewayError;
use crate::protocol::{Method, META_PREFIX};

/// How a forwarded request relates to a call the gateway may hold.
#[derive(Debug)]
pub enum Continuation {
    /// A first call; `inputResponses` sent with it are the scope's `preanswers`.
    First,
    /// A retry: `requestState` names the held call, `inputResponses` answer its round.
    Retry {
        token: String,
        answers: Map<String, Value>,
    },
}

/// What a `requestState` of one backend of a route over several is bound to: the route's path
/// and the backend's name (a path holds no `#`).
pub(crate) fn backend_scope(path: &str, backend: &str) -> String {
    format!("{path}#{backend}")
}

/// The route path a state's binding names ([`backend_scope`], or the path alone).
pub(crate) fn scope_path(scope: &str) -> &str {
    scope.split_once('#').map_or(scope, |(path, _)| path)
}

/// Who sent a forwarded call, and where: bound into its `requestState`.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The route path the request came in on; for one backend of a route over several, the
    /// path and the backend ([`backend_scope`]).
    pub route: String,
    pub principal: String,
    /// What the backend is told about the caller: sessions are keyed by it too.
    pub(crate) identity: Arc<SessionIdentity>,
}

/// A request the bridge forwards to the backend, as the front parsed it once: what the bridge
/// needs to start or resume it. Whether it is a first call or a retry is decided with it
/// ([`Continuation`]).
#[derive(Debug)]
pub struct ForwardedCall {
    pub method: Method,
    /// The tool or prompt name, or the resource URI.
    pub target: Option<String>,
    /// `arguments` of a tool or prompt, as sent.
    pub arguments: Option<Value>,
    /// The client's params without `inputResponses`, `requestState` and `arguments` (and the
    /// capabilities moved out of `_meta`); unknown fields kept.
    pub params: Map<String, Value>,
    /// `None` for a method that cannot be held.
    pub continuation: Option<Continuation>,
    /// What the request declared that shapes what it may see.
    pub scope: RequestScope,
    /// W3C trace context from the HTTP headers, used when `_meta` carries none.
    pub trace_headers: Vec<(&'static str, String)>,
}

impl Bridge {
    /// Runs a forwarded request to its first answer: an outcome, or a first notification with
    /// the call's events to follow.
    pub async fn call(
        self: &Arc<Self>,
        pool: &Pool,
        caller: Caller,
        request: ForwardedCall,
    ) -> Result<Started, GatewayError> {
        // Running from here, waiting for a session included: a draining gateway waits for it.
        // `start` counts the call itself from its first step.
        let setting_up = self.tasks.token();
        let Caller {
            route,
            principal,
            identity,
        } = caller;
        let ForwardedCall {
            method,
            target,
            arguments,
            params,
            continuation,
            scope,
            trace_headers,
        } = request;
        let interruptible = continuation.is_some();
        // Only a call that can be held has its params bound into a `requestState`.
        let params_digest = if interruptible {
            params_digest(method, target.as_deref(), arguments.as_ref())
        } else {
            String::new()
        };
        let binding = CallBinding {
            route,
            principal,
            method: method.as_str().to_string(),
            params_digest,
            error_context: json!({
                "uri": target.filter(|_| method == Method::ResourcesRead)
            }),
        };
        let scope = match continuation {
            None | Some(Continuation::First) => scope,
            Some(Continuation::Retry { token, answers }) => {
                match self.redeem(&binding, &token, &answers, scope).await? {
                    Redeemed::Fresh(events) => return Ok(first_answer(events).await),
                    Redeemed::Duplicate(mut outcome) => {
                        let wait = pool.request_timeout() + self.config.round_wait;
                        let ready =
                            tokio::time::timeout(wait, outcome.wait_for(Option::is_some)).await;
                        let outcome = match ready {
                            Ok(Ok(done)) => done.clone().unwrap_or_else(|| {
                                Outcome::Error(GatewayError::Internal("no outcome".into()))
                            }),
                            _ => Outcome::Error(GatewayError::BackendTimeout(
                                "the original retry did not finish".into(),
                            )),
                        };
                        return Ok(Started::Outcome(outcome));
                    }
                    // The client visited the URLs: the original request is issued again.
                    Redeemed::Reissue {
                        accepted: true,
                        scope,
                        ..
                    } => scope,
                    Redeemed::Reissue { error, .. } => return Err(error),
                    Redeemed::Again(outcome) => return Ok(Started::Outcome(outcome)),
                }
            }
        };

        let profile = pool.profile_for(&scope.client_capabilities);
        let key = PoolKey::with_identity(&binding.principal, &profile, identity);
        let purpose = if interruptible {
            Purpose::Interruptible
        } else {
            Purpose::Plain
        };
        let lease = pool.acquire(&key, &profile, purpose).await?;
        let session = &*lease;
        if let Some(capability) = method.required_backend_capability() {
            let init = session.init_result();
            if init
                .get("capabilities")
                .and_then(|c| c.get(capability))
                .is_none()
            {
                return Err(GatewayError::method_not_found(method.as_str()));
            }
        }
        let backend_progress_token = scope.client_progress_token.as_ref().map(|_| {
            format!(
                "mrtr-{}",
                self.progress_tokens.fetch_add(1, Ordering::Relaxed)
            )
        });
        let backend_params = backend_params(
            method,
            params,
            arguments,
            backend_progress_token.as_deref(),
            &trace_headers,
        );
        // The level is set on the exclusive session before the call starts.
        session
            .apply_log_level(scope.log_level.as_deref(), pool.request_timeout())
            .await?;
        let call = session.start_call(method.as_str(), Some(backend_params), interruptible)?;
        let driver = CallDriver::new(
            LeasedCall::new(call, lease),
            interruptible,
            backend_progress_token,
            scope,
            pool.request_timeout(),
            Settle {
                window: self.config.settle_window,
                quiet: self.config.settle_quiet,
            },
        );
        drop(setting_up);
        Ok(self.start(driver, binding).await)
    }

    /// The backend's `InitializeResult` for `server/discover`: the cached one, or a session's
    /// when no session started yet or every one started before the backend's last list change.
    pub(crate) async fn server_init(
        &self,
        pool: &Pool,
        principal: &str,
        identity: Arc<SessionIdentity>,
        client_capabilities: &Value,
    ) -> Result<Arc<Value>, GatewayError> {
        if let Some(init) = pool.current_init() {
            return Ok(init);
        }
        let profile = pool.profile_for(client_capabilities);
        let key = PoolKey::with_identity(principal, &profile, identity);
        let lease = pool.acquire_current(&key, &profile).await?;
        Ok(lease.init_result())
    }
}

/// A resumed call answers with its outcome when that comes first, else with its first
/// notification and the events that follow.
async fn first_answer(mut events: mpsc::Receiver<Event>) -> Started {
    match events.recv().await {
        Some(Event::Notify(first)) => Started::Streaming(first, events),
        Some(Event::Outcome(outcome)) => Started::Outcome(outcome),
        None => Started::Outcome(Outcome::Error(GatewayError::Internal(
            "call ended without an outcome".into(),
        ))),
    }
}

/// Params for the backend: 2026-only `_meta` keys and `task` removed, the progress token
/// replaced by the gateway's own, `arguments` defaulted for `tools/call`. Everything else,
/// trace context and unknown keys included, passes unchanged.
pub(crate) fn backend_params(
    method: Method,
    mut params: Map<String, Value>,
    arguments: Option<Value>,
    backend_progress_token: Option<&str>,
    trace_headers: &[(&'static str, String)],
) -> Value {
    // A 2026 client's `task` belongs to the tasks extension; to a 2025 server it would ask for a
    // 2025 task, which the gateway does not run.
    params.remove("task");
    let mut meta = match params.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    meta.retain(|key, _| !key.starts_with(META_PREFIX));
    meta.remove("progressToken");
    if let Some(token) = backend_progress_token {
        meta.insert("progressToken".into(), json!(token));
    }
    // Trace context in `_meta` wins; the HTTP headers are the fallback.
    if !meta.contains_key("traceparent") {
        for (name, value) in trace_headers {
            meta.insert((*name).into(), json!(value));
        }
    }
    if !meta.is_empty() {
        params.insert("_meta".into(), Value::Object(meta));
    }
    match arguments {
        Some(arguments) => {
            params.insert("arguments".into(), arguments);
        }
        None if method == Method::ToolsCall => {
            params.insert("arguments".into(), json!({}));
        }
        None => {}
    }
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_lose_2026_fields_and_keep_the_rest() {
        let params = json!({
            "name": "t",
            "task": {"ttl": 60000},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": 7,
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "com.example/custom": 1
            },
            "extra": true
        });
        let Value::Object(map) = params else {
            unreachable!()
        };
        let out = backend_params(
            Method::ToolsCall,
            map,
            None,
            Some("g-1"),
            &[(
                "traceparent",
                "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01".into(),
            )],
        );
        assert_eq!(
            out,
            json!({
                "name": "t",
                "arguments": {},
                "extra": true,
                "_meta": {
                    "progressToken": "g-1",
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                    "com.example/custom": 1
                }
            })
        );
    }

    #[test]
    fn arguments_go_back_as_sent() {
        let arguments = json!({"q": [1, {"b": 2}]});
        let out = backend_params(
            Method::PromptsGet,
            Map::new(),
            Some(arguments.clone()),
            None,
            &[],
        );
        assert_eq!(out, json!({ "arguments": arguments }));
        assert_eq!(
            backend_params(Method::PromptsGet, Map::new(), None, None, &[]),
            json!({})
        );
    }

    #[test]
    fn trace_headers_fill_in_missing_trace_context() {
        let out = backend_params(
            Method::ToolsList,
            Map::new(),
            None,
            None,
            &[
                (
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
                ),
                ("tracestate", "v=1".into()),
            ],
        );
        assert_eq!(
            out["_meta"]["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(out["_meta"]["tracestate"], "v=1");
        assert_eq!(
            backend_params(Method::ToolsList, Map::new(), None, None, &[]),
            json!({})
        );
    }
}
