//! Replicas that finish each other's held calls (`[fleet]`): the owner of a call or session
//! addressed, and a request forwarded to it with its answer streamed back as it comes. Both eras
//! forward through here: the front a retry whose `requestState` names another replica, the
//! 2025-11-25 era a request for a session another replica holds.
//!
//! - The owner's address is trusted only because the sealed state (or session id) opened with the
//!   shared key ring; a client never chooses where the gateway connects, and
//!   `fleet.allowed_peers` narrows it further.
//! - The HTTP request goes on unchanged (path, headers including `Authorization`, body) plus the
//!   [`FORWARDED_BY`] marker: the owner authenticates and validates it as if the client had
//!   called it directly, and never forwards a marked request again (one hop).
//! - What the client is told depends on what is certain. An owner that refuses the connection
//!   is gone (nothing listens at its address), and with it the call: `owner_unavailable`, start
//!   again. An owner that cannot be reached otherwise, sends no response head within
//!   `fleet.peer_timeout`, goes silent for longer than `sse_keep_alive + peer_timeout` or breaks
//!   off its answer may be frozen, overloaded or behind a broken link, its call still held:
//!   `owner_not_answering`, send the same retry again (a copy of a retry already redeemed gets
//!   its outcome replayed). A cut SSE answer carries the error as its last event.
//! - Dropping the client's response drops the forwarded one, which closes its connection.
//!
//! Forwarded retries are counted from the start until their answer is relayed
//! ([`Fleet::forwarding`]): a draining gateway waits for them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream;
use http::header::HOST;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::FleetConfig;
use crate::error::{GatewayError, StateRejection};
use crate::http_client::{is_event_stream, new_client, HttpClient, TlsSetupError};
use crate::http_serve::{error_response, labeled, sse_frame, Body};
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::protocol::Method;

/// Marks a request one replica forwarded to another; its value is the forwarder's address.
pub(crate) const FORWARDED_BY: HeaderName = HeaderName::from_static("mrtr-forwarded-by");

/// Set by an owner that answers a forwarded retry with `owner_unavailable` (it was restarted,
/// or the state names yet another replica), so the forwarder counts the result as such.
pub(crate) const OWNER_UNAVAILABLE: HeaderName = HeaderName::from_static("mrtr-owner-unavailable");

/// Marks an owner's `owner_unavailable` answer to a forwarded retry, for the forwarder's count.
pub(crate) fn mark_owner_unavailable(response: &mut Response<Body>) {
    response
        .headers_mut()
        .insert(OWNER_UNAVAILABLE, HeaderValue::from_static("1"));
}

/// Headers of one connection only (RFC 9110 §7.6.1), never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The forwarder's address, when another replica forwarded this request.
pub(crate) fn forwarded_by(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get(FORWARDED_BY)
}

/// What a replica needs to reach the others, shared by every route.
pub(crate) struct Fleet {
    /// This replica's `fleet.advertise`, the marker's value.
    advertise: HeaderValue,
    allowed_peers: Vec<ipnet::IpNet>,
    peer_timeout: Duration,
    /// Between SSE keep-alive comments of an answer started early.
    keep_alive: Duration,
    /// Pooled connections to the other replicas.
    client: HttpClient,
    metrics: Arc<Metrics>,
    /// Forwards whose answer is still being relayed.
    forwarding: AtomicUsize,
    /// Cancelled when the drain ends: a relay still open ends with `GatewayError::ShutDown`.
    calls_end: Arc<CancellationToken>,
}

impl Fleet {
    pub(crate) fn new(
        config: &FleetConfig,
        keep_alive: Duration,
        metrics: Arc<Metrics>,
        calls_end: Arc<CancellationToken>,
    ) -> Result<Self, TlsSetupError> {
        Ok(Self {
            // Checked as an authority when the configuration was loaded.
            advertise: HeaderValue::from_str(&config.advertise)
                .unwrap_or(HeaderValue::from_static("replica")),
            allowed_peers: config.allowed_peers.clone(),
            peer_timeout: config.peer_timeout,
            keep_alive,
            client: new_client()?,
            metrics,
            forwarding: AtomicUsize::new(0),
            calls_end,
        })
    }

    /// Forwards whose answer is still being relayed.
    pub(crate) fn forwarding(&self) -> usize {
        self.forwarding.load(Ordering::Acquire)
    }

