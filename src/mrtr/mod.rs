//! The MRTR bridge: a backend call that asks its client something (2025-11-25 server requests)
//! becomes a 2026-07-28 `input_required` round; the call is held meanwhile in a table indexed by
//! a random id sealed into `requestState`; the client's retry redeems it, once.
//!
//! - [`call`] drives one backend call across rounds, on a [`clock`] finer than tokio's;
//! - [`held`] is the table the calls wait in;
//! - [`inputs`] gates, names and cleans surfaced requests and validates answers;
//! - [`state`] seals and opens `requestState`.
//!
//! Redemption order (design invariant 3): open and verify the state (integrity, expiry, owner,
//! route, principal, method, params digest, round), validate every answer, and only then take the
//! held call out of the table. A rejected retry sends the backend nothing and leaves the call
//! held; when its answers were refused, only for `refused_retry_grace`, since clients rarely
//! correct an answer after an error. A re-sent retry with the same answers attaches to the
//! outcome of the first one (invariant 4), so the backend sees each answer exactly once.
//!
//! Tasks: a first call runs in its request's own task up to its first notification or outcome
//! ([`Bridge::start`]); a call that streams notifications, and a resumed one, run in a task
//! tracked by the bridge, ending with their outcome (or, for a first call, when the client goes
//! away); one sweeper task ends abandoned rounds. [`Bridge::shutdown`] stops the sweeper and
//! waits for both kinds of call.

pub mod call;
pub mod clock;
pub mod held;
pub mod inputs;
pub mod quota;
pub mod setup;
pub mod state;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::call::{CallDriver, Ending, RequestScope, Step};
use self::held::{Admission, HeldTable};
use self::inputs::{check_answer, PendingInput};
use self::quota::Quota;
use self::state::{now_ms, principal_digest, random_id, KeyRing, StatePayload};
use crate::config::MrtrConfig;
use crate::error::{GatewayError, StateRejection};
use crate::jsonrpc::JsonRpcError;
use crate::metrics::Metrics;
use crate::sync::LockRecovered;

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

/// How a call ended for the front request that waits on it.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The backend's final result as it wrote it, not yet stamped.
    Final(Box<serde_json::value::RawValue>),
    Error(GatewayError),
    /// An `InputRequiredResult` (without `_meta`).
    InputRequired(Value),
}

/// What a front request receives from the call it waits on.
#[derive(Debug)]
pub enum Event {
    Notify(Value),
    Outcome(Outcome),
}

/// How the first step of a call answers the request that started it.
pub enum Started {
    /// The call reached its outcome before any notification.
    Outcome(Outcome),
    /// A notification came first; a task drives the call and the rest follows on the receiver.
    Streaming(Value, mpsc::Receiver<Event>),
}

/// What ties a call to the request that may resume it.
#[derive(Debug, Clone)]
pub struct CallBinding {
    pub route: String,
    pub principal: String,
    pub method: String,
    pub params_digest: String,
    /// Params that error rewriting may need (e.g. the `uri` of a missing resource).
    pub error_context: Value,
}

struct HeldCall {
    kind: Held,
    binding: CallBinding,
    round: u32,
    parked: Instant,
    expires: Instant,
}

enum Held {
    /// A backend call still running, waiting for answers.
    Live(Box<CallDriver>),
    /// A call the backend ended with -32042: re-issued once the client has visited the URLs.
    Reissue {
        inputs: Vec<PendingInput>,
        error: JsonRpcError,
    },
}

impl Held {
    fn alive(&self) -> bool {
        match self {
            Self::Live(driver) => driver.session_alive(),
            Self::Reissue { .. } => true,
        }
    }

    fn abandon(&mut self, reason: &str) {
        if let Self::Live(driver) = self {
            driver.abandon(reason);
        }
    }
}

struct Redemption {
    answers_digest: String,
    /// Digest of the principal the record is counted against once its outcome is kept.
    principal: String,
    created: Instant,
    outcome: watch::Sender<Option<Outcome>>,
    /// When the outcome was published.
    finished: OnceLock<Instant>,
    /// What a later copy of the retry gets (`Replay`).
    replay: AtomicU8,
}

/// The replay states of a [`Redemption`].
struct Replay;

impl Replay {
    /// Running, or finished without reaching anyone: a later copy waits for or gets the outcome.
    const PENDING: u8 = 0;
    /// Reached a client and kept for `outcome_ttl` (counted in `kept_outcomes`): a later copy
    /// gets it again.
    const KEPT: u8 = 1;
    /// Reached a client and not kept: a later copy is refused.
    const REFUSED: u8 = 2;
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

/// Why the `requestState` keys were not reloaded (the current ones stay).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Keys(#[from] state::KeyError),
    #[error("no keys configured; keeping the current key ring")]
    NoKeys,
}

