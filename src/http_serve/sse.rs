//! Server-sent events, for both eras: a JSON-RPC message as an event, the keep-alive comment,
//! an SSE response's headers, and an answer that starts as SSE when it is slow to come.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{stream, StreamExt};
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde::Serialize;

use super::response::{labeled, Body};
use crate::http_client::is_event_stream;
use crate::protocol::Method;

/// The SSE comment that keeps an idle stream's connection open.
pub(crate) const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// One JSON-RPC message as an SSE event.
pub(crate) fn sse_frame(message: &(impl Serialize + ?Sized)) -> Bytes {
    sse_event(&serde_json::to_vec(message).unwrap_or_default())
}

/// One SSE event whose data is this (single-line JSON) message.
pub(crate) fn sse_event(data: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(data.len() + 23);
    event.extend_from_slice(b"event: message\ndata: ");
    event.extend_from_slice(data);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// An SSE response with this body, labelled for the metrics.
pub(crate) fn sse_response(body: Body, method: Method, outcome: &'static str) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx and similar proxies would otherwise hold events back.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    labeled(response, method, outcome)
}

/// An answer as it is when it comes within `after`, else an SSE stream started then:
/// keep-alive comments every `keep_alive`, then the answer as its one event, or the answer's own
/// SSE events. Proxies and peers that cut a silent response wait for it then.
pub(crate) async fn answer_early(
    mut answer: BoxFuture<'static, Response<Body>>,
    method: Method,
    after: Duration,
    keep_alive: Duration,
) -> Response<Body> {
    tokio::select! {
        response = &mut answer => return response,
        _ = tokio::time::sleep(after) => {}
    }
    enum Relay {
        Waiting(BoxFuture<'static, Response<Body>>, tokio::time::Interval),
        Streaming(Body),
    }
    let keep_alive_frame = || Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)));
    let mut keep_alive = tokio::time::interval(keep_alive);
    keep_alive.reset();
    let first = stream::once(async move { keep_alive_frame() });
    let rest = stream::unfold(
        Some(Relay::Waiting(answer, keep_alive)),
        move |relay| async move {
            match relay? {
                Relay::Waiting(mut answer, mut keep_alive) => tokio::select! {
                    response = &mut answer => {
                        let event_stream = is_event_stream(response.headers());
                        let mut body = response.into_body();
                        if event_stream {
                            // Its own events follow.
                            let frame = body.frame().await?;
                            return Some((frame, Some(Relay::Streaming(body))));
                        }
                        match body.collect().await {
                            Ok(message) => Some((Ok(Frame::data(sse_event(&message.to_bytes()))), None)),
                            Err(error) => Some((Err(error), None)),
                        }
                    }
                    _ = keep_alive.tick() => Some((keep_alive_frame(), Some(Relay::Waiting(answer, keep_alive)))),
                },
                Relay::Streaming(mut body) => {
                    let frame = body.frame().await?;
                    Some((frame, Some(Relay::Streaming(body))))
                }
            }
        },
    );
    sse_response(
        StreamBody::new(first.chain(rest)).boxed_unsync(),
        method,
        "stream",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_serve::{full, json_response};
    use http::StatusCode;
    use serde_json::json;

    /// `answer_early` as an owner with a 2 s peer timeout calls it: SSE after 1 s, keep-alive
    /// comments every 400 ms.
    async fn early(
        answer: impl std::future::Future<Output = Response<Body>> + Send + 'static,
    ) -> Response<Body> {
        answer_early(
            Box::pin(answer),
            Method::ToolsCall,
            Duration::from_secs(1),
            Duration::from_millis(400),
        )
        .await
    }

    async fn body_text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_answer_is_relayed_as_it_is() {
        let answer = async {
            tokio::time::sleep(Duration::from_millis(900)).await;
            json_response(StatusCode::BAD_REQUEST, &json!({"id": 1}))
        };
        let response = early(answer).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body_text(response).await, r#"{"id":1}"#);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_starts_as_sse_with_keep_alives() {
        let answer = async {
            tokio::time::sleep(Duration::from_millis(2000)).await;
            json_response(StatusCode::OK, &json!({"id": 1}))
        };
        let response = early(answer).await;
        assert_eq!(response.headers()[CONTENT_TYPE], "text/event-stream");
        let text = body_text(response).await;
        // One comment at the head, one per 400 ms until the answer at 2 s (1 s after the head).
        assert_eq!(
            text,
            ": keep-alive\n\n: keep-alive\n\n: keep-alive\n\nevent: message\ndata: {\"id\":1}\n\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_stream_is_relayed_event_by_event() {
        let answer = async {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let mut response = Response::new(full("event: message\ndata: {\"a\":1}\n\n"));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            response
        };
        let response = early(answer).await;
        assert_eq!(
            body_text(response).await,
            ": keep-alive\n\nevent: message\ndata: {\"a\":1}\n\n"
        );
    }
}
