//! One client request through the reverse bridge: sent to the 2026-07-28 backend, its
//! notifications passed to the request's stream, each round's questions put to the client and
//! their answers checked, until the backend's final answer or `max_rounds`.

use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::{Answer, Inner};
use crate::backend::modern::{ModernEvent, ModernRequest};
use crate::backend::{BackendError, TransportEvent};
use crate::error::GatewayError;
use crate::jsonrpc::{codes, JsonRpcError};
use crate::mrtr::inputs::{undeclared, validate_answer, InputKind, PendingInput};
use crate::sync::LockRecovered;

impl Inner {
    /// One request through its rounds, to the backend's final answer.
    pub(super) async fn run(&self, method: &str, id: &Value, params: Map<String, Value>) -> Answer {
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            _ => None,
        }
        .and_then(Value::as_str)
        .map(String::from);
        let base = self.modern_params(params);
        let mut continuation: Option<(Map<String, Value>, Option<Value>)> = None;
        for round in 0..=self.limits.max_rounds {
            let mut params = base.clone();
            if let (Some((answers, state)), Value::Object(params)) =
                (continuation.take(), &mut params)
            {
                params.insert("inputResponses".into(), Value::Object(answers));
                if let Some(state) = state {
                    params.insert("requestState".into(), state);
                }
            }
            let mut result = self.exchange(method, params, name.clone(), id).await?;
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                if let Value::Object(result) = &mut result {
                    result.remove("resultType");
                }
                return Ok(result);
            }
            if round == self.limits.max_rounds {
                break;
            }
            let state = result.get("requestState").cloned();
            let answers = match result.get("inputRequests") {
                Some(Value::Object(requests)) => self.ask(id, requests).await?,
                // A round without questions: the backend asks to be called again.
                _ => Map::new(),
            };
            continuation = Some((answers, state));
        }
        Err(JsonRpcError::new(
            codes::INTERNAL_ERROR,
            format!(
                "the backend asked for input more than {} times",
                self.limits.max_rounds
            ),
        ))
    }

    /// Sends one request and reads it to its answer; its notifications go to the client's
    /// request (`client_id`) as they come.
    pub(super) async fn exchange(
        &self,
        method: &str,
        params: Value,
        name: Option<String>,
        client_id: &Value,
    ) -> Answer {
        let request = ModernRequest {
            method: method.to_string(),
            params,
            name,
            headers: Vec::new(),
        };
        let timeout = self.limits.request_timeout;
        let run = async {
            let mut exchange = self.upstream.send(request).await?;
            loop {
                match exchange.next().await {
                    Some(Ok(ModernEvent::Notify(notice))) => {
                        let _ = self
                            .events
                            .send(TransportEvent::ForRequest {
                                request: client_id.clone(),
                                message: notice,
                            })
                            .await;
                    }
                    Some(Ok(ModernEvent::Result(result))) => {
                        return Ok(Ok(serde_json::from_str(result.get()).unwrap_or(Value::Null)))
                    }
                    Some(Ok(ModernEvent::Error { error })) => {
                        return Ok(Err(legacy_error(method, error)))
                    }
                    Some(Err(error)) => return Err(error),
                    None => return Err(BackendError::Closed("no answer".into())),
                }
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                self.upstream.failed(&error);
                Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("Backend unavailable: {error}"),
                ))
            }
            Err(_) => Err(JsonRpcError::new(
                codes::INTERNAL_ERROR,
                format!("the backend did not answer within {timeout:?}"),
            )),
        }
    }

    /// Puts a round's questions to the client, all at once, on its request's stream; their
    /// answers, checked, keyed as the backend asked.
    async fn ask(
        &self,
        client_id: &Value,
        requests: &Map<String, Value>,
    ) -> Result<Map<String, Value>, JsonRpcError> {
        // A question the client did not declare it can answer never reaches it (the backend
        // should have answered -32021 itself).
        let declared = self.state.lock_recovered().client_capabilities.clone();
        if let Some(required) = undeclared(requests, &declared) {
            return Err(GatewayError::MissingCapability { required }.to_jsonrpc());
        }
        let mut asked = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(kind) = InputKind::from_method(method) else {
                return Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("the backend asked for {method:?}, which is no input request"),
                ));
            };
            let question_id = json!(format!(
                "mrtr-q-{}",
                self.next_question.fetch_add(1, Ordering::Relaxed)
            ));
            let (answered, answer) = oneshot::channel();
            self.state
                .lock_recovered()
                .questions
                .insert(question_id.to_string(), answered);
            let params = request.get("params").cloned();
            let mut question = crate::jsonrpc::request(question_id.clone(), method, params.clone());
            if question.get("params").is_none() {
                question["params"] = json!({});
            }
            let _ = self
                .events
                .send(TransportEvent::ForRequest {
                    request: client_id.clone(),
                    message: question,
                })
                .await;
            let input = PendingInput {
                key: key.clone(),
                backend_id: Value::Null,
                kind,
                request: request.clone(),
                original: (method.to_string(), params),
                deferred: false,
            };
            asked.push((question_id, input, answer));
        }
        let timeout = self.limits.request_timeout;
        let waits = asked
            .into_iter()
            .map(|(question_id, input, answer)| async move {
                let answer = tokio::time::timeout(timeout, answer).await;
                (question_id, input, answer)
            });
        let mut answers = Map::new();
        for (question_id, input, answer) in join_all(waits).await {
            let message = match answer {
                Ok(Ok(message)) => message,
                _ => {
                    self.state
                        .lock_recovered()
                        .questions
                        .remove(&question_id.to_string());
                    return Err(JsonRpcError::new(
                        codes::INTERNAL_ERROR,
                        format!(
                            "the client did not answer {} within {timeout:?}",
                            input.kind.as_str()
                        ),
                    ));
                }
            };
            if let Some(error) = message.get("error") {
                let error = JsonRpcError::from_value(error);
                return Err(JsonRpcError::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "the client could not answer {}: {}",
                        input.original.0, error.message
                    ),
                ));
            }
            let result = message.get("result").cloned().unwrap_or(Value::Null);
            let checked = validate_answer(&input, &result).map_err(|problem| {
                JsonRpcError::new(
                    codes::INVALID_PARAMS,
                    format!("the answer to {} {problem}", input.original.0),
                )
            })?;
            answers.insert(input.key, checked);
        }
        Ok(answers)
    }
}

/// A 2026-07-28 error as a 2025-11-25 client knows it: a missing resource is `-32002`.
fn legacy_error(method: &str, error: JsonRpcError) -> JsonRpcError {
    if method == "resources/read"
        && error.code == codes::INVALID_PARAMS
        && error.data.as_ref().and_then(|d| d.get("uri")).is_some()
    {
        return JsonRpcError {
            code: codes::LEGACY_RESOURCE_NOT_FOUND,
            ..error
        };
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_resource_is_the_2025_code() {
        let missing = JsonRpcError::new(codes::INVALID_PARAMS, "Resource not found")
            .with_data(json!({"uri": "test://x"}));
        assert_eq!(legacy_error("resources/read", missing.clone()).code, -32002);
        assert_eq!(
            legacy_error("tools/call", missing).code,
            codes::INVALID_PARAMS
        );
    }
}