pub struct Bridge {
    config: MrtrConfig,
    /// Read on every seal and open, replaced on reload: no lock on the hot path.
    keys: ArcSwap<KeyRing>,
    /// Modification time of `keys_file` when last read.
    keys_file_seen: std::sync::Mutex<Option<std::time::SystemTime>>,
    instance: String,
    /// With `[fleet]`: where other replicas reach this one, sealed into every state.
    owner_address: Option<String>,
    held: HeldTable<HeldCall>,
    redemptions: DashMap<String, Arc<Redemption>>,
    /// Kept outcomes, bounded like held calls (`max_held`, `max_held_per_principal`).
    kept_outcomes: Quota,
    /// Call tasks (counted as running calls).
    tasks: TaskTracker,
    /// The sweeper.
    upkeep: TaskTracker,
    /// A child of the gateway's shutdown token.
    stop: CancellationToken,
    metrics: Arc<Metrics>,
    /// Numbers the progress tokens the gateway gives backends.
    progress_tokens: AtomicU64,
}

const EVENT_BUFFER: usize = 64;

impl Bridge {
    pub fn new(
        config: MrtrConfig,
        keys: KeyRing,
        instance: String,
        owner_address: Option<String>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let keys_file_seen = config
            .keys_file
            .as_ref()
            .and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        let held = HeldTable::new(config.max_held, config.max_held_per_principal);
        let kept_outcomes = Quota::new(config.max_held, config.max_held_per_principal);
        let bridge = Arc::new(Self {
            config,
            keys: ArcSwap::from_pointee(keys),
            keys_file_seen: std::sync::Mutex::new(keys_file_seen),
            instance,
            owner_address,
            held,
            redemptions: DashMap::new(),
            kept_outcomes,
            tasks: TaskTracker::new(),
            upkeep: TaskTracker::new(),
            stop,
            metrics,
            progress_tokens: AtomicU64::new(1),
        });
        bridge.upkeep.spawn(sweep(
            Arc::downgrade(&bridge),
            bridge.stop.clone(),
            bridge.sweep_interval(),
        ));
        bridge.upkeep.close();
        bridge
    }

    fn sweep_interval(&self) -> Duration {
        (self.config.held_ttl / 8).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// Seals a legacy session id with the state keys (rotated with them).
    pub fn seal_session_id(&self, plaintext: &[u8]) -> String {
        self.key_ring()
            .seal_bytes(state::SESSION_ID_VERSION, plaintext)
    }

    /// Opens a legacy session id sealed by any replica of the fleet.
    pub fn open_session_id(&self, token: &str) -> Option<Vec<u8>> {
        self.key_ring()
            .open_bytes(state::SESSION_ID_VERSION, token)
            .ok()
    }

    /// This process's instance id, sealed into what it issues.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// With `[fleet]`: where the other replicas reach this one.
    pub fn owner_address(&self) -> Option<&str> {
        self.owner_address.as_deref()
    }

    fn key_ring(&self) -> Arc<KeyRing> {
        self.keys.load_full()
    }

    /// Reads the configured keys again (SIGHUP, or `keys_file` changed): the new first key seals
    /// from now on; states sealed with a key still listed keep opening. A bad key set is
    /// refused and the current one kept.
    pub fn reload_keys(&self) -> Result<(), ReloadError> {
        let keys = self.config.key_list()?;
        if keys.is_empty() {
            return Err(ReloadError::NoKeys);
        }
        let ring = KeyRing::from_base64(&keys)?;
        self.keys.store(Arc::new(ring));
        tracing::info!(keys = keys.len(), "requestState keys reloaded");
        Ok(())
    }

    /// Reloads the keys when `keys_file` changed since it was last read.
    fn reload_keys_if_changed(&self) {
        let Some(path) = &self.config.keys_file else {
            return;
        };
        let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified()) else {
            return;
        };
        let mut seen = self.keys_file_seen.lock_recovered();
        match *seen {
            None => *seen = Some(modified),
            Some(previous) if previous != modified => {
                *seen = Some(modified);
                drop(seen);
                if let Err(e) = self.reload_keys() {
                    tracing::warn!(error = %e, "requestState keys not reloaded");
                }
            }
            Some(_) => {}
        }
    }

    /// Calls held right now, waiting for a retry.
    pub fn held_count(&self) -> usize {
        self.held.count()
    }

    /// Calls running right now (not held).
    pub fn running_count(&self) -> usize {
        self.tasks.len()
    }

    /// Runs `driver` to its next outcome in a task. With `cancel_on_disconnect`, the call is
    /// cancelled when the receiver is dropped (a first call whose client went away); a redeemed
    /// retry runs on, so a re-sent retry can still collect the outcome.
    pub fn drive(
        self: &Arc<Self>,
        driver: CallDriver,
        binding: CallBinding,
        cancel_on_disconnect: bool,
    ) -> mpsc::Receiver<Event> {
        self.drive_recorded(driver, binding, cancel_on_disconnect, None)
    }

