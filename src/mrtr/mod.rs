//! The MRTR bridge: a backend call that asks its client something (2025-11-25 server requests)
//! becomes a 2026-07-28 `input_required` round; the call is held meanwhile in a table indexed by
//! a random id sealed into `requestState`; the client's retry redeems it, once.
//!
//! A round's life, one module each:
//! - [`setup`] takes a forwarded request to its first answer: a first call leases a session and
//!   starts the backend call, a retry is redeemed;
//! - [`run`] drives a call to its first notification or outcome;
//! - [`park`] holds a call that asks for input in the [`held`] table and seals its state;
//! - [`redeem`] opens a retry's state, checks it and the answers, and resumes the held call
//!   once (the redemption order and its invariants are stated there);
//! - [`sweep`] ends rounds nobody came back for, and every held call at shutdown.
//!
//! Beneath them, [`call`] drives one backend call across rounds, on a [`clock`] finer than
//! tokio's; [`inputs`] gates, names and cleans surfaced requests and validates answers;
//! [`state`] seals and opens `requestState`; [`quota`] counts places per principal.
//!
//! Tasks: a first call runs in its request's own task up to its first notification or outcome
//! ([`Bridge::start`]); a call that streams notifications, and a resumed one, run in a task
//! tracked by the bridge, ending with their outcome (or, for a first call, when the client goes
//! away); one sweeper task ends abandoned rounds. [`Bridge::shutdown`] stops the sweeper and
//! waits for both kinds of call.

mod call;
mod clock;
pub(crate) mod held;
pub(crate) mod inputs;
mod park;
pub(crate) mod quota;
mod redeem;
mod relay;
mod run;
mod setup;
pub(crate) mod state;
mod sweep;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dashmap::DashMap;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use self::call::RequestScope;
use self::call::{BackendCall, LeasedCall};
use self::clock::{Clock, FineClock};
use self::held::HeldTable;
use self::park::HeldCall;
use self::quota::Quota;
use self::redeem::Redemption;
pub(crate) use self::redeem::{Location, Redeemed};
pub(crate) use self::setup::{backend_scope, Caller, Continuation, ForwardedCall};
use self::state::KeyRing;
use crate::config::MrtrConfig;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::sync::LockRecovered;

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

/// The bridge. Generic over the backend call it holds and the clock its calls wait on only so
/// that the unit tests can run it against a scripted backend on tokio's clock; the gateway
/// uses the defaults.
pub struct Bridge<C: BackendCall = LeasedCall, K: Clock = FineClock> {
    config: MrtrConfig,
    /// Read on every seal and open, replaced on reload: no lock on the hot path.
    keys: ArcSwap<KeyRing>,
    /// Modification time of `keys_file` when last read.
    keys_file_seen: std::sync::Mutex<Option<std::time::SystemTime>>,
    instance: String,
    /// With `[fleet]`: where other replicas reach this one, sealed into every state.
    owner_address: Option<String>,
    held: HeldTable<HeldCall<C, K>>,
    /// Per held id, the record of the retry that redeems (or is redeeming) the call.
    redemptions: DashMap<String, Arc<Redemption>>,
    /// Kept outcomes, bounded like held calls (`max_held`, `max_held_per_principal`).
    kept_outcomes: Quota,
    /// Call tasks, and calls being set up (a token each): the running calls.
    tasks: TaskTracker,
    /// The sweeper.
    upkeep: TaskTracker,
    /// A child of the gateway's shutdown token.
    stop: CancellationToken,
    metrics: Arc<Metrics>,
    /// Numbers the progress tokens the gateway gives backends.
    progress_tokens: AtomicU64,
}

impl Bridge {
    pub fn new(
        config: MrtrConfig,
        keys: KeyRing,
        instance: String,
        owner_address: Option<String>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        Self::assemble(config, keys, instance, owner_address, metrics, stop)
    }
}

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// A bridge on any backend call and clock, its sweeper started.
    fn assemble(
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
        bridge.upkeep.spawn(sweep::sweep(
            Arc::downgrade(&bridge),
            bridge.stop.clone(),
            bridge.sweep_interval(),
        ));
        bridge.upkeep.close();
        bridge
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

    /// Rounds one call may go through (`mrtr.max_rounds`).
    pub fn max_rounds(&self) -> u32 {
        self.config.max_rounds
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

    /// Calls running right now (not held): in a call task, or still being set up (waiting for
    /// a session, or for their first answer).
    pub fn running_count(&self) -> usize {
        self.tasks.len()
    }
}
