//! Writing a response, for both eras: the body type every front response has, empty and JSON
//! responses, a JSON-RPC error with the HTTP status and headers the one error table gives it,
//! and the labels ([`Labels`]) the metrics layer reads off a response.

use std::convert::Infallible;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use serde::Serialize;
use serde_json::Value;

use crate::error::GatewayError;
use crate::jsonrpc;
use crate::protocol::{Era, Method};

/// The body of every front response. Boxed with a boxed error, as panic catching needs.
pub(crate) type Body = UnsyncBoxBody<Bytes, tower::BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Empty::new()
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
}

pub(crate) fn not_found() -> Response<Body> {
    let mut response = Response::new(full("not found\n"));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

pub(crate) fn json_response(
    status: StatusCode,
    message: &(impl Serialize + ?Sized),
) -> Response<Body> {
    json_bytes_response(status, serde_json::to_vec(message).unwrap_or_default())
}

/// A JSON response whose body is already written.
pub(crate) fn json_bytes_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error with the status [`GatewayError::http_status`] gives it.
pub(crate) fn error_response(id: Option<Value>, error: &GatewayError) -> Response<Body> {
    let mut response = json_response(
        error.http_status(),
        &jsonrpc::error_response(id, &error.to_jsonrpc()),
    );
    if matches!(error, GatewayError::MethodNotAllowed) {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
    }
    if let Some(secs) = error.retry_after_secs() {
        response.headers_mut().insert(RETRY_AFTER, secs.into());
    }
    response
}

/// What a response was, for metrics: set by whoever builds it.
#[derive(Clone, Copy)]
pub(crate) struct Labels {
    pub method: Method,
    pub outcome: &'static str,
    /// The protocol era the request was served in.
    pub era: Era,
}

pub(crate) fn labeled(
    response: Response<Body>,
    method: Method,
    outcome: &'static str,
) -> Response<Body> {
    labeled_in(response, method, outcome, Era::Modern)
}

/// [`labeled`], for a response of the given era.
pub(crate) fn labeled_in(
    mut response: Response<Body>,
    method: Method,
    outcome: &'static str,
    era: Era,
) -> Response<Body> {
    response.extensions_mut().insert(Labels {
        method,
        outcome,
        era,
    });
    response
}

/// The outcome label of a request answered with `error`: the client's fault, or not.
pub(crate) fn error_outcome(error: &GatewayError) -> &'static str {
    if error.http_status().is_client_error() {
        "rejected"
    } else {
        "error"
    }
}

/// Adds to a 403 for [`GatewayError::InsufficientScope`] the challenge that names the scopes
/// needed and where the route's metadata is (RFC 6750 §3.1, RFC 9728 §5.1): a client steps up
/// by asking its authorization server for a token with them. Both eras answer with it.
pub(crate) fn scope_challenge(
    metadata_url: &str,
    error: &GatewayError,
    response: &mut Response<Body>,
) {
    let GatewayError::InsufficientScope { scopes } = error else {
        return;
    };
    let challenge = format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata_url}\"",
        scopes.join(" ")
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
}

/// The answer to a request whose handling panicked: a JSON-RPC internal error, 500.
pub(crate) fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %detail, "request handling panicked");
    error_response(
        None,
        &GatewayError::Internal("the request could not be handled".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{ServiceBuilder, ServiceExt};
    use tower_http::catch_panic::CatchPanicLayer;

    #[tokio::test]
    async fn a_panic_below_answers_500_with_a_jsonrpc_error() {
        let service = ServiceBuilder::new()
            .layer(CatchPanicLayer::custom(panicked))
            .service_fn(|request: http::Request<()>| async move {
                if request.uri().path() == "/panic" {
                    panic!("boom");
                }
                Ok::<_, Infallible>(empty(StatusCode::ACCEPTED))
            });
        let calm = service.oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(calm.status(), StatusCode::ACCEPTED);
        let request = http::Request::builder().uri("/panic").body(()).unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(message["error"]["code"], jsonrpc::codes::INTERNAL_ERROR);
        assert_eq!(message["id"], Value::Null);
    }
}
