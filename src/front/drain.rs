//! Draining as a layer: once the drain has begun, new calls and new 2025-11-25 sessions get 503
//! while retries of held calls (and requests on open sessions) are still served, so the rounds
//! in flight can finish. A request marked [`AcceptedBeforeDrain`] is served whatever it is: its
//! connection came through a listener that closed when the drain began, so the request was
//! accepted before, and a balancer that sent it cannot send it elsewhere.

use std::sync::Arc;

use http::{Request, Response};
use tokio_util::sync::CancellationToken;
use tower_http::validate_request::ValidateRequest;

use super::request::Inbound;
use crate::error::GatewayError;
use crate::http_serve::{error_response, Body};
use crate::legacy::serve::LegacyRequest;

/// Marks a request of a connection whose listener closes when the drain begins (set by the
/// accept loop).
#[derive(Clone, Copy)]
pub(crate) struct AcceptedBeforeDrain;

/// Cancelled when the drain starts. Behind an `Arc`: the stack is cloned per request, and a
/// token's clone takes a lock.
#[derive(Clone)]
pub(crate) struct Drain(pub Arc<CancellationToken>);

impl ValidateRequest<Inbound> for Drain {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<Inbound>) -> Result<(), Response<Body>> {
        if !self.0.is_cancelled() || request.extensions().get::<AcceptedBeforeDrain>().is_some() {
            return Ok(());
        }
        let id = match request.body() {
            Inbound::Modern(request) if request.retry_token().is_some() => return Ok(()),
            Inbound::Modern(request) => request.id.clone(),
            Inbound::Legacy(LegacyRequest::Initialize { id, .. }) => id.clone(),
            Inbound::Legacy(LegacyRequest::Session(_)) => return Ok(()),
        };
        Err(error_response(
            Some(id),
            &GatewayError::Busy("the gateway is shutting down".into()),
        ))
    }
}
