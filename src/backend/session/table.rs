//! A session's routing table ([`Routing`]): the gateway's requests awaiting answers, the call
//! active on the session, the server requests kept for the next call, and what the session
//! knows about the roots its backend holds. Read and written under the session's one lock by
//! the reader (routing) and by the session's users.

use std::collections::HashMap;

use serde_json::Value;

use super::init_roots::InitRoots;
use super::queue::CallSink;

#[derive(Default)]
pub(super) struct Routing {
    pub(super) pending: HashMap<u64, CallSink>,
    pub(super) active: Option<(u64, CallSink)>,
    /// The gateway cancelled a request here: whatever the backend still sends for it (late
    /// questions included) could be taken for the next caller's, so the session is not lent
    /// again.
    pub(super) tainted: bool,
    /// Server requests that arrived outside any call (`unsolicited = "defer"`).
    pub(super) deferred: Vec<(Value, String, Option<Value>)>,
    /// A client's answer to `roots/list` reached the backend: what it holds as roots belongs to
    /// a flow, not to the session.
    pub(super) client_roots: bool,
    /// The backend asked for roots outside any call on this session (it keeps roots per
    /// session): a call that can ask its client runs here only once that question waits for it.
    pub(super) roots_asked: bool,
    /// A `roots/list` arrived outside any call, whoever answered it.
    pub(super) roots_question_seen: bool,
    /// A call was started on this session.
    pub(super) lent: bool,
    pub(super) dead: Option<String>,
}

impl Routing {
    /// A `roots/list` outside any call; one before the session's first call teaches the pool
    /// that its backend asks at initialization.
    pub(super) fn note_roots_question(&mut self, init_roots: &InitRoots) {
        self.roots_question_seen = true;
        if !self.lent {
            init_roots.learn_asks();
        }
    }

    pub(super) fn reusable(&self) -> bool {
        self.dead.is_none() && self.pending.is_empty() && !self.tainted
    }

    pub(super) fn roots_question_waiting(&self) -> bool {
        self.deferred
            .iter()
            .any(|(_, method, _)| method == "roots/list")
    }

    pub(super) fn roots_fit(&self, can_ask_client: bool) -> bool {
        if can_ask_client {
            self.roots_question_waiting() || (!self.roots_asked && !self.client_roots)
        } else {
            !self.client_roots
        }
    }

    /// Whether asking the backend to ask for roots again is settled: `Some(true)` once its
    /// question waits here, `Some(false)` when it never can (session ended or tainted).
    pub(super) fn roots_reask_settled(&self) -> Option<bool> {
        if self.roots_question_waiting() {
            Some(true)
        } else if self.dead.is_some() || self.tainted {
            Some(false)
        } else {
            None
        }
    }
}
