//! A route over several backends as the 2026-07-28 server a 2025-11-25 session reaches through
//! the reverse bridge: each of the bridge's requests is parsed and applied as a 2026-07-28
//! client's would be (the route's names, merged answers, rounds), and its response read back
//! as a backend's. The session's own door has checked the route's policy and keeps the audit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::HeaderMap;
use serde_json::json;

use super::ApplyOn;
use crate::access::CallerAccess;
use crate::backend::modern::{request_headers, Exchange, ModernEvent, ModernRequest};
use crate::backend::BackendError;
use crate::front::request::{parse, Parsed};
use crate::front::route::Route;
use crate::legacy::LocalServer;

/// The route over several backends, served to its 2025-11-25 sessions.
pub(crate) struct AggregateServer {
    /// The route's innermost service, without the audit (the door keeps it).
    via: Arc<dyn ApplyOn>,
    /// The route itself.
    route: Arc<Route>,
    /// Longest one request may take: the longest of the backends' `request_timeout`.
    request_timeout: Duration,
    next_id: AtomicU64,
}

impl AggregateServer {
    pub(crate) fn new(via: Arc<dyn ApplyOn>, route: Arc<Route>, request_timeout: Duration) -> Self {
        Self {
            via,
            route,
            request_timeout,
            next_id: AtomicU64::new(1),
        }
    }
}

impl LocalServer for AggregateServer {
    fn exchange(
        &self,
        caller: Arc<CallerAccess>,
        request: ModernRequest,
    ) -> BoxFuture<'static, Result<Exchange, BackendError>> {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (via, route) = (self.via.clone(), self.route.clone());
        Box::pin(async move {
            let message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request.method,
                "params": request.params,
            });
            let body = serde_json::to_vec(&message)
                .map_err(|e| BackendError::Closed(format!("request not written: {e}")))?;
            let mut headers = HeaderMap::new();
            request_headers(&request, &mut headers)?;
            let parsed = match parse(&headers, &body) {
                Ok(Parsed::Request(parsed)) => parsed,
                Ok(_) => {
                    return Err(BackendError::Closed(format!(
                        "{} is not a 2026-07-28 request",
                        request.method
                    )))
                }
                Err(rejection) => {
                    let error = rejection.error.to_jsonrpc();
                    return Ok(Exchange::answered(id, ModernEvent::Error { error }));
                }
            };
            match via.apply_on(route, None, parsed, caller, &headers).await {
                Ok(response) => Exchange::from_response(id, response).await,
                Err(error) => {
                    let error = error.to_jsonrpc();
                    Ok(Exchange::answered(id, ModernEvent::Error { error }))
                }
            }
        })
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }
}
