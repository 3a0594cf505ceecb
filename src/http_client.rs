//! How the gateway's outbound HTTP clients are built (one per Streamable HTTP backend, one for
//! JWKS documents, one for the other replicas of a fleet): hyper's pooled client over rustls
//! (ring; the webpki roots and the system's trust store), HTTP/1.1; and how their responses say
//! they are SSE. A leaf.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub(crate) type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The TLS provider could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS setup failed: {0}")]
pub struct TlsSetupError(#[source] rustls::Error);

/// How long an idle pooled connection is kept, and how many per host at most. Shorter than the
/// 5 s idle limit of common servers (Node's `http`, uvicorn, Apache): a connection the server is
/// closing at that instant is never the one reused, which would lose a message sent on it.
/// After a burst, thousands of idle connections (each with its buffers) would otherwise hold
/// memory.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
const POOL_MAX_IDLE_PER_HOST: usize = 128;

/// The certificate authorities outbound TLS trusts: the webpki roots (the gateway works without a
/// system store, as in a distroless image) plus the system's store, where an operator adds a
/// private CA (a mounted bundle named by `SSL_CERT_FILE` or `SSL_CERT_DIR`, or the image's
/// `/etc/ssl/certs`). Read once: every client shares it.
static TRUST_ROOTS: LazyLock<Arc<rustls::RootCertStore>> = LazyLock::new(|| {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::warn!(%error, "a certificate of the system's trust store could not be read");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    let chosen = ["SSL_CERT_FILE", "SSL_CERT_DIR"].map(|name| std::env::var_os(name).is_some());
    if added == 0 && chosen.contains(&true) {
        // The operator named a trust store and none of it was taken: say so now rather than
        // let each TLS handshake to a private CA fail later.
        tracing::warn!(
            ignored,
            "SSL_CERT_FILE / SSL_CERT_DIR gave no usable certificate"
        );
    } else {
        tracing::debug!(added, ignored, "system trust store loaded");
    }
    Arc::new(roots)
});

pub(crate) fn new_client() -> Result<HttpClient, TlsSetupError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    // Requests and SSE events are small writes that must not wait for Nagle's algorithm.
    tcp.set_nodelay(true);
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsSetupError)?
    .with_root_certificates(Arc::clone(&TRUST_ROOTS))
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
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
pub(crate) fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}
