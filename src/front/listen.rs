//! `subscriptions/listen`: a long-lived SSE stream of the backend's list changes and resource
//! updates, as its 2026-07-28 client asked for them. (A 2026-07-28 backend's own listen is
//! relayed instead: [`Listens::relay`].)
//!
//! The filter is parsed once ([`Filter`]); what the backend can deliver is honoured (its
//! `listChanged` and `resources.subscribe` capabilities) and acknowledged first
//! (`notifications/subscriptions/acknowledged`). Then every matching change of the principal's
//! feed goes out with `_meta["io.modelcontextprotocol/subscriptionId"]` equal to the listen id,
//! keep-alive comments in between. The client closing the stream ends the listen (its
//! [`ListenGuard`] unsubscribes what no one else listens to); the gateway's drain ends it with
//! the `SubscriptionsListenResult`. Logs and progress never go on a listen stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use futures_util::StreamExt;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::route::Route;
use crate::access::CallerAccess;
use crate::backend::changes::Change;
use crate::backend::identity::SessionIdentity;
use crate::backend::listen::ListenGuard;
use crate::backend::modern::{Exchange, ModernEvent, ModernRequest};
use crate::backend::BackendError;
use crate::error::{GatewayError, HeldError};
use crate::http_serve::{sse_frame, sse_response, Body, KEEP_ALIVE};
use crate::jsonrpc;
use crate::mrtr::quota::{Place, Quota};
use crate::protocol::{Method, META_CLIENT_CAPABILITIES};

/// `_meta` key naming the listen a notification belongs to.
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What a listen asked for (`params.notifications`), or what it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    pub resources_list_changed: bool,
    /// `None`: not asked for; `Some`, possibly empty: these URIs.
    pub resource_subscriptions: Option<Vec<String>>,
}

impl Filter {
    /// Parses `params.notifications`; a missing filter asks for nothing.
    pub(crate) fn parse(params: &Map<String, Value>) -> Result<Self, GatewayError> {
        let Some(notifications) = params.get("notifications") else {
            return Ok(Self::default());
        };
        let Some(notifications) = notifications.as_object() else {
            return Err(GatewayError::invalid_params(
                "notifications must be an object",
            ));
        };
        let flag = |key: &str| match notifications.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(on)) => Ok(*on),
            Some(_) => Err(GatewayError::invalid_params(format!(
                "notifications.{key} must be a boolean"
            ))),
        };
        let resource_subscriptions = match notifications.get("resourceSubscriptions") {
            None | Some(Value::Null) => None,
            Some(Value::Array(uris)) => Some(
                uris.iter()
                    .map(|uri| uri.as_str().map(String::from))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        GatewayError::invalid_params(
                            "notifications.resourceSubscriptions must be an array of strings",
                        )
                    })?,
            ),
            Some(_) => {
                return Err(GatewayError::invalid_params(
                    "notifications.resourceSubscriptions must be an array of strings",
                ))
            }
        };
        Ok(Self {
            tools_list_changed: flag("toolsListChanged")?,
            prompts_list_changed: flag("promptsListChanged")?,
            resources_list_changed: flag("resourcesListChanged")?,
            resource_subscriptions,
        })
    }

    /// The part of this filter a backend with these 2025-11-25 capabilities can deliver.
    pub(crate) fn honoured(&self, capabilities: &Value) -> Self {
        let offers = |kind: &str, flag: &str| {
            capabilities
                .get(kind)
                .and_then(|c| c.get(flag))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            tools_list_changed: self.tools_list_changed && offers("tools", "listChanged"),
            prompts_list_changed: self.prompts_list_changed && offers("prompts", "listChanged"),
            resources_list_changed: self.resources_list_changed
                && offers("resources", "listChanged"),
            resource_subscriptions: self
                .resource_subscriptions
                .clone()
                .filter(|_| offers("resources", "subscribe")),
        }
    }

    /// The `notifications` object of the acknowledgement: the fields honoured, nothing else.
    pub(crate) fn to_value(&self) -> Value {
        let mut out = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if on {
                out.insert(key.into(), Value::Bool(true));
            }
        }
        if let Some(uris) = &self.resource_subscriptions {
            out.insert("resourceSubscriptions".into(), json!(uris));
        }
        Value::Object(out)
    }

    /// Whether this listen wants the change. An update of a sub-resource of a subscribed URI
    /// counts.
    pub(crate) fn wants(&self, change: &Change) -> bool {
        match change {
            Change::ToolsListChanged => self.tools_list_changed,
            Change::PromptsListChanged => self.prompts_list_changed,
            Change::ResourcesListChanged => self.resources_list_changed,
            Change::ResourceUpdated(_) => {
                let (Some(uris), Some(updated)) = (&self.resource_subscriptions, change.uri())
                else {
                    return false;
                };
                uris.iter().any(|uri| {
                    updated == uri
                        || updated
                            .strip_prefix(uri.as_str())
                            .is_some_and(|rest| uri.ends_with('/') || rest.starts_with('/'))
                })
            }
        }
    }
}

