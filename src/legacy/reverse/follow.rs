//! The reverse bridge's one listen per session: the list changes the 2026-07-28 backend
//! announces and the resources the client subscribed to, passed on as 2025-11-25
//! notifications (the session places them on its GET stream).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::Inner;
use crate::backend::modern::{ModernEvent, ModernRequest};
use crate::backend::TransportEvent;
use crate::sync::LockRecovered;

impl Inner {
    /// Keeps one listen open for the resources subscribed to and the list changes the backend
    /// announces (nothing to follow: no listen).
    pub(super) fn follow_subscriptions(self: Arc<Self>) {
        let (filter, previous, listen) = {
            let mut state = self.state.lock_recovered();
            let mut filter = state.list_changes.clone();
            if !state.subscribed.is_empty() {
                filter.insert("resourceSubscriptions".into(), json!(state.subscribed));
            }
            let listen = (!filter.is_empty()).then(|| self.ended.child_token());
            let previous = std::mem::replace(&mut state.listen, listen.clone());
            (filter, previous, listen)
        };
        if let Some(previous) = previous {
            previous.cancel();
        }
        let Some(listen) = listen else {
            return;
        };
        let inner = self.clone();
        self.tasks.spawn(async move {
            let params = inner.modern_params(Map::from_iter([(
                "notifications".to_string(),
                Value::Object(filter),
            )]));
            let request = ModernRequest {
                method: "subscriptions/listen".into(),
                params,
                name: None,
                headers: Vec::new(),
            };
            let follow = async {
                let Ok(mut exchange) = inner.upstream.send(request).await else {
                    return;
                };
                while let Some(Ok(ModernEvent::Notify(mut notice))) = exchange.next().await {
                    let method = notice.get("method").and_then(Value::as_str);
                    if !method.is_some_and(|m| FOLLOWED.contains(&m)) {
                        continue;
                    }
                    // The subscription is the gateway's; the client knows none.
                    if let Some(params) = notice.get_mut("params").and_then(Value::as_object_mut) {
                        params.remove("_meta");
                    }
                    let _ = inner.events.send(TransportEvent::Message(notice)).await;
                }
            };
            tokio::select! {
                () = follow => {}
                () = listen.cancelled() => {}
            }
        });
    }
}

/// What a session's listen passes on to its client.
const FOLLOWED: [&str; 4] = [
    "notifications/resources/updated",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// The list changes a backend's capabilities announce, as a listen's filter asks for them.
pub(super) fn list_changes(capabilities: &Value) -> Map<String, Value> {
    [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ]
    .into_iter()
    .filter(|(kind, _)| capabilities[kind]["listChanged"] == json!(true))
    .map(|(_, flag)| (flag.to_string(), json!(true)))
    .collect()
}
