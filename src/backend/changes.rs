//! What a backend announces outside any call: its tool, prompt and resource lists changed, or a
//! subscribed resource was updated. In 2025-11-25 these are session-scoped notifications; here
//! they are gathered per principal, from every session of that principal (the pool's call
//! sessions and its listening session), into one [`Feed`] that listeners subscribe to. A
//! principal's feed never carries another principal's notifications.
//!
//! The same list change often arrives on several sessions of one principal: one per
//! [`DEDUP_WINDOW`] is published. Every list change, whoever hears it, is also recorded for the
//! whole backend ([`ListChanges`]), so that what the gateway learned from the backend before it
//! is forgotten: the `x-mcp-header` annotations of an older tool list, the `InitializeResult`
//! of a session started before the change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::sync::{LockRecovered, RwLockRecovered};

/// Within this window, a repeated list change of one principal is published once.
pub(crate) const DEDUP_WINDOW: Duration = Duration::from_millis(250);
/// Changes a slow listener may fall behind by before it misses some.
const FEED_CAPACITY: usize = 256;

/// One change a backend announced.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    ToolsListChanged,
    PromptsListChanged,
    ResourcesListChanged,
    /// `notifications/resources/updated` params, as sent (`uri`, and anything else).
    ResourceUpdated(Value),
}

impl Change {
    /// The change a backend notification announces, if it is one.
    pub fn from_notification(method: &str, params: &Value) -> Option<Self> {
        match method {
            "notifications/tools/list_changed" => Some(Self::ToolsListChanged),
            "notifications/prompts/list_changed" => Some(Self::PromptsListChanged),
            "notifications/resources/list_changed" => Some(Self::ResourcesListChanged),
            "notifications/resources/updated"
                if params.get("uri").is_some_and(Value::is_string) =>
            {
                Some(Self::ResourceUpdated(params.clone()))
            }
            _ => None,
        }
    }

    /// The notification's method, the same in both revisions.
    pub fn method(&self) -> &'static str {
        match self {
            Self::ToolsListChanged => "notifications/tools/list_changed",
            Self::PromptsListChanged => "notifications/prompts/list_changed",
            Self::ResourcesListChanged => "notifications/resources/list_changed",
            Self::ResourceUpdated(_) => "notifications/resources/updated",
        }
    }

    /// The updated resource's URI.
    pub fn uri(&self) -> Option<&str> {
        match self {
            Self::ResourceUpdated(params) => params.get("uri").and_then(Value::as_str),
            _ => None,
        }
    }
}

/// What every feed of one backend records of its list changes, whoever hears them.
#[derive(Default)]
struct ListChanges {
    /// Tool list changes so far.
    tools_generation: AtomicU64,
    /// When any list last changed.
    last: RwLock<Option<Instant>>,
}

/// One principal's changes.
pub(crate) struct Feed {
    sender: broadcast::Sender<Change>,
    lists: Arc<ListChanges>,
    /// When each kind of list change was last published.
    last_list_change: Mutex<HashMap<&'static str, Instant>>,
}

