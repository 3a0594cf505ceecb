//! The table of held calls: entries by their random held id, counted per principal, bounded
//! gateway-wide (`max_held`) and per principal (`max_held_per_principal`). Sharded (dashmap), so
//! no lock spans the table.
//!
//! A call takes its place with [`HeldTable::admit`] before it is held: the admission counts
//! against both limits at once, so concurrent calls can never exceed them. It becomes an entry
//! with [`HeldTable::insert`], or gives its place back when dropped unused.

use dashmap::DashMap;

use super::quota::Quota;
pub(crate) use crate::error::HeldError;

struct Slot<T> {
    /// Digest of the principal the entry is counted against.
    principal: String,
    value: T,
}

pub struct HeldTable<T> {
    entries: DashMap<String, Slot<T>>,
    /// Admitted places (entries and admissions not yet inserted).
    places: Quota,
}

/// A place in the table, counted against its limits; released when dropped unused.
#[must_use = "an admission is a place in the table: insert the entry or drop it"]
pub struct Admission<'a, T> {
    table: &'a HeldTable<T>,
    /// `None` once the place has gone to an entry.
    principal: Option<String>,
}

impl<T> Admission<'_, T> {
    /// Digest of the principal this place is counted against.
    pub fn principal(&self) -> &str {
        self.principal.as_deref().unwrap_or_default()
    }
}

impl<T> Drop for Admission<'_, T> {
    fn drop(&mut self) {
        if let Some(principal) = self.principal.take() {
            self.table.release(principal);
        }
    }
}

impl<T> HeldTable<T> {
    pub fn new(max_held: usize, max_per_principal: usize) -> Self {
        Self {
            entries: DashMap::new(),
            places: Quota::new(max_held, max_per_principal),
        }
    }

    /// Entries held right now.
    pub fn count(&self) -> usize {
        self.entries.len()
    }

    /// Gives back the room a burst left: a map keeps its capacity when emptied.
    pub fn shrink_if_sparse(&self) {
        shrink_if_sparse(&self.entries);
    }

    /// Takes a place for one more entry of this principal, or says which limit is reached.
    pub fn admit(&self, principal_digest: String) -> Result<Admission<'_, T>, HeldError> {
        self.places.take(&principal_digest)?;
        Ok(Admission {
            table: self,
            principal: Some(principal_digest),
        })
    }

    /// Puts an entry in the place its admission took.
    pub fn insert(&self, id: String, mut admission: Admission<'_, T>, value: T) {
        let principal = admission.principal.take().unwrap_or_default();
        let slot = Slot { principal, value };
        if let Some(replaced) = self.entries.insert(id, slot) {
            // Ids are 128-bit random: a collision is not expected, but the count stays true.
            self.release(replaced.principal);
        }
    }

    /// Reads an entry (its shard shares the lock with other readers meanwhile).
    pub fn read<R>(&self, id: &str, read: impl FnOnce(&T) -> R) -> Option<R> {
        self.entries.get(id).map(|slot| read(&slot.value))
    }

    /// Reads or changes an entry in place.
    pub fn update<R>(&self, id: &str, change: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.entries
            .get_mut(id)
            .map(|mut slot| change(&mut slot.value))
    }

    /// Takes an entry out; only one caller gets it.
    pub fn take(&self, id: &str) -> Option<T> {
        let (_, slot) = self.entries.remove(id)?;
        self.release(slot.principal);
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

    fn release(&self, principal: String) {
        self.places.give_back(&principal);
    }
}

/// Shrinks `map` when it holds far fewer entries than it has room for (after a burst).
pub(crate) fn shrink_if_sparse<K, V>(map: &DashMap<K, V>)
where
    K: Eq + std::hash::Hash,
{
    if map.capacity() > 4 * map.len() + 1024 {
        map.shrink_to_fit();
    }
}

/// Whether `a` and `b` fall in the same shard of `map`: with `a`'s shard locked, `b` cannot be
/// read. `a` need not be in the map (nothing is inserted).
#[cfg(test)]
pub(crate) fn share_a_shard<V>(map: &DashMap<String, V>, a: &str, b: &str) -> bool {
    let _locked = map.entry(a.to_owned());
    matches!(map.try_get(b), dashmap::try_result::TryResult::Locked)
}

#[cfg(test)]
impl<T> HeldTable<T> {
    /// Whether the shard that holds `id` is locked right now, by this thread or another.
    pub fn shard_is_locked(&self, id: &str) -> bool {
        matches!(
            self.entries.try_get(id),
            dashmap::try_result::TryResult::Locked
        )
    }

    /// Whether entries `a` and `b` fall in the same shard of the table.
    pub fn share_a_shard(&self, a: &str, b: &str) -> bool {
        share_a_shard(&self.entries, a, b)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn limits_count_per_principal_and_release_on_take() {
        let table = HeldTable::new(3, 2);
        let place = table.admit("a".into()).unwrap();
        assert_eq!(place.principal(), "a");
        table.insert("1".into(), place, 10);
        table.insert("2".into(), table.admit("a".into()).unwrap(), 20);
        assert!(matches!(
            table.admit("a".into()),
            Err(HeldError::Full(_) | HeldError::PrincipalFull(_))
        ));
        table.insert("3".into(), table.admit("b".into()).unwrap(), 30);
        assert!(
            table.admit("c".into()).is_err(),
            "the gateway-wide limit holds too"
        );
        assert_eq!(table.update("2", |v| *v), Some(20));
        assert_eq!(table.take("2"), Some(20));
        assert_eq!(table.take("2"), None, "taken once");
        assert_eq!(table.ids_where(|v| *v > 15), vec!["3".to_string()]);
        assert_eq!(table.count(), 2);
        // An admission dropped unused gives its place back.
        let unused = table.admit("a".into()).unwrap();
        assert!(table.admit("d".into()).is_err(), "the place is taken");
        drop(unused);
        table.insert("4".into(), table.admit("d".into()).unwrap(), 40);
        assert_eq!(table.count(), 3);
    }

    /// Admission is one step: calls admitted at the same time never exceed the limits.
    #[test]
    fn concurrent_admissions_respect_the_limits() {
        const THREADS: usize = 8;
        const TRIES: usize = 200;
        let table = HeldTable::<usize>::new(50, 30);
        let admitted = AtomicUsize::new(0);
        let start = std::sync::Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let (table, admitted, start) = (&table, &admitted, &start);
                scope.spawn(move || {
                    start.wait();
                    for n in 0..TRIES {
                        // Two principals, so both limits are exercised.
                        let principal = format!("p{}", n % 2);
                        if let Ok(place) = table.admit(principal) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            table.insert(format!("{thread}-{n}"), place, n);
                        }
                    }
                });
            }
        });
        assert_eq!(
            admitted.load(Ordering::Relaxed),
            50,
            "exactly max_held got in"
        );
        assert_eq!(table.count(), 50);
        for principal in ["p0", "p1"] {
            let count = table.places.taken_by(principal);
            assert!(count <= 30, "{principal} holds {count}, over its limit");
        }
    }
}
