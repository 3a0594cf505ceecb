//! Draining as a layer: once the gateway is stopping, new calls get 503 while retries of held
//! calls are still served, so the rounds in flight can finish.

use std::sync::Arc;

use http::{Request, Response};
use tokio_util::sync::CancellationToken;
use tower_http::validate_request::ValidateRequest;

use super::request::McpRequest;
use crate::error::GatewayError;
use crate::http_serve::{error_response, Body};

/// Cancelled when the drain starts. Behind an `Arc`: the stack is cloned per request, and a
/// token's clone takes a lock.
#[derive(Clone)]
pub struct Drain(pub Arc<CancellationToken>);

impl ValidateRequest<McpRequest> for Drain {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<McpRequest>) -> Result<(), Response<Body>> {
        let request = request.body();
        if self.0.is_cancelled() && !request.resumes_held_call() {
            return Err(error_response(
                Some(request.id.clone()),
                &GatewayError::Busy("the gateway is shutting down".into()),
            ));
        }
        Ok(())
    }
}
