//! Merged answers of a route over several backends: every backend is asked at once, each
//! within `list_timeout`, and what they answered is put together in the order of `backends`.
//!
//! - Lists: one page of each backend still to ask, names exposed; the `nextCursor` is opaque
//!   to the client and names, for each backend with more, its own cursor. Hints are the
//!   strictest a backend gave (the shortest `ttlMs`; `private` if any part is).
//! - `server/discover`: the union of the capabilities, each backend's instructions labelled,
//!   the gateway's own `serverInfo`.
//!
//! A backend that fails its part (down, an internal error, no answer in time) is left out and
//! counted (`on_backend_error = "omit"`; the answer then says not to cache it), or fails the
//! answer (`"fail"`). When none answered, the first backend's failure is the answer. A part
//! that fails for the request's own reason (a bad cursor, a refused step-up, a limit) is the
//! answer as it is. A cursor names its list and each backend once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::future::join_all;
use http::{HeaderMap, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::names::{self, expose_items, instructions_of};
use super::part::Part;
use super::{Aggregate, ApplyOn, Member};
use crate::access::CallerAccess;
use crate::backend::modern::MODERN_VERSION;
use crate::config::OnBackendError;
use crate::error::GatewayError;
use crate::front::request::Command;
use crate::front::translate;
use crate::http_serve::{json_response, labeled, Body};
use crate::jsonrpc::{self, raw};
use crate::mrtr::{ForwardedCall, RequestScope};
use crate::protocol::{gateway_implementation, Method, META_PROTOCOL_VERSION, SUPPORTED_VERSIONS};

/// Pages of one backend's resources read to find which backend a URI belongs to.
const MAX_LEARN_PAGES: usize = 10;

/// The shortest time between two listings to learn URIs.
const RELEARN_AFTER: Duration = Duration::from_secs(5);

/// The largest cursor taken: a few backends' own cursors.
const MAX_CURSOR_LEN: usize = 64 * 1024;

/// Where a merged list goes on: the list it pages, and the backends with more, each with its
/// own cursor (`None`: its first page).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Cursor {
    #[serde(rename = "m")]
    method: String,
    #[serde(rename = "p")]
    pending: Vec<(String, Option<String>)>,
}

impl Cursor {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(text: &str) -> Option<Self> {
        if text.len() > MAX_CURSOR_LEN {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        serde_json::from_slice::<Self>(&json)
            .ok()
            .filter(|c| !c.pending.is_empty())
    }
}

/// A part that answered, by the backend's index.
type Answered = (usize, Map<String, Value>);

impl Aggregate {
    /// A merged page of `tools/list`, `prompts/list`, `resources/list` or
    /// `resources/templates/list`, what the caller may not see left out.
    pub(in crate::front) async fn list(
        &self,
        via: &dyn ApplyOn,
        id: Value,
        call: ForwardedCall,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let method = call.method;
        let key = names::items_key(method)
            .ok_or_else(|| GatewayError::method_not_found(method.as_str()))?;
        let pending = self.pending(&call)?;
        let asked = pending.iter().map(|(i, cursor)| {
            let mut params = call.params.clone();
            match cursor {
                Some(cursor) => params.insert("cursor".into(), json!(cursor)),
                None => params.remove("cursor"),
            };
            let request = ForwardedCall {
                method,
                target: None,
                arguments: None,
                params,
                continuation: None,
                scope: call.scope.clone(),
                trace_headers: call.trace_headers.clone(),
            };
            self.part(
                via,
                &self.members[*i],
                Command::Forward(request),
                caller,
                headers,
            )
        });
        let parts = join_all(asked).await;
        let mut items = Vec::new();
        let mut next = Cursor {
            method: method.as_str().to_string(),
            pending: Vec::new(),
        };
        let mut hints = Hints::default();
        let parts = pending.iter().map(|(i, _)| *i).zip(parts);
        let (answered, omitted) = self.answered(method, parts)?;
        hints.partial = omitted;
        for (i, mut result) in answered {
            let member = &self.members[i];
            if let Some(Value::Array(mut page)) = result.remove(key) {
                self.resources.learn(i, key, &page);
                expose_items(method, &member.prefix, &mut page);
                items.append(&mut page);
            }
            if let Some(Value::String(cursor)) = result.get("nextCursor") {
                next.pending
                    .push((member.name.clone(), Some(cursor.clone())));
            }
            hints.add(&result);
        }
        let mut merged = Map::new();
        merged.insert(key.into(), Value::Array(items));
        if !next.pending.is_empty() {
            merged.insert("nextCursor".into(), json!(next.encode()));
        }
        caller.filter_list(method, &mut merged);
        let config = &self.config;
        let stamped = translate::stamp_result(
            method,
            &raw(&Value::Object(merged)),
            config,
            Some(&gateway_implementation()),
            false,
        );
        let mut stamped = stamped;
        hints.apply(&mut stamped);
        Ok(labeled(
            json_response(StatusCode::OK, &jsonrpc::result_message(&id, stamped)),
            method,
            "ok",
        ))
    }

