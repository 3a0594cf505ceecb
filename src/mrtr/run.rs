//! Running a call between its rounds: a first call runs in its request's own task up to its
//! first notification or outcome ([`Bridge::start`]), so a call that simply answers costs no
//! task; the rest of a call that streams notifications, and a resumed call, run in a task the
//! bridge tracks ([`Bridge::drive`]). A step that ends the front request becomes its
//! [`Outcome`]; one that asks for input parks the call for its next round.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::call::{BackendCall, CallDriver, Ending, Step};
use super::clock::Clock;
use super::park::Held;
use super::redeem::{Redemption, Replay};
use super::state::principal_digest;
use super::{Bridge, CallBinding, Event, Outcome, Started};
use crate::error::GatewayError;

/// Events a call may send ahead of a slow front request.
const EVENT_BUFFER: usize = 64;

impl<C: BackendCall + Sync + 'static, K: Clock + Sync + 'static> Bridge<C, K> {
    /// Runs `driver` to its next outcome in a task. With `cancel_on_disconnect`, the call is
    /// cancelled when the receiver is dropped (a first call whose client went away); a redeemed
    /// retry runs on, so a re-sent retry can still collect the outcome.
    pub fn drive(
        self: &Arc<Self>,
        driver: CallDriver<C, K>,
        binding: CallBinding,
        cancel_on_disconnect: bool,
    ) -> mpsc::Receiver<Event> {
        self.drive_recorded(driver, binding, cancel_on_disconnect, None)
    }

    pub(super) fn drive_recorded(
        self: &Arc<Self>,
        driver: CallDriver<C, K>,
        binding: CallBinding,
        cancel_on_disconnect: bool,
        record: Option<Arc<Redemption>>,
    ) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let bridge = self.clone();
        // The call's logs and the round it reaches belong to the request that drives it.
        let request_span = tracing::Span::current();
        self.tasks.spawn(tracing::Instrument::instrument(
            async move {
                let resumed = record.is_some();
                let outcome = tokio::select! {
                    outcome = bridge.run(driver, binding, resumed, &tx) => outcome,
                    _ = tx.closed(), if cancel_on_disconnect => return,
                };
                if let Some(record) = &record {
                    record.outcome.send_replace(Some(outcome.clone()));
                    let _ = record.finished.set(Instant::now());
                }
                let delivered = tx.send(Event::Outcome(outcome)).await.is_ok();
                if let Some(record) = record.filter(|_| delivered) {
                    let replay = match bridge.kept_outcomes.take(&record.principal) {
                        Ok(()) => Replay::KEPT,
                        Err(_) => Replay::REFUSED,
                    };
                    record.replay.store(replay, Ordering::Release);
                }
            },
            request_span,
        ));
        rx
    }

    /// Runs a first call in the calling task up to its first notification or its outcome, so a
    /// call that simply answers costs no task of its own. When a notification comes first, a
    /// task drives the rest (as [`Bridge::drive`], cancelled when the receiver is dropped).
    /// Dropping this future (the client went away) drops the driver, which cancels the call.
    pub async fn start(
        self: &Arc<Self>,
        mut driver: CallDriver<C, K>,
        binding: CallBinding,
    ) -> Started {
        // Counted with the call tasks: status and shutdown see it running.
        let _running = self.tasks.token();
        match driver.next_step().await {
            Step::Notify(message) => Started::Streaming(message, self.drive(driver, binding, true)),
            Step::End(ending) => Started::Outcome(self.conclude(ending, driver, binding)),
        }
    }

    async fn run(
        self: &Arc<Self>,
        mut driver: CallDriver<C, K>,
        binding: CallBinding,
        resumed: bool,
        tx: &mpsc::Sender<Event>,
    ) -> Outcome {
        if resumed {
            // The retry's logLevel applies to the rest of the call.
            if let Err(error) = driver.apply_log_level().await {
                return Outcome::Error(error);
            }
        }
        loop {
            match driver.next_step().await {
                Step::Notify(message) => {
                    // A client that left misses notifications, not the outcome.
                    if !tx.is_closed() {
                        let _ = tx.send(Event::Notify(message)).await;
                    }
                }
                Step::End(ending) => return self.conclude(ending, driver, binding),
            }
        }
    }

    /// The outcome a step that ends the current front request gives it.
    fn conclude(&self, ending: Ending, driver: CallDriver<C, K>, binding: CallBinding) -> Outcome {
        match ending {
            Ending::Final(Ok(result)) => Outcome::Final(result),
            Ending::Final(Err(error)) => Outcome::Error(GatewayError::from_backend(
                error,
                &binding.method,
                &binding.error_context,
            )),
            Ending::Failed(error) => Outcome::Error(error),
            Ending::InputRequired => self.park(driver, binding),
            Ending::UrlRequired { inputs, error } => {
                let round = driver.round + 1;
                // The backend call is over: its session goes back to the pool now.
                drop(driver);
                match self.held.admit(principal_digest(&binding.principal)) {
                    Ok(place) => {
                        let reissue = Held::Reissue {
                            inputs: Arc::new(inputs),
                            error,
                        };
                        self.hold(place, reissue, binding, round)
                    }
                    Err(error) => Outcome::Error(error.into()),
                }
            }
        }
    }
}