/// What a listen needs from the front.
pub(crate) struct Listens {
    pub quota: Arc<Quota>,
    pub keep_alive: Duration,
    /// Cancelled when the gateway starts to drain: every listen then ends with its result.
    pub drain: CancellationToken,
}

impl Listens {
    /// Opens a listen: its place in the limits, the principal's listening session, and the
    /// stream.
    pub(crate) async fn open(
        &self,
        route: &Route,
        caller: Arc<CallerAccess>,
        id: Value,
        params: &Map<String, Value>,
    ) -> Result<Response<Body>, GatewayError> {
        let mut filter = Filter::parse(params)?;
        // A resource the policy hides is not subscribed to: the backend hears nothing of it.
        if let Some(uris) = filter.resource_subscriptions.as_mut() {
            uris.retain(|uri| caller.hears_of(uri));
        }
        let principal = caller.principal().to_string();
        let identity = caller.session_identity().await?;
        let place = self.place(&principal)?;
        // Subscribed before the session starts, so nothing it hears first is missed.
        let pool = route.pool()?;
        let changes = pool.changes(&principal);
        let uris = filter.resource_subscriptions.clone().unwrap_or_default();
        let guard = pool.listen(&principal, identity, &uris);
        let init = guard.init(pool.init_timeout()).await.ok_or_else(|| {
            GatewayError::Upstream(crate::backend::BackendError::Initialize(
                "the listening session did not start".into(),
            ))
        })?;
        let honoured = filter.honoured(init.get("capabilities").unwrap_or(&Value::Null));
        Ok(stream_listen(
            id,
            honoured,
            caller,
            changes,
            Held {
                _guard: guard,
                _place: place,
            },
            self.keep_alive,
            self.drain.clone(),
        ))
    }
}

impl Listens {
    /// A listen on a 2026-07-28 backend: its own `subscriptions/listen`, relayed. Hidden
    /// resources are not subscribed to, and their updates not told; every notification carries
    /// this listen's id. An answer that ends the listen before anything else is the client's
    /// as it is (a JSON error, with its status); the client closing the stream cancels the
    /// backend's listen, and the gateway's drain ends it with the listen's result.
    pub(crate) async fn relay(
        &self,
        route: &Route,
        caller: Arc<CallerAccess>,
        identity: Arc<SessionIdentity>,
        id: Value,
        (mut params, client_capabilities): (Map<String, Value>, Value),
    ) -> Result<Response<Body>, GatewayError> {
        let mut filter = Filter::parse(&params)?;
        if let Some(uris) = filter.resource_subscriptions.as_mut() {
            uris.retain(|uri| caller.hears_of(uri));
            if let Some(Value::Object(notifications)) = params.get_mut("notifications") {
                notifications.insert("resourceSubscriptions".into(), json!(uris));
            }
        }
        let place = self.place(caller.principal())?;
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_CLIENT_CAPABILITIES.into(), client_capabilities);
        }
        let request = ModernRequest {
            method: Method::SubscriptionsListen.as_str().to_string(),
            params: Value::Object(params),
            name: None,
            headers: Vec::new(),
        };
        let pool = route.pool()?;
        let modern = pool.modern();
        let wait = pool.request_timeout();
        let opened = async {
            let mut exchange = modern.send(&identity, &request).await?;
            let first = exchange.next().await;
            Ok::<_, BackendError>((exchange, first))
        };
        let (exchange, first) = match tokio::time::timeout(wait, opened).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(error)) => {
                modern.failed(&error);
                return Err(error.into());
            }
            Err(_) => return Err(GatewayError::BackendTimeout(format!("{wait:?}"))),
        };
        let first = match first {
            Some(Ok(ModernEvent::Notify(first))) => first,
            Some(Ok(ModernEvent::Error { error })) => {
                return Err(GatewayError::from_modern_backend(
                    error,
                    Method::SubscriptionsListen.as_str(),
                ))
            }
            Some(Ok(ModernEvent::Result(_))) | None => {
                return Err(GatewayError::Upstream(BackendError::Closed(
                    "the backend ended the listen at once".into(),
                )))
            }
            Some(Err(error)) => return Err(error.into()),
        };
        Ok(stream_relayed(
            id,
            first,
            exchange,
            caller,
            place,
            self.keep_alive,
            self.drain.clone(),
        ))
    }

    /// A listen's place in the limits, given back when its stream ends.
    pub(super) fn place(&self, principal: &str) -> Result<Place, GatewayError> {
        self.quota
            .place(principal.to_string())
            .map_err(|error| match error {
                HeldError::Full(n) => GatewayError::ListenLimit(format!("{n} listens are open")),
                HeldError::PrincipalFull(n) => {
                    GatewayError::ListenLimit(format!("{n} of this client's listens are open"))
                }
            })
    }
}

