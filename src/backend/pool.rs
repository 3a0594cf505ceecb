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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::changes::{Change, Feeds};
use super::listen::{ListenContext, ListenGuard, Listening};
use super::session::{InitRoots, Session};
use super::{BackendError, BackendSpec};
use crate::config::UnsolicitedPolicy;

pub use crate::error::PoolError;
use crate::metrics::Metrics;
use crate::sync::{LockRecovered, RwLockRecovered};

const MAX_BACKOFF: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// After `notifications/roots/list_changed`, how long a backend has to ask for roots again
/// before its session is closed instead of lent to another flow.
const ROOTS_REASK_WAIT: Duration = Duration::from_secs(1);

/// The capabilities a backend session declares at `initialize`, derived from what a 2026-07-28
/// request declared: only the brokerable ones, in a canonical form (`elicitation: {}` means form).
pub fn capability_profile(client_capabilities: &Value) -> Value {
    let mut out = Map::new();
    if let Some(elicitation) = client_capabilities
        .get("elicitation")
        .and_then(Value::as_object)
    {
        let mut modes = Map::new();
        let form = elicitation.contains_key("form") || !elicitation.contains_key("url");
        if form {
            modes.insert("form".into(), json!({}));
        }
        if elicitation.contains_key("url") {
            modes.insert("url".into(), json!({}));
        }
        out.insert("elicitation".into(), Value::Object(modes));
    }
    if let Some(sampling) = client_capabilities
        .get("sampling")
        .and_then(Value::as_object)
    {
        let mut sub = Map::new();
        for key in ["tools", "context"] {
            if sampling.contains_key(key) {
                sub.insert(key.into(), json!({}));
            }
        }
        out.insert("sampling".into(), Value::Object(sub));
    }
    if client_capabilities
        .get("roots")
        .is_some_and(Value::is_object)
    {
        // listChanged is the gateway's own (sessions say it when they may be asked again), so it
        // is no part of the profile.
        out.insert("roots".into(), json!({}));
    }
    Value::Object(out)
}

/// Which sessions a call may use, by what it can do with the roots of another flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `tools/call`, `prompts/get`, `resources/read`: a roots question waiting on the session is
    /// put to this call's client before the call is sent.
    Interruptible,
    /// Anything else: only sessions that never held a client's roots.
    Plain,
}

/// `session` started after `since`, if given.
fn started_since(session: &Session, since: Option<Instant>) -> bool {
    since.is_none_or(|at| session.created > at)
}

