//! A retry, from its `requestState` to its held call: where it is served ([`Bridge::locate`]),
//! then its redemption here.
//!
//! Redemption order (design invariant 3): open and verify the state (integrity, expiry, owner,
//! route, principal, method, params digest, round), validate every answer, and only then take the
//! held call out of the table. A rejected retry sends the backend nothing and leaves the call
//! held; when its answers were refused, only for `refused_retry_grace`, since clients rarely
//! correct an answer after an error. A re-sent retry with the same answers attaches to the
//! outcome of the first one (invariant 4), so the backend sees each answer exactly once.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use dashmap::mapref::entry::Entry;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};

use super::call::{BackendCall, RequestScope};
use super::clock::Clock;
use super::inputs::{check_answer, PendingInput};
use super::park::Held;
use super::state::{now_ms, principal_digest};
use super::{Bridge, CallBinding, Event, Outcome};
use crate::error::{GatewayError, StateRejection};

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

/// What a retry that took its held call leaves behind, so that a copy of it re-sent later gets
/// the same outcome instead of reaching the backend again.
pub(super) struct Redemption {
    pub(super) answers_digest: String,
    /// Digest of the principal the record is counted against once its outcome is kept.
    pub(super) principal: String,
    pub(super) created: Instant,
    pub(super) outcome: watch::Sender<Option<Outcome>>,
    /// When the outcome was published.
    pub(super) finished: OnceLock<Instant>,
    /// What a later copy of the retry gets (`Replay`).
    pub(super) replay: AtomicU8,
}

/// The replay states of a [`Redemption`].
pub(super) struct Replay;

impl Replay {
    /// Running, or finished without reaching anyone: a later copy waits for or gets the outcome.
    pub(super) const PENDING: u8 = 0;
    /// Reached a client and kept for `outcome_ttl` (counted in `kept_outcomes`): a later copy
    /// gets it again.
    pub(super) const KEPT: u8 = 1;
    /// Reached a client and not kept: a later copy is refused.
    pub(super) const REFUSED: u8 = 2;
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
            && payload.route == route
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

    /// Verifies a retry and, if everything holds, resumes its call with the answers.
    pub fn redeem(
        self: &Arc<Self>,
        binding: &CallBinding,
        token: &str,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
        let redeemed = self.redeem_checked(binding, token, answers, scope);
        let result = match &redeemed {
            Ok(_) => "ok",
            Err(GatewayError::BadState { reason }) => reason.as_str(),
            Err(_) => "invalid_answers",
        };
        self.metrics.redemptions.with_label_values(&[result]).inc();
        redeemed
    }

    fn redeem_checked(
        self: &Arc<Self>,
        binding: &CallBinding,
        token: &str,
        answers: &Map<String, Value>,
        scope: RequestScope,
    ) -> Result<Redeemed, GatewayError> {
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
        tracing::Span::current().record("round", payload.round);
        let answers_digest =
            crate::digest::sha256_hex(&serde_json::to_vec(answers).unwrap_or_default());
        match self.redemptions.entry(payload.held_id.clone()) {
            Entry::Occupied(existing) => {
                let record = existing.get();
                // The same answers again: the first one's outcome, while it is pending, was
                // never handed to anyone, or is kept for `outcome_ttl`.
                let replayable = record.replay.load(Ordering::Acquire) != Replay::REFUSED;
                if record.answers_digest == answers_digest && replayable {
                    Ok(Redeemed::Duplicate(existing.get().outcome.subscribe()))
                } else {
                    Err(reject(StateRejection::ConsumedOrUnknown))
                }
            }
            Entry::Vacant(slot) => {
                let grace = self.config.refused_retry_grace;
                let validated = self
                    .held
                    .update(&payload.held_id, |held| {
                        if held.round != payload.round {
                            return Err(reject(StateRejection::ConsumedOrUnknown));
                        }
                        let checked = match &held.kind {
                            Held::Live(driver) => driver.validate_answers(answers).map(Some),
                            Held::Reissue { inputs, .. } => {
                                validate_reissue(inputs, answers).map(|()| None)
                            }
                        };
                        if checked.is_err() {
                            // The official clients do not retry after an error: unless a
                            // corrected retry comes soon, the sweeper abandons the call and its
                            // session is reset.
                            if let Some(soon) = Instant::now().checked_add(grace) {
                                held.expires = held.expires.min(soon);
                            }
                        }
                        checked
                    })
                    .ok_or(reject(StateRejection::ConsumedOrUnknown))??;
                let held = self
                    .held
                    .take(&payload.held_id)
                    .ok_or(reject(StateRejection::ConsumedOrUnknown))?;
                self.metrics
                    .held_age
                    .observe(held.parked.elapsed().as_secs_f64());
                let (mut driver, validated) = match (held.kind, validated) {
                    (Held::Live(driver), Some(validated)) => (*driver, validated),
                    (Held::Reissue { inputs, error, .. }, _) => {
                        let (answered, unanswered): (Vec<_>, Vec<_>) = inputs
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
                            let round = held.round + 1;
                            if held.round >= self.config.max_rounds {
                                return Err(GatewayError::BadState {
                                    reason: StateRejection::RoundLimit,
                                });
                            }
                            let place =
                                self.held.admit(principal_digest(&held.binding.principal))?;
                            let again = Held::Reissue {
                                inputs: unanswered,
                                error,
                            };
                            return Ok(Redeemed::Again(self.hold(
                                place,
                                again,
                                held.binding,
                                round,
                            )));
                        }
                        let error = GatewayError::from_backend(
                            error,
                            &held.binding.method,
                            &held.binding.error_context,
                        );
                        return Ok(Redeemed::Reissue {
                            accepted,
                            error,
                            scope,
                        });
                    }
                    (Held::Live(_), None) => {
                        return Err(GatewayError::Internal("answers not validated".into()))
                    }
                };
                let record = Arc::new(Redemption {
                    answers_digest,
                    principal: payload.principal.clone(),
                    created: Instant::now(),
                    outcome: watch::channel(None).0,
                    finished: OnceLock::new(),
                    replay: AtomicU8::new(Replay::PENDING),
                });
                slot.insert(record.clone());
                driver.resume(scope, validated, self.config.round_wait);
                Ok(Redeemed::Fresh(self.drive_recorded(
                    driver,
                    held.binding,
                    false,
                    Some(record),
                )))
            }
        }
    }
}

/// Answers to URL-mode requests are checked like any other; the backend never sees them.
fn validate_reissue(
    inputs: &[PendingInput],
    answers: &Map<String, Value>,
) -> Result<(), GatewayError> {
    for input in inputs {
        if let Some(answer) = answers.get(&input.key) {
            check_answer(input, answer)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
