//! The SSE streams of one legacy session, kept so that a client can resume one with
//! `Last-Event-ID` (2025-11-25 resumability).
//!
//! - Stream 0 is the standalone GET stream; every request POSTed gets a stream of its own,
//!   numbered from 1. Event ids are `{stream}-{seq}`: unique across the session, and each names
//!   its stream, so a resuming GET continues that stream and no other.
//! - Each stream keeps its last `replay_events` events. A request's stream starts with a priming
//!   event (an id, `retry:`, empty data) and finishes after its response; it is forgotten once a
//!   client has read it to the end, or when too many finished ones wait unread.
//! - One reader at a time per stream ([`Attached`] carries the rule): a second one gets 409,
//!   unless it resumes with `Last-Event-ID`. That is a client back after losing the stream,
//!   whose old connection the gateway may not have seen close yet: the resuming reader takes
//!   the stream over, and the old one ends. Events written while nobody reads wait for the next
//!   reader.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::GatewayError;
use crate::http_serve::{Body, KEEP_ALIVE};
use crate::sync::LockRecovered;

/// The standalone (GET) stream's number.
pub(crate) const STANDALONE: u64 = 0;

/// Finished request streams kept unread before the oldest is forgotten.
const MAX_UNREAD_FINISHED: usize = 64;

/// How long a client waits before reconnecting a stream that broke off (SSE `retry:`).
const RETRY_MS: u64 = 1000;

/// The streams of one session.
pub struct Streams {
    logs: Mutex<Logs>,
    keep: usize,
}

struct Logs {
    by_id: HashMap<u64, Arc<StreamLog>>,
    next: u64,
}

impl Streams {
    pub fn new(keep: usize) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<Streams>| {
            let standalone = Arc::new(StreamLog::new(STANDALONE, keep, me.clone()));
            Self {
                logs: Mutex::new(Logs {
                    by_id: HashMap::from([(STANDALONE, standalone)]),
                    next: STANDALONE + 1,
                }),
                keep,
            }
        })
    }

    /// A new request stream, its priming event written.
    pub fn open(self: &Arc<Self>) -> Arc<StreamLog> {
        let mut logs = self.logs.lock_recovered();
        let id = logs.next;
        logs.next += 1;
        let log = Arc::new(StreamLog::new(id, self.keep, Arc::downgrade(self)));
        log.push_frame(|event_id| {
            Bytes::from(format!("id: {event_id}\nretry: {RETRY_MS}\ndata: \n\n"))
        });
        logs.by_id.insert(id, log.clone());
        log
    }

    pub fn standalone(&self) -> Option<Arc<StreamLog>> {
        self.find(STANDALONE)
    }

    pub fn find(&self, id: u64) -> Option<Arc<StreamLog>> {
        self.logs.lock_recovered().by_id.get(&id).cloned()
    }

    fn forget(&self, id: u64) {
        if id != STANDALONE {
            self.logs.lock_recovered().by_id.remove(&id);
        }
    }

    /// Finished request streams nobody reads beyond the bound are forgotten, oldest first.
    fn trim_unread(&self) {
        let mut logs = self.logs.lock_recovered();
        let mut unread: Vec<u64> = logs
            .by_id
            .iter()
            .filter(|(id, log)| **id != STANDALONE && log.finished_unattached())
            .map(|(id, _)| *id)
            .collect();
        if unread.len() > MAX_UNREAD_FINISHED {
            unread.sort_unstable();
            for id in &unread[..unread.len() - MAX_UNREAD_FINISHED] {
                logs.by_id.remove(id);
            }
        }
    }

    /// The session ended: every stream finishes, so open readers end once they are through.
    pub fn finish_all(&self) {
        let logs: Vec<Arc<StreamLog>> =
            self.logs.lock_recovered().by_id.values().cloned().collect();
        for log in logs {
            log.finish();
        }
    }
}

/// `{stream}-{seq}` of a `Last-Event-ID` this gateway issued.
pub(crate) fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// One stream's events, by sequence number.
pub struct StreamLog {
    id: u64,
    state: Mutex<LogState>,
    changed: watch::Sender<()>,
    keep: usize,
    owner: Weak<Streams>,
}

