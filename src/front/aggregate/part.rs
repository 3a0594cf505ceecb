//! One backend's part of a merged answer (a list page, `server/discover`, the pages read to
//! learn URIs): the request applied by the backend's own route, its response read back.
//!
//! A part has `list_timeout` to answer. One that is late is not dropped: it finishes in the
//! background (at most one per backend at a time, ended by the drain), so that a backend whose
//! first session takes longer to start than `list_timeout` is ready for the next answer instead
//! of being started again, and cut off again, by each one.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::{Map, Value};

use super::{Aggregate, ApplyOn, Member};
use crate::access::CallerAccess;
use crate::backend::modern::{Exchange, ModernEvent};
use crate::error::GatewayError;
use crate::front::request::{Command, McpRequest};
use crate::http_serve::Body;

/// One backend's part of a merged answer: its result, or why it has none.
pub(super) type Part = Result<Map<String, Value>, GatewayError>;

type PartFuture = Pin<Box<dyn Future<Output = Part> + Send>>;

/// The id a part's request goes with, which its answer carries.
fn part_id() -> Value {
    Value::from(0)
}

impl Aggregate {
    /// One backend's part: `command` applied by the backend's own route within `list_timeout`,
    /// and its result read.
    pub(super) async fn part(
        &self,
        via: &dyn ApplyOn,
        member: &Member,
        command: Command,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Part {
        let request = McpRequest {
            id: part_id(),
            command,
            caller_trace: Vec::new(),
            body: Bytes::new(),
        };
        let member_caller = Arc::new(caller.under(&member.route.access));
        let (via, route, headers) = (via.to_shared(), member.route.clone(), headers.clone());
        let mut work: PartFuture = Box::pin(async move {
            let response = via
                .apply_on(route, None, request, member_caller, &headers)
                .await?;
            result_of(response).await
        });
        tokio::select! {
            part = &mut work => part,
            () = tokio::time::sleep(self.list_timeout) => {
                self.finish_in_background(member, work);
                Err(GatewayError::BackendTimeout(format!(
                    "no answer within {:?}",
                    self.list_timeout
                )))
            }
        }
    }

    /// Lets a late part run to its end (its route's own timeouts bound it), unless one of the
    /// backend's is already finishing or the gateway drains.
    fn finish_in_background(&self, member: &Member, work: PartFuture) {
        if member.finishing.swap(true, Ordering::AcqRel) {
            return;
        }
        let finishing = member.finishing.clone();
        let drain = self.listens.drain.clone();
        self.late_parts.spawn(async move {
            tokio::select! {
                _ = work => {}
                () = drain.cancelled() => {}
            }
            finishing.store(false, Ordering::Release);
        });
    }
}

/// The result of a response a route wrote (a JSON answer, or an SSE stream ending with it),
/// read as a backend's exchange is; an error answer as the error.
async fn result_of(response: Response<Body>) -> Part {
    let mut exchange = Exchange::from_response(part_id(), response).await?;
    loop {
        match exchange.next().await {
            Some(Ok(ModernEvent::Notify(_))) => continue,
            Some(Ok(ModernEvent::Result(result))) => {
                return serde_json::from_str(result.get()).map_err(|_| {
                    GatewayError::Internal("a backend's part is not an object".into())
                })
            }
            Some(Ok(ModernEvent::Error { error })) => return Err(GatewayError::Backend(error)),
            Some(Err(error)) => return Err(error.into()),
            None => {
                return Err(GatewayError::Internal(
                    "a backend's part had no answer".into(),
                ))
            }
        }
    }
}