    fn drive_recorded(
        self: &Arc<Self>,
        driver: CallDriver,
        binding: CallBinding,
        cancel_on_disconnect: bool,
        record: Option<Arc<Redemption>>,
    ) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let bridge = self.clone();
        // The call's logs and the round it reaches belong to the request that drives it.
        let request_span = tracing::Span::current();
        self.tasks.spawn(tracing::Instrument::instrument(
            async move {
                let resumed = record.is_some();
                let outcome = tokio::select! {
                    outcome = bridge.run(driver, binding, resumed, &tx) => outcome,
                    _ = tx.closed(), if cancel_on_disconnect => return,
                };
                if let Some(record) = &record {
                    record.outcome.send_replace(Some(outcome.clone()));
                    let _ = record.finished.set(Instant::now());
                }
                let delivered = tx.send(Event::Outcome(outcome)).await.is_ok();
                if let Some(record) = record.filter(|_| delivered) {
                    let replay = match bridge.kept_outcomes.take(&record.principal) {
                        Ok(()) => Replay::KEPT,
                        Err(_) => Replay::REFUSED,
                    };
                    record.replay.store(replay, Ordering::Release);
                }
            },
            request_span,
        ));
        rx
    }

    /// Runs a first call in the calling task up to its first notification or its outcome, so a
    /// call that simply answers costs no task of its own. When a notification comes first, a
    /// task drives the rest (as [`Bridge::drive`], cancelled when the receiver is dropped).
    /// Dropping this future (the client went away) drops the driver, which cancels the call.
    pub async fn start(self: &Arc<Self>, mut driver: CallDriver, binding: CallBinding) -> Started {
        // Counted with the call tasks: status and shutdown see it running.
        let _running = self.tasks.token();
        match driver.next_step().await {
            Step::Notify(message) => Started::Streaming(message, self.drive(driver, binding, true)),
            Step::End(ending) => Started::Outcome(self.conclude(ending, driver, binding)),
        }
    }

    async fn run(
        self: &Arc<Self>,
        mut driver: CallDriver,
        binding: CallBinding,
        resumed: bool,
        tx: &mpsc::Sender<Event>,
    ) -> Outcome {
        if resumed {
            // The retry's logLevel applies to the rest of the call.
            if let Err(error) = driver.apply_log_level().await {
                return Outcome::Error(error);
            }
        }
        loop {
            match driver.next_step().await {
                Step::Notify(message) => {
                    // A client that left misses notifications, not the outcome.
                    if !tx.is_closed() {
                        let _ = tx.send(Event::Notify(message)).await;
                    }
                }
                Step::End(ending) => return self.conclude(ending, driver, binding),
            }
        }
    }

    /// The outcome a step that ends the current front request gives it.
    fn conclude(&self, ending: Ending, driver: CallDriver, binding: CallBinding) -> Outcome {
        match ending {
            Ending::Final(Ok(result)) => Outcome::Final(result),
            Ending::Final(Err(error)) => Outcome::Error(GatewayError::from_backend(
                error,
                &binding.method,
                &binding.error_context,
            )),
            Ending::Failed(error) => Outcome::Error(error),
            Ending::InputRequired => self.park(driver, binding),
            Ending::UrlRequired { inputs, error } => {
                let round = driver.round + 1;
                // The backend call is over: its session goes back to the pool now.
                drop(driver);
                match self.held.admit(principal_digest(&binding.principal)) {
                    Ok(place) => self.hold(place, Held::Reissue { inputs, error }, binding, round),
                    Err(error) => Outcome::Error(error.into()),
                }
            }
        }
    }

    /// Holds a live call for its next round.
    fn park(&self, mut driver: CallDriver, binding: CallBinding) -> Outcome {
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
    fn hold(
        &self,
        place: Admission<'_, HeldCall>,
        held: Held,
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

    /// Forgets redemption records: a finished one `outcome_ttl` after its outcome, one still
    /// running after `round_wait + held_ttl`.
    fn prune_redemptions(&self) {
        let running_for = self.config.round_wait + self.config.held_ttl;
        let outcome_ttl = self.config.outcome_ttl;
        self.redemptions.retain(|_, record| {
            let keep = match record.finished.get() {
                Some(finished) => finished.elapsed() < outcome_ttl,
                None => record.created.elapsed() < running_for,
            };
            if !keep && record.replay.swap(Replay::REFUSED, Ordering::AcqRel) == Replay::KEPT {
                self.kept_outcomes.give_back(&record.principal);
            }
            keep
        });
        held::shrink_if_sparse(&self.redemptions);
    }

    /// Ends every held call (their backends see cancellation) and waits for call tasks.
    pub async fn shutdown(&self, grace: Duration) {
        self.stop.cancel();
        for id in self.held.ids_where(|_| true) {
            if let Some(mut held) = self.held.take(&id) {
                held.kind.abandon("gateway shutting down");
            }
        }
        self.upkeep.wait().await;
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
    }
}

/// Ends rounds nobody came back for, and calls whose backend session died meanwhile.
async fn sweep(bridge: std::sync::Weak<Bridge>, stop: CancellationToken, every: Duration) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some(bridge) = bridge.upgrade() else {
            return;
        };
        bridge.reload_keys_if_changed();
        let now = Instant::now();
        let ended = bridge
            .held
            .ids_where(|held| held.expires <= now || !held.kind.alive());
        for id in ended {
            if let Some(mut held) = bridge.held.take(&id) {
                tracing::debug!(method = %held.binding.method, "held call abandoned");
                held.kind.abandon("the round expired");
            }
        }
        bridge.prune_redemptions();
        bridge.held.shrink_if_sparse();
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