/// A backend's listen notification as this listen's client gets it: tagged with its id, or
/// `None` for one it is not told (a hidden resource's update, anything that is not news).
pub(super) fn relayed_notice(notice: &Value, caller: &CallerAccess, id: &Value) -> Option<Value> {
    let method = notice.get("method").and_then(Value::as_str)?;
    let params = notice.get("params");
    match method {
        "notifications/resources/updated" => {
            let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str)?;
            caller.hears_of(uri).then(|| tagged(method, params, id))
        }
        "notifications/subscriptions/acknowledged"
        | "notifications/tools/list_changed"
        | "notifications/prompts/list_changed"
        | "notifications/resources/list_changed" => Some(tagged(method, params, id)),
        _ => None,
    }
}

fn stream_relayed(
    id: Value,
    first: Value,
    exchange: Exchange,
    caller: Arc<CallerAccess>,
    place: Place,
    keep_alive: Duration,
    drain: CancellationToken,
) -> Response<Body> {
    let first = relayed_notice(&first, &caller, &id);
    let first = stream::iter(first.map(|first| sse_frame(&first)));
    let mut keep_alive = tokio::time::interval(keep_alive);
    keep_alive.reset();
    let state = Some((exchange, keep_alive, place, id, caller, drain));
    let rest = stream::unfold(state, |state| async move {
        let (mut exchange, mut keep_alive, place, id, caller, drain) = state?;
        loop {
            tokio::select! {
                // The drain first: the backend's processes stop right after it, and the listen
                // ends with its result, not with their end.
                biased;
                _ = drain.cancelled() => {
                    return Some((listen_result(id), None));
                }
                event = exchange.next() => match event {
                    Some(Ok(ModernEvent::Notify(notice))) => {
                        if let Some(message) = relayed_notice(&notice, &caller, &id) {
                            return Some((sse_frame(&message), Some((exchange, keep_alive, place, id, caller, drain))));
                        }
                    }
                    // The backend ended the listen: its result, as this listen's.
                    Some(Ok(ModernEvent::Result(_))) => {
                        return Some((listen_result(id), None));
                    }
                    Some(Ok(ModernEvent::Error { error })) => {
                        let error = GatewayError::from_modern_backend(error, Method::SubscriptionsListen.as_str());
                        let message = jsonrpc::error_response(Some(id), &error.to_jsonrpc());
                        return Some((sse_frame(&message), None));
                    }
                    Some(Err(error)) => {
                        let error = GatewayError::from(error);
                        let message = jsonrpc::error_response(Some(id), &error.to_jsonrpc());
                        return Some((sse_frame(&message), None));
                    }
                    None => return None,
                },
                _ = keep_alive.tick() => {
                    return Some((Bytes::from_static(KEEP_ALIVE), Some((exchange, keep_alive, place, id, caller, drain))));
                }
            }
        }
    });
    listen_response(first.chain(rest))
}

/// A listen's response: its SSE frames as they come.
pub(super) fn listen_response(
    frames: impl futures_util::Stream<Item = Bytes> + Send + 'static,
) -> Response<Body> {
    let frames = frames.map(|bytes| Ok::<_, tower::BoxError>(Frame::data(bytes)));
    sse_response(
        StreamBody::new(frames).boxed_unsync(),
        Method::SubscriptionsListen,
        "stream",
    )
}

/// What a listen holds while its stream is open.
struct Held {
    _guard: ListenGuard,
    _place: Place,
}

/// The `SubscriptionsListenResult` that ends a listen, as its stream's last event.
pub(super) fn listen_result(id: Value) -> Bytes {
    let result = json!({
        "resultType": "complete",
        "_meta": { META_SUBSCRIPTION_ID: id },
    });
    sse_frame(&jsonrpc::result_response(id, result))
}

