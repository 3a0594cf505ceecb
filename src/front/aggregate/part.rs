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
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};

use super::{Aggregate, ApplyOn, Member};
use crate::access::CallerAccess;
use crate::error::GatewayError;
use crate::front::request::{Command, McpRequest};
use crate::http_serve::Body;
use crate::jsonrpc::JsonRpcError;

/// One backend's part of a merged answer: its result, or why it has none.
pub(super) type Part = Result<Map<String, Value>, GatewayError>;

type PartFuture = Pin<Box<dyn Future<Output = Part> + Send>>;

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
            id: json!(0),
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

/// The result of a response a route wrote (a JSON body, or an SSE stream whose last message is
/// the answer); an error answer as the error.
async fn result_of(response: Response<Body>) -> Part {
    let stream = crate::http_client::is_event_stream(response.headers());
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| GatewayError::Internal(format!("reading a backend's part: {e}")))?
        .to_bytes();
    let message: Option<Value> = if stream {
        let text = String::from_utf8_lossy(&body);
        text.split("\n\n")
            .filter_map(|event| {
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                serde_json::from_str::<Value>(&data.join("\n")).ok()
            })
            .filter(|m| m.get("result").is_some() || m.get("error").is_some())
            .last()
    } else {
        serde_json::from_slice(&body).ok()
    };
    let Some(mut message) = message else {
        return Err(GatewayError::Internal(
            "a backend's part had no answer".into(),
        ));
    };
    if let Some(Value::Object(result)) = message.get_mut("result").map(Value::take) {
        return Ok(result);
    }
    let error = message
        .get_mut("error")
        .map(Value::take)
        .and_then(|e| serde_json::from_value::<JsonRpcError>(e).ok())
        .unwrap_or_else(|| JsonRpcError::new(crate::jsonrpc::codes::INTERNAL_ERROR, "no result"));
    Err(GatewayError::Backend(error))
}
