//! The pool's maintenance task: keeps `min_idle` warm spares for keys in use, closes sessions
//! idle past `idle_timeout` and those no call may use, forgets keys nobody uses. One per pool,
//! ticking until the pool's stop token is cancelled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{PoolInner, Purpose};
use crate::backend::identity::SessionIdentity;
use crate::backend::modern::detect::ResolvedEra;
use crate::backend::session::Session;
use crate::sync::LockRecovered;

/// Warm spares, idle reaping and forgetting keys nobody uses.
pub(super) async fn maintain(inner: Arc<PoolInner>) {
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
        if backing_off || to_warm.is_empty() {
            continue;
        }
        // Spares are sessions: a 2026-07-28 backend has none.
        let nobody = SessionIdentity::none();
        let era = tokio::select! {
            _ = inner.stop.cancelled() => return,
            era = inner.modern.era(&nobody) => era,
        };
        if !matches!(era, Ok(ResolvedEra::Legacy)) {
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
                    &key.identity,
                    profile,
                    Some(permit),
                    &inner.per_backend,
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