impl Feed {
    fn new(lists: Arc<ListChanges>) -> Self {
        Self {
            sender: broadcast::channel(FEED_CAPACITY).0,
            lists,
            last_list_change: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes a change to this principal's listeners; a list change seen within
    /// [`DEDUP_WINDOW`] is dropped. Returns whether it was published.
    pub(crate) fn publish(&self, change: Change) -> bool {
        if !matches!(change, Change::ResourceUpdated(_)) {
            let now = Instant::now();
            // What the gateway learned from the backend is stale, whoever listens.
            if change == Change::ToolsListChanged {
                self.lists.tools_generation.fetch_add(1, Ordering::AcqRel);
            }
            *self.lists.last.write_recovered() = Some(now);
            let mut last = self.last_list_change.lock_recovered();
            if last
                .get(change.method())
                .is_some_and(|at| now.duration_since(*at) < DEDUP_WINDOW)
            {
                return false;
            }
            last.insert(change.method(), now);
        }
        // No listener: nothing to do.
        let _ = self.sender.send(change);
        true
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.sender.subscribe()
    }
}

/// The feeds of one backend, by principal.
#[derive(Default)]
pub(crate) struct Feeds {
    by_principal: Mutex<HashMap<String, Arc<Feed>>>,
    lists: Arc<ListChanges>,
}

impl Feeds {
    /// The principal's feed, created on first use.
    pub(crate) fn of(&self, principal: &str) -> Arc<Feed> {
        let mut feeds = self.by_principal.lock_recovered();
        if let Some(feed) = feeds.get(principal) {
            return feed.clone();
        }
        let feed = Arc::new(Feed::new(self.lists.clone()));
        feeds.insert(principal.to_string(), feed.clone());
        feed
    }

    /// How many tool list changes any session of the backend announced so far.
    pub(crate) fn tools_generation(&self) -> u64 {
        self.lists.tools_generation.load(Ordering::Acquire)
    }

    /// When any session of the backend last announced a list change.
    pub(crate) fn last_list_change(&self) -> Option<Instant> {
        *self.lists.last.read_recovered()
    }

    /// Forgets feeds nobody listens to and no session publishes to.
    pub(crate) fn prune(&self) {
        self.by_principal
            .lock_recovered()
            .retain(|_, feed| Arc::strong_count(feed) > 1 || feed.sender.receiver_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn notifications_become_changes() {
        assert_eq!(
            Change::from_notification("notifications/tools/list_changed", &json!({})),
            Some(Change::ToolsListChanged)
        );
        let updated = Change::from_notification(
            "notifications/resources/updated",
            &json!({"uri": "file:///a", "title": "A"}),
        )
        .unwrap();
        assert_eq!(updated.uri(), Some("file:///a"));
        assert_eq!(
            Change::from_notification("notifications/resources/updated", &json!({})),
            None
        );
        assert_eq!(
            Change::from_notification("notifications/progress", &json!({})),
            None
        );
    }

    #[test]
    fn a_list_change_repeated_at_once_is_published_once_and_principals_stay_apart() {
        let feeds = Feeds::default();
        let alice = feeds.of("alice");
        let mut heard = alice.subscribe();
        let mut bob_heard = feeds.of("bob").subscribe();
        assert!(alice.publish(Change::ToolsListChanged));
        assert!(!alice.publish(Change::ToolsListChanged), "a duplicate");
        assert!(alice.publish(Change::PromptsListChanged), "another kind");
        let update = Change::ResourceUpdated(json!({"uri": "file:///a"}));
        assert!(alice.publish(update.clone()));
        assert!(alice.publish(update.clone()), "updates are never merged");
        assert_eq!(heard.try_recv().unwrap(), Change::ToolsListChanged);
        assert_eq!(heard.try_recv().unwrap(), Change::PromptsListChanged);
        assert_eq!(heard.try_recv().unwrap(), update);
        assert_eq!(heard.try_recv().unwrap(), update);
        assert!(heard.try_recv().is_err());
        assert!(
            bob_heard.try_recv().is_err(),
            "bob hears nothing of alice's"
        );
        assert_eq!(feeds.tools_generation(), 2, "every tool list change counts");
        assert!(feeds.last_list_change().is_some());
        let others = Feeds::default();
        others
            .of("carol")
            .publish(Change::ResourceUpdated(json!({"uri": "file:///a"})));
        assert_eq!(
            others.last_list_change(),
            None,
            "an update is no list change"
        );
        others.of("carol").publish(Change::ResourcesListChanged);
        assert!(others.last_list_change().is_some());
    }

    #[test]
    fn unused_feeds_are_pruned() {
        let feeds = Feeds::default();
        let kept = feeds.of("alice");
        let listened = feeds.of("bob").subscribe();
        drop(feeds.of("carol"));
        feeds.prune();
        assert_eq!(feeds.by_principal.lock_recovered().len(), 2);
        drop((kept, listened));
        feeds.prune();
        assert!(feeds.by_principal.lock_recovered().is_empty());
    }
}