struct LogState {
    frames: VecDeque<Bytes>,
    /// Sequence number of `frames[0]`.
    first: u64,
    finished: bool,
    attached: bool,
    /// Counts the readers attached so far: only the latest reads, and only its end frees the
    /// stream.
    generation: u64,
    /// Where the last reader stopped: a reader that names no event id starts here.
    read_to: u64,
}

impl LogState {
    fn end(&self) -> u64 {
        self.first + self.frames.len() as u64
    }
}

impl StreamLog {
    fn new(id: u64, keep: usize, owner: Weak<Streams>) -> Self {
        Self {
            id,
            state: Mutex::new(LogState {
                frames: VecDeque::new(),
                first: 0,
                finished: false,
                attached: false,
                generation: 0,
                read_to: 0,
            }),
            changed: watch::channel(()).0,
            keep,
            owner,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Writes one JSON-RPC message as an event.
    pub fn push(&self, message: &Value) {
        let data = serde_json::to_vec(message).unwrap_or_default();
        self.push_frame(|event_id| {
            let mut frame = Vec::with_capacity(data.len() + 40);
            frame.extend_from_slice(format!("id: {event_id}\nevent: message\ndata: ").as_bytes());
            frame.extend_from_slice(&data);
            frame.extend_from_slice(b"\n\n");
            Bytes::from(frame)
        });
    }

    fn push_frame(&self, frame: impl FnOnce(String) -> Bytes) {
        {
            let mut state = self.state.lock_recovered();
            if state.finished {
                return;
            }
            let seq = state.end();
            state.frames.push_back(frame(format!("{}-{seq}", self.id)));
            while state.frames.len() > self.keep {
                state.frames.pop_front();
                state.first += 1;
            }
        }
        self.changed.send_replace(());
    }

    /// Nothing more is written: a reader ends once it has read everything.
    pub fn finish(&self) {
        self.state.lock_recovered().finished = true;
        self.changed.send_replace(());
        if let Some(owner) = self.owner.upgrade() {
            owner.trim_unread();
        }
    }

    /// Whether a client reads this stream now.
    pub fn is_attached(&self) -> bool {
        self.state.lock_recovered().attached
    }

    fn finished_unattached(&self) -> bool {
        let state = self.state.lock_recovered();
        state.finished && !state.attached
    }

    /// The stream as an SSE body, from the event after `after` (a `Last-Event-ID`), or from where
    /// the last reader stopped. Idle stretches carry keep-alive comments. A resuming reader
    /// (`after` given) takes the stream from one still attached.
    pub fn attach(
        self: &Arc<Self>,
        after: Option<u64>,
        keep_alive: Duration,
    ) -> Result<Body, GatewayError> {
        let (cursor, generation, took_over) = {
            let mut state = self.state.lock_recovered();
            let took_over = state.attached;
            if took_over && after.is_none() {
                return Err(GatewayError::StreamConflict(
                    "this stream already has a reader".into(),
                ));
            }
            state.attached = true;
            state.generation += 1;
            let cursor = after.map_or(state.read_to, |seq| seq + 1);
            (cursor, state.generation, took_over)
        };
        if took_over {
            // The reader taken over may be waiting for a change: it wakes, and ends.
            self.changed.send_replace(());
        }
        let reader = Reader {
            attached: Attached {
                log: self.clone(),
                generation,
            },
            cursor,
            changes: self.changed.subscribe(),
        };
        let frames = stream::unfold(reader, move |mut reader| async move {
            loop {
                match reader.next_frame() {
                    Next::Frame(frame) => return Some((Ok(Frame::data(frame)), reader)),
                    Next::End => return None,
                    Next::Wait => {}
                }
                match tokio::time::timeout(keep_alive, reader.changes.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return None,
                    Err(_) => {
                        return Some((Ok(Frame::data(Bytes::from_static(KEEP_ALIVE))), reader))
                    }
                }
            }
        });
        Ok(StreamBody::new(frames).boxed_unsync())
    }
}

enum Next {
    Frame(Bytes),
    Wait,
    End,
}

struct Reader {
    attached: Attached,
    cursor: u64,
    changes: watch::Receiver<()>,
}

impl Reader {
    fn next_frame(&mut self) -> Next {
        let log = &self.attached.log;
        let mut state = log.state.lock_recovered();
        if state.generation != self.attached.generation {
            return Next::End;
        }
        // Events trimmed before this reader came are lost to it.
        self.cursor = self.cursor.max(state.first);
        if self.cursor < state.end() {
            let frame = state.frames[(self.cursor - state.first) as usize].clone();
            self.cursor += 1;
            state.read_to = self.cursor;
            return Next::Frame(frame);
        }
        self.changes.mark_unchanged();
        if state.finished {
            Next::End
        } else {
            Next::Wait
        }
    }
}

/// A stream's one reader: dropping the latest frees the stream for the next, and forgets a
/// request stream read to its end. One taken over leaves the stream to its successor.
struct Attached {
    log: Arc<StreamLog>,
    generation: u64,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let log = &self.log;
        let read_through = {
            let mut state = log.state.lock_recovered();
            if state.generation != self.generation {
                return;
            }
            state.attached = false;
            state.finished && state.read_to >= state.end()
        };
        if read_through {
            if let Some(owner) = log.owner.upgrade() {
                owner.forget(log.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn read_all(body: Body) -> String {
        let bytes = body.collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_request_stream_primes_resumes_and_is_forgotten_once_read() {
        let streams = Streams::new(16);
        let log = streams.open();
        log.push(&json!({"jsonrpc": "2.0", "method": "notifications/progress"}));
        // The first reader takes the priming event and the notification, then breaks off.
        let mut first = log.attach(None, Duration::from_secs(5)).unwrap();
        let priming = first.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&priming).starts_with("id: 1-0\nretry: 1000\ndata: \n"));
        let _ = first.frame().await.unwrap().unwrap();
        assert!(matches!(
            log.attach(None, Duration::from_secs(5)),
            Err(GatewayError::StreamConflict(_))
        ));
        drop(first);
        log.push(&json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
        log.finish();
        // Resuming after event 1-1 gives the response only, then the stream ends.
        let rest = read_all(log.attach(Some(1), Duration::from_secs(5)).unwrap()).await;
        assert_eq!(rest.matches("id: ").count(), 1, "{rest}");
        assert!(
            rest.contains("id: 1-2\n") && rest.contains("\"id\":7"),
            "{rest}"
        );
        assert!(
            streams.find(log.id()).is_none(),
            "read to its end: forgotten"
        );
        assert!(streams.standalone().is_some());
        assert_eq!(parse_event_id("1-2"), Some((1, 2)));
        assert_eq!(parse_event_id("x"), None);
    }

    #[tokio::test]
    async fn a_resuming_reader_takes_the_stream_from_one_still_attached() {
        let streams = Streams::new(16);
        let log = streams.open();
        log.push(&json!({"jsonrpc": "2.0", "method": "notifications/progress"}));
        let mut old = log.attach(None, Duration::from_secs(5)).unwrap();
        let _priming = old.frame().await.unwrap().unwrap();
        // The client lost the connection after the priming event (1-0), which the gateway has
        // not seen close: it resumes, and the old reader ends without reading more.
        let mut resumed = log.attach(Some(0), Duration::from_secs(5)).unwrap();
        assert!(old.frame().await.is_none(), "the old reader ends");
        drop(old);
        // The stream is still the resumed reader's: a plain second reader is refused.
        assert!(matches!(
            log.attach(None, Duration::from_secs(5)),
            Err(GatewayError::StreamConflict(_))
        ));
        let next = resumed.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&next).starts_with("id: 1-1\n"));
        log.push(&json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
        log.finish();
        let rest = read_all(resumed).await;
        assert!(rest.contains("id: 1-2\n"), "{rest}");
        assert!(
            streams.find(log.id()).is_none(),
            "read to its end: forgotten"
        );
    }

    #[tokio::test]
    async fn events_without_a_reader_wait_for_the_next_and_the_oldest_are_trimmed() {
        let streams = Streams::new(2);
        let standalone = streams.standalone().unwrap();
        for n in 0..3 {
            standalone.push(&json!({"jsonrpc": "2.0", "method": format!("n{n}")}));
        }
        standalone.finish();
        let all = read_all(standalone.attach(None, Duration::from_secs(5)).unwrap()).await;
        assert!(
            !all.contains("n0") && all.contains("n1") && all.contains("n2"),
            "{all}"
        );
    }
}