    /// The backends a list request asks, by index, with their cursors.
    fn pending(&self, call: &ForwardedCall) -> Result<Vec<(usize, Option<String>)>, GatewayError> {
        let cursor = match call.params.get("cursor") {
            None | Some(Value::Null) => {
                return Ok((0..self.members.len()).map(|i| (i, None)).collect());
            }
            Some(Value::String(cursor)) => cursor,
            Some(_) => return Err(GatewayError::invalid_params("cursor must be a string")),
        };
        let invalid = || GatewayError::invalid_params("Invalid cursor");
        let cursor = Cursor::decode(cursor)
            .filter(|c| c.method == call.method.as_str())
            .ok_or_else(invalid)?;
        // Each backend once at most: a cursor asks no backend twice.
        let mut pending: Vec<(usize, Option<String>)> = Vec::with_capacity(cursor.pending.len());
        for (name, cursor) in cursor.pending {
            let i = self
                .members
                .iter()
                .position(|m| m.name == name)
                .filter(|i| pending.iter().all(|(seen, _)| seen != i))
                .ok_or_else(invalid)?;
            pending.push((i, cursor));
        }
        Ok(pending)
    }

    /// Lists every backend's resources and templates (a bounded number of pages each), to
    /// learn which backend a URI belongs to, within one `list_timeout` in all. One listing at a
    /// time, and none within [`RELEARN_AFTER`] of the last: URIs no backend has cannot make the
    /// route list again and again.
    pub(super) async fn learn_resources(
        &self,
        via: &dyn ApplyOn,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) {
        let mut last = self.learned_at.lock().await;
        if last.is_some_and(|at| at.elapsed() < RELEARN_AFTER) {
            return;
        }
        let learn = |i: usize, method: Method| async move {
            let member = &self.members[i];
            let key = names::items_key(method).unwrap_or_default();
            let mut cursor: Option<String> = None;
            for _ in 0..MAX_LEARN_PAGES {
                // As a client that declares nothing would ask.
                let mut params = Map::new();
                params.insert(
                    "_meta".into(),
                    json!({ META_PROTOCOL_VERSION: MODERN_VERSION }),
                );
                if let Some(cursor) = cursor.take() {
                    params.insert("cursor".into(), Value::String(cursor));
                }
                let request = ForwardedCall {
                    method,
                    target: None,
                    arguments: None,
                    params,
                    continuation: None,
                    scope: RequestScope {
                        client_capabilities: json!({}),
                        ..RequestScope::default()
                    },
                    trace_headers: Vec::new(),
                };
                let part = self.part(via, member, Command::Forward(request), caller, headers);
                let Ok(result) = part.await else {
                    return;
                };
                if let Some(Value::Array(items)) = result.get(key) {
                    self.resources.learn(i, key, items);
                }
                match result.get("nextCursor") {
                    Some(Value::String(next)) => cursor = Some(next.clone()),
                    _ => return,
                }
            }
        };
        let asked = (0..self.members.len()).flat_map(|i| {
            [
                learn(i, Method::ResourcesList),
                learn(i, Method::ResourcesTemplatesList),
            ]
        });
        // The whole listing within one `list_timeout`: reads waiting for it wait no longer.
        let _ = tokio::time::timeout(self.list_timeout, join_all(asked)).await;
        *last = Some(Instant::now());
    }

