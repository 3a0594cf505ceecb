//! The audit log (`[audit]`): one JSON line per `tools/call`, `prompts/get` and `resources/read`
//! and per refusal, in both protocol eras. This module owns the record's shape, the queue that
//! keeps appending off the request path (past its bound a record is dropped and counted), and
//! the one writer task that empties it into the file or standard output.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::config::AuditConfig;
use crate::metrics::Metrics;
use crate::protocol::Era;
use crate::sync::LockRecovered;

/// The longest `close` waits for the writer to write what is queued.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Records written at most per write: a batch is one buffer in memory.
const MAX_BATCH: usize = 256;

/// How a call or request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AuditOutcome {
    Ok,
    Error,
    Denied,
    InputRequired,
    /// The call never concluded: its client went away, or the gateway stopped.
    Cancelled,
}

/// One line of the log. Absent values are `null`, but `error` and `arguments`, which are left
/// out.
#[derive(Debug, Serialize)]
pub(crate) struct AuditRecord {
    /// When the call concluded: RFC 3339, UTC, milliseconds.
    time: String,
    principal: Option<String>,
    route: String,
    /// The client's protocol revision.
    era: &'static str,
    /// Null for a request refused before its method was read (authentication).
    method: Option<String>,
    /// The tool or prompt name, or the resource URI.
    name: Option<String>,
    outcome: AuditOutcome,
    /// `input_required` rounds the call went through.
    rounds: u32,
    duration_ms: u64,
    trace_id: Option<String>,
    /// A short reason, for `error` and `denied`.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The call's arguments, when `arguments = true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
}

/// What is known of a call when it starts (or of a request when it is refused).
#[derive(Debug, Clone)]
pub(crate) struct PendingFields {
    pub(crate) principal: Option<String>,
    pub(crate) route: String,
    pub(crate) era: Era,
    pub(crate) method: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) trace_id: Option<String>,
    /// Kept only when the log wants arguments ([`AuditLog::wants_arguments`]).
    pub(crate) arguments: Option<Value>,
}

/// The audit log; clones share one queue and writer. The writer ends at [`AuditLog::close`], or
/// once every clone (and every [`PendingAudit`]) is gone.
#[derive(Clone)]
pub(crate) struct AuditLog {
    shared: Arc<Shared>,
}