impl Purpose {
    fn fits(self, session: &Session) -> bool {
        session.roots_fit(self == Self::Interruptible)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    principal: String,
    profile: String,
}

impl PoolKey {
    pub fn new(principal: &str, profile: &Value) -> Self {
        Self {
            principal: principal.to_string(),
            // serde_json maps are sorted, so this string is canonical.
            profile: profile.to_string(),
        }
    }
}

struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

struct KeyState {
    idle: Vec<Session>,
    profile: Value,
    last_used: Instant,
    /// Configured in `warm_profiles`: always kept warm, never forgotten.
    pinned: bool,
}

/// One of the sessions a principal may use at once (`pool.max_sessions_per_principal`), held
/// by its lease and given back when dropped.
struct SharePlace {
    pool: Arc<PoolInner>,
    principal: String,
}

impl Drop for SharePlace {
    fn drop(&mut self) {
        if let dashmap::Entry::Occupied(mut used) = self.pool.in_use.entry(self.principal.clone()) {
            *used.get_mut() = used.get().saturating_sub(1);
            if *used.get() == 0 {
                used.remove();
            }
        }
    }
}

/// The `InitializeResult` of the most recently started session.
struct CachedInit {
    session_created: Instant,
    init: Arc<Value>,
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
    /// Whether this backend asks for roots right after `initialized`.
    init_roots: Arc<InitRoots>,
    /// What the sessions hear outside calls, per principal.
    feeds: Feeds,
    /// One session per listening principal, outside the call pool's slots.
    listening: Listening,
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
    pub fn new(spec: Arc<BackendSpec>, metrics: Arc<Metrics>, stop: CancellationToken) -> Self {
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
            background: TaskTracker::new(),
            init_roots: Arc::default(),
            feeds: Feeds::default(),
            listening: Listening::default(),
            stop,
        });
        inner.background.spawn(maintain(inner.clone()));
        Self { inner }
    }

    /// The list changes and resource updates this principal's sessions hear from now on.
    pub fn changes(&self, principal: &str) -> tokio::sync::broadcast::Receiver<Change> {
        self.inner.feeds.of(principal).subscribe()
    }

    /// Keeps `principal`'s listening session open, subscribed to `uris`, while the guard lives.
    pub fn listen(&self, principal: &str, uris: &[String]) -> ListenGuard {
        let inner = &self.inner;
        inner.listening.listen(principal, uris, || ListenContext {
            spec: inner.spec.clone(),
            init_roots: inner.init_roots.clone(),
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

    /// The largest message this backend takes (`max_message_bytes`, or the transport's default).
    pub fn message_limit(&self) -> Option<usize> {
        self.inner.spec.config.message_limit()
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
        let backing_off = self
            .inner
            .backoff
            .lock_recovered()
            .until
            .is_some_and(|u| u > Instant::now());
        self.cached_init().is_some() && !backing_off
    }

    /// The capabilities this backend's sessions declare for a request that declared
    /// `client_capabilities`: its [`capability_profile`], with `roots` always declared when the
    /// gateway answers roots itself (`unsolicited = "static"`).
    pub fn profile_for(&self, client_capabilities: &Value) -> Value {
        profile_for(&self.inner.spec, client_capabilities)
    }

    /// Starts one session for an unauthenticated caller with no capabilities, so readiness
    /// reflects whether the backend can be reached; the session then waits as a spare.
    pub async fn probe(&self) -> Result<(), PoolError> {
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

    async fn acquire_inner(
        &self,
        key: &PoolKey,
        profile: &Value,
        purpose: Purpose,
        since: Option<Instant>,
    ) -> Result<Lease, PoolError> {
        let inner = &self.inner;
        // Past its share a principal is refused at once: it waits for nobody's session.
        let share = inner.take_share(&key.principal)?;
        let deadline = Instant::now() + inner.spec.config.pool.queue_wait;
        loop {
            let returned = inner.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();

            if let Some(session) = inner.take_idle(key, profile, purpose, since) {
                return Ok(self.lease(key, session, share));
            }
            let permit = match inner.slots.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    if inner.evict_unfit_idle(key, purpose, since) {
                        continue;
                    }
                    tokio::select! {
                        _ = &mut returned => continue,
                        permit = inner.slots.clone().acquire_owned() => match permit {
                            Ok(permit) => permit,
                            Err(_) => return Err(PoolError::Closed),
                        },
                        _ = tokio::time::sleep_until(deadline.into()) => {
                            return Err(PoolError::QueueTimeout {
                                backend: inner.spec.name.clone(),
                                wait: inner.spec.config.pool.queue_wait,
                            });
                        }
                    }
                }
            };
            let session = inner.start_session(key, profile, permit, deadline).await?;
            return Ok(self.lease(key, session, share));
        }
    }

    fn lease(&self, key: &PoolKey, session: Session, share: Option<SharePlace>) -> Lease {
        Lease {
            session: Some(session),
            pool: self.inner.clone(),
            key: key.clone(),
            _share: share,
        }
    }

    /// Stops maintenance and closes idle sessions politely.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
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

fn profile_for(spec: &BackendSpec, client_capabilities: &Value) -> Value {
    let mut profile = capability_profile(client_capabilities);
    if spec.config.unsolicited == UnsolicitedPolicy::Static {
        if let Value::Object(map) = &mut profile {
            map.insert("roots".into(), json!({}));
        }
    }
    profile
}

impl PoolInner {
    /// A place in `principal`'s share of the sessions; none is needed without authentication
    /// (every caller is the same principal then).
    fn take_share(self: &Arc<Self>, principal: &str) -> Result<Option<SharePlace>, PoolError> {
        if principal == crate::config::ANONYMOUS {
            return Ok(None);
        }
        let share = self.spec.config.pool.principal_share();
        let mut used = self.in_use.entry(principal.to_string()).or_insert(0);
        if *used >= share {
            return Err(PoolError::PrincipalShare {
                backend: self.spec.name.clone(),
                share,
            });
        }
        *used += 1;
        drop(used);
        Ok(Some(SharePlace {
            pool: self.clone(),
            principal: principal.to_string(),
        }))
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, KeyState>> {
        self.keys.lock_recovered()
    }

    fn take_idle(
        &self,
        key: &PoolKey,
        profile: &Value,
        purpose: Purpose,
        since: Option<Instant>,
    ) -> Option<Session> {
        let mut keys = self.keys();
        let state = keys.entry(key.clone()).or_insert_with(|| KeyState {
            idle: Vec::new(),
            profile: profile.clone(),
            last_used: Instant::now(),
            pinned: false,
        });
        state.last_used = Instant::now();
        // Dead sessions are dropped here; their slots return to the semaphore.
        state.idle.retain(Session::is_alive);
        // The most recently returned lendable session, one that held a client's roots first
        // (`Session::lendable`).
        let can_ask = purpose == Purpose::Interruptible;
        let (pos, _) = state
            .idle
            .iter()
            .enumerate()
            .filter(|(_, s)| started_since(s, since))
            .filter_map(|(pos, s)| s.lendable(can_ask).map(|held_roots| (pos, held_roots)))
            .max_by_key(|&(pos, held_roots)| (held_roots, pos))?;
        Some(state.idle.swap_remove(pos))
    }

    /// Frees a slot held by an idle session this caller cannot use: one of another key (least
    /// recently used key first), or one of its own whose roots do not fit `purpose` or that
    /// started before `since`. True if one was closed.
    fn evict_unfit_idle(&self, key: &PoolKey, purpose: Purpose, since: Option<Instant>) -> bool {
        let victim = {
            let mut keys = self.keys();
            let own = keys.get_mut(key).and_then(|state| {
                let pos = state
                    .idle
                    .iter()
                    .position(|s| !purpose.fits(s) || !started_since(s, since))?;
                Some(state.idle.swap_remove(pos))
            });
            own.or_else(|| {
                keys.iter_mut()
                    .filter(|(k, s)| *k != key && !s.idle.is_empty())
                    .min_by_key(|(_, s)| s.last_used)
                    .and_then(|(_, s)| s.idle.pop())
            })
        };
        match victim {
            Some(session) => {
                self.close(session);
                true
            }
            None => false,
        }
    }

    async fn start_session(
        &self,
        key: &PoolKey,
        profile: &Value,
        permit: OwnedSemaphorePermit,
        deadline: Instant,
    ) -> Result<Session, PoolError> {
        let wait_until = self.backoff.lock_recovered().until;
        if let Some(until) = wait_until.filter(|u| *u > Instant::now()) {
            if until > deadline {
                return Err(PoolError::BackingOff(self.spec.name.clone()));
            }
            tokio::time::sleep_until(until.into()).await;
        }
        let feed = Some(self.feeds.of(&key.principal));
        match Session::connect(
            &self.spec,
            profile.clone(),
            Some(permit),
            &self.init_roots,
            feed,
        )
        .await
        {
            Ok(session) => {
                self.started(&session);
                Ok(session)
            }
            Err(e) => {
                self.record_failure(&e);
                Err(PoolError::Start(e))
            }
        }
    }

    /// A session started: the backoff resets and its `InitializeResult` becomes the one
    /// `server/discover` and result stamping use.
    fn started(&self, session: &Session) {
        self.record_start(true);
        let mut backoff = self.backoff.lock_recovered();
        backoff.failures = 0;
        backoff.until = None;
        drop(backoff);
        let mut cache = self.init_cache.write_recovered();
        // Sessions may finish starting out of order: the newest one's result stays.
        if cache
            .as_ref()
            .is_none_or(|cached| cached.session_created <= session.created)
        {
            *cache = Some(CachedInit {
                session_created: session.created,
                init: session.init_result(),
            });
        }
    }

    fn record_start(&self, ok: bool) {
        self.metrics
            .session_starts
            .with_label_values(&[self.spec.name.as_str(), if ok { "ok" } else { "error" }])
            .inc();
    }

    fn record_failure(&self, error: &BackendError) {
        self.record_start(false);
        let mut backoff = self.backoff.lock_recovered();
        backoff.failures = backoff.failures.saturating_add(1);
        let delay = FIRST_BACKOFF
            .saturating_mul(1u32 << backoff.failures.min(10).saturating_sub(1))
            .min(MAX_BACKOFF);
        backoff.until = Some(Instant::now() + delay);
        tracing::warn!(backend = %self.spec.name, error = %error, retry_in = ?delay, "backend session failed to start");
    }

    /// Frees the session's slot at once; the polite close runs on its own.
    fn close(&self, mut session: Session) {
        session.release_slot();
        self.background.spawn(session.close());
    }

    /// Closes a returned session and wakes the callers waiting for one.
    fn discard(&self, session: Session) {
        self.close(session);
        self.returned.notify_waiters();
    }

    fn give_back(self: &Arc<Self>, key: PoolKey, session: Session) {
        if !session.is_alive() {
            return;
        }
        if !session.is_reusable() {
            self.discard(session);
            return;
        }
        if !Purpose::Interruptible.fits(&session) {
            // It holds a flow's roots, or its backend's roots question is gone.
            self.reclaim_roots(key, session);
            return;
        }
        self.make_idle(key, session);
    }

    /// A session whose backend holds a flow's roots (or dropped its roots question): the backend
    /// is asked to ask again, off the request path; its session comes back idle once it did, and
    /// is closed otherwise.
    fn reclaim_roots(self: &Arc<Self>, key: PoolKey, session: Session) {
        if self.spec.config.unsolicited != UnsolicitedPolicy::Defer || self.stop.is_cancelled() {
            // Nowhere to keep the backend's question: the roots cannot be taken back.
            self.discard(session);
            return;
        }
        let pool = self.clone();
        self.background.spawn(async move {
            let asked = tokio::select! {
                asked = session.ask_roots_again(ROOTS_REASK_WAIT) => asked,
                _ = pool.stop.cancelled() => false,
            };
            if asked && session.is_reusable() {
                pool.make_idle(key, session);
            } else {
                tracing::debug!(backend = %pool.spec.name, session = session.number(), "backend did not ask for roots again; session closed");
                pool.discard(session);
            }
        });
    }

    fn make_idle(&self, key: PoolKey, mut session: Session) {
        session.last_used = Instant::now();
        let mut keys = self.keys();
        // Checked under the lock `shutdown` drains the idle lists with: once it has, nobody
        // would close this one.
        if self.stop.is_cancelled() {
            drop(keys);
            self.close(session);
            return;
        }
        match keys.get_mut(&key) {
            Some(state) => {
                state.idle.push(session);
                state.last_used = Instant::now();
            }
            None => {
                drop(keys);
                self.close(session);
                return;
            }
        }
        drop(keys);
        self.returned.notify_waiters();
    }
}

/// Warm spares, idle reaping and forgetting keys nobody uses.
async fn maintain(inner: Arc<PoolInner>) {
    let config = inner.spec.config.pool.clone();
    let tick = (config.idle_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(5));
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                _ = inner.stop.cancelled() => return,
                _ = tokio::time::sleep(tick) => {}
            }
        }
        first = false;
        let mut to_close = Vec::new();
        let mut to_warm = Vec::new();
        {
            let mut keys = inner.keys();
            keys.retain(|key, state| {
                state.idle.retain(Session::is_alive);
                // A session no call may use (it holds a flow's roots and its backend did not ask
                // again) is no spare: close it, and let a fresh one be warmed.
                let (stranded, usable): (Vec<_>, Vec<_>) = state
                    .idle
                    .drain(..)
                    .partition(|s| !Purpose::Interruptible.fits(s) && !Purpose::Plain.fits(s));
                state.idle = usable;
                to_close.extend(stranded);
                let min_idle = if state.pinned {
                    config.min_idle.max(1)
                } else {
                    config.min_idle
                };
                let mut keep = state.idle.len();
                state.idle.sort_by_key(|s| std::cmp::Reverse(s.last_used));
                while keep > min_idle
                    && state.idle[keep - 1].last_used.elapsed() > config.idle_timeout
                {
                    keep -= 1;
                }
                to_close.extend(state.idle.drain(keep..));
                let in_use = state.pinned || state.last_used.elapsed() <= config.idle_timeout;
                if in_use && state.idle.len() < min_idle {
                    to_warm.push((key.clone(), state.profile.clone()));
                }
                in_use || !state.idle.is_empty()
            });
        }
        for session in to_close {
            inner.close(session);
        }
        inner.feeds.prune();
        let backing_off = inner
            .backoff
            .lock_recovered()
            .until
            .is_some_and(|u| u > Instant::now());
        if backing_off {
            continue;
        }
        // One spare per key and tick keeps start-up load on the backend gentle.
        for (key, profile) in to_warm {
            let Ok(permit) = inner.slots.clone().try_acquire_owned() else {
                break;
            };
            let started = tokio::select! {
                _ = inner.stop.cancelled() => return,
                s = Session::connect(
                    &inner.spec,
                    profile,
                    Some(permit),
                    &inner.init_roots,
                    Some(inner.feeds.of(&key.principal)),
                ) => s,
            };
            match started {
                Ok(session) => {
                    inner.started(&session);
                    inner.make_idle(key, session);
                }
                Err(e) => {
                    inner.record_failure(&e);
                    break;
                }
            }
        }
    }
}

