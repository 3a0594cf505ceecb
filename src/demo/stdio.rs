//! How [`DemoServer`] is served over stdin/stdout (`mrtr-gateway
//! demo-backend`), and why that stopped.

use rmcp::ServiceExt;

use super::DemoServer;

/// Why [`run_stdio`] stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The `initialize` handshake failed.
    #[error("demo server failed to start: {0}")]
    Start(Box<rmcp::service::ServerInitializeError>),
    /// The task serving the connection panicked or was aborted.
    #[error("demo server stopped abnormally: {0}")]
    Serve(#[from] tokio::task::JoinError),
}

/// Serves [`DemoServer`] over stdin/stdout until the client disconnects.
pub async fn run_stdio() -> Result<(), DemoError> {
    // Lines as long as the gateway writes (rmcp's default is a quarter of that).
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .with_max_line_length(crate::config::STDIO_MAX_LINE_BYTES);
    let running = DemoServer::new()
        .serve(transport)
        .await
        .map_err(|error| DemoError::Start(Box::new(error)))?;
    running.waiting().await?;
    Ok(())
}