struct Shared {
    records: mpsc::Sender<AuditRecord>,
    arguments: bool,
    metrics: Arc<Metrics>,
    /// Tells the writer to write what is queued and end.
    closing: Arc<Notify>,
    writer: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl AuditLog {
    /// Opens `config.file` (created with mode 0600, appended to) or standard output (`"-"`), and
    /// starts the writer. Must be called within the runtime.
    pub(crate) fn open(
        config: &AuditConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Self, std::io::Error> {
        let output: Box<dyn AsyncWrite + Send + Unpin> = if config.file == "-" {
            Box::new(tokio::io::stdout())
        } else {
            let mut options = std::fs::OpenOptions::new();
            options.create(true).append(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            Box::new(tokio::fs::File::from_std(options.open(&config.file)?))
        };
        let (log, records) = Self::detached(config, metrics);
        let writer = tokio::spawn(write(
            records,
            output,
            Arc::clone(&log.shared.closing),
            Arc::clone(&log.shared.metrics),
        ));
        *log.shared.writer.lock_recovered() = Some(writer);
        Ok(log)
    }

    /// A log whose records go to the returned queue, with no writer.
    fn detached(
        config: &AuditConfig,
        metrics: Arc<Metrics>,
    ) -> (Self, mpsc::Receiver<AuditRecord>) {
        // A queue of 0 cannot be made: it holds one record at least.
        let (sender, records) = mpsc::channel(config.queue.max(1));
        let shared = Arc::new(Shared {
            records: sender,
            arguments: config.arguments,
            metrics,
            closing: Arc::new(Notify::new()),
            writer: std::sync::Mutex::new(None),
        });
        (Self { shared }, records)
    }

    /// Whether records carry arguments: when not, callers need not copy them.
    pub(crate) fn wants_arguments(&self) -> bool {
        self.shared.arguments
    }

    /// Starts the record of a call, written by [`PendingAudit::finish`], or as `cancelled` if
    /// the call is dropped before.
    pub(crate) fn begin(&self, mut fields: PendingFields) -> PendingAudit {
        if !self.shared.arguments {
            fields.arguments = None;
        }
        PendingAudit {
            log: self.clone(),
            fields: Some(fields),
            started: Instant::now(),
            rounds: 0,
        }
    }

    fn append(
        &self,
        fields: PendingFields,
        outcome: AuditOutcome,
        rounds: u32,
        duration: Duration,
        error: Option<String>,
    ) {
        let record = AuditRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            principal: fields.principal,
            route: fields.route,
            era: fields.era.label(),
            method: fields.method,
            name: fields.name,
            outcome,
            rounds,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            trace_id: fields.trace_id,
            error,
            arguments: fields.arguments.filter(|_| self.shared.arguments),
        };
        // Never waits: a full queue (or a closed log) loses the record, counted.
        if self.shared.records.try_send(record).is_err() {
            self.shared.metrics.audit_records_dropped.inc();
        }
    }

    /// Ends the writer once it wrote what is queued, waiting at most 2 s. Records appended
    /// afterwards are dropped and counted.
    pub(crate) async fn close(&self) {
        self.shared.closing.notify_one();
        let writer = self.shared.writer.lock_recovered().take();
        let Some(mut writer) = writer else {
            return;
        };
        if tokio::time::timeout(CLOSE_WAIT, &mut writer).await.is_err() {
            tracing::warn!("the audit log was not written out in time; queued records are lost");
            writer.abort();
        }
    }
}

/// A call's record until the call concludes. Dropped unfinished, it writes `cancelled`.
pub(crate) struct PendingAudit {
    log: AuditLog,
    fields: Option<PendingFields>,
    started: Instant,
    rounds: u32,
}

impl PendingAudit {
    /// The rounds so far, for the record written if the call never concludes.
    pub(crate) fn set_rounds(&mut self, rounds: u32) {
        self.rounds = rounds;
    }

    /// Writes the call's record.
    pub(crate) fn finish(mut self, outcome: AuditOutcome, rounds: u32, error: Option<String>) {
        if let Some(fields) = self.fields.take() {
            self.log
                .append(fields, outcome, rounds, self.started.elapsed(), error);
        }
    }
}

impl Drop for PendingAudit {
    fn drop(&mut self) {
        if let Some(fields) = self.fields.take() {
            self.log.append(
                fields,
                AuditOutcome::Cancelled,
                self.rounds,
                self.started.elapsed(),
                None,
            );
        }
    }
}

/// The writer: takes what is queued in batches, one line per record, flushed after each batch,
/// until the log closes or every sender is gone.
async fn write(
    mut records: mpsc::Receiver<AuditRecord>,
    mut output: Box<dyn AsyncWrite + Send + Unpin>,
    closing: Arc<Notify>,
    metrics: Arc<Metrics>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut buffer = Vec::new();
    // Only the first failure of a streak is logged.
    let mut failing = false;
    loop {
        let first = tokio::select! {
            biased;
            record = records.recv() => record,
            () = closing.notified() => {
                // What is queued is still received, then `None`.
                records.close();
                records.recv().await
            }
        };
        let Some(first) = first else {
            break;
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match records.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        buffer.clear();
        let mut lines = 0u64;
        for record in batch.drain(..) {
            let start = buffer.len();
            if serde_json::to_writer(&mut buffer, &record).is_ok() {
                buffer.push(b'\n');
                lines += 1;
            } else {
                buffer.truncate(start);
                metrics.audit_records_dropped.inc();
            }
        }
        let written = async {
            output.write_all(&buffer).await?;
            output.flush().await
        };
        match written.await {
            Ok(()) => {
                metrics.audit_records.inc_by(lines);
                failing = false;
            }
            Err(error) => {
                metrics.audit_records_dropped.inc_by(lines);
                if !failing {
                    tracing::warn!(%error, "audit records could not be written; dropping them until a write succeeds");
                }
                failing = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
