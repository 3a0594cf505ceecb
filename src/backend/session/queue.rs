//! A call's event queue: the session's reader puts, the call takes, in arrival order.
//!
//! The reader never waits on it. A call held for its client's retry takes nothing for as long
//! as the client takes, and a reader waiting on it would stop reading the session: the backend's
//! pings unanswered, other requests' answers unread, a stdio backend's output backed up.
//!
//! So the queue is unbounded for what the call must see, and bounded for the rest. What the call
//! must see is never dropped: its answer or failure (one per request), the backend's questions
//! (each becomes an input round, or is answered for the client) and their withdrawals. Those are
//! few by the protocol's nature (a backend waits on each question it asks) and live no longer
//! than the call (a held call is abandoned after `held_ttl`), not bounded by this queue. What a
//! client can do without (progress, log messages, completed elicitations) takes at most
//! [`MAX_QUEUED_NOTICES`] places; past that a new one is dropped, and counted in
//! `mrtr_backend_events_dropped_total`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntCounter;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::backend::BackendError;
use crate::jsonrpc::JsonRpcError;
use crate::metrics::Metrics;

/// What the backend sends that concerns one call.
#[derive(Debug)]
pub enum CallEvent {
    /// `notifications/progress` params, as sent.
    Progress(Value),
    /// `notifications/message` params, as sent.
    Log(Value),
    /// A request from the server made while this call was active, or (`deferred`) one made
    /// while the session was idle and kept for the next interruptible call.
    ServerRequest {
        id: Value,
        method: String,
        params: Option<Value>,
        deferred: bool,
    },
    /// The server withdrew one of its own requests (`notifications/cancelled`).
    ServerRequestCancelled { id: Value },
    /// `notifications/elicitation/complete` params.
    ElicitationComplete(Value),
    /// The answer to the call, its result as the backend wrote it.
    Final(Result<Box<RawValue>, JsonRpcError>),
    /// The call cannot be answered: the transport failed or the session is gone.
    Failed(BackendError),
}

/// Notifications one call may have queued and not taken yet.
pub(super) const MAX_QUEUED_NOTICES: usize = 256;

/// The notifications one backend's calls had no room for, by kind.
#[derive(Clone)]
pub(crate) struct DroppedNotices {
    progress: IntCounter,
    log: IntCounter,
    elicitation_complete: IntCounter,
}

impl DroppedNotices {
    pub(crate) fn new(metrics: &Metrics, backend: &str) -> Self {
        let counter = |kind| {
            metrics
                .backend_events_dropped
                .with_label_values(&[backend, kind])
        };
        Self {
            progress: counter("progress"),
            log: counter("log"),
            elicitation_complete: counter("elicitation_complete"),
        }
    }

    fn counter(&self, kind: NoticeKind) -> &IntCounter {
        match kind {
            NoticeKind::Progress => &self.progress,
            NoticeKind::Log => &self.log,
            NoticeKind::ElicitationComplete => &self.elicitation_complete,
        }
    }
}

#[derive(Clone, Copy)]
enum NoticeKind {
    Progress,
    Log,
    ElicitationComplete,
}

/// The kind of `event` when it is a notice a client can do without; `None` for what the call
/// must see.
fn notice_kind(event: &CallEvent) -> Option<NoticeKind> {
    match event {
        CallEvent::Progress(_) => Some(NoticeKind::Progress),
        CallEvent::Log(_) => Some(NoticeKind::Log),
        CallEvent::ElicitationComplete(_) => Some(NoticeKind::ElicitationComplete),
        CallEvent::ServerRequest { .. }
        | CallEvent::ServerRequestCancelled { .. }
        | CallEvent::Final(_)
        | CallEvent::Failed(_) => None,
    }
}

/// A new queue: the session routes into the sink, the call reads the events.
pub(super) fn call_queue(dropped: &DroppedNotices) -> (CallSink, CallEvents) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let notices = Arc::new(AtomicUsize::new(0));
    (
        CallSink {
            events: sender,
            notices: notices.clone(),
            dropped: dropped.clone(),
        },
        CallEvents {
            events: receiver,
            notices,
        },
    )
}

/// The session's end of a call's queue.
#[derive(Clone)]
pub(super) struct CallSink {
    events: mpsc::UnboundedSender<CallEvent>,
    /// Notices queued and not taken yet.
    notices: Arc<AtomicUsize>,
    dropped: DroppedNotices,
}

