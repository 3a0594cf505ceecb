//! Ending what nobody will come back for: a sweeper task ends rounds that expired or whose
//! backend session died, and forgets redemption records once their outcome is no longer kept;
//! shutdown ends every held call and waits for the call tasks.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::call::BackendCall;
use super::clock::Clock;
use super::redeem::Replay;
use super::{held, Bridge};

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// How often the sweeper looks: often enough that a round ends close to `held_ttl`.
    pub(super) fn sweep_interval(&self) -> Duration {
        (self.config.held_ttl / 8).clamp(Duration::from_millis(50), Duration::from_secs(1))
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
pub(super) async fn sweep<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static>(
    bridge: std::sync::Weak<Bridge<C, K>>,
    stop: CancellationToken,
    every: Duration,
) {
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
