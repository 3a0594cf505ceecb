//! Requests the server sends to the client on behalf of the tool call being
//! handled (elicitation, sampling, roots); the test backend sends its own
//! through [`ask_client`] too.

use rmcp::{
    model::{ClientResult, ErrorData as McpError, ServerRequest},
    service::{RequestContext, RoleServer, ServiceError},
};

/// Why a request to the client produced no usable answer.
pub enum AskError {
    /// The tool call that needed the answer was cancelled.
    Cancelled,
    /// The client answered with a JSON-RPC error.
    Refused(McpError),
    /// The request never got an answer.
    Failed(ServiceError),
}

/// Sends `request` to the client through the peer of the call being handled
/// and waits for the answer. If that call is cancelled first, the request is
/// withdrawn with `notifications/cancelled`.
pub async fn ask_client(
    context: &RequestContext<RoleServer>,
    request: ServerRequest,
) -> Result<ClientResult, AskError> {
    let handle = context
        .peer
        .send_cancellable_request(request, Default::default())
        .await
        .map_err(AskError::Failed)?;
    let id = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => match answer {
            Ok(answer) => Ok(answer),
            Err(ServiceError::McpError(error)) => Err(AskError::Refused(error)),
            Err(error) => Err(AskError::Failed(error)),
        },
        () = context.ct.cancelled() => {
            let notice = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("the tool call was cancelled".to_owned()),
            );
            // Best effort: the call is already over for the client.
            let _ = context.peer.notify_cancelled(notice).await;
            Err(AskError::Cancelled)
        }
    }
}
