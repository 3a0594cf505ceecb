//! Who may have a session of the pool now: the slots (`max_sessions`, one semaphore permit per
//! open session), each principal's share (`max_sessions_per_principal`), the idle sessions per
//! key, and the callers waiting for one (woken when a session is returned, up to
//! `queue_wait`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::{Lease, Pool, PoolInner, PoolKey, Purpose};
use crate::backend::session::Session;
use crate::error::PoolError;
use crate::sync::LockRecovered;

/// The sessions of one key (principal, capability profile).
pub(super) struct KeyState {
    pub(super) idle: Vec<Session>,
    pub(super) profile: Value,
    pub(super) last_used: Instant,
    /// Configured in `warm_profiles`: always kept warm, never forgotten.
    pub(super) pinned: bool,
}

/// One of the sessions a principal may use at once (`pool.max_sessions_per_principal`), held
/// by its lease and given back when dropped.
pub(super) struct SharePlace {
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

/// `session` started after `since`, if given.
fn started_since(session: &Session, since: Option<Instant>) -> bool {
    since.is_none_or(|at| session.created > at)
}

impl Pool {
    pub(super) async fn acquire_inner(
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
}

impl PoolInner {
    /// A place in `principal`'s share of the sessions; none is needed without authentication
    /// (every caller is the same principal then).
    pub(super) fn take_share(
        self: &Arc<Self>,
        principal: &str,
    ) -> Result<Option<SharePlace>, PoolError> {
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

    pub(super) fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, KeyState>> {
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

    /// Frees the session's slot at once; the polite close runs on its own.
    pub(super) fn close(&self, mut session: Session) {
        session.release_slot();
        self.background.spawn(session.close());
    }

    /// Closes a returned session and wakes the callers waiting for one.
    pub(super) fn discard(&self, session: Session) {
        self.close(session);
        self.returned.notify_waiters();
    }

    pub(super) fn make_idle(&self, key: PoolKey, mut session: Session) {
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
