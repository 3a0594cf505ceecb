//! The body's turn: media types first (`Content-Type` JSON, `Accept` listing JSON and SSE),
//! then the body read whole, within `server.max_body_bytes` and `server.body_read_timeout`.
//! A declared `Content-Length` over the limit is refused before anything is read.
//!
//! The read timeout bounds the whole body, not each frame: a client trickling bytes cannot hold
//! a request open (tower-http's body timeout restarts on every frame).

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Limited};
use tower::{Layer, Service};
use tower_http::validate_request::ValidateRequest;

use super::response::{error_response, Body};
use crate::error::GatewayError;
use crate::metrics::Metrics;

/// `Content-Type` and `Accept` of a POST as a layer's check.
#[derive(Clone, Copy)]
pub(crate) struct MediaTypes;

impl<B> ValidateRequest<B> for MediaTypes {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        // Only a POST carries a message (a 2025-11-25 session's GET and DELETE do not).
        if request.method() != http::Method::POST {
            return Ok(());
        }
        check_media_types(request.headers()).map_err(|error| error_response(None, &error))
    }
}

/// The media types a header lists, without parameters, skipping those with an explicit
/// `q=0` ("not acceptable"). Borrowed: this runs on every request.
fn media_types<'a>(
    headers: &'a HeaderMap,
    name: http::header::HeaderName,
) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let media_type = pieces.next().unwrap_or_default().trim();
            let refused =
                pieces.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (!refused).then_some(media_type)
        })
}

/// Whether `Accept` admits `wanted` (wildcards count, `q=0` refuses).
pub(crate) fn accepts(headers: &HeaderMap, wanted: &str) -> bool {
    let major = wanted.split('/').next().unwrap_or_default();
    media_types(headers, ACCEPT).any(|a| {
        a.eq_ignore_ascii_case(wanted)
            || a == "*/*"
            || a.strip_suffix("/*")
                .is_some_and(|m| m.eq_ignore_ascii_case(major))
    })
}

/// Checks `Content-Type` and `Accept` of a POST.
pub fn check_media_types(headers: &HeaderMap) -> Result<(), GatewayError> {
    let json = "application/json";
    if !media_types(headers, CONTENT_TYPE)
        .next()
        .is_some_and(|t| t.eq_ignore_ascii_case(json))
    {
        return Err(GatewayError::UnsupportedMediaType(
            "Content-Type must be application/json".into(),
        ));
    }
    if !(accepts(headers, json) && accepts(headers, "text/event-stream")) {
        return Err(GatewayError::NotAcceptable(
            "Accept must list both application/json and text/event-stream".into(),
        ));
    }
    Ok(())
}

/// Reads the body whole: `Request<B>` becomes `Request<Bytes>`.
#[derive(Clone)]
pub(crate) struct ReadBodyLayer {
    pub max_bytes: usize,
    pub timeout: Duration,
    pub metrics: std::sync::Arc<Metrics>,
}

impl<S> Layer<S> for ReadBodyLayer {
    type Service = ReadBody<S>;

    fn layer(&self, inner: S) -> ReadBody<S> {
        ReadBody {
            inner,
            limits: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct ReadBody<S> {
    inner: S,
    limits: ReadBodyLayer,
}

impl<S, B> Service<Request<B>> for ReadBody<S>
where
    S: Service<Request<Bytes>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let limits = self.limits.clone();
        Box::pin(async move {
            match read(request, &limits).await {
                Ok(request) => inner.call(request).await,
                Err(error) => Ok(error_response(None, &error)),
            }
        })
    }
}

/// The body of `request`, whole, within the limits.
pub(crate) async fn read<B>(
    request: Request<B>,
    limits: &ReadBodyLayer,
) -> Result<Request<Bytes>, GatewayError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tower::BoxError>,
{
    let too_large = GatewayError::BodyTooLarge {
        limit: limits.max_bytes,
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limits.max_bytes) {
        return Err(too_large);
    }
    let (parts, body) = request.into_parts();
    let collected = tokio::time::timeout(
        limits.timeout,
        Limited::new(body, limits.max_bytes).collect(),
    )
    .await
    .map_err(|_| GatewayError::RequestTimeout("the request body did not arrive in time".into()))?;
    match collected {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            limits.metrics.request_bytes.inc_by(bytes.len() as u64);
            Ok(Request::from_parts(parts, bytes))
        }
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large),
        Err(e) => Err(GatewayError::InvalidRequest(format!(
            "reading the body failed: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_serve::testing::headers;

    #[test]
    fn media_types_are_checked() {
        let ok = headers(&[
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
        ]);
        assert!(check_media_types(&ok).is_ok());
        let only_json = headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]);
        assert!(matches!(
            check_media_types(&only_json),
            Err(GatewayError::NotAcceptable(_))
        ));
        let text = headers(&[("content-type", "text/plain"), ("accept", "*/*")]);
        assert!(matches!(
            check_media_types(&text),
            Err(GatewayError::UnsupportedMediaType(_))
        ));
        // Case does not matter; wildcards count; types may come in separate headers.
        let mixed = headers(&[
            ("content-type", "Application/JSON"),
            ("accept", "APPLICATION/json;q=0.9"),
            ("accept", "text/*"),
        ]);
        assert!(check_media_types(&mixed).is_ok());
        // An explicit q=0 refuses a type.
        let refused = headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
        ]);
        assert!(matches!(
            check_media_types(&refused),
            Err(GatewayError::NotAcceptable(_))
        ));
        let missing = headers(&[("accept", "*/*")]);
        assert!(matches!(
            check_media_types(&missing),
            Err(GatewayError::UnsupportedMediaType(_))
        ));
    }
}
