//! One backend call, across every front request that touches it (the first call and each
//! retry): relays progress under the current request's token and logs at or above its level,
//! gathers the questions it surfaces into rounds (closed once the backend is quiet, or at the
//! settle window), resumes with validated answers, and enforces the request timeout and the
//! per-round wait. How each question is gated, surfaced, answered or abandoned, and how a
//! call waits for its session's prelude, is in [`questions`].
//!
//! Dropping a [`CallDriver`] whose call is unfinished cancels the backend request
//! (`notifications/cancelled`); the session then returns to the pool.
//!
//! The driver reaches the backend only through [`BackendCall`] ([`backend`]): in production a
//! [`LeasedCall`] (the call and the lease of its session), in the unit tests a scripted double,
//! so the rules are tested on tokio's paused clock; its waits likewise run on a [`Clock`]: in
//! production the [`FineClock`], in the unit tests tokio's own timer. The driver is generic over
//! both, not boxed: the forwarding path pays no dynamic dispatch.

mod backend;
#[cfg(test)]
pub(super) mod fake;
mod questions;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
// Tokio's clock, so the timers and the deadlines they are compared with follow a paused clock
// in tests; outside tests it is the monotonic clock itself.
use tokio::time::Instant;

pub(crate) use self::backend::{BackendCall, LeasedCall};
use super::clock::{Clock, FineClock};
use super::inputs::{check_answer, PendingInput};
use crate::backend::session::CallEvent;
use crate::backend::MessageLimit;
use crate::error::GatewayError;
use crate::jsonrpc::{self, JsonRpcError};
use crate::protocol::log_level_rank;

/// What the current front request sees next.
#[derive(Debug)]
pub enum Step {
    /// A notification for the current response stream.
    Notify(Value),
    /// What ends the current front request.
    End(Ending),
}

/// A step that ends the current front request.
#[derive(Debug)]
pub enum Ending {
    /// The backend's answer.
    Final(Result<Box<serde_json::value::RawValue>, JsonRpcError>),
    /// The call cannot be answered (timeout, backend lost, capability missing).
    Failed(GatewayError),
    /// A round is ready (or nothing happened within the round wait): park the call.
    InputRequired,
    /// The backend ended the call with -32042 (URL elicitation required): the client is to
    /// visit these URLs, then the original request is issued again.
    UrlRequired {
        inputs: Vec<PendingInput>,
        error: JsonRpcError,
    },
}

/// Events taken without waiting once the round is due, before it is handed out.
const SETTLED_DRAIN_LIMIT: usize = 64;

/// How a round gathers the backend's questions: it closes once the backend has sent nothing
/// for `quiet`, and `window` after its first question at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    pub window: Duration,
    pub quiet: Duration,
}

/// What one front request declared that shapes what it may see.
#[derive(Debug, Clone, Default)]
pub struct RequestScope {
    pub client_capabilities: Value,
    pub client_progress_token: Option<Value>,
    pub log_level: Option<String>,
    /// `inputResponses` sent with a first call: answers used when a request with that key
    /// arrives.
    pub preanswers: Map<String, Value>,
}

