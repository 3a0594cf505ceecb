//! The logging level a client sets with `logging/setLevel`, and the
//! `notifications/message` it lets through.

use std::sync::PoisonError;

use rmcp::{
    model::{LoggingLevel, LoggingMessageNotificationParam},
    service::{RoleServer, ServiceError},
    Peer,
};

use super::DemoServer;

impl DemoServer {
    /// The level the client last asked for with `logging/setLevel`, if any.
    pub fn log_level(&self) -> Option<LoggingLevel> {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `notifications/message` to `peer` unless the client asked for a
    /// higher level. Until the client sets a level, everything is sent.
    /// Returns whether the message was sent.
    pub async fn send_log(
        &self,
        peer: &Peer<RoleServer>,
        level: LoggingLevel,
        data: serde_json::Value,
    ) -> Result<bool, ServiceError> {
        if self
            .log_level()
            .is_some_and(|minimum| severity(level) < severity(minimum))
        {
            return Ok(false);
        }
        peer.notify_logging_message(
            LoggingMessageNotificationParam::new(level, data).with_logger("demo"),
        )
        .await?;
        Ok(true)
    }

    /// Records the level the client asked for with `logging/setLevel`.
    pub(super) fn set_log_level(&self, level: LoggingLevel) {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(level);
    }
}

/// Numeric order of syslog severities, lowest first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
