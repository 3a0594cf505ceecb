//! Places counted gateway-wide and per principal, both bounded: what the held table admits calls
//! against, what kept outcomes are counted against, open `subscriptions/listen` streams, and
//! 2025-11-25 sessions. Sharded (dashmap): the shard lock of a
//! principal's count makes its check and increment one step; no lock spans all principals.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use crate::error::HeldError;

/// One place taken in a [`Quota`], given back when dropped.
pub(crate) struct Place {
    quota: Arc<Quota>,
    principal: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.quota.give_back(&self.principal);
    }
}

pub(crate) struct Quota {
    /// Places taken, per principal digest.
    per_principal: DashMap<String, usize>,
    /// Places taken, gateway-wide.
    taken: AtomicUsize,
    max_total: usize,
    max_per_principal: usize,
}

impl Quota {
    pub(crate) fn new(max_total: usize, max_per_principal: usize) -> Self {
        Self {
            per_principal: DashMap::new(),
            taken: AtomicUsize::new(0),
            max_total,
            max_per_principal,
        }
    }

    /// Takes one place for `principal`, or says which bound is reached.
    pub(crate) fn take(&self, principal: &str) -> Result<(), HeldError> {
        // A principal that holds places already needs no new key.
        if let Some(mut mine) = self.per_principal.get_mut(principal) {
            return self.count_in(&mut mine);
        }
        let mut mine = self.per_principal.entry(principal.to_owned()).or_insert(0);
        self.count_in(&mut mine)
    }

    /// Counts one more place in a principal's count (held under its shard lock).
    fn count_in(&self, mine: &mut usize) -> Result<(), HeldError> {
        let max_total = self.max_total;
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_total).then_some(n + 1)
            })
            .map_err(HeldError::Full)?;
        if *mine >= self.max_per_principal {
            self.taken.fetch_sub(1, Ordering::AcqRel);
            return Err(HeldError::PrincipalFull(*mine));
        }
        *mine += 1;
        Ok(())
    }

    /// Gives back a place `principal` took.
    pub(crate) fn give_back(&self, principal: &str) {
        if let Some(mut count) = self.per_principal.get_mut(principal) {
            *count = count.saturating_sub(1);
        }
        self.per_principal
            .remove_if(principal, |_, count| *count == 0);
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }

    /// Takes one place for `principal` as a guard that gives it back when dropped.
    pub(crate) fn place(self: &Arc<Self>, principal: String) -> Result<Place, HeldError> {
        self.take(&principal)?;
        Ok(Place {
            quota: self.clone(),
            principal,
        })
    }

    /// Places taken now, gateway-wide.
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }

    /// Places `principal` holds now.
    #[cfg(test)]
    pub(crate) fn taken_by(&self, principal: &str) -> usize {
        self.per_principal.get(principal).map_or(0, |n| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_gateway_wide_and_per_principal() {
        let quota = Quota::new(3, 2);
        assert!(quota.take("a").is_ok());
        assert!(quota.take("a").is_ok());
        assert!(matches!(quota.take("a"), Err(HeldError::PrincipalFull(2))));
        assert!(quota.take("b").is_ok());
        assert!(matches!(quota.take("c"), Err(HeldError::Full(3))));
        quota.give_back("a");
        assert!(quota.take("c").is_ok());
        for principal in ["a", "b", "c"] {
            quota.give_back(principal);
        }
        assert_eq!(quota.taken.load(Ordering::Acquire), 0);
        assert!(quota.per_principal.is_empty());
    }
}
