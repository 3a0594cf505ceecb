//! A retry, from its `requestState` to its held call: where it is served ([`Bridge::locate`]),
//! then its redemption here.
//!
//! Redemption order (design invariant 3): open and verify the state (integrity, expiry, owner,
//! principal, route, method, params digest, round), validate every answer, and only then take the
//! held call out of the table. A rejected retry sends the backend nothing and leaves the call
//! held; when its answers were refused, only for `refused_retry_grace`, since clients rarely
//! correct an answer after an error. A re-sent retry with the same answers attaches to the
//! outcome of the first one (invariant 4), so the backend sees each answer exactly once: how
//! single use and that replay hold without a lock is in [`replay`].
//!
//! No map lock is held while answers are validated (their size is the client's) or a state is
//! sealed: retries of other calls never wait for them.

mod replay;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};

use self::replay::{Claim, Reservation};
pub(super) use self::replay::{Redemption, Replay};
use super::call::{validate_answers, BackendCall, RequestScope};
use super::clock::Clock;
use super::inputs::PendingInput;
use super::park::Held;
use super::state::{now_ms, principal_digest, StatePayload};
use super::{Bridge, CallBinding, Event, Outcome};
use crate::error::{GatewayError, StateRejection};
use crate::jsonrpc::JsonRpcError;

/// Where a retry is served, by what its `requestState` says ([`Bridge::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Here: this replica holds the call, or refuses the retry itself.
    Here,
    /// Held by the replica reached at this `HOST:PORT`.
    Replica(String),
    /// Held by an earlier process at this replica's address: the call is lost.
    Gone,
}

