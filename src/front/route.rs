//! Routes: one MCP endpoint per configured path, the backend pool behind it (or the several
//! backends it serves together, `aggregate`), and what the endpoint says about itself as an
//! OAuth protected resource (RFC 9728).

use std::sync::Arc;

use http::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::param_headers::ToolHeaders;
use crate::access::RouteAccess;
use crate::auth::Authenticator;
use crate::backend::pool::Pool;
use crate::config::RouteConfig;
use crate::error::GatewayError;
use crate::http_serve::{error_response, json_response, Body};
use crate::metrics::Metrics;

/// Where protected resource metadata is served: this prefix, then the route's path.
pub(crate) const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// What serves a route's requests.
pub(crate) enum Backends {
    /// One backend's pool, handed to the bridge, which leases its sessions.
    One(Arc<Pool>),
    /// Several backends, each served as a route of its own, their names mapped: the route's
    /// `aggregate::Aggregate`, which its dispatch holds.
    Many,
}

/// One MCP endpoint and the backend behind it.
pub(crate) struct Route {
    pub config: RouteConfig,
    pub backends: Backends,
    /// What a `requestState` issued here is bound to: the path; for one backend of a route over
    /// several, the path and the backend, so that a state answers only its own backend's call.
    pub state_scope: String,
    /// `x-mcp-header` annotations learned from this route's `tools/list` results.
    pub tool_headers: ToolHeaders,
    pub auth: Authenticator,
    /// Required scopes, policy, and what the backend is told about callers.
    pub access: Arc<RouteAccess>,
    pub metrics: Arc<Metrics>,
}

impl Route {
    /// The pool of a route that serves one backend. A route over several answers through its
    /// aggregate, which hands each request to one backend's own route.
    pub(crate) fn pool(&self) -> Result<&Arc<Pool>, GatewayError> {
        match &self.backends {
            Backends::One(pool) => Ok(pool),
            Backends::Many => Err(GatewayError::Internal(
                "a route over several backends has no one pool".into(),
            )),
        }
    }

    /// The backend's most recent `InitializeResult` (its `serverInfo` stamps every result).
    pub(crate) fn backend_init(&self) -> Option<Arc<Value>> {
        self.pool().ok()?.cached_init()
    }

    /// This endpoint's URL as a protected resource (RFC 9728).
    fn resource(&self, headers: &HeaderMap) -> String {
        match &self.config.resource {
            Some(resource) => resource.clone(),
            None => {
                let host = headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("localhost");
                format!("http://{host}{}", self.config.path)
            }
        }
    }

    /// Where this endpoint's protected resource metadata lives: the well-known path inserted
    /// before the resource's path (RFC 9728 §3.1).
    pub(crate) fn resource_metadata_url(&self, headers: &HeaderMap) -> String {
        let resource = self.resource(headers);
        match resource.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                format!("{scheme}://{authority}{RESOURCE_METADATA_PATH}{path}")
            }
            None => resource,
        }
    }

    /// The metadata document: GET only, and only for a route that authenticates.
    pub(crate) fn resource_metadata<B>(&self, request: &Request<B>) -> Response<Body> {
        if request.method() != Method::GET {
            return error_response(None, &GatewayError::MethodNotAllowed);
        }
        let headers = request.headers();
        let mut metadata = json!({
            "resource": self.resource(headers),
            "authorization_servers": self.config.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        let scopes = self.access.scopes_supported();
        if !scopes.is_empty() {
            metadata["scopes_supported"] = json!(scopes);
        }
        json_response(StatusCode::OK, &metadata)
    }
}
