//! The relay, owned by the bridge: a 2026-07-28 client's request to a 2026-07-28 backend
//! goes on as it came (its `_meta`, capabilities, arguments, trace context, `Mcp-Param-*`), and
//! the backend's notifications and answer come back as they are. Nothing is held: a round the
//! backend opens is the backend's own.
//!
//! One thing is the gateway's: the backend's `requestState` travels sealed inside the gateway's
//! own ([`RelayState`]), bound to the route, the caller's principal, the method and params, the
//! round and an expiry. A retry whose state was issued to another principal, for another
//! request, or that was tampered with or expired, is refused before the backend hears it; any
//! replica of a fleet opens it (the key ring is shared), so any replica serves any retry.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::inputs::undeclared;
use super::setup::{Caller, Continuation, ForwardedCall};
use super::state::{now_ms, params_digest, principal_digest, RELAY_STATE_VERSION};
use super::{Bridge, Event, Outcome, Started};
use crate::backend::modern::{Exchange, ModernBackend, ModernEvent, ModernRequest};
use crate::backend::BackendError;
use crate::error::{GatewayError, StateRejection};
use crate::protocol::{Method, META_CLIENT_CAPABILITIES};

/// Events a relayed request may send ahead of a slow client.
const EVENT_BUFFER: usize = 64;
/// Largest backend `requestState` the gateway carries (sealed, it must stay under the
/// longest relayed state a retry may bring back).
const MAX_BACKEND_STATE: usize = 512 * 1024;

/// What a relayed round's `requestState` binds.
#[derive(Debug, Serialize, Deserialize)]
struct RelayState {
    #[serde(rename = "b")]
    route: String,
    /// SHA-256 of the principal (hex, 128 bits).
    #[serde(rename = "p")]
    principal: String,
    #[serde(rename = "m")]
    method: String,
    #[serde(rename = "d")]
    params_digest: String,
    /// Rounds handed out so far in this flow.
    #[serde(rename = "r")]
    round: u32,
    #[serde(rename = "e")]
    expires_ms: u64,
    /// The backend's own `requestState`, if it gave one.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    backend_state: Option<String>,
}

/// Who asked, for what: what a relayed round is bound to.
struct Flow {
    route: String,
    principal: String,
    method: Method,
    params_digest: String,
    /// What this request declared: a round may ask for nothing else.
    client_capabilities: Value,
}

