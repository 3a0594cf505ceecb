//! The audit log's lines, its bounded queue and its close.

use serde_json::json;

use super::*;

fn config(file: &str, arguments: bool, queue: usize) -> AuditConfig {
    toml::from_str(&format!(
        "file = {file:?}\narguments = {arguments}\nqueue = {queue}"
    ))
    .unwrap()
}

fn call(name: &str) -> PendingFields {
    PendingFields {
        principal: Some("bearer alice".into()),
        route: "/mcp".into(),
        era: Era::Modern,
        method: Some("tools/call".into()),
        name: Some(name.into()),
        trace_id: None,
        arguments: Some(json!({"city": "Paris"})),
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn each_record_is_one_json_line_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let metrics = Arc::new(Metrics::new());
    let log = AuditLog::open(
        &config(path.to_str().unwrap(), false, 16),
        Arc::clone(&metrics),
    )
    .unwrap();
    assert!(!log.wants_arguments());
    log.begin(call("weather"))
        .finish(AuditOutcome::InputRequired, 2, None);
    let mut refused = call("delete");
    refused.principal = None;
    refused.era = Era::Legacy;
    log.begin(refused)
        .finish(AuditOutcome::Denied, 0, Some("policy".into()));
    log.close().await;

    let lines = lines(&path);
    assert_eq!(lines.len(), 2);
    // The fields, in their order, read from the line as written.
    let text = std::fs::read_to_string(&path).unwrap();
    let first_line = text.lines().next().unwrap();
    let positions: Vec<usize> = [
        "time",
        "principal",
        "route",
        "era",
        "method",
        "name",
        "outcome",
        "rounds",
        "duration_ms",
        "trace_id",
    ]
    .iter()
    .map(|key| first_line.find(&format!("\"{key}\":")).unwrap())
    .collect();
    assert!(positions.is_sorted(), "{first_line}");
    let first = lines[0].as_object().unwrap();
    assert_eq!(first.len(), 10, "{first_line}");
    assert_eq!(first["principal"], "bearer alice");
    assert_eq!(first["route"], "/mcp");
    assert_eq!(first["era"], "2026-07-28");
    assert_eq!(first["method"], "tools/call");
    assert_eq!(first["name"], "weather");
    assert_eq!(first["outcome"], "input_required");
    assert_eq!(first["rounds"], 2);
    assert!(first["duration_ms"].is_u64());
    assert_eq!(first["trace_id"], Value::Null);
    let time = first["time"].as_str().unwrap();
    assert!(humantime::parse_rfc3339(time).is_ok(), "{time}");
    assert!(time.ends_with('Z') && time.len() == "2026-01-01T00:00:00.000Z".len());

    assert_eq!(lines[1]["outcome"], "denied");
    assert_eq!(lines[1]["error"], "policy");
    assert_eq!(lines[1]["principal"], Value::Null);
    assert_eq!(lines[1]["era"], "2025-11-25");
    assert_eq!(lines[1]["duration_ms"], 0);
    assert_eq!(metrics.audit_records.get(), 2);
    assert_eq!(metrics.audit_records_dropped.get(), 0);

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn arguments_are_recorded_only_when_configured() {
    let metrics = Arc::new(Metrics::new());
    let (with, mut records) = AuditLog::detached(&config("-", true, 4), Arc::clone(&metrics));
    assert!(with.wants_arguments());
    with.begin(call("weather"))
        .finish(AuditOutcome::Ok, 0, None);
    let line = serde_json::to_value(records.recv().await.unwrap()).unwrap();
    assert_eq!(line["arguments"], json!({"city": "Paris"}));
    assert!(line.get("error").is_none());

    let (without, mut records) = AuditLog::detached(&config("-", false, 4), metrics);
    without
        .begin(call("weather"))
        .finish(AuditOutcome::Error, 1, Some("backend error".into()));
    let line = serde_json::to_value(records.recv().await.unwrap()).unwrap();
    assert!(line.get("arguments").is_none(), "{line}");
    assert_eq!(line["error"], "backend error");
    assert_eq!(line["outcome"], "error");
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let metrics = Arc::new(Metrics::new());
    // No writer: the queue is never emptied.
    let (log, mut records) = AuditLog::detached(&config("-", false, 1), Arc::clone(&metrics));
    for name in ["a", "b", "c"] {
        log.begin(call(name)).finish(AuditOutcome::Ok, 0, None);
    }
    assert_eq!(metrics.audit_records_dropped.get(), 2);
    assert_eq!(records.recv().await.unwrap().name.as_deref(), Some("a"));
    assert!(records.try_recv().is_err());
}

#[tokio::test]
async fn a_call_dropped_unfinished_is_cancelled() {
    let metrics = Arc::new(Metrics::new());
    let (log, mut records) = AuditLog::detached(&config("-", false, 4), metrics);
    let mut pending = log.begin(call("slow"));
    pending.set_rounds(3);
    drop(pending);
    let record = records.recv().await.unwrap();
    assert_eq!(record.outcome, AuditOutcome::Cancelled);
    assert_eq!(record.rounds, 3);
    assert_eq!(record.error, None);
}

#[tokio::test]
async fn close_writes_everything_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let metrics = Arc::new(Metrics::new());
    let log = AuditLog::open(
        &config(path.to_str().unwrap(), false, 4096),
        Arc::clone(&metrics),
    )
    .unwrap();
    for i in 0..1000 {
        log.begin(call(&format!("tool{i}")))
            .finish(AuditOutcome::Ok, 0, None);
    }
    log.close().await;
    let lines = lines(&path);
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[999]["name"], "tool999");
    assert_eq!(metrics.audit_records.get(), 1000);
    // After the close a record is dropped and counted.
    log.begin(call("late")).finish(AuditOutcome::Ok, 0, None);
    assert_eq!(metrics.audit_records_dropped.get(), 1);

    // A log appended to keeps what was there.
    let again = AuditLog::open(&config(path.to_str().unwrap(), false, 4), metrics).unwrap();
    again.begin(call("next")).finish(AuditOutcome::Ok, 0, None);
    again.close().await;
    assert_eq!(self::lines(&path).len(), 1001);
}

#[tokio::test]
async fn the_writer_ends_when_every_log_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(
        &config(path.to_str().unwrap(), false, 4),
        Arc::new(Metrics::new()),
    )
    .unwrap();
    let writer = log.shared.writer.lock_recovered().take().unwrap();
    log.begin(call("last")).finish(AuditOutcome::Ok, 0, None);
    drop(log);
    tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lines(&path).len(), 1);
}
