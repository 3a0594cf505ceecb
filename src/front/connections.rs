//! The MCP listener's connections: at most `server.max_connections` open at once, each given
//! `server.first_byte_timeout` to send its first byte. At the limit, the connection idle the
//! longest (one that never spoke, or one between keep-alive requests) is closed to make room
//! before a new client is refused, so idle connections cannot lock active clients out.
//! `saturated` (every place taken by a connection with a request in flight) is what readiness
//! reports.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long a new connection waits for the place of the one closed for it.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// The open connections of the MCP listener.
pub struct Connections {
    slots: Arc<Semaphore>,
    max: usize,
    open: DashMap<u64, Arc<Activity>>,
    next_id: AtomicU64,
    /// The origin of `Activity::idle_since_ms`.
    epoch: Instant,
    metrics: Arc<Metrics>,
}

/// What one connection is doing.
pub struct Activity {
    in_flight: AtomicUsize,
    /// Requests begun on it so far, and what wakes those waiting for its first.
    begun: AtomicU64,
    first_begun: Notify,
    /// Since when nothing has been in flight (milliseconds after `Connections::epoch`).
    idle_since_ms: AtomicU64,
    closing: AtomicBool,
    close: CancellationToken,
    epoch: Instant,
}

impl Activity {
    /// A request started on this connection; it is busy until the guard (kept by the
    /// response body) is dropped.
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if self.begun.fetch_add(1, Ordering::AcqRel) == 0 {
            self.first_begun.notify_waiters();
        }
        InFlight(self.clone())
    }

    /// Resolves once a request has begun on this connection.
    pub async fn first_request_begun(&self) {
        let notified = self.first_begun.notified();
        if self.begun.load(Ordering::Acquire) > 0 {
            return;
        }
        notified.await;
    }

    /// Resolves when the connection is to close (evicted at the limit).
    pub async fn closed(&self) {
        self.close.cancelled().await;
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && !self.closing.load(Ordering::Acquire)
    }
}

/// A request in flight on a connection.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since_ms.store(
            activity.epoch.elapsed().as_millis() as u64,
            Ordering::Release,
        );
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it is written or dropped.
pub(crate) struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub(crate) fn new(body: B, in_flight: InFlight) -> Self {
        Self {
            body,
            _in_flight: in_flight,
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's place; given back when dropped.
pub struct Admitted {
    connections: Arc<Connections>,
    id: u64,
    pub activity: Arc<Activity>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.open.remove(&self.id);
        self.connections.metrics.connections.dec();
    }
}

impl Connections {
    pub fn new(max: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
            open: DashMap::new(),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            metrics,
        }
    }

    /// A place for a new connection: a free one, or the one of the connection idle the
    /// longest, closed for it. None when every place is busy.
    pub async fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !self.evict_idlest() {
                    self.count_close("refused");
                    return None;
                }
                // The evicted connection's task ends at once and gives its place back.
                match tokio::time::timeout(EVICTION_WAIT, self.slots.clone().acquire_owned()).await
                {
                    Ok(Ok(slot)) => slot,
                    _ => {
                        self.count_close("refused");
                        return None;
                    }
                }
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            begun: AtomicU64::new(0),
            first_begun: Notify::new(),
            idle_since_ms: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            closing: AtomicBool::new(false),
            close: CancellationToken::new(),
            epoch: self.epoch,
        });
        self.open.insert(id, activity.clone());
        self.metrics.connections.inc();
        Some(Admitted {
            connections: self.clone(),
            id,
            activity,
            _slot: slot,
        })
    }

    /// Closes the connection idle the longest, if any is idle.
    fn evict_idlest(&self) -> bool {
        let victim = self
            .open
            .iter()
            .filter(|entry| entry.value().idle())
            .min_by_key(|entry| entry.value().idle_since_ms.load(Ordering::Acquire))
            .map(|entry| entry.value().clone());
        match victim {
            Some(activity) if !activity.closing.swap(true, Ordering::AcqRel) => {
                activity.close.cancel();
                self.count_close("evicted");
                true
            }
            // Another admission took it meanwhile: its place is spoken for.
            _ => false,
        }
    }

    /// A connection that sent nothing within `first_byte_timeout`.
    pub fn silent(&self) {
        self.count_close("silent");
    }

    fn count_close(&self, reason: &str) {
        self.metrics
            .connection_closes
            .with_label_values(&[reason])
            .inc();
    }

    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Every place is taken by a connection with a request in flight: a new client would be
    /// refused.
    pub fn saturated(&self) -> bool {
        self.slots.available_permits() == 0 && !self.open.iter().any(|entry| entry.value().idle())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_limit_the_longest_idle_connection_makes_room() {
        let connections = Arc::new(Connections::new(2, Arc::new(Metrics::new())));
        let first = connections.admit().await.expect("a place");
        let second = connections.admit().await.expect("a place");
        let busy = second.activity.request_started();
        assert!(!connections.saturated(), "the first one is idle");
        let closing = first.activity.clone();
        let closed = tokio::spawn(async move { closing.closed().await });
        // The first one closes for the third, once its task drops its place.
        let third = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit().await }
        });
        closed.await.expect("the idle one was told to close");
        drop(first);
        let third = third.await.expect("joined").expect("admitted");
        let _busy_too = third.activity.request_started();
        assert!(connections.saturated());
        // Nothing idle: refused at once.
        assert!(connections.admit().await.is_none());
        drop(busy);
        assert!(
            !connections.saturated(),
            "a finished request leaves its connection idle"
        );
        let metrics = connections.metrics.render();
        assert!(metrics.contains("mrtr_connection_closes_total{reason=\"evicted\"} 1"));
        assert!(metrics.contains("mrtr_connection_closes_total{reason=\"refused\"} 1"));
        assert!(metrics.contains("mrtr_connections 2"));
    }
}