    /// How long a forwarder waits for an owner's response head.
    pub(crate) fn peer_timeout(&self) -> Duration {
        self.peer_timeout
    }

    /// Between SSE keep-alive comments of an answer started early.
    pub(crate) fn keep_alive(&self) -> Duration {
        self.keep_alive
    }

    /// A retry no replica can finish (its owner was restarted), refused here.
    pub(crate) fn count_unavailable(&self) {
        self.metrics
            .forwarded_retries
            .with_label_values(&["owner_unavailable"])
            .inc();
    }

    /// The socket address to forward to: the owner's, if `allowed_peers` admits it.
    async fn peer(&self, owner: &str) -> Result<SocketAddr, GatewayError> {
        let candidates: Vec<SocketAddr> = match owner.parse::<SocketAddr>() {
            Ok(address) => vec![address],
            Err(_) => tokio::net::lookup_host(owner)
                .await
                .map_err(|e| GatewayError::OwnerNotAnswering(format!("cannot be resolved ({e})")))?
                .collect(),
        };
        let allowed = |address: &SocketAddr| {
            self.allowed_peers.is_empty()
                || self
                    .allowed_peers
                    .iter()
                    .any(|net| net.contains(&address.ip()))
        };
        match candidates.iter().find(|a| allowed(a)) {
            Some(address) => Ok(*address),
            None if candidates.is_empty() => {
                Err(GatewayError::OwnerNotAnswering("cannot be resolved".into()))
            }
            None => Err(GatewayError::BadState {
                reason: StateRejection::OwnerNotAllowed,
            }),
        }
    }

    /// The request as it came, to its owner: the response head, or why there is none.
    async fn send_to_owner(
        &self,
        owner: &str,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Result<Response<hyper::body::Incoming>, GatewayError> {
        tokio::time::timeout(self.peer_timeout, async {
            let peer = self.peer(owner).await?;
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let uri = format!("http://{peer}{path}").parse().map_err(|_| {
                GatewayError::OwnerUnavailable(format!("has an unusable address ({owner})"))
            })?;
            let mut forwarded = Request::new(Full::new(body));
            *forwarded.method_mut() = parts.method;
            *forwarded.uri_mut() = uri;
            let headers = forwarded.headers_mut();
            *headers = parts.headers;
            strip_hop_by_hop(headers);
            // An HTTP/2 client names the host in `:authority`: the owner checks it as `Host`.
            if let (false, Some(authority)) = (headers.contains_key(HOST), parts.uri.authority()) {
                if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                    headers.insert(HOST, host);
                }
            }
            headers.insert(FORWARDED_BY, self.advertise.clone());
            crate::telemetry::inject_current_trace(headers);
            self.client.request(forwarded).await.map_err(|e| {
                if refused(&e) {
                    GatewayError::OwnerUnavailable("refused the connection".into())
                } else {
                    GatewayError::OwnerNotAnswering(format!("cannot be reached ({e})"))
                }
            })
        })
        .await
        .unwrap_or_else(|_| {
            Err(GatewayError::OwnerNotAnswering(format!(
                "did not answer within {:?}",
                self.peer_timeout
            )))
        })
    }