impl Bridge {
    /// Relays one request to a 2026-07-28 backend, to its first answer: an outcome, or a
    /// first notification with the rest to follow.
    pub(crate) async fn relay(
        self: &Arc<Self>,
        backend: &Arc<ModernBackend>,
        caller: Caller,
        request: ForwardedCall,
        param_headers: Vec<(HeaderName, HeaderValue)>,
        timeout: Duration,
    ) -> Result<Started, GatewayError> {
        let deadline = Instant::now() + timeout;
        let ForwardedCall {
            method,
            target,
            arguments,
            mut params,
            continuation,
            scope,
            trace_headers,
        } = request;
        let flow = Flow {
            route: caller.route,
            params_digest: params_digest(method, target.as_deref(), arguments.as_ref()),
            principal: caller.principal,
            method,
            client_capabilities: if method.is_interruptible() {
                scope.client_capabilities.clone()
            } else {
                Value::Null
            },
        };
        let (round, answers, backend_state) = match continuation {
            None => (0, Map::new(), None),
            Some(Continuation::First) => (0, scope.preanswers, None),
            Some(Continuation::Retry { token, answers }) => {
                let state = self.open_relayed(&token, &flow)?;
                (state.round, answers, state.backend_state)
            }
        };
        // The client's `_meta` as it came (the front moved the capabilities out to read them).
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_CLIENT_CAPABILITIES.into(), scope.client_capabilities);
            if !meta.contains_key("traceparent") {
                for (name, value) in trace_headers {
                    meta.insert(name.into(), json!(value));
                }
            }
        }
        if let Some(arguments) = arguments {
            params.insert("arguments".into(), arguments);
        }
        if !answers.is_empty() {
            params.insert("inputResponses".into(), Value::Object(answers));
        }
        if let Some(state) = backend_state {
            params.insert("requestState".into(), Value::String(state));
        }
        let request = ModernRequest {
            method: method.as_str().to_string(),
            params: Value::Object(params),
            name: target,
            headers: param_headers,
        };
        let sent = tokio::time::timeout_at(deadline, backend.send(&caller.identity, &request));
        let mut exchange = match sent.await {
            Ok(Ok(exchange)) => exchange,
            Ok(Err(error)) => return Err(self.upstream(backend, error)),
            Err(_) => return Err(GatewayError::BackendTimeout(format!("{timeout:?}"))),
        };
        let flow = Arc::new(flow);
        match self
            .next_event(&mut exchange, backend, &flow, round, deadline)
            .await
        {
            Event::Notify(first) => {
                let (tx, rx) = mpsc::channel(EVENT_BUFFER);
                let bridge = self.clone();
                let backend = backend.clone();
                self.tasks.spawn(async move {
                    loop {
                        // The client went away: dropping the exchange cancels the request.
                        let event = tokio::select! {
                            event = bridge.next_event(&mut exchange, &backend, &flow, round, deadline) => event,
                            () = tx.closed() => return,
                        };
                        let last = matches!(event, Event::Outcome(_));
                        if tx.send(event).await.is_err() || last {
                            return;
                        }
                    }
                });
                Ok(Started::Streaming(first, rx))
            }
            Event::Outcome(outcome) => Ok(Started::Outcome(outcome)),
        }
    }

    /// The exchange's next notification, or its outcome (the deadline passing included).
    async fn next_event(
        &self,
        exchange: &mut Exchange,
        backend: &ModernBackend,
        flow: &Flow,
        round: u32,
        deadline: Instant,
    ) -> Event {
        let event = match tokio::time::timeout_at(deadline, exchange.next()).await {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(error))) => {
                return Event::Outcome(Outcome::Error(self.upstream(backend, error)))
            }
            Ok(None) => {
                return Event::Outcome(Outcome::Error(GatewayError::Internal(
                    "relayed request ended without an answer".into(),
                )))
            }
            Err(_) => {
                return Event::Outcome(Outcome::Error(GatewayError::BackendTimeout(
                    "the backend did not answer in time".into(),
                )))
            }
        };
        match event {
            ModernEvent::Notify(notice) => Event::Notify(notice),
            ModernEvent::Result(result) => Event::Outcome(self.relayed_result(result, flow, round)),
            ModernEvent::Error { error, .. } => {
                if error.code == crate::jsonrpc::codes::UNSUPPORTED_PROTOCOL_VERSION {
                    // The backend no longer speaks 2026-07-28: the next request probes again.
                    backend.forget_era();
                }
                Event::Outcome(Outcome::Error(GatewayError::from_modern_backend(
                    error,
                    flow.method.as_str(),
                )))
            }
        }
    }

    /// A backend's result: as it is, but a round's state sealed into the gateway's own.
    fn relayed_result(
        &self,
        result: Box<serde_json::value::RawValue>,
        flow: &Flow,
        round: u32,
    ) -> Outcome {
        #[derive(Deserialize)]
        struct Kind<'a> {
            #[serde(borrow, default, rename = "resultType")]
            result_type: Option<&'a str>,
        }
        let input_required = serde_json::from_str::<Kind>(result.get())
            .is_ok_and(|kind| kind.result_type == Some("input_required"));
        if !input_required {
            return Outcome::Final(result);
        }
        if !flow.method.is_interruptible() {
            return Outcome::Error(GatewayError::Internal(format!(
                "the backend asked for input on {}, which cannot take a round",
                flow.method.as_str()
            )));
        }
        let Ok(Value::Object(mut interim)) = serde_json::from_str::<Value>(result.get()) else {
            return Outcome::Error(GatewayError::Internal("unreadable round".into()));
        };
        // A question this request did not declare it can answer never reaches its client
        // (the backend should have answered -32021 itself).
        if let Some(Value::Object(requests)) = interim.get("inputRequests") {
            if let Some(required) = undeclared(requests, &flow.client_capabilities) {
                return Outcome::Error(GatewayError::MissingCapability { required });
            }
        }
        let round = round + 1;
        if round > self.config.max_rounds {
            return Outcome::Error(GatewayError::BadState {
                reason: StateRejection::RoundLimit,
            });
        }
        let backend_state = match interim.remove("requestState") {
            None => None,
            Some(Value::String(state)) if state.len() <= MAX_BACKEND_STATE => Some(state),
            Some(_) => {
                return Outcome::Error(GatewayError::Internal(
                    "the backend's requestState is not a string the gateway carries".into(),
                ))
            }
        };
        let state = RelayState {
            route: flow.route.clone(),
            principal: principal_digest(&flow.principal),
            method: flow.method.as_str().to_string(),
            params_digest: flow.params_digest.clone(),
            round,
            expires_ms: now_ms() + self.config.held_ttl.as_millis() as u64,
            backend_state,
        };
        let sealed = self.key_ring().seal_bytes(
            RELAY_STATE_VERSION,
            &serde_json::to_vec(&state).unwrap_or_default(),
        );
        interim.insert("requestState".into(), Value::String(sealed));
        Outcome::InputRequired(Value::Object(interim))
    }

    /// Opens a relayed round's state and checks what it is bound to.
    fn open_relayed(&self, token: &str, flow: &Flow) -> Result<RelayState, GatewayError> {
        let reject = |reason| GatewayError::BadState { reason };
        let plaintext = self
            .key_ring()
            .open_bytes(RELAY_STATE_VERSION, token)
            .map_err(reject)?;
        let state: RelayState =
            serde_json::from_slice(&plaintext).map_err(|_| reject(StateRejection::Malformed))?;
        if state.expires_ms < now_ms() {
            return Err(reject(StateRejection::Expired));
        }
        if state.principal != principal_digest(&flow.principal) {
            return Err(reject(StateRejection::PrincipalMismatch));
        }
        if state.route != flow.route
            || state.method != flow.method.as_str()
            || state.params_digest != flow.params_digest
        {
            return Err(reject(StateRejection::RequestMismatch));
        }
        if state.round > self.config.max_rounds {
            return Err(reject(StateRejection::RoundLimit));
        }
        Ok(state)
    }

    /// A backend's failure as the client hears it (the backend told of it first).
    fn upstream(&self, backend: &ModernBackend, error: BackendError) -> GatewayError {
        backend.failed(&error);
        GatewayError::from(error)
    }

    /// The rounds a relayed retry's flow went through (0 if its state does not open): for the
    /// audit record.
    pub fn relayed_round_of(&self, token: &str) -> u32 {
        self.key_ring()
            .open_bytes(RELAY_STATE_VERSION, token)
            .ok()
            .and_then(|plain| serde_json::from_slice::<RelayState>(&plain).ok())
            .map_or(0, |state| state.round)
    }
}
