//! Locks that survive a panic. A panic while a lock is held poisons it; the gateway's locks
//! guard plain data whose every update is complete before anything can panic, so the data is
//! still sound: it is taken anyway rather than failing every later request. A leaf.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) trait LockRecovered<T> {
    fn lock_recovered(&self) -> MutexGuard<'_, T>;
}

impl<T> LockRecovered<T> for Mutex<T> {
    fn lock_recovered(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub(crate) trait RwLockRecovered<T> {
    fn read_recovered(&self) -> RwLockReadGuard<'_, T>;
    fn write_recovered(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockRecovered<T> for RwLock<T> {
    fn read_recovered(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_recovered(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_still_usable() {
        let lock = std::sync::Arc::new(Mutex::new(1));
        let poisoner = lock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock_recovered();
            panic!("poison");
        })
        .join();
        assert!(lock.is_poisoned());
        *lock.lock_recovered() += 1;
        assert_eq!(*lock.lock_recovered(), 2);
    }
}