/// Exclusive use of one session; returned to the pool when dropped (if still healthy).
pub struct Lease {
    session: Option<Session>,
    pool: Arc<PoolInner>,
    key: PoolKey,
    /// Given back after the session (declared last, dropped last).
    _share: Option<SharePlace>,
}

impl Lease {
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            self.pool.give_back(self.key.clone(), session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_canonical() {
        assert_eq!(capability_profile(&json!({})), json!({}));
        assert_eq!(
            capability_profile(&json!({"elicitation": {}})),
            json!({"elicitation": {"form": {}}})
        );
        assert_eq!(
            capability_profile(&json!({"elicitation": {"url": {}}})),
            json!({"elicitation": {"url": {}}})
        );
        assert_eq!(
            capability_profile(&json!({
                "roots": {"listChanged": true},
                "sampling": {"tools": {}, "x": 1},
                "experimental": {"a": {}},
                "extensions": {"io.example/x": {}}
            })),
            json!({"roots": {}, "sampling": {"tools": {}}})
        );
        let a = PoolKey::new(
            "p",
            &capability_profile(&json!({"sampling": {}, "roots": {}})),
        );
        let b = PoolKey::new(
            "p",
            &capability_profile(&json!({"roots": {}, "sampling": {}})),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            PoolKey::new(
                "q",
                &capability_profile(&json!({"roots": {}, "sampling": {}}))
            )
        );
    }
}
