//! Authentication as a layer: the route's [`Authenticator`](crate::auth::Authenticator) turns the
//! bearer token into a [`Principal`] in the request's extensions, or answers 401 with the
//! `WWW-Authenticate` challenge that names the route's protected resource metadata (RFC 6750,
//! RFC 9728). A token without every scope of the route's `auth.scopes` gets 403 with the
//! `insufficient_scope` challenge ([`scope_challenge`]), which a policy's step-up answers too.

use std::sync::Arc;

use futures_util::future::{ready, BoxFuture, Either, Ready};
use http::header::WWW_AUTHENTICATE;
use http::{HeaderMap, HeaderValue, Request, Response};
use tower_http::auth::AsyncAuthorizeRequest;

use super::route::Route;
use crate::access::CallerAccess;
use crate::audit::{AuditLog, AuditOutcome, PendingFields};
use crate::auth::{AuthError, Identity};
use crate::error::GatewayError;
use crate::http_serve::{decode_header_value, error_response, Body};
use crate::protocol::{Era, PROTOCOL_VERSION_HEADER, SUPPORTED_VERSIONS};

/// Who the request is from (a token's principal, claims and scopes), under the route's rules.
#[derive(Clone)]
pub(crate) struct Principal(pub Arc<CallerAccess>);

impl Principal {
    /// The principal's name: a static token's, a JWT's issuer and subject, or `anonymous`.
    pub(crate) fn name(&self) -> &str {
        self.0.principal()
    }
}

#[derive(Clone)]
pub(crate) struct Authenticate {
    pub route: Arc<Route>,
    /// `[audit]`: every refusal here is recorded.
    pub audit: Option<Arc<AuditLog>>,
}

impl<B: Send + 'static> AsyncAuthorizeRequest<B> for Authenticate {
    type RequestBody = B;
    type ResponseBody = Body;
    type Future = Either<
        Ready<Result<Request<B>, Response<Body>>>,
        BoxFuture<'static, Result<Request<B>, Response<Body>>>,
    >;

    fn authorize(&mut self, request: Request<B>) -> Self::Future {
        // `none` and `bearer` answer at once: no future to box.
        if let Some(result) = self.route.auth.authenticate_now(request.headers()) {
            return Either::Left(ready(self.admit(request, result)));
        }
        let gate = self.clone();
        Either::Right(Box::pin(async move {
            let result = gate.route.auth.authenticate(request.headers()).await;
            gate.admit(request, result)
        }))
    }
}

impl Authenticate {
    /// The principal into the request, or 401 naming where to learn how to authenticate.
    // The shape tower-http's authorization takes.
    #[allow(clippy::result_large_err)]
    fn admit<B>(
        &self,
        mut request: Request<B>,
        result: Result<Identity, AuthError>,
    ) -> Result<Request<B>, Response<Body>> {
        let route = &self.route;
        let error = match result {
            Ok(identity) => {
                let required = route.config.auth.required_scopes();
                let missing = identity.missing_scopes(required);
                if !missing.is_empty() {
                    tracing::debug!(principal = %identity.principal, ?missing, "insufficient scope");
                    let error = GatewayError::InsufficientScope {
                        scopes: required.to_vec(),
                    };
                    self.audit_refusal(request.headers(), Some(&identity.principal), &error);
                    let mut response = error_response(None, &error);
                    scope_challenge(route, request.headers(), &error, &mut response);
                    return Err(response);
                }
                let caller = route.access.caller(identity);
                request.extensions_mut().insert(Principal(Arc::new(caller)));
                return Ok(request);
            }
            Err(error) => error,
        };
        let invalid = if matches!(error, AuthError::Missing) {
            ""
        } else {
            ", error=\"invalid_token\""
        };
        let error = GatewayError::Unauthorized(error.to_string());
        self.audit_refusal(request.headers(), None, &error);
        let mut response = error_response(None, &error);
        // Only a route that authenticates can answer 401, and only 401 names this URL.
        let metadata_url = route.resource_metadata_url(request.headers());
        let challenge = format!("Bearer resource_metadata=\"{metadata_url}\"{invalid}");
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(WWW_AUTHENTICATE, value);
        }
        Err(response)
    }

    /// A refusal here is in the audit log too. The body is not read yet: the method and name
    /// are those of the request-metadata headers a 2026-07-28 client sends (none for a
    /// 2025-11-25 client, whose era its missing or older `MCP-Protocol-Version` tells).
    fn audit_refusal(&self, headers: &HeaderMap, principal: Option<&str>, error: &GatewayError) {
        let Some(audit) = &self.audit else {
            return;
        };
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let modern = header(PROTOCOL_VERSION_HEADER.as_str())
            .is_some_and(|version| SUPPORTED_VERSIONS.contains(&version));
        let trace = header("traceparent")
            .map(|parent| vec![("traceparent", parent.to_string())])
            .unwrap_or_default();
        let fields = PendingFields {
            principal: principal.map(String::from),
            route: self.route.config.path.clone(),
            era: if modern { Era::Modern } else { Era::Legacy },
            method: header("mcp-method").filter(|_| modern).map(String::from),
            name: header("mcp-name")
                .filter(|_| modern)
                .and_then(|name| decode_header_value(name).ok()),
            trace_id: crate::telemetry::trace_id_of(&trace),
            arguments: None,
        };
        audit
            .begin(fields)
            .finish(AuditOutcome::Denied, 0, Some(error.to_string()));
    }
}

/// Adds to a 403 for [`GatewayError::InsufficientScope`] the challenge naming the scopes and
/// the route's metadata ([`crate::http_serve::scope_challenge`]).
pub(crate) fn scope_challenge(
    route: &Route,
    headers: &http::HeaderMap,
    error: &GatewayError,
    response: &mut Response<Body>,
) {
    if matches!(error, GatewayError::InsufficientScope { .. }) {
        let metadata_url = route.resource_metadata_url(headers);
        crate::http_serve::scope_challenge(&metadata_url, error, response);
    }
}