pub struct CallDriver<C: BackendCall = LeasedCall, K: Clock = FineClock> {
    /// `Drop` answers the outstanding inputs through it; dropping it then ends the call.
    call: C,
    interruptible: bool,
    backend_progress_token: Option<String>,
    scope: RequestScope,
    log_rank: Option<usize>,
    deadline: Instant,
    timeout: Duration,
    settle: Settle,
    /// When the gathering round closes at the latest (`settle.window` after it opened).
    settle_deadline: Option<Instant>,
    /// When it closes if the backend stays quiet (`settle.quiet` after its last event).
    quiet_deadline: Option<Instant>,
    idle_deadline: Option<Instant>,
    /// Surfaced inputs not answered yet. Shared while a retry's answers are validated against
    /// them (outside the held table's lock); changed only through [`Self::outstanding_mut`].
    outstanding: Arc<Vec<PendingInput>>,
    /// Capabilities the backend asked for that this request did not declare.
    refused: Option<Value>,
    keys_used: HashSet<String>,
    key_counter: u32,
    /// Events that arrived while the call was held, read before waiting for new ones.
    backlog: VecDeque<CallEvent>,
    /// The backend asked for roots while the call was not sent yet.
    prelude_asked_roots: bool,
    /// This flow's roots reached the backend while the call was not sent yet.
    prelude_gave_roots: bool,
    /// Roots were delivered since the last barrier: the backend must have applied them before
    /// it hears the call.
    roots_to_settle: bool,
    /// What the driver's waits are timed on.
    clock: K,
    /// Rounds completed so far.
    pub round: u32,
}

/// Answers checked against the inputs they answer, ready for the backend.
pub struct ValidatedAnswers(Vec<(String, Value)>);

/// Checks a retry's `inputResponses` against the inputs of its round without changing anything.
/// Unknown keys are ignored; missing keys stay outstanding. Answers to URL-mode requests are
/// checked like any other, though the backend never sees them. An answer whose response would
/// be larger than the backend takes (`limit`) is refused here, so that none of a retry's
/// answers is sent unless all can be.
pub(crate) fn validate_answers(
    inputs: &[PendingInput],
    answers: &Map<String, Value>,
    limit: Option<&MessageLimit>,
) -> Result<ValidatedAnswers, GatewayError> {
    let mut checked = Vec::new();
    for input in inputs {
        let Some(answer) = answers.get(&input.key) else {
            continue;
        };
        let answer = check_answer(input, answer)?;
        if let Some(limit) = limit {
            let response = jsonrpc::result_message(&input.backend_id, &answer);
            limit.check(jsonrpc::written_len(&response))?;
        }
        checked.push((input.key.clone(), answer));
    }
    Ok(ValidatedAnswers(checked))
}

impl<C: BackendCall, K: Clock> CallDriver<C, K> {
    pub fn new(
        call: C,
        interruptible: bool,
        backend_progress_token: Option<String>,
        scope: RequestScope,
        timeout: Duration,
        settle: Settle,
    ) -> Self {
        let log_rank = scope.log_level.as_deref().and_then(log_level_rank);
        Self {
            call,
            interruptible,
            backend_progress_token,
            scope,
            log_rank,
            deadline: Instant::now() + timeout,
            timeout,
            settle,
            settle_deadline: None,
            quiet_deadline: None,
            idle_deadline: None,
            outstanding: Arc::default(),
            refused: None,
            keys_used: HashSet::new(),
            key_counter: 0,
            backlog: VecDeque::new(),
            prelude_asked_roots: false,
            prelude_gave_roots: false,
            roots_to_settle: false,
            clock: K::default(),
            round: 0,
        }
    }

    /// The inputs of the round to surface now (everything not yet answered).
    pub fn input_requests(&self) -> Map<String, Value> {
        self.outstanding
            .iter()
            .map(|p| (p.key.clone(), p.request.clone()))
            .collect()
    }

    pub fn session_alive(&self) -> bool {
        self.call.session_alive()
    }

    /// The largest message the call's backend takes, if it has a limit.
    pub(crate) fn message_limit(&self) -> Option<MessageLimit> {
        self.call.message_limit()
    }

    /// Marks the current round as handed to the client.
    pub fn parked(&mut self) {
        self.round += 1;
        self.stop_gathering();
        self.idle_deadline = None;
        self.clock.release();
    }

    /// The inputs a retry answers, shared: its answers are validated against them while the
    /// driver stays in the held table, unlocked.
    pub fn outstanding_inputs(&self) -> Arc<Vec<PendingInput>> {
        self.outstanding.clone()
    }

