//! Session pool of one backend.
//!
//! Sessions are keyed by (principal, capability profile): a session never serves two principals,
//! and it is initialized declaring exactly the capabilities its callers declared, so a well-behaved
//! backend only asks for what the client can answer. A session is lent to one caller at a time
//! ([`Lease`]), which is what makes server requests attributable. The pool bounds the number of
//! sessions (`max_sessions`), keeps `min_idle` warm spares for keys in use, closes sessions idle
//! past `idle_timeout`, backs off when sessions fail to start, and answers a caller that waited
//! `queue_wait` without a session with a clear error.
//!
//! Tasks: one maintenance task per pool and the background work it and returned sessions need
//! (closing, asking a backend for roots again), all on the pool's one task tracker; they end
//! with the pool's stop token, cancelled by [`Pool::shutdown`], the gateway's shutdown or drop.
//!
//! Here: the pool's surface ([`Pool`], [`PoolKey`], [`Purpose`]) and its shared state; apart:
//! - `accounting` who may have a session now: slots (`max_sessions`), principal shares, the
//!   idle sessions per key, callers waiting for one;
//! - `starting` starting sessions, the backoff after failures, the cached `InitializeResult`;
//! - `lease` the [`Lease`] a caller holds, and what becomes of its session when it ends;
//! - `maintain` the maintenance task: warm spares, idle reaping;
//! - `profile` the capability profile a session declares.

mod accounting;
mod lease;
mod maintain;
mod profile;
mod starting;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::accounting::KeyState;
pub(crate) use self::lease::Lease;
use self::profile::profile_for;
use self::starting::{Backoff, CachedInit};
use super::changes::{Change, Feeds};
use super::listen::{ListenContext, ListenGuard, Listening};
use super::modern::detect::ResolvedEra;
use super::modern::ModernBackend;
use super::session::{DroppedNotices, PerBackend, Session};
use super::BackendSpec;

pub(crate) use crate::backend::identity::SessionIdentity;
use crate::error::PoolError;
use crate::metrics::Metrics;
use crate::sync::{LockRecovered, RwLockRecovered};

/// Which sessions a call may use, by what it can do with the roots of another flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `tools/call`, `prompts/get`, `resources/read`: a roots question waiting on the session is
    /// put to this call's client before the call is sent.
    Interruptible,
    /// Anything else: only sessions that never held a client's roots.
    Plain,
}

impl Purpose {
    fn fits(self, session: &Session) -> bool {
        session.roots_fit(self == Self::Interruptible)
    }
}

/// What a session is for: one principal, one capability profile, and what the backend is told
/// about the caller (sessions told different things are not shared).
#[derive(Debug, Clone)]
pub struct PoolKey {
    principal: String,
    profile: String,
    identity: Arc<SessionIdentity>,
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        self.principal == other.principal
            && self.profile == other.profile
            && self.identity.fingerprint() == other.identity.fingerprint()
    }
}

impl Eq for PoolKey {}

impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.principal.hash(state);
        self.profile.hash(state);
        self.identity.fingerprint().hash(state);
    }
}

impl PoolKey {
    /// The key of a caller the backend is told nothing about.
    pub fn new(principal: &str, profile: &Value) -> Self {
        Self::with_identity(principal, profile, SessionIdentity::none())
    }

    pub(crate) fn with_identity(
        principal: &str,
        profile: &Value,
        identity: Arc<SessionIdentity>,
    ) -> Self {
        Self {
            principal: principal.to_string(),
            // serde_json maps are sorted, so this string is canonical.
            profile: profile.to_string(),
            identity,
        }
    }
}

struct PoolInner {
    spec: Arc<BackendSpec>,
    metrics: Arc<Metrics>,
    /// This backend's `mrtr_pool_wait_seconds`, resolved once.
    pool_wait: prometheus::Histogram,
    slots: Arc<Semaphore>,
    keys: Mutex<HashMap<PoolKey, KeyState>>,
    returned: Notify,
    init_cache: RwLock<Option<CachedInit>>,
    /// Sessions lent per authenticated principal, against its share.
    in_use: dashmap::DashMap<String, usize>,
    backoff: Mutex<Backoff>,
    /// Polite closes and roots re-asks.
    background: TaskTracker,
    /// What its sessions share: whether the backend asks for roots right after `initialized`,
    /// the count of notifications their calls had no room for.
    per_backend: PerBackend,
    /// What the sessions hear outside calls, per principal.
    feeds: Feeds,
    /// One session per listening principal, outside the call pool's slots.
    listening: Listening,
    /// The same backend as 2026-07-28 sees it: its era, and requests relayed to it.
    modern: Arc<ModernBackend>,
    stop: CancellationToken,
}