pub(super) fn tagged(method: &str, params: Option<&Value>, id: &Value) -> Value {
    let mut params = match params {
        Some(Value::Object(params)) => params.clone(),
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_SUBSCRIPTION_ID.into(), id.clone());
    }
    jsonrpc::notification(method, Some(Value::Object(params)))
}

fn stream_listen(
    id: Value,
    filter: Filter,
    caller: Arc<CallerAccess>,
    changes: broadcast::Receiver<Change>,
    held: Held,
    keep_alive: Duration,
    drain: CancellationToken,
) -> Response<Body> {
    let acknowledged = tagged(
        "notifications/subscriptions/acknowledged",
        Some(&json!({ "notifications": filter.to_value() })),
        &id,
    );
    let first = stream::once(async move { sse_frame(&acknowledged) });
    let mut keep_alive = tokio::time::interval(keep_alive);
    keep_alive.reset();
    let state = Some((changes, keep_alive, held, id, (filter, caller), drain));
    let rest = stream::unfold(state, |state| async move {
        let (mut changes, mut keep_alive, held, id, (filter, caller), drain) = state?;
        loop {
            tokio::select! {
                _ = drain.cancelled() => {
                    return Some((listen_result(id), None));
                }
                change = changes.recv() => match change {
                    // An update of a resource the policy hides (on a path subscribed to) is
                    // not told.
                    Ok(change)
                        if filter.wants(&change)
                            && change.uri().is_none_or(|uri| caller.hears_of(uri)) =>
                    {
                        let params = match &change {
                            Change::ResourceUpdated(params) => Some(params),
                            _ => None,
                        };
                        let message = tagged(change.method(), params, &id);
                        return Some((sse_frame(&message), Some((changes, keep_alive, held, id, (filter, caller), drain))));
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "a listen fell behind; changes were missed");
                        continue;
                    }
                    // The backend's feed is gone (the pool shut down).
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = keep_alive.tick() => {
                    return Some((Bytes::from_static(KEEP_ALIVE), Some((changes, keep_alive, held, id, (filter, caller), drain))));
                }
            }
        }
    });
    listen_response(first.chain(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(value: Value) -> Result<Filter, GatewayError> {
        let mut params = Map::new();
        params.insert("notifications".into(), value);
        Filter::parse(&params)
    }

    #[test]
    fn the_filter_is_parsed_and_honoured_as_the_backend_can() {
        let asked = filter(json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourceSubscriptions": ["file:///a/"]
        }))
        .unwrap();
        let capabilities = json!({"tools": {"listChanged": true}, "prompts": {}, "resources": {"subscribe": true}});
        let honoured = asked.honoured(&capabilities);
        assert_eq!(
            honoured.to_value(),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a/"]})
        );
        assert!(honoured.wants(&Change::ToolsListChanged));
        assert!(!honoured.wants(&Change::PromptsListChanged));
        assert!(honoured.wants(&Change::ResourceUpdated(json!({"uri": "file:///a/b"}))));
        assert!(!honoured.wants(&Change::ResourceUpdated(json!({"uri": "file:///ab"}))));
        assert_eq!(
            asked.honoured(&json!({})).to_value(),
            json!({}),
            "a backend that offers nothing honours nothing"
        );
    }

    #[test]
    fn a_bad_filter_is_invalid_params() {
        for bad in [
            json!([]),
            json!({"toolsListChanged": "yes"}),
            json!({"resourceSubscriptions": "file:///a"}),
            json!({"resourceSubscriptions": [1]}),
        ] {
            assert!(
                matches!(filter(bad.clone()), Err(GatewayError::InvalidParams { .. })),
                "{bad}"
            );
        }
        assert_eq!(Filter::parse(&Map::new()).unwrap(), Filter::default());
    }

    #[test]
    fn notifications_carry_the_listen_id_with_its_type() {
        let message = tagged(
            "notifications/resources/updated",
            Some(&json!({"uri": "file:///a", "_meta": {"x": 1}})),
            &json!(7),
        );
        assert_eq!(message["params"]["uri"], "file:///a");
        assert_eq!(message["params"]["_meta"]["x"], 1);
        assert_eq!(message["params"]["_meta"][META_SUBSCRIPTION_ID], json!(7));
        let message = tagged("notifications/tools/list_changed", None, &json!("l-1"));
        assert_eq!(
            message["params"]["_meta"][META_SUBSCRIPTION_ID],
            json!("l-1")
        );
    }
}
