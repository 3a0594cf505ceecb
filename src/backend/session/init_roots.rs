//! What one backend's sessions have shown about asking for roots right after `initialized`
//! ([`InitRoots`]), shared by the backend's sessions.

use std::sync::atomic::{AtomicU8, Ordering};

/// What sessions of one backend have shown about asking for roots right after `initialized`,
/// learned by the first session that declared `roots`: a backend that does not ask costs that
/// first session one wait (`ROOTS_ON_INIT_WAIT`); one that asks is waited for on every new session,
/// even when it asks from a timer or another task after answering a `ping`.
#[derive(Debug, Default)]
pub(crate) struct InitRoots(AtomicU8);

impl InitRoots {
    const UNKNOWN: u8 = 0;
    const ASKS: u8 = 1;
    const SILENT: u8 = 2;

    /// A session's backend asked for roots before its first call.
    pub(super) fn learn_asks(&self) {
        self.0.store(Self::ASKS, Ordering::Relaxed);
    }

    /// A healthy first session's backend did not ask in time; a concurrent session that saw it
    /// ask wins.
    pub(super) fn learn_silent(&self) {
        let _ = self.0.compare_exchange(
            Self::UNKNOWN,
            Self::SILENT,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    pub(super) fn known_silent(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::SILENT
    }
}