pub struct Pool {
    inner: Arc<PoolInner>,
}

impl Drop for Pool {
    /// Maintenance and background work end with the pool.
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

/// Counts for status and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub open: usize,
    pub idle: usize,
}

impl Pool {
    /// A pool whose tasks end when `stop` (a child of the gateway's shutdown token) is
    /// cancelled, or when it is dropped.
    pub fn new(
        spec: Arc<BackendSpec>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Result<Self, crate::error::BackendError> {
        let max = spec.config.pool.max_sessions;
        // Profiles warmed from the start, for unauthenticated callers: their first call does
        // not wait for a backend to start.
        let mut keys = HashMap::new();
        for client_capabilities in &spec.config.pool.warm_profiles {
            let profile = profile_for(&spec, client_capabilities);
            keys.insert(
                PoolKey::new(crate::config::ANONYMOUS, &profile),
                KeyState {
                    idle: Vec::new(),
                    profile,
                    last_used: Instant::now(),
                    pinned: true,
                },
            );
        }
        let pool_wait = metrics.pool_wait.with_label_values(&[spec.name.as_str()]);
        let per_backend = PerBackend {
            init_roots: Arc::default(),
            dropped: DroppedNotices::new(&metrics, &spec.name),
        };
        let background = TaskTracker::new();
        let modern = Arc::new(ModernBackend::new(
            spec.clone(),
            background.clone(),
            stop.clone(),
        )?);
        let inner = Arc::new(PoolInner {
            spec,
            metrics,
            pool_wait,
            slots: Arc::new(Semaphore::new(max)),
            keys: Mutex::new(keys),
            returned: Notify::new(),
            init_cache: RwLock::new(None),
            in_use: dashmap::DashMap::new(),
            backoff: Mutex::new(Backoff {
                failures: 0,
                until: None,
            }),
            background,
            per_backend,
            feeds: Feeds::default(),
            listening: Listening::default(),
            modern,
            stop,
        });
        inner.background.spawn(maintain::maintain(inner.clone()));
        Ok(Self { inner })
    }

    /// The revision the backend speaks, as `/status` and the metrics show it: `unknown` before
    /// its first probe.
    pub fn era_label(&self) -> &'static str {
        self.inner
            .modern
            .known_era()
            .map_or("unknown", ResolvedEra::label)
    }

    /// The backend as a 2026-07-28 client reaches it: its era, and the relay's link.
    pub(crate) fn modern(&self) -> &Arc<ModernBackend> {
        &self.inner.modern
    }

    /// The list changes and resource updates this principal's sessions hear from now on.
    pub fn changes(&self, principal: &str) -> tokio::sync::broadcast::Receiver<Change> {
        self.inner.feeds.of(principal).subscribe()
    }

    /// Keeps `principal`'s listening session open, subscribed to `uris`, while the guard lives.
    pub(crate) fn listen(
        &self,
        principal: &str,
        identity: Arc<SessionIdentity>,
        uris: &[String],
    ) -> ListenGuard {
        let inner = &self.inner;
        // One listening session per principal and identity: a caller told otherwise (its claims
        // changed) is not heard through the session told who it was before.
        let listener = format!("{principal}\u{0}{}", identity.fingerprint());
        inner.listening.listen(&listener, uris, || ListenContext {
            identity,
            spec: inner.spec.clone(),
            per_backend: inner.per_backend.clone(),
            feed: inner.feeds.of(principal),
            stop: inner.stop.clone(),
            tasks: inner.background.clone(),
        })
    }

    /// Tool list changes the backend announced so far, on any session.
    pub fn tools_generation(&self) -> u64 {
        self.inner.feeds.tools_generation()
    }

    /// Principals with a listening session.
    pub fn listening(&self) -> usize {
        self.inner.listening.count()
    }

    /// How long a session of this backend may take to initialize.
    pub fn init_timeout(&self) -> Duration {
        self.inner.spec.config.init_timeout
    }

    /// How long a call of this backend may take to answer.
    pub fn request_timeout(&self) -> Duration {
        self.inner.spec.config.request_timeout
    }

    /// What a dedicated session of this backend is started from (2025-11-25 clients get one
    /// each, outside the pool).
    pub fn spec(&self) -> &Arc<BackendSpec> {
        &self.inner.spec
    }

    pub fn backend_name(&self) -> &str {
        &self.inner.spec.name
    }

