//! stdio transport: one child process per session, newline-delimited JSON-RPC on stdin/stdout,
//! stderr forwarded into tracing.
//!
//! The transport's tasks (writer, stdout reader, stderr reader) live in a `JoinSet` owned by the
//! transport, so they end with it; the child is killed on drop if it did not exit earlier.

use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::codec::{FramedRead, LinesCodec};

use super::identity::SessionIdentity;
use super::{BackendError, BackendSpec, Encoded, Outbox, TransportEvent};
use crate::sync::LockRecovered;

/// How long a child gets after stdin EOF, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_millis(1500);

pub(crate) struct StdioTransport {
    outbox: Outbox<Bytes>,
    child: Mutex<Option<Child>>,
    tasks: Mutex<JoinSet<()>>,
}

impl StdioTransport {
    pub(crate) fn spawn(
        spec: &BackendSpec,
        identity: &SessionIdentity,
        inbound: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, BackendError> {
        let config = &spec.config;
        let program = config
            .command
            .as_deref()
            .ok_or_else(|| BackendError::Spawn("no command configured".into()))?;
        let mut command = Command::new(program);
        command
            .args(&config.args)
            .envs(&config.env)
            .envs(identity.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| BackendError::Spawn(format!("{program}: {e}")))?;
        let pid = child.id();
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(BackendError::Spawn("child pipes unavailable".into()));
        };

        let mut tasks = JoinSet::new();
        let (outbox, mut outgoing) = mpsc::unbounded_channel::<Bytes>();
        tasks.spawn(async move {
            while let Some(line) = outgoing.recv().await {
                let written = async {
                    stdin.write_all(&line).await?;
                    stdin.write_all(b"\n").await?;
                    stdin.flush().await
                };
                if written.await.is_err() {
                    break;
                }
            }
            // Dropping stdin here is the EOF that asks the child to exit.
        });

        let backend = spec.name.clone();
        tasks.spawn(async move {
            let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(crate::config::STDIO_MAX_LINE_BYTES));
            let reason = loop {
                match lines.next().await {
                    Some(Ok(line)) => {
                        if line.trim().is_empty() {
                            continue;
                        }
                        match crate::jsonrpc::decode(&line) {
                            Ok(messages) => {
                                for message in messages {
                                    if inbound.send(message.into()).await.is_err() {
                                        return;
                                    }
                                }
                            }
                            Err(e) => {
                                tracing::warn!(backend = %backend, error = %e, "backend wrote a non-JSON line to stdout; ignored");
                            }
                        }
                    }
                    Some(Err(e)) => break format!("reading backend stdout failed: {e}"),
                    None => break "backend process exited".to_string(),
                }
            };
            let _ = inbound.send(TransportEvent::Closed(reason)).await;
        });

        let backend = spec.name.clone();
        tasks.spawn(async move {
            let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(64 * 1024));
            while let Some(line) = lines.next().await {
                match line {
                    Ok(line) => tracing::info!(target: "mrtr_gateway::backend::stderr", backend = %backend, pid, "{line}"),
                    // The codec skips to the next newline; closing the pipe would make the
                    // backend's next stderr write fail.
                    Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                        tracing::info!(target: "mrtr_gateway::backend::stderr", backend = %backend, pid, "(a stderr line over 64 KiB was skipped)");
                    }
                    Err(_) => break,
                }
            }
        });

        tracing::debug!(backend = %spec.name, pid, "backend process started");
        Ok(Self {
            outbox: Outbox::new(outbox),
            child: Mutex::new(Some(child)),
            tasks: Mutex::new(tasks),
        })
    }

    pub(crate) fn send(&self, message: Encoded) -> Result<(), BackendError> {
        self.outbox.send(message.bytes)
    }

    /// stdin EOF, wait; SIGTERM, wait; then SIGKILL (the 2025-11-25 shutdown sequence).
    pub(crate) async fn shutdown(&self) {
        self.outbox.close();
        let child = self.child.lock_recovered().take();
        if let Some(mut child) = child {
            if tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
            {
                if let Some(pid) = child.id() {
                    // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGTERM);
                    }
                }
                if tokio::time::timeout(EXIT_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            }
        }
        self.tasks.lock_recovered().abort_all();
    }
}
