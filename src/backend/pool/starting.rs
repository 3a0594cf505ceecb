//! Starting a pool's sessions: a failed start backs the pool off (doubling from
//! `FIRST_BACKOFF` to `MAX_BACKOFF`), a successful one resets it and makes its
//! `InitializeResult` the one `server/discover` and result stamping use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::{PoolInner, PoolKey};
use crate::backend::session::Session;
use crate::backend::BackendError;
use crate::error::PoolError;
use crate::sync::{LockRecovered, RwLockRecovered};

const MAX_BACKOFF: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

pub(super) struct Backoff {
    pub(super) failures: u32,
    pub(super) until: Option<Instant>,
}

/// The `InitializeResult` of the most recently started session.
pub(super) struct CachedInit {
    pub(super) session_created: Instant,
    pub(super) init: Arc<Value>,
}

impl PoolInner {
    pub(super) async fn start_session(
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
            &key.identity,
            profile.clone(),
            Some(permit),
            &self.per_backend,
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
    pub(super) fn started(&self, session: &Session) {
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

    pub(super) fn record_failure(&self, error: &BackendError) {
        self.record_start(false);
        if matches!(error, BackendError::Initialize(_)) {
            // Refused `initialize`: the server may have moved to 2026-07-28 since it was probed.
            self.modern.forget_era();
        }
        let mut backoff = self.backoff.lock_recovered();
        backoff.failures = backoff.failures.saturating_add(1);
        let delay = FIRST_BACKOFF
            .saturating_mul(1u32 << backoff.failures.min(10).saturating_sub(1))
            .min(MAX_BACKOFF);
        backoff.until = Some(Instant::now() + delay);
        tracing::warn!(backend = %self.spec.name, error = %error, retry_in = ?delay, "backend session failed to start");
    }
}