    /// The most recent `InitializeResult` of this backend, if any session started yet.
    pub fn cached_init(&self) -> Option<Arc<Value>> {
        let cache = self.inner.init_cache.read_recovered();
        cache.as_ref().map(|cached| cached.init.clone())
    }

    /// The most recent `InitializeResult`, if its session started after the backend's last
    /// list change: one from before may describe what changed since.
    pub fn current_init(&self) -> Option<Arc<Value>> {
        let last_change = self.inner.feeds.last_list_change();
        let cache = self.inner.init_cache.read_recovered();
        cache
            .as_ref()
            .filter(|cached| last_change.is_none_or(|at| cached.session_created > at))
            .map(|cached| cached.init.clone())
    }

    /// Lends a session started after the backend's last list change (any session when none
    /// changed), starting one if needed; waits at most `queue_wait`.
    pub async fn acquire_current(
        &self,
        key: &PoolKey,
        profile: &Value,
    ) -> Result<Lease, PoolError> {
        let since = self.inner.feeds.last_list_change();
        self.acquire_timed(key, profile, Purpose::Plain, since)
            .await
    }

    /// A session of this backend initialized at least once and starting sessions works now.
    pub fn ready(&self) -> bool {
        match self.inner.modern.known_era() {
            // Ready once probed: a modern backend has no sessions to start.
            Some(ResolvedEra::Modern) => return true,
            Some(ResolvedEra::Legacy) => {}
            None => return self.inner.spec.config.tells_identity(),
        }
        let backing_off = self
            .inner
            .backoff
            .lock_recovered()
            .until
            .is_some_and(|u| u > Instant::now());
        // A backend told who calls is never started for nobody: it is ready until a session
        // of a caller's fails to start.
        (self.cached_init().is_some() || self.inner.spec.config.tells_identity()) && !backing_off
    }

    /// The capabilities this backend's sessions declare for a request that declared
    /// `client_capabilities`: its capability profile, with `roots` always declared when the
    /// gateway answers roots itself (`unsolicited = "static"`).
    pub fn profile_for(&self, client_capabilities: &Value) -> Value {
        profile_for(&self.inner.spec, client_capabilities)
    }

    /// Starts one session for an unauthenticated caller with no capabilities, so readiness
    /// reflects whether the backend can be reached; the session then waits as a spare.
    pub async fn probe(&self) -> Result<(), PoolError> {
        if self.inner.spec.config.tells_identity() {
            // An anonymous `initialize` would reach it without the identity or credential
            // every session of it carries.
            return Ok(());
        }
        let nobody = SessionIdentity::none();
        let era = self.inner.modern.era(&nobody).await;
        if era.map_err(PoolError::Start)? == ResolvedEra::Modern {
            return Ok(());
        }
        let profile = self.profile_for(&serde_json::json!({}));
        let lease = self
            .acquire(
                &PoolKey::new(crate::config::ANONYMOUS, &profile),
                &profile,
                Purpose::Plain,
            )
            .await?;
        drop(lease);
        Ok(())
    }

    pub fn stats(&self) -> PoolStats {
        let max = self.inner.spec.config.pool.max_sessions;
        let idle = self.inner.keys().values().map(|k| k.idle.len()).sum();
        PoolStats {
            open: max - self.inner.slots.available_permits(),
            idle,
        }
    }

    /// Lends a session of `key` fit for `purpose` exclusively, starting one if needed; waits at
    /// most `queue_wait`.
    pub async fn acquire(
        &self,
        key: &PoolKey,
        profile: &Value,
        purpose: Purpose,
    ) -> Result<Lease, PoolError> {
        self.acquire_timed(key, profile, purpose, None).await
    }

    /// [`Pool::acquire`] of a session started after `since`, when given.
    async fn acquire_timed(
        &self,
        key: &PoolKey,
        profile: &Value,
        purpose: Purpose,
        since: Option<Instant>,
    ) -> Result<Lease, PoolError> {
        let started = Instant::now();
        let lease = self.acquire_inner(key, profile, purpose, since).await;
        self.inner
            .pool_wait
            .observe(started.elapsed().as_secs_f64());
        lease
    }

    /// Stops maintenance and closes idle sessions politely.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        self.inner.modern.shutdown().await;
        let idle: Vec<Session> = self
            .inner
            .keys()
            .values_mut()
            .flat_map(|k| k.idle.drain(..))
            .collect();
        for session in idle {
            self.inner.background.spawn(session.close());
        }
        self.inner.background.close();
        self.inner.background.wait().await;
    }
}