    /// Sends a retry (the HTTP request as it came, with its JSON-RPC id and method) to the
    /// replica holding its call, and relays the answer.
    pub(crate) async fn forward_retry(
        self: Arc<Self>,
        owner: String,
        parts: http::request::Parts,
        body: Bytes,
        id: Value,
        method: Method,
    ) -> Response<Body> {
        let relaying = Relaying::start(&self);
        let started = Instant::now();
        let relayed = self.send_to_owner(&owner, parts, body).await;
        self.metrics
            .forward_duration
            .observe(started.elapsed().as_secs_f64());
        let result = match &relayed {
            Ok(response) if response.headers().contains_key(OWNER_UNAVAILABLE) => {
                "owner_unavailable"
            }
            Ok(_) => "ok",
            Err(GatewayError::BadState { .. }) => "owner_not_allowed",
            Err(GatewayError::OwnerNotAnswering(_)) => "owner_not_answering",
            Err(_) => "owner_unavailable",
        };
        self.metrics
            .forwarded_retries
            .with_label_values(&[result])
            .inc();
        let response = match relayed {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%owner, %error, "retry not forwarded");
                return error_response(Some(id), &error);
            }
        };
        tracing::debug!(%owner, status = %response.status(), "retry forwarded");
        let (mut head, incoming) = response.into_parts();
        strip_hop_by_hop(&mut head.headers);
        head.headers.remove(OWNER_UNAVAILABLE);
        let event_stream = is_event_stream(&head.headers);
        let body = self.relay(incoming, event_stream, Some(id), Some(relaying));
        labeled(Response::from_parts(head, body), method, "forwarded")
    }

    /// A 2025-11-25 session's request (POST, GET stream or DELETE), to the replica holding the
    /// session, and its answer relayed. Not counted in [`Fleet::forwarding`]: a GET stream
    /// lasts as long as the client wants, and the drain does not wait for it.
    pub(crate) async fn forward_session(
        self: Arc<Self>,
        owner: String,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Response<Body> {
        let response = match self.send_to_owner(&owner, parts, body).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%owner, %error, "session request not forwarded");
                return error_response(None, &error);
            }
        };
        let (mut head, incoming) = response.into_parts();
        strip_hop_by_hop(&mut head.headers);
        let event_stream = is_event_stream(&head.headers);
        let body = self.relay(incoming, event_stream, None, None);
        Response::from_parts(head, body)
    }

    /// The owner's body, frame by frame as it comes. An owner silent for longer than its
    /// keep-alive interval plus `peer_timeout`, or one that breaks off, ends an SSE answer with
    /// `owner_unavailable` (a JSON answer can only be cut short).
    fn relay<B>(
        &self,
        incoming: B,
        event_stream: bool,
        id: Option<serde_json::Value>,
        relaying: Option<Relaying>,
    ) -> Body
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<tower::BoxError>,
    {
        let silence = self.keep_alive + self.peer_timeout;
        let calls_end = self.calls_end.clone();
        let frames = stream::unfold(Some((incoming, relaying)), move |state| {
            let id = id.clone();
            let calls_end = calls_end.clone();
            async move {
                let (mut body, relaying) = state?;
                let error = tokio::select! {
                    biased;
                    frame = tokio::time::timeout(silence, body.frame()) => {
                        let why = match frame {
                            Ok(Some(Ok(frame))) => return Some((Ok(frame), Some((body, relaying)))),
                            Ok(None) => return None,
                            Ok(Some(Err(error))) => format!("broke off its answer ({})", error.into()),
                            Err(_) => format!("stopped answering for {silence:?}"),
                        };
                        tracing::warn!(reason = %why, "forwarded answer ended early");
                        GatewayError::OwnerNotAnswering(why)
                    }
                    // This replica's drain is over: the relay ends like a call of its own.
                    () = calls_end.cancelled() => GatewayError::ShutDown,
                };
                if !event_stream {
                    return Some((Err(error.to_string().into()), None));
                }
                // A session's stream (no id to answer) just ends: its client resumes it.
                let id = id?;
                let message = jsonrpc::error_response(Some(id), &error.to_jsonrpc());
                Some((Ok(Frame::data(sse_frame(&message))), None))
            }
        });
        StreamBody::new(frames).boxed_unsync()
    }
}

/// One forward, counted in [`Fleet::forwarding`] from its start until its answer is relayed or
/// dropped.
struct Relaying(Arc<Fleet>);

impl Relaying {
    fn start(fleet: &Arc<Fleet>) -> Self {
        fleet.forwarding.fetch_add(1, Ordering::AcqRel);
        Self(fleet.clone())
    }
}

