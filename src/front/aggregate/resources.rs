//! Which backend of a route over several a resource URI belongs to: a configured URI prefix
//! first, then the backend whose `resources/list` named the URI, then the backend one of whose
//! templates the URI fits (by the template's text before its first variable).

use dashmap::DashMap;
use serde_json::Value;

/// URIs remembered before the table is started again (a backend listing millions of resources
/// must not grow the gateway without bound; a URI forgotten is learned again by listing).
const MAX_LEARNED: usize = 100_000;

pub(super) struct Resources {
    /// `resource_prefixes`: a URI prefix and its backend's index.
    configured: Vec<(String, usize)>,
    /// URIs as the backends listed them.
    listed: DashMap<String, usize>,
    /// Each template's text before its first `{`, and the backend listing it.
    templates: DashMap<String, usize>,
}

impl Resources {
    pub(super) fn new(configured: Vec<(String, usize)>) -> Self {
        Self {
            configured,
            listed: DashMap::new(),
            templates: DashMap::new(),
        }
    }

    /// The index of the backend a URI goes to, if known.
    pub(super) fn owner(&self, uri: &str) -> Option<usize> {
        if let Some((_, i)) = self
            .configured
            .iter()
            .find(|(prefix, _)| uri.starts_with(prefix.as_str()))
        {
            return Some(*i);
        }
        if let Some(i) = self.listed.get(uri) {
            return Some(*i);
        }
        // The longest fixed head wins: `file:///srv/{x}` over `file:///{x}`.
        self.templates
            .iter()
            .filter(|entry| uri.starts_with(entry.key().as_str()))
            .max_by_key(|entry| entry.key().len())
            .map(|entry| *entry.value())
    }

    /// Remembers what one backend's list page named.
    pub(super) fn learn(&self, member: usize, items_key: &str, items: &[Value]) {
        match items_key {
            "resources" => {
                if self.listed.len() >= MAX_LEARNED {
                    self.listed.clear();
                }
                for uri in items
                    .iter()
                    .filter_map(|r| r.get("uri").and_then(Value::as_str))
                {
                    self.listed.insert(uri.to_string(), member);
                }
            }
            "resourceTemplates" => {
                for template in items
                    .iter()
                    .filter_map(|t| t.get("uriTemplate").and_then(Value::as_str))
                {
                    let head = template.split('{').next().unwrap_or_default();
                    // A template that starts with a variable fits every URI: it routes none.
                    if !head.is_empty() && self.templates.len() < MAX_LEARNED {
                        self.templates.insert(head.to_string(), member);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configured_then_listed_then_the_longest_template() {
        let resources = Resources::new(vec![("tickets://".into(), 2)]);
        resources.learn(0, "resources", &[json!({"uri": "file:///a.txt"})]);
        resources.learn(
            1,
            "resourceTemplates",
            &[
                json!({"uriTemplate": "file:///{path}"}),
                json!({"uriTemplate": "{any}"}),
            ],
        );
        resources.learn(
            0,
            "resourceTemplates",
            &[json!({"uriTemplate": "file:///srv/{x}"})],
        );
        assert_eq!(resources.owner("tickets://1"), Some(2));
        assert_eq!(resources.owner("file:///a.txt"), Some(0));
        assert_eq!(resources.owner("file:///b.txt"), Some(1));
        assert_eq!(resources.owner("file:///srv/b.txt"), Some(0));
        assert_eq!(resources.owner("http://elsewhere"), None);
    }
}
