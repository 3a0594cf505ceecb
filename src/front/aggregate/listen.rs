//! `subscriptions/listen` on a route over several backends: one listen on each backend (its own
//! route's: a listening session, or the backend's own listen relayed), the resources subscribed
//! to given each to the backend they belong to, and their notifications merged into one stream.
//!
//! The client gets one acknowledgement (what any backend honours), then every backend's news
//! tagged with its listen id, hidden resources' updates left out, keep-alives in between. A
//! backend that cannot open its listen is left out (counted) or fails the listen, as
//! `on_backend_error` says. The listen ends with its result when the gateway drains or when
//! any backend's listen ends (its client listens again, and hears that backend again).
//! Closing the stream ends every backend's listen.
//!
//! The listen takes one place in `server.max_listens` (a 2025-11-25 session's, none: the
//! session is counted in `[legacy]`); its backends' listens take none.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::stream::{self, BoxStream, SelectAll};
use futures_util::StreamExt;
use http::{HeaderMap, Response};
use serde_json::{json, Map, Value};

use super::{Aggregate, ApplyOn, Member};
use crate::access::CallerAccess;
use crate::backend::modern::{Exchange, ModernEvent};
use crate::backend::BackendError;
use crate::error::GatewayError;
use crate::front::listen::{
    listen_response, listen_result, relayed_notice, tagged, Filter, Listens,
};
use crate::front::request::{Command, McpRequest};
use crate::http_serve::{sse_frame, Body, KEEP_ALIVE};
use crate::mrtr::quota::Place;
use crate::protocol::Method;

/// One backend's listen, read as its events.
type MemberEvents = BoxStream<'static, Result<ModernEvent, BackendError>>;

impl Aggregate {
    /// Opens the merged listen: each backend's, then one stream.
    pub(in crate::front) async fn listen(
        &self,
        via: &dyn ApplyOn,
        limits: &Listens,
        id: Value,
        (params, client_capabilities): (Map<String, Value>, Value),
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let filter = Filter::parse(&params)?;
        let place = limits.place(caller.principal())?;
        let mut by_member: Vec<Option<Vec<String>>> = vec![None; self.members.len()];
        if let Some(uris) = &filter.resource_subscriptions {
            if uris.iter().any(|uri| self.resources.owner(uri).is_none()) {
                self.learn_resources(via, caller, headers).await;
            }
            for uri in uris.iter().filter(|uri| caller.hears_of(uri)) {
                // A URI no backend lists or fits is nobody's: not subscribed, not acknowledged.
                if let Some(i) = self.resources.owner(uri) {
                    by_member[i].get_or_insert_with(Vec::new).push(uri.clone());
                }
            }
        }
        let opened = self.members.iter().zip(by_member).map(|(member, uris)| {
            let mut params = params.clone();
            if let Some(Value::Object(notifications)) = params.get_mut("notifications") {
                match uris {
                    Some(uris) => notifications.insert("resourceSubscriptions".into(), json!(uris)),
                    None => notifications.remove("resourceSubscriptions"),
                };
            }
            let command = Command::Listen {
                params,
                client_capabilities: client_capabilities.clone(),
            };
            self.open_one(via, member, &id, command, caller, headers)
        });
        let opened = join_all(opened).await;
        let mut honoured = Map::new();
        let mut merged = SelectAll::new();
        let mut first_failure = None;
        for (member, opened) in self.members.iter().zip(opened) {
            match opened {
                Ok((acknowledged, events)) => {
                    add_honoured(&mut honoured, &acknowledged);
                    merged.push(events);
                }
                Err(error) => {
                    let method = Method::SubscriptionsListen;
                    if let Some(failed) = self.part_failed(member, method, error)? {
                        first_failure.get_or_insert(failed);
                    }
                }
            }
        }
        if merged.is_empty() {
            return Err(first_failure.unwrap_or_else(|| {
                GatewayError::method_not_found(Method::SubscriptionsListen.as_str())
            }));
        }
        let acknowledged = tagged(
            "notifications/subscriptions/acknowledged",
            Some(&json!({ "notifications": honoured })),
            &id,
        );
        Ok(self.merged_stream(id, acknowledged, merged, caller.clone(), place))
    }