    /// The outstanding inputs, to change: copied only if a validation still shares them.
    fn outstanding_mut(&mut self) -> &mut Vec<PendingInput> {
        Arc::make_mut(&mut self.outstanding)
    }

    /// Resumes the call for a retry: the retry's scope applies from now on, answers go to the
    /// backend (each exactly once), and the round wait starts.
    pub fn resume(&mut self, scope: RequestScope, answers: ValidatedAnswers, round_wait: Duration) {
        self.log_rank = scope.log_level.as_deref().and_then(log_level_rank);
        self.scope = scope;
        // Questions the backend withdrew while the call was held must not be answered.
        while let Some(event) = self.call.try_next_event() {
            if let CallEvent::ServerRequestCancelled { id } = &event {
                self.outstanding_mut().retain(|p| p.backend_id != *id);
            }
            self.backlog.push_back(event);
        }
        for (key, result) in answers.0 {
            if let Some(pos) = self.outstanding.iter().position(|p| p.key == key) {
                let input = self.outstanding_mut().remove(pos);
                self.deliver(&input, result);
            }
        }
        let now = Instant::now();
        self.deadline = now + self.timeout;
        if self.outstanding.is_empty() {
            self.idle_deadline = Some(now + round_wait);
        } else {
            // Ask again for what is still missing, after gathering what else arrives.
            self.start_gathering(now);
        }
    }

    /// Opens a round's gathering at `now`.
    fn start_gathering(&mut self, now: Instant) {
        self.settle_deadline = Some(now + self.settle.window);
        self.quiet_deadline = Some(now + self.settle.quiet);
    }

    fn stop_gathering(&mut self) {
        self.settle_deadline = None;
        self.quiet_deadline = None;
    }

    /// When the gathering round closes: at the quiet gap's end, or the window's if sooner.
    fn round_due(&self) -> Option<Instant> {
        let latest = self.settle_deadline?;
        Some(
            self.quiet_deadline
                .map_or(latest, |quiet| quiet.min(latest)),
        )
    }

    fn round_due_by(&self, now: Instant) -> bool {
        self.round_due().is_some_and(|due| due <= now)
    }

    /// Handles every event already queued for the call, without waiting.
    fn take_queued_events(&mut self) -> Option<Step> {
        while let Some(event) = self.call.try_next_event() {
            if let Some(step) = self.on_event(event) {
                return Some(step);
            }
        }
        None
    }

    /// Sets the backend's log level to what the current request asked for.
    pub async fn apply_log_level(&self) -> Result<(), GatewayError> {
        self.call
            .apply_log_level(self.scope.log_level.as_deref(), self.timeout)
            .await
            .map_err(GatewayError::from)
    }

