//! Roots on a session. Roots belong to the flow that gave them (2026-07-28 gives roots per
//! request; a legacy server caches them per session). The session records whether a client's
//! roots were delivered on it ([`Session::note_client_roots`]); the pool asks such a session's
//! backend to ask again ([`Session::ask_roots_again`]) before another flow may use it. A backend
//! that asks for roots right after `initialized` is waited for before the session is lent
//! ([`InitRoots`] remembers, per backend, whether it does).

use std::time::Duration;

use super::table::Routing;
use super::Session;
use crate::config::UnsolicitedPolicy;

/// Longest wait for the `ping` that tells the backend has read what came before it.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);
/// After `initialized`, how long a new session waits for a backend that asks for roots at
/// initialization (or may: the first time) to ask.
const ROOTS_ON_INIT_WAIT: Duration = Duration::from_secs(1);

impl Session {
    /// A backend that asks for roots in reaction to `initialized` asks before the session is
    /// lent: the question then waits for the first call's client (or, under `static`, its
    /// answer has reached the backend and applied).
    pub(super) async fn await_roots_on_init(&self) {
        let learned = &self.core.init_roots;
        if learned.known_silent() {
            return;
        }
        // Most backends ask while handling `initialized`, before they answer this.
        let pinged = self.ping_barrier().await;
        let asked = self
            .wait_until_asked(ROOTS_ON_INIT_WAIT, |routing| {
                if routing.roots_question_seen {
                    Some(true)
                } else {
                    routing.dead.is_some().then_some(false)
                }
            })
            .await;
        if asked {
            if self.core.unsolicited == UnsolicitedPolicy::Static {
                // Answered from static_roots already: let them apply before the first call.
                self.roots_barrier().await;
            }
        } else if pinged && self.is_reusable() {
            // Only a healthy session teaches anything.
            tracing::debug!(backend = %self.core.backend, "backend does not ask for roots at initialization; later sessions do not wait for it");
            learned.learn_silent();
        }
    }

    /// Sends a `ping` and waits for its answer; false when none came.
    async fn ping_barrier(&self) -> bool {
        match self.request("ping", None, BARRIER_TIMEOUT).await {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(backend = %self.core.backend, session = self.core.number, error = %e, "barrier ping failed");
                false
            }
        }
    }

    /// Waits until the backend has read everything sent before (a `ping` answered), then
    /// `roots_settle`, so roots it was just given apply to what is sent next: some servers apply
    /// them asynchronously (server-filesystem resolves each root on disk).
    pub async fn roots_barrier(&self) {
        let _ = self.ping_barrier().await;
        if !self.core.roots_settle.is_zero() {
            tokio::time::sleep(self.core.roots_settle).await;
        }
    }

    /// A client's roots reached the backend on this session.
    pub fn note_client_roots(&self) {
        self.core.routing().client_roots = true;
    }

    /// Whether a call may run here without the roots of another flow. A call that can ask its
    /// client needs the backend's roots question waiting (its first round answers it before the
    /// call is sent), unless the backend never asked and holds no client's roots; a call that
    /// cannot ask needs a session that never held a client's roots.
    pub fn roots_fit(&self, can_ask_client: bool) -> bool {
        self.core.routing().roots_fit(can_ask_client)
    }

    /// Whether this session may be lent to a call (`is_reusable` and `roots_fit`), and if so
    /// whether it holds a client's roots (a call that can ask its client takes those first, to
    /// keep the others for calls that cannot). One look under the routing lock.
    pub fn lendable(&self, can_ask_client: bool) -> Option<bool> {
        let routing = self.core.routing();
        (routing.reusable() && routing.roots_fit(can_ask_client)).then_some(routing.client_roots)
    }

    /// Tells the backend its roots changed (`notifications/roots/list_changed`) and waits up to
    /// `wait` for it to ask again; the question then waits for the next call, whose client
    /// answers it. False when the backend did not ask: its roots cannot be taken back.
    pub async fn ask_roots_again(&self, wait: Duration) -> bool {
        if let Some(asked) = self.core.routing().roots_reask_settled() {
            return asked;
        }
        if self.core.tell_roots_changed().is_err() {
            return false;
        }
        self.wait_until_asked(wait, Routing::roots_reask_settled)
            .await
    }

    /// Waits up to `wait` for what the backend asks to settle `settled` (`Some(answer)`);
    /// false when it did not in time.
    async fn wait_until_asked(
        &self,
        wait: Duration,
        settled: impl Fn(&Routing) -> Option<bool>,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let asked = self.core.asked.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            if let Some(answer) = settled(&self.core.routing()) {
                return answer;
            }
            if tokio::time::timeout_at(deadline, asked).await.is_err() {
                return false;
            }
        }
    }
}