impl CallSink {
    /// Queues `event` without waiting: a notice finding no room is dropped (and counted). The
    /// event comes back when the call is gone.
    pub(super) fn deliver(&self, event: CallEvent) -> Result<(), CallEvent> {
        let Some(kind) = notice_kind(&event) else {
            return self.events.send(event).map_err(|gone| gone.0);
        };
        if self.events.is_closed() {
            return Err(event);
        }
        // Only the session's reader queues notices, so the room seen here cannot shrink before
        // this one takes it.
        if self.notices.load(Ordering::Acquire) >= MAX_QUEUED_NOTICES {
            self.dropped.counter(kind).inc();
            return Ok(());
        }
        self.notices.fetch_add(1, Ordering::AcqRel);
        self.events.send(event).map_err(|gone| {
            self.notices.fetch_sub(1, Ordering::AcqRel);
            gone.0
        })
    }
}

/// The call's end of its queue.
pub(super) struct CallEvents {
    events: mpsc::UnboundedReceiver<CallEvent>,
    notices: Arc<AtomicUsize>,
}

impl CallEvents {
    /// The next event; `None` once the session dropped every sink and nothing is left.
    /// Cancel-safe.
    pub(super) async fn recv(&mut self) -> Option<CallEvent> {
        let event = self.events.recv().await;
        self.taken(event)
    }

    pub(super) fn try_recv(&mut self) -> Option<CallEvent> {
        let event = self.events.try_recv().ok();
        self.taken(event)
    }

    /// No event is queued and none can come.
    pub(super) fn is_finished(&self) -> bool {
        self.events.is_closed() && self.events.is_empty()
    }

    fn taken(&self, event: Option<CallEvent>) -> Option<CallEvent> {
        if event.as_ref().and_then(notice_kind).is_some() {
            self.notices.fetch_sub(1, Ordering::AcqRel);
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::backend::BackendError;

    #[test]
    fn notices_past_the_room_are_dropped_and_what_the_call_needs_never() {
        let metrics = Metrics::new();
        let (sink, mut events) = call_queue(&DroppedNotices::new(&metrics, "b"));
        for n in 0..MAX_QUEUED_NOTICES + 10 {
            sink.deliver(CallEvent::Progress(json!(n))).unwrap();
        }
        sink.deliver(CallEvent::Log(json!({}))).unwrap();
        sink.deliver(CallEvent::ServerRequest {
            id: json!("q"),
            method: "roots/list".into(),
            params: None,
            deferred: false,
        })
        .unwrap();
        sink.deliver(CallEvent::ServerRequestCancelled { id: json!("q") })
            .unwrap();
        sink.deliver(CallEvent::Final(Ok(crate::jsonrpc::raw(&json!({})))))
            .unwrap();
        let dropped = |kind| {
            metrics
                .backend_events_dropped
                .with_label_values(&["b", kind])
                .get()
        };
        assert_eq!(dropped("progress"), 10);
        assert_eq!(dropped("log"), 1);

        for n in 0..MAX_QUEUED_NOTICES {
            assert!(matches!(events.try_recv(), Some(CallEvent::Progress(p)) if p == json!(n)));
        }
        // Room again once taken.
        sink.deliver(CallEvent::ElicitationComplete(json!({})))
            .unwrap();
        assert!(matches!(
            events.try_recv(),
            Some(CallEvent::ServerRequest { .. })
        ));
        assert!(matches!(
            events.try_recv(),
            Some(CallEvent::ServerRequestCancelled { .. })
        ));
        assert!(matches!(events.try_recv(), Some(CallEvent::Final(Ok(_)))));
        assert!(matches!(
            events.try_recv(),
            Some(CallEvent::ElicitationComplete(_))
        ));
        assert!(events.try_recv().is_none());
        assert!(!events.is_finished());
        drop(sink);
        assert!(events.is_finished());
    }

    #[test]
    fn an_event_for_a_call_that_is_gone_comes_back_uncounted() {
        let metrics = Metrics::new();
        let (sink, events) = call_queue(&DroppedNotices::new(&metrics, "b"));
        drop(events);
        assert!(matches!(
            sink.deliver(CallEvent::Progress(json!(1))),
            Err(CallEvent::Progress(_))
        ));
        assert!(matches!(
            sink.deliver(CallEvent::Failed(BackendError::Closed("gone".into()))),
            Err(CallEvent::Failed(_))
        ));
        assert_eq!(
            metrics
                .backend_events_dropped
                .with_label_values(&["b", "progress"])
                .get(),
            0
        );
    }
}
