//! One forwarded request from the moment it is sent to its backend session until its final
//! JSON-RPC message: relays progress (under the client's token) and logs (only at or above the
//! level the request asked for), answers what cannot reach the client, stamps the result, and
//! enforces the backend's request timeout.
//!
//! Dropping a [`CallDriver`] before it finished (the client closed its response) cancels the
//! backend request; the session then returns to the pool.

use std::sync::Arc;
use std::time::Instant;

use http::StatusCode;
use serde_json::Value;

use super::validate::log_level_rank;
use super::Route;
use crate::backend::pool::Lease;
use crate::backend::session::{answer_locally, ActiveCall, CallEvent};
use crate::error::GatewayError;
use crate::jsonrpc;

/// What the client receives next.
pub enum Step {
    /// A notification on the response stream.
    Notify(Value),
    /// The final response, and the status it gets if it is the only thing sent.
    Done { message: Value, status: StatusCode },
}

pub struct CallDriver {
    // Declared before `lease`: an unfinished call is cancelled before its session is returned.
    call: ActiveCall,
    lease: Lease,
    route: Arc<Route>,
    id: Value,
    method: String,
    params: Value,
    server_info: Option<Value>,
    client_progress_token: Option<Value>,
    backend_progress_token: Option<String>,
    log_rank: Option<usize>,
    deadline: Instant,
}

pub struct CallSetup {
    pub route: Arc<Route>,
    pub id: Value,
    pub method: String,
    /// The client's params, kept for error rewriting (e.g. `uri` of a missing resource).
    pub params: Value,
    pub server_info: Option<Value>,
    pub client_progress_token: Option<Value>,
    pub backend_progress_token: Option<String>,
    pub log_level: Option<String>,
}

impl CallDriver {
    pub fn new(call: ActiveCall, lease: Lease, setup: CallSetup) -> Self {
        let deadline = Instant::now() + setup.route.request_timeout;
        Self {
            call,
            lease,
            route: setup.route,
            id: setup.id,
            method: setup.method,
            params: setup.params,
            server_info: setup.server_info,
            client_progress_token: setup.client_progress_token,
            backend_progress_token: setup.backend_progress_token,
            log_rank: setup.log_level.as_deref().and_then(log_level_rank),
            deadline,
        }
    }

    fn done_error(&self, error: GatewayError) -> Step {
        Step::Done {
            status: error.http_status(),
            message: jsonrpc::error_response(Some(self.id.clone()), &error.to_jsonrpc()),
        }
    }

    pub async fn next_step(&mut self) -> Step {
        loop {
            let event = tokio::select! {
                event = self.call.next_event() => event,
                _ = tokio::time::sleep_until(self.deadline.into()) => {
                    return self.done_error(GatewayError::BackendTimeout(format!(
                        "{} did not finish within {:?}",
                        self.method, self.route.request_timeout
                    )));
                }
            };
            match event {
                CallEvent::Progress(mut params) => {
                    let (Some(client_token), Some(ours)) =
                        (&self.client_progress_token, &self.backend_progress_token)
                    else {
                        continue;
                    };
                    if params.get("progressToken").and_then(Value::as_str) != Some(ours.as_str()) {
                        continue;
                    }
                    params["progressToken"] = client_token.clone();
                    return Step::Notify(jsonrpc::notification(
                        "notifications/progress",
                        Some(params),
                    ));
                }
                CallEvent::Log(params) => {
                    let Some(wanted) = self.log_rank else {
                        continue;
                    };
                    let rank = params
                        .get("level")
                        .and_then(Value::as_str)
                        .and_then(log_level_rank);
                    if rank.is_some_and(|r| r >= wanted) {
                        return Step::Notify(jsonrpc::notification(
                            "notifications/message",
                            Some(params),
                        ));
                    }
                }
                CallEvent::ServerRequest { id, method, .. } => {
                    if let Err(e) = self.call.respond(id, answer_locally(&method)) {
                        tracing::debug!(error = %e, "answering a server request failed");
                    }
                }
                CallEvent::ServerRequestCancelled { .. } | CallEvent::ElicitationComplete(_) => {}
                CallEvent::Final(Ok(result)) => {
                    let stamped = super::translate::stamp_result(
                        &self.method,
                        result,
                        &self.route.config,
                        self.server_info.as_ref(),
                    );
                    return Step::Done {
                        message: jsonrpc::result_response(self.id.clone(), stamped),
                        status: StatusCode::OK,
                    };
                }
                CallEvent::Final(Err(error)) => {
                    let error = GatewayError::from_backend(error, &self.method, &self.params);
                    return self.done_error(error);
                }
                CallEvent::Failed(e) => {
                    return self.done_error(GatewayError::BackendUnavailable(e.to_string()));
                }
            }
        }
    }

    /// The session this call runs on, for logs.
    pub fn session_number(&self) -> Option<u64> {
        self.lease.session().map(|s| s.number())
    }
}
