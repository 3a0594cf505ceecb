//! The lease: exclusive use of one session, which is what makes the backend's server requests
//! attributable to one caller. When it ends, its session is given back: kept idle for the next
//! caller, closed, or (when it holds a flow's roots) kept only once its backend asked for roots
//! again.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::accounting::SharePlace;
use super::{Pool, PoolInner, PoolKey, Purpose};
use crate::backend::session::Session;
use crate::config::UnsolicitedPolicy;

/// After `notifications/roots/list_changed`, how long a backend has to ask for roots again
/// before its session is closed instead of lent to another flow.
const ROOTS_REASK_WAIT: Duration = Duration::from_secs(1);

/// Exclusive use of one session; returned to the pool when dropped (if still healthy). A lease
/// always has its session: use it as a `&Session` (`Deref`).
pub struct Lease {
    /// Taken out only by `drop`, to be given back to the pool.
    session: ManuallyDrop<Session>,
    pool: Arc<PoolInner>,
    key: PoolKey,
    /// Given back after the session (declared last, dropped last).
    _share: Option<SharePlace>,
}

impl Deref for Lease {
    type Target = Session;

    fn deref(&self) -> &Session {
        &self.session
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // SAFETY: `session` is taken exactly once, here, and not touched again: the lease is
        // being dropped, and dropping its fields does not drop a `ManuallyDrop`.
        #[allow(unsafe_code)]
        let session = unsafe { ManuallyDrop::take(&mut self.session) };
        self.pool.give_back(self.key.clone(), session);
    }
}

impl Pool {
    pub(super) fn lease(
        &self,
        key: &PoolKey,
        session: Session,
        share: Option<SharePlace>,
    ) -> Lease {
        Lease {
            session: ManuallyDrop::new(session),
            pool: self.inner.clone(),
            key: key.clone(),
            _share: share,
        }
    }
}

impl PoolInner {
    /// A lease ended: a dead session is forgotten (its slot returns with it), one that cannot be
    /// lent again is closed, one holding a flow's roots is reclaimed, any other kept idle.
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
}
