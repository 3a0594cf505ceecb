//! How the gateway's outbound HTTP clients are built (one per Streamable HTTP backend, one for
//! JWKS documents, one for the other replicas of a fleet): hyper's pooled client over rustls
//! (ring, webpki roots), HTTP/1.1; and how their responses say they are SSE. A leaf.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The TLS provider could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS setup failed: {0}")]
pub struct TlsSetupError(#[source] rustls::Error);

/// How long an idle pooled connection is kept, and how many per host at most. After a burst,
/// thousands of idle connections (each with its buffers) would otherwise hold memory.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_MAX_IDLE_PER_HOST: usize = 128;

pub fn new_client() -> Result<HttpClient, TlsSetupError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    // Requests and SSE events are small writes that must not wait for Nagle's algorithm.
    tcp.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(TlsSetupError)?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        // Without a timer, hyper drops an expired idle connection only when the host is asked
        // for another one: after a burst nobody asks.
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
        .build(connector))
}

/// Whether a response is an SSE stream (`Content-Type: text/event-stream`, any case).
pub fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}