impl Drop for Relaying {
    fn drop(&mut self) {
        self.0.forwarding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the owner's address refused the connection: nothing listens there, so the process
/// that held the call is gone. Anything else may be a pause or a broken link.
fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Named by `Connection` as well as the fixed set.
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_serve::{full, KEEP_ALIVE};
    use futures_util::StreamExt;
    use serde_json::json;

    fn fleet(allowed_peers: &[&str]) -> Arc<Fleet> {
        let config = FleetConfig {
            advertise: "127.0.0.1:8080".into(),
            allowed_peers: allowed_peers.iter().map(|p| p.parse().unwrap()).collect(),
            peer_timeout: Duration::from_secs(2),
            listen: None,
        };
        Arc::new(
            Fleet::new(
                &config,
                Duration::from_millis(400),
                Arc::new(Metrics::new()),
                Arc::new(CancellationToken::new()),
            )
            .unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_gone_silent_ends_the_stream_with_owner_not_answering() {
        let fleet = fleet(&[]);
        // One keep-alive, then nothing ever again.
        let frames = stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
            Bytes::from_static(KEEP_ALIVE),
        ))])
        .chain(stream::pending());
        let relayed = fleet.relay(
            StreamBody::new(frames),
            true,
            Some(json!(7)),
            Some(Relaying::start(&fleet)),
        );
        assert_eq!(fleet.forwarding(), 1);
        // Keep-alive (400 ms) + peer timeout (2 s) of silence: the owner is not answering; it
        // may be paused with the call still held, so the client is to send the same retry again.
        let text = String::from_utf8(relayed.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        let (first, last) = text.split_once("\n\n").unwrap();
        assert_eq!(format!("{first}\n\n").as_bytes(), KEEP_ALIVE);
        let message: serde_json::Value =
            serde_json::from_str(last.trim().trim_start_matches("event: message\ndata: ")).unwrap();
        assert_eq!(message["id"], 7);
        assert_eq!(message["error"]["data"]["reason"], "owner_not_answering");
        assert!(message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped answering"));
        assert_eq!(fleet.forwarding(), 0, "the count ends with the relay");
    }

    #[tokio::test]
    async fn a_relay_open_when_the_drain_ends_ends_with_the_shutdown_error() {
        let fleet = fleet(&[]);
        let frames = stream::pending::<Result<Frame<Bytes>, std::convert::Infallible>>();
        let relayed = fleet.relay(
            StreamBody::new(frames),
            true,
            Some(json!(9)),
            Some(Relaying::start(&fleet)),
        );
        fleet.calls_end.cancel();
        let text = String::from_utf8(relayed.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        let message: serde_json::Value =
            serde_json::from_str(text.trim().trim_start_matches("event: message\ndata: ")).unwrap();
        assert_eq!(message["id"], 9);
        assert!(message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shut down"));
        assert_eq!(fleet.forwarding(), 0);
    }

    #[tokio::test]
    async fn a_relay_dropped_by_its_client_is_no_longer_counted() {
        let fleet = fleet(&[]);
        let relayed = fleet.relay(
            full("{}"),
            false,
            Some(json!(1)),
            Some(Relaying::start(&fleet)),
        );
        assert_eq!(fleet.forwarding(), 1);
        drop(relayed);
        assert_eq!(fleet.forwarding(), 0);
    }

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", HeaderValue::from_static("close, x-private"));
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("authorization", HeaderValue::from_static("Bearer t"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["authorization"], "Bearer t");
    }

    fn retry_parts() -> http::request::Parts {
        let (parts, ()) = Request::post("/mcp").body(()).unwrap().into_parts();
        parts
    }

    #[tokio::test]
    async fn only_a_refused_connection_says_the_owner_is_gone() {
        let fleet = fleet(&[]);
        // Nothing listens at the address: the process that held the call is gone.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = closed.local_addr().unwrap().to_string();
        drop(closed);
        let gone = fleet
            .send_to_owner(&address, retry_parts(), Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert!(
            matches!(&gone, GatewayError::OwnerUnavailable(why) if why == "refused the connection"),
            "{gone:?}"
        );

        // An owner that takes the request and closes the connection without an answer may have
        // been cut off mid-way, its call still held: the same retry is to be sent again.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let owner = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await;
        });
        let silent = fleet
            .send_to_owner(&address, retry_parts(), Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert!(
            matches!(silent, GatewayError::OwnerNotAnswering(_)),
            "{silent:?}"
        );
        owner.await.unwrap();
    }

    #[tokio::test]
    async fn only_allowed_peers_are_reached() {
        let open = fleet(&[]);
        assert_eq!(
            open.peer("10.1.2.3:8080").await.unwrap(),
            "10.1.2.3:8080".parse().unwrap()
        );
        let narrow = fleet(&["10.0.0.0/8", "::1/128"]);
        assert!(narrow.peer("10.1.2.3:8080").await.is_ok());
        assert!(narrow.peer("[::1]:8080").await.is_ok());
        assert!(matches!(
            narrow.peer("192.168.1.1:8080").await,
            Err(GatewayError::BadState {
                reason: StateRejection::OwnerNotAllowed
            })
        ));
        // A name is resolved, and each of its addresses checked.
        assert!(matches!(
            narrow.peer("localhost:8080").await,
            Err(GatewayError::BadState { .. }) | Ok(_)
        ));
        assert!(fleet(&["127.0.0.0/8"]).peer("localhost:8080").await.is_ok());
    }
}