    /// One backend's listen, opened by its own route within `list_timeout`: its
    /// acknowledgement, and the rest of its events.
    async fn open_one(
        &self,
        via: &dyn ApplyOn,
        member: &Member,
        id: &Value,
        command: Command,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<(Value, MemberEvents), GatewayError> {
        let request = McpRequest {
            id: id.clone(),
            command,
            caller_trace: Vec::new(),
            body: Bytes::new(),
        };
        let member_caller = Arc::new(caller.under(&member.route.access));
        let (route, listens) = (member.route.clone(), Some(self.member_listens.clone()));
        let open = async {
            let response = via
                .apply_on(route, listens, request, member_caller, headers)
                .await?;
            let mut exchange = Exchange::from_response(id.clone(), response).await?;
            match exchange.next().await {
                Some(Ok(ModernEvent::Notify(first))) => Ok((first, exchange)),
                Some(Ok(ModernEvent::Error { error })) => Err(GatewayError::Backend(error)),
                Some(Ok(ModernEvent::Result(_))) | None => Err(GatewayError::Upstream(
                    BackendError::Closed("the listen ended at once".into()),
                )),
                Some(Err(error)) => Err(error.into()),
            }
        };
        let (first, exchange) = match tokio::time::timeout(self.list_timeout, open).await {
            Ok(opened) => opened?,
            Err(_) => {
                return Err(GatewayError::BackendTimeout(format!(
                    "the listen did not open within {:?}",
                    self.list_timeout
                )))
            }
        };
        let acknowledged = first
            .pointer("/params/notifications")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let events = stream::unfold(exchange, |mut exchange| async move {
            let event = exchange.next().await?;
            Some((event, exchange))
        })
        .boxed();
        Ok((acknowledged, events))
    }

    /// The merged stream: the acknowledgement, then every backend's news, keep-alives between.
    fn merged_stream(
        &self,
        id: Value,
        acknowledged: Value,
        merged: SelectAll<MemberEvents>,
        caller: Arc<CallerAccess>,
        place: Place,
    ) -> Response<Body> {
        let first = stream::once(async move { sse_frame(&acknowledged) });
        let mut keep_alive = tokio::time::interval(self.listens.keep_alive);
        keep_alive.reset();
        let drain = self.listens.drain.clone();
        let state = Some((merged, keep_alive, id, caller, drain, place));
        let rest = stream::unfold(state, |state| async move {
            let (mut merged, mut keep_alive, id, caller, drain, place) = state?;
            loop {
                tokio::select! {
                    biased;
                    _ = drain.cancelled() => return Some((listen_result(id), None)),
                    event = merged.next() => match event {
                        Some(Ok(ModernEvent::Notify(notice))) => {
                            if let Some(message) = relayed_notice(&notice, &caller, &id) {
                                let frame = sse_frame(&message);
                                return Some((frame, Some((merged, keep_alive, id, caller, drain, place))));
                            }
                        }
                        // One backend's listen ended (its answer, or its stream failing): so
                        // does this one, so that its client listens again and hears that
                        // backend again.
                        Some(_) | None => return Some((listen_result(id), None)),
                    },
                    _ = keep_alive.tick() => {
                        let frame = Bytes::from_static(KEEP_ALIVE);
                        return Some((frame, Some((merged, keep_alive, id, caller, drain, place))));
                    }
                }
            }
        });
        listen_response(first.chain(rest))
    }
}

/// What one backend's acknowledgement honours, added to the listen's: flags any backend
/// honours, and every backend's resource subscriptions.
fn add_honoured(into: &mut Map<String, Value>, acknowledged: &Value) {
    let Some(honoured) = acknowledged.as_object() else {
        return;
    };
    for (key, value) in honoured {
        match (key.as_str(), value) {
            ("resourceSubscriptions", Value::Array(uris)) => {
                let all = into
                    .entry(key.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(all) = all {
                    all.extend(uris.iter().cloned());
                }
            }
            (_, Value::Bool(true)) => {
                into.insert(key.clone(), Value::Bool(true));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acknowledgement_is_what_any_backend_honours() {
        let mut honoured = Map::new();
        add_honoured(
            &mut honoured,
            &json!({"toolsListChanged": true, "resourceSubscriptions": ["a://1"]}),
        );
        add_honoured(
            &mut honoured,
            &json!({"promptsListChanged": true, "resourceSubscriptions": ["b://2"]}),
        );
        add_honoured(&mut honoured, &json!("not an object"));
        assert_eq!(
            Value::Object(honoured),
            json!({"toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["a://1", "b://2"]})
        );
    }
}
