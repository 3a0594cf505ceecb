//! The table of held calls: entries by their random held id, counted per principal, bounded
//! gateway-wide (`max_held`) and per principal (`max_held_per_principal`). Sharded (dashmap), so
//! no lock spans the table.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::error::GatewayError;

struct Slot<T> {
    /// Digest of the principal the entry is counted against.
    principal: String,
    value: T,
}

pub struct HeldTable<T> {
    entries: DashMap<String, Slot<T>>,
    per_principal: DashMap<String, usize>,
    max_held: usize,
    max_per_principal: usize,
}

impl<T> HeldTable<T> {
    pub fn new(max_held: usize, max_per_principal: usize) -> Self {
        Self {
            entries: DashMap::new(),
            per_principal: DashMap::new(),
            max_held,
            max_per_principal,
        }
    }

    /// Entries held right now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Room for one more entry, gateway-wide and for this principal.
    pub fn admit(&self, principal_digest: &str) -> Result<(), GatewayError> {
        let held = self.entries.len();
        if held >= self.max_held {
            return Err(GatewayError::TooManyHeld(format!(
                "{held} calls are waiting for input"
            )));
        }
        let mine = self.per_principal.get(principal_digest).map_or(0, |n| *n);
        if mine >= self.max_per_principal {
            return Err(GatewayError::TooManyHeld(format!(
                "{mine} of this client's calls are waiting for input"
            )));
        }
        Ok(())
    }

    pub fn insert(&self, id: String, principal_digest: String, value: T) {
        *self
            .per_principal
            .entry(principal_digest.clone())
            .or_insert(0) += 1;
        let slot = Slot {
            principal: principal_digest,
            value,
        };
        if let Some(replaced) = self.entries.insert(id, slot) {
            // Ids are 128-bit random: a collision is not expected, but the count stays true.
            self.uncount(replaced.principal);
        }
    }

    /// Reads an entry in place.
    pub fn with<R>(&self, id: &str, read: impl FnOnce(&T) -> R) -> Option<R> {
        self.entries.get(id).map(|slot| read(&slot.value))
    }

    /// Takes an entry out; only one caller gets it.
    pub fn take(&self, id: &str) -> Option<T> {
        let (_, slot) = self.entries.remove(id)?;
        self.uncount(slot.principal);
        Some(slot.value)
    }

    /// Ids of the entries `matches` selects.
    pub fn ids_where(&self, matches: impl Fn(&T) -> bool) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| matches(&e.value().value))
            .map(|e| e.key().clone())
            .collect()
    }

    fn uncount(&self, principal: String) {
        if let Entry::Occupied(mut count) = self.per_principal.entry(principal) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_per_principal_and_release_on_take() {
        let table = HeldTable::new(3, 2);
        table.admit("a").unwrap();
        table.insert("1".into(), "a".into(), 10);
        table.insert("2".into(), "a".into(), 20);
        assert!(matches!(
            table.admit("a"),
            Err(GatewayError::TooManyHeld(_))
        ));
        table.admit("b").unwrap();
        table.insert("3".into(), "b".into(), 30);
        assert!(
            table.admit("c").is_err(),
            "the gateway-wide limit holds too"
        );
        assert_eq!(table.with("2", |v| *v), Some(20));
        assert_eq!(table.take("2"), Some(20));
        assert_eq!(table.take("2"), None, "taken once");
        table.admit("a").unwrap();
        assert_eq!(table.ids_where(|v| *v > 15), vec!["3".to_string()]);
        assert_eq!(table.len(), 2);
    }
}
