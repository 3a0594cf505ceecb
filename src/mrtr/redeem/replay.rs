//! Single use and replay. The redemption table keeps, per held call, the record of the retry
//! that redeems it. A retry claims the call there before its answers are checked; a copy arriving
//! meanwhile waits for that retry's verdict (as it would behind a lock, without holding one),
//! then looks again: the call is free again if the first was refused, and once it was taken the
//! copy attaches to the first one's outcome when its answers are the same (design invariant 4)
//! or is refused.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::watch;

use crate::error::{GatewayError, StateRejection};
use crate::mrtr::call::BackendCall;
use crate::mrtr::clock::Clock;
use crate::mrtr::{Bridge, Outcome, Redeemed};

/// What a retry that took its held call leaves behind, so that a copy of it re-sent later gets
/// the same outcome instead of reaching the backend again.
pub(in crate::mrtr) struct Redemption {
    pub(in crate::mrtr) answers_digest: String,
    /// Digest of the principal the record is counted against once its outcome is kept.
    pub(in crate::mrtr) principal: String,
    pub(in crate::mrtr) created: Instant,
    /// Whether the retry that made the record is done with its checks: it took the call (the
    /// record stays), or was refused (the record left the table first).
    settled: watch::Sender<bool>,
    pub(in crate::mrtr) outcome: watch::Sender<Option<Outcome>>,
    /// When the outcome was published.
    pub(in crate::mrtr) finished: OnceLock<Instant>,
    /// What a later copy of the retry gets (`Replay`).
    pub(in crate::mrtr) replay: AtomicU8,
}

/// The replay states of a [`Redemption`].
pub(in crate::mrtr) struct Replay;

impl Replay {
    /// Running, or finished without reaching anyone: a later copy waits for or gets the outcome.
    pub(in crate::mrtr) const PENDING: u8 = 0;
    /// Reached a client and kept for `outcome_ttl` (counted in `kept_outcomes`): a later copy
    /// gets it again.
    pub(in crate::mrtr) const KEPT: u8 = 1;
    /// Reached a client and not kept: a later copy is refused.
    pub(in crate::mrtr) const REFUSED: u8 = 2;
}

/// What a retry finds for its held call in the redemption table.
pub(super) enum Claim<'a> {
    /// Nobody else is redeeming the call: this retry checks its answers.
    Reserved(Reservation<'a>),
    /// Another retry took the call.
    Redeemed(Arc<Redemption>),
    /// Another retry's answers are being checked; its verdict comes on the receiver.
    Checking(watch::Receiver<bool>),
}

/// A retry's claim on a held call while its answers are checked: its record is in the table, so
/// a copy arriving meanwhile waits rather than checking the same call at once. Dropped without
/// [`Reservation::keep`] (refused, or the call ended with nothing to replay), the record leaves
/// the table; either way, the copies waiting are woken.
pub(super) struct Reservation<'a> {
    table: &'a DashMap<String, Arc<Redemption>>,
    held_id: String,
    record: Arc<Redemption>,
    kept: bool,
}

impl Reservation<'_> {
    /// The retry took the held call: its record stays for the copies of the retry.
    pub(super) fn keep(mut self) -> Arc<Redemption> {
        self.kept = true;
        self.record.clone()
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.table
                .remove_if(&self.held_id, |_, record| Arc::ptr_eq(record, &self.record));
        }
        self.record.settled.send_replace(true);
    }
}

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// Claims a held call for a retry, or says who has it. The table's lock is held only for
    /// the look-up and the insertion of the record.
    pub(super) fn claim(&self, held_id: &str, answers_digest: &str, principal: &str) -> Claim<'_> {
        let record = match self.redemptions.entry(held_id.to_owned()) {
            Entry::Occupied(existing) => existing.get().clone(),
            Entry::Vacant(slot) => {
                let record = Arc::new(Redemption {
                    answers_digest: answers_digest.to_owned(),
                    principal: principal.to_owned(),
                    created: Instant::now(),
                    settled: watch::channel(false).0,
                    outcome: watch::channel(None).0,
                    finished: OnceLock::new(),
                    replay: AtomicU8::new(Replay::PENDING),
                });
                slot.insert(record.clone());
                return Claim::Reserved(Reservation {
                    table: &self.redemptions,
                    held_id: held_id.to_owned(),
                    record,
                    kept: false,
                });
            }
        };
        let settled = record.settled.subscribe();
        if *settled.borrow() {
            Claim::Redeemed(record)
        } else {
            Claim::Checking(settled)
        }
    }
}

/// A copy of the retry that took the call: with the same answers, the first one's outcome while
/// it is pending, was never handed to anyone, or is kept for `outcome_ttl`; else refused.
pub(super) fn replay(record: &Redemption, answers_digest: &str) -> Result<Redeemed, GatewayError> {
    let replayable = record.replay.load(Ordering::Acquire) != Replay::REFUSED;
    if record.answers_digest == answers_digest && replayable {
        Ok(Redeemed::Duplicate(record.outcome.subscribe()))
    } else {
        Err(GatewayError::BadState {
            reason: StateRejection::ConsumedOrUnknown,
        })
    }
}
