//! Parking a call for its next round: a call that asks for input (or that the backend ended
//! with -32042) takes a place in the held table, bounded gateway-wide and per principal, and is
//! named by a random id sealed into the `requestState` of the `InputRequiredResult` its client
//! gets.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::call::{BackendCall, CallDriver};
use super::clock::Clock;
use super::held::Admission;
use super::inputs::PendingInput;
use super::state::{now_ms, principal_digest, random_id, StatePayload};
use super::{Bridge, CallBinding, Outcome};
use crate::backend::MessageLimit;
use crate::error::{GatewayError, StateRejection};
use crate::jsonrpc::JsonRpcError;

pub(super) struct HeldCall<C: BackendCall, K: Clock> {
    pub(super) kind: Held<C, K>,
    pub(super) binding: CallBinding,
    pub(super) round: u32,
    pub(super) parked: Instant,
    pub(super) expires: Instant,
}

pub(super) enum Held<C: BackendCall, K: Clock> {
    /// A backend call still running, waiting for answers.
    Live(Box<CallDriver<C, K>>),
    /// A call the backend ended with -32042: re-issued once the client has visited the URLs.
    Reissue {
        inputs: Arc<Vec<PendingInput>>,
        error: JsonRpcError,
    },
}

impl<C: BackendCall, K: Clock> Held<C, K> {
    pub(super) fn alive(&self) -> bool {
        match self {
            Self::Live(driver) => driver.session_alive(),
            Self::Reissue { .. } => true,
        }
    }

    /// The inputs a retry answers, shared: its answers are validated out of the table's lock.
    pub(super) fn inputs(&self) -> Arc<Vec<PendingInput>> {
        match self {
            Self::Live(driver) => driver.outstanding_inputs(),
            Self::Reissue { inputs, .. } => inputs.clone(),
        }
    }

    /// What the held call's answers are measured against: a live call's backend limit (a
    /// reissued call's answers reach no backend).
    pub(super) fn message_limit(&self) -> Option<MessageLimit> {
        match self {
            Self::Live(driver) => driver.message_limit(),
            Self::Reissue { .. } => None,
        }
    }

    pub(super) fn abandon(&mut self, reason: &str) {
        if let Self::Live(driver) = self {
            driver.abandon(reason);
        }
    }
}

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// Holds a live call for its next round.
    pub(super) fn park(&self, mut driver: CallDriver<C, K>, binding: CallBinding) -> Outcome {
        if driver.round >= self.config.max_rounds {
            driver.abandon("round limit reached");
            return Outcome::Error(GatewayError::BadState {
                reason: StateRejection::RoundLimit,
            });
        }
        let place = match self.held.admit(principal_digest(&binding.principal)) {
            Ok(place) => place,
            Err(error) => {
                driver.abandon("too many calls are waiting for input");
                return Outcome::Error(error.into());
            }
        };
        driver.parked();
        let round = driver.round;
        self.hold(place, Held::Live(Box::new(driver)), binding, round)
    }

    /// Puts a call in the place it was admitted to and returns the `InputRequiredResult` that
    /// names it.
    pub(super) fn hold(
        &self,
        place: Admission<'_, HeldCall<C, K>>,
        held: Held<C, K>,
        binding: CallBinding,
        round: u32,
    ) -> Outcome {
        let held_id = random_id();
        let payload = StatePayload {
            held_id: held_id.clone(),
            owner: self.instance.clone(),
            owner_address: self.owner_address.clone(),
            route: binding.route.clone(),
            principal: place.principal().to_owned(),
            method: binding.method.clone(),
            params_digest: binding.params_digest.clone(),
            round,
            expires_ms: now_ms() + self.config.held_ttl.as_millis() as u64,
        };
        let token = self.key_ring().seal(&payload);
        let requests: Map<String, Value> = match &held {
            Held::Live(driver) => driver.input_requests(),
            Held::Reissue { inputs, .. } => inputs
                .iter()
                .map(|p| (p.key.clone(), p.request.clone()))
                .collect(),
        };
        let mut result = Map::new();
        result.insert("resultType".into(), json!("input_required"));
        if !requests.is_empty() {
            result.insert("inputRequests".into(), Value::Object(requests));
        }
        result.insert("requestState".into(), json!(token));
        tracing::Span::current().record("round", round);
        tracing::debug!(method = %binding.method, round, "call held for input");
        self.held.insert(
            held_id,
            place,
            HeldCall {
                kind: held,
                binding,
                round,
                parked: Instant::now(),
                expires: Instant::now() + self.config.held_ttl,
            },
        );
        Outcome::InputRequired(Value::Object(result))
    }
}