    /// `server/discover`: the backends' capabilities together, their instructions labelled.
    pub(in crate::front) async fn discover(
        &self,
        via: &dyn ApplyOn,
        id: Value,
        scope: RequestScope,
        caller: &Arc<CallerAccess>,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let asked = self.members.iter().map(|member| {
            let command = Command::Discover {
                scope: scope.clone(),
            };
            self.part(via, member, command, caller, headers)
        });
        let parts = join_all(asked).await;
        let mut capabilities = Map::new();
        let mut instructions = Vec::new();
        let (answered, omitted) = self.answered(Method::Discover, parts.into_iter().enumerate())?;
        let mut hints = Hints {
            partial: omitted,
            ..Hints::default()
        };
        for (i, result) in answered {
            hints.add(&result);
            if let Some(Value::Object(offered)) = result.get("capabilities") {
                union(&mut capabilities, offered);
            }
            if let Some(text) = instructions_of(&result) {
                let prefix = self.members[i]
                    .prefix
                    .trim_end_matches(crate::config::NAME_SEPARATOR);
                instructions.push((prefix.to_string(), text.to_string()));
            }
        }
        let mut result = Map::new();
        result.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
        result.insert("capabilities".into(), Value::Object(capabilities));
        if let Some(text) = names::labelled_instructions(&instructions) {
            result.insert("instructions".into(), Value::String(text));
        }
        let mut stamped = translate::stamp_result(
            Method::Discover,
            &raw(&Value::Object(result)),
            &self.config,
            Some(&gateway_implementation()),
            false,
        );
        hints.apply(&mut stamped);
        Ok(labeled(
            json_response(StatusCode::OK, &jsonrpc::result_message(&id, stamped)),
            Method::Discover,
            "ok",
        ))
    }

    /// The parts that answered, by backend index, and whether a backend was left out. A
    /// backend without the method adds nothing; a part that failed for the request's own reason
    /// (a bad cursor, a refused step-up, a limit) fails the answer with it; a backend's failure
    /// is counted and logged, and leaves the backend out or fails the answer, as the route says.
    /// None answering is the first backend's failure, or, if none has the method, its absence.
    fn answered(
        &self,
        method: Method,
        parts: impl Iterator<Item = (usize, Part)>,
    ) -> Result<(Vec<Answered>, bool), GatewayError> {
        let mut answered = Vec::new();
        let mut first_failure = None;
        for (i, part) in parts {
            match part {
                Ok(result) => answered.push((i, result)),
                Err(error) => {
                    if let Some(failed) = self.part_failed(&self.members[i], method, error)? {
                        first_failure.get_or_insert(failed);
                    }
                }
            }
        }
        match first_failure {
            Some(failure) if answered.is_empty() => Err(failure),
            None if answered.is_empty() => Err(GatewayError::method_not_found(method.as_str())),
            failure => Ok((answered, failure.is_some())),
        }
    }