    pub async fn next_step(&mut self) -> Step {
        let mut drained = 0;
        loop {
            if self.call.is_unsent() {
                if let Some(step) = self.send_after_prelude().await {
                    return step;
                }
            }
            let wake = [Some(self.deadline), self.round_due(), self.idle_deadline]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.deadline);
            if let Some(event) = self.backlog.pop_front() {
                if let Some(step) = self.on_event(event) {
                    return step;
                }
                continue;
            }
            // A round that is due (or has a zero window) needs no wait: take what already
            // arrived (a bounded number of events) and hand out the round. A closed call goes
            // on to the wait below, which reports why it ended.
            if !self.outstanding.is_empty()
                && self.round_due_by(Instant::now())
                && !self.call.events_closed()
            {
                if drained < SETTLED_DRAIN_LIMIT {
                    if let Some(event) = self.call.try_next_event() {
                        drained += 1;
                        if let Some(step) = self.on_event(event) {
                            return step;
                        }
                        continue;
                    }
                }
                return Step::End(Ending::InputRequired);
            }
            let event = tokio::select! {
                event = self.call.next_event() => event,
                _ = self.clock.sleep_until(wake) => {
                    let now = Instant::now();
                    if self.round_due_by(now) && !self.outstanding.is_empty() {
                        // What the backend's reader was woken for in the same instant comes
                        // first: the loop's drain above takes it (a question arriving now
                        // restarts the quiet gap) before the round is handed out.
                        tokio::task::yield_now().await;
                        continue;
                    }
                    if self.idle_deadline.is_some_and(|d| d <= now) {
                        return Step::End(Ending::InputRequired);
                    }
                    if self.deadline <= now {
                        return Step::End(Ending::Failed(GatewayError::BackendTimeout(format!(
                            "no answer within {:?}",
                            self.timeout
                        ))));
                    }
                    if self.round_due_by(now) {
                        self.stop_gathering();
                    }
                    continue;
                }
            };
            if let Some(step) = self.on_event(event) {
                return step;
            }
        }
    }

    /// What an event means for the current request; `None` when there is nothing to show yet.
    /// Any event restarts the quiet gap of a gathering round: the backend is not quiet.
    fn on_event(&mut self, event: CallEvent) -> Option<Step> {
        let step = self.apply_event(event);
        if self.settle_deadline.is_some() {
            self.quiet_deadline = Some(Instant::now() + self.settle.quiet);
        }
        step
    }

    fn apply_event(&mut self, event: CallEvent) -> Option<Step> {
        match event {
            CallEvent::Progress(mut params) => {
                let client_token = self.scope.client_progress_token.as_ref()?;
                let ours = self.backend_progress_token.as_deref()?;
                if params.get("progressToken").and_then(Value::as_str) != Some(ours) {
                    return None;
                }
                params["progressToken"] = client_token.clone();
                Some(Step::Notify(jsonrpc::notification(
                    "notifications/progress",
                    Some(params),
                )))
            }
            CallEvent::Log(params) => {
                let wanted = self.log_rank?;
                let rank = params
                    .get("level")
                    .and_then(Value::as_str)
                    .and_then(log_level_rank)?;
                (rank >= wanted).then(|| {
                    Step::Notify(jsonrpc::notification("notifications/message", Some(params)))
                })
            }
            CallEvent::ServerRequest {
                id,
                method,
                params,
                deferred,
            } => {
                self.on_server_request(id, method, params, deferred);
                None
            }
            CallEvent::ServerRequestCancelled { id } => {
                // The backend withdrew its question: never answer it, never ask it.
                self.outstanding_mut().retain(|p| p.backend_id != id);
                if self.outstanding.is_empty() {
                    self.stop_gathering();
                }
                None
            }
            CallEvent::ElicitationComplete(_) => None,
            CallEvent::Final(Err(error))
                if self.interruptible
                    && error.code == jsonrpc::codes::LEGACY_URL_ELICITATION_REQUIRED =>
            {
                Some(self.url_required(error))
            }
            CallEvent::Final(Err(error)) if self.refused.is_some() => {
                tracing::debug!(
                    code = error.code,
                    "call failed after a refused server request"
                );
                let required = self.refused.take().unwrap_or_else(|| json!({}));
                Some(Step::End(Ending::Failed(GatewayError::MissingCapability {
                    required,
                })))
            }
            CallEvent::Final(outcome) if self.interruptible && !self.outstanding.is_empty() => {
                // Questions are waiting (e.g. deferred from an idle session): ask them now and
                // keep the answer for the retry that brings theirs.
                self.backlog.push_front(CallEvent::Final(outcome));
                Some(Step::End(Ending::InputRequired))
            }
            CallEvent::Final(outcome) => Some(Step::End(Ending::Final(outcome))),
            CallEvent::Failed(e) => Some(Step::End(Ending::Failed(e.into()))),
        }
    }
}

impl<C: BackendCall, K: Clock> Drop for CallDriver<C, K> {
    /// Questions of a call that ends unseen (client gone, call failed) are answered, so the
    /// backend never waits on them.
    fn drop(&mut self) {
        self.abandon("the call ended");
    }
}

#[cfg(test)]
mod tests;