/// A retry that passed every check.
pub enum Redeemed {
    /// The held call was a -32042 and every URL was answered: issue the original request again
    /// (`accepted`), or report the backend's error if the client did not accept every URL.
    /// The retry's scope comes back for that new call.
    Reissue {
        accepted: bool,
        error: GatewayError,
        scope: RequestScope,
    },
    /// A -32042 round answered in part: another round asks for the URLs not yet visited.
    Again(Outcome),
    /// This retry took the held call; its events follow.
    Fresh(mpsc::Receiver<Event>),
    /// The same retry, re-sent before its outcome reached anyone or while it is kept: wait for
    /// that outcome.
    Duplicate(watch::Receiver<Option<Outcome>>),
}

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// Where the call a retry's `requestState` names is held, as far as the sealed state says.
    /// Only a state that opens, has not expired, and is bound to this principal, route and
    /// method within `max_rounds` can name another replica: anything else is refused here, by
    /// the local redemption, without a hop.
    pub fn locate(&self, token: &str, principal: &str, route: &str, method: &str) -> Location {
        let Ok(payload) = self.key_ring().open(token) else {
            return Location::Here;
        };
        let elsewhere = payload.owner != self.instance
            && payload.expires_ms >= now_ms()
            && super::setup::scope_path(&payload.route) == route
            && payload.method == method
            && payload.round <= self.config.max_rounds
            && payload.principal == principal_digest(principal);
        if !elsewhere {
            return Location::Here;
        }
        match payload.owner_address {
            // This replica's address, another instance: the owner was restarted and its calls
            // are gone.
            Some(address) if Some(&address) == self.owner_address.as_ref() => Location::Gone,
            Some(address) => Location::Replica(address),
            None => Location::Here,
        }
    }

    /// The rounds a retry's call went through, as its `requestState` says (0 if it does not
    /// open): for the audit record, never for a decision.
    pub fn round_of(&self, token: &str) -> u32 {
        self.key_ring()
            .open(token)
            .map_or(0, |payload| payload.round)
    }

    /// Verifies a retry and, if everything holds, resumes its call with the answers.
    pub async fn redeem(
        self: &Arc<Self>,
        binding: &CallBinding,
        token: &str,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
        let redeemed = self.redeem_checked(binding, token, answers, scope).await;
        let result = match &redeemed {
            Ok(_) => "ok",
            Err(GatewayError::BadState { reason }) => reason.as_str(),
            Err(_) => "invalid_answers",
        };
        self.metrics.redemptions.with_label_values(&[result]).inc();
        redeemed
    }

    async fn redeem_checked(
        self: &Arc<Self>,
        binding: &CallBinding,
        token: &str,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
        let payload = self.open_state(binding, token)?;
        tracing::Span::current().record("round", payload.round);
        let answers_digest =
            crate::digest::sha256_hex(&serde_json::to_vec(answers).unwrap_or_default());
        let reservation = loop {
            match self.claim(&payload.held_id, &answers_digest, &payload.principal) {
                Claim::Reserved(reservation) => break reservation,
                Claim::Redeemed(record) => return replay::replay(&record, &answers_digest),
                // Another retry of the call is being checked: its verdict decides what this
                // one finds next.
                Claim::Checking(mut settled) => {
                    let _ = settled.wait_for(|settled| *settled).await;
                }
            }
        };
        self.take_checked(reservation, &payload, answers, scope)
    }

    /// Opens a retry's state and checks what it binds against the retry.
    fn open_state(&self, binding: &CallBinding, token: &str) -> Result<StatePayload, GatewayError> {
        let reject = |reason| GatewayError::BadState { reason };
        let payload = self.key_ring().open(token).map_err(reject)?;
        if payload.expires_ms < now_ms() {
            return Err(reject(StateRejection::Expired));
        }
        if payload.owner != self.instance {
            return Err(reject(StateRejection::ConsumedOrUnknown));
        }
        if payload.principal != principal_digest(&binding.principal) {
            return Err(reject(StateRejection::PrincipalMismatch));
        }
        if payload.route != binding.route
            || payload.method != binding.method
            || payload.params_digest != binding.params_digest
        {
            return Err(reject(StateRejection::RequestMismatch));
        }
        if payload.round > self.config.max_rounds {
            return Err(reject(StateRejection::RoundLimit));
        }
        Ok(payload)
    }

    /// Validates the answers against the held call's inputs and, if every one holds, takes the
    /// call out of the table and resumes it. The inputs are read out (shared, not copied) so
    /// that no table lock is held while the answers are validated.
    fn take_checked(
        self: &Arc<Self>,
        reservation: Reservation<'_>,
        payload: &StatePayload,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
        let reject = |reason| GatewayError::BadState { reason };
        let (round, inputs, limit) = self
            .held
            .read(&payload.held_id, |held| {
                (held.round, held.kind.inputs(), held.kind.message_limit())
            })
            .ok_or(reject(StateRejection::ConsumedOrUnknown))?;
        if round != payload.round {
            return Err(reject(StateRejection::ConsumedOrUnknown));
        }
        #[cfg(test)]
        tests::while_validating();
        let validated = validate_answers(&inputs, answers, limit.as_ref());
        // Let go of the inputs before the call resumes: it then changes them without a copy.
        drop(inputs);
        let validated = match validated {
            Ok(validated) => validated,
            Err(error) => {
                // The official clients do not retry after an error: unless a corrected retry
                // comes soon, the sweeper abandons the call and its session is reset.
                if let Some(soon) = Instant::now().checked_add(self.config.refused_retry_grace) {
                    self.held.update(&payload.held_id, |held| {
                        held.expires = held.expires.min(soon);
                    });
                }
                return Err(error);
            }
        };
        let held = self
            .held
            .take(&payload.held_id)
            .ok_or(reject(StateRejection::ConsumedOrUnknown))?;
        self.metrics
            .held_age
            .observe(held.parked.elapsed().as_secs_f64());
        match held.kind {
            Held::Live(mut driver) => {
                let record = reservation.keep();
                driver.resume(scope, validated, self.config.round_wait);
                Ok(Redeemed::Fresh(self.drive_recorded(
                    *driver,
                    held.binding,
                    false,
                    Some(record),
                )))
            }
            // Nothing of a -32042 is replayed: its reservation leaves the table.
            Held::Reissue { inputs, error } => {
                self.reissue(held.binding, held.round, inputs, error, answers, scope)
            }
        }
    }

    /// A -32042 round answered: another round for the URLs not visited yet, or the original
    /// request issued again (or the backend's error, if the client did not accept every URL).
    fn reissue(
        &self,
        binding: CallBinding,
        round: u32,
        inputs: Arc<Vec<PendingInput>>,
        error: JsonRpcError,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
        let (answered, unanswered): (Vec<_>, Vec<_>) = Arc::unwrap_or_clone(inputs)
            .into_iter()
            .partition(|input| answers.contains_key(&input.key));
        let accepted = answered.iter().all(|input| {
            answers
                .get(&input.key)
                .and_then(|a| a.get("action"))
                .and_then(Value::as_str)
                == Some("accept")
        });
        if accepted && !unanswered.is_empty() {
            // URLs still to visit: a round that asks for those alone.
            if round >= self.config.max_rounds {
                return Err(GatewayError::BadState {
                    reason: StateRejection::RoundLimit,
                });
            }
            let place = self.held.admit(principal_digest(&binding.principal))?;
            let again = Held::Reissue {
                inputs: Arc::new(unanswered),
                error,
            };
            return Ok(Redeemed::Again(self.hold(place, again, binding, round + 1)));
        }
        let error = GatewayError::from_backend(error, &binding.method, &binding.error_context);
        Ok(Redeemed::Reissue {
            accepted,
            error,
            scope,
        })
    }
}

#[cfg(test)]
mod tests;