    /// What one backend's failed part does to the answer: a backend without the method adds
    /// nothing (`Ok(None)`); the request's own error is the answer as it is (`Err`); a backend's
    /// failure is counted and logged, then fails the answer (`Err`, `on_backend_error =
    /// "fail"`) or leaves the backend out (`Ok(Some)`: the failure, which is the answer if no
    /// backend answers).
    pub(super) fn part_failed(
        &self,
        member: &Member,
        method: Method,
        error: GatewayError,
    ) -> Result<Option<GatewayError>, GatewayError> {
        if lacks_method(&error) {
            return Ok(None);
        }
        if !error.is_backend_failure() {
            return Err(error);
        }
        let failed = GatewayError::MemberFailed {
            backend: member.name.clone(),
            reason: error.to_string(),
        };
        match self.on_error {
            OnBackendError::Fail => {
                self.count_failure(member, method, "failed", &error);
                Err(failed)
            }
            OnBackendError::Omit => {
                self.count_failure(member, method, "omitted", &error);
                Ok(Some(failed))
            }
        }
    }
}

/// Whether a part's error says its backend does not have the method (a server without
/// prompts, resources or listens).
fn lacks_method(error: &GatewayError) -> bool {
    match error {
        GatewayError::MethodNotFound { .. } => true,
        GatewayError::Backend(e) => e.code == crate::jsonrpc::codes::METHOD_NOT_FOUND,
        _ => false,
    }
}

/// Capabilities put together: objects merged, a flag on where any backend has it on.
fn union(into: &mut Map<String, Value>, offered: &Map<String, Value>) {
    for (key, value) in offered {
        match (into.get_mut(key), value) {
            (Some(Value::Object(have)), Value::Object(more)) => union(have, more),
            (Some(Value::Bool(have)), Value::Bool(more)) => *have |= *more,
            (Some(_), _) => {}
            (None, value) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The cache hints of a merged answer: the strictest any part gave; nothing to keep when a
/// backend was left out.
#[derive(Default)]
struct Hints {
    ttl_ms: Option<u64>,
    private: bool,
    /// A backend was left out: the answer is not to be cached.
    partial: bool,
}

impl Hints {
    fn add(&mut self, result: &Map<String, Value>) {
        if let Some(ttl) = result.get("ttlMs").and_then(Value::as_u64) {
            self.ttl_ms = Some(self.ttl_ms.map_or(ttl, |have| have.min(ttl)));
        }
        if result.get("cacheScope").and_then(Value::as_str) == Some("private") {
            self.private = true;
        }
    }

    fn apply(&self, result: &mut crate::jsonrpc::RawObject) {
        let ttl_ms = if self.partial { Some(0) } else { self.ttl_ms };
        if let Some(ttl) = ttl_ms {
            if let Ok(raw) = serde_json::value::to_raw_value(&ttl) {
                let strictest = match result
                    .get("ttlMs")
                    .and_then(|v| v.get().parse::<u64>().ok())
                {
                    Some(have) if have < ttl => None,
                    _ => Some(raw),
                };
                if let Some(raw) = strictest {
                    result.insert("ttlMs".into(), raw);
                }
            }
        }
        if self.private {
            if let Ok(raw) = serde_json::value::to_raw_value("private") {
                result.insert("cacheScope".into(), raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_each_backend_with_more() {
        let cursor = Cursor {
            method: "tools/list".into(),
            pending: vec![
                ("files".into(), Some("c1".into())),
                ("tickets".into(), None),
            ],
        };
        let text = cursor.encode();
        assert_eq!(Cursor::decode(&text), Some(cursor));
        assert_eq!(Cursor::decode("not base64!"), None);
        assert_eq!(Cursor::decode(&Cursor::default().encode()), None);
        assert_eq!(Cursor::decode(&"A".repeat(MAX_CURSOR_LEN + 1)), None);
    }

    #[test]
    fn capabilities_are_united() {
        let mut into = Map::new();
        union(
            &mut into,
            json!({"tools": {"listChanged": false}, "logging": {}})
                .as_object()
                .unwrap(),
        );
        union(
            &mut into,
            json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            Value::Object(into),
            json!({"tools": {"listChanged": true}, "logging": {}, "resources": {"subscribe": true}})
        );
    }

    #[test]
    fn hints_are_the_strictest() {
        let mut hints = Hints::default();
        hints.add(
            json!({"ttlMs": 500, "cacheScope": "public"})
                .as_object()
                .unwrap(),
        );
        hints.add(
            json!({"ttlMs": 100, "cacheScope": "private"})
                .as_object()
                .unwrap(),
        );
        let mut result = crate::jsonrpc::RawObject::new();
        result.insert(
            "ttlMs".into(),
            serde_json::value::to_raw_value(&1000).unwrap(),
        );
        hints.apply(&mut result);
        assert_eq!(result["ttlMs"].get(), "100");
        assert_eq!(result["cacheScope"].get(), "\"private\"");
    }
}
