//! The modern test backend (`modern_backend` example, 2026-07-28 only) on its own, without the
//! gateway, over Streamable HTTP and over stdio, with plain JSON-RPC: `server/discover` names
//! only 2026-07-28, `initialize` is refused with -32022 (HTTP 400) and the server keeps
//! serving, `ask_name` takes one `input_required` round and `two_rounds` two, and what it
//! received is in its log with the HTTP headers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::gateway::example_path;
use crate::support::modern_client::{
    modern_request, post_raw, post_raw_with_headers, retry_of, PROTOCOL_VERSION,
};
use crate::support::rpc::{assert_rpc_error, elicitation_caps, no_caps, tool_call};

/// How long one answer may take.
const PATIENCE: Duration = Duration::from_secs(20);

/// A legacy client's first message.
fn legacy_initialize(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "legacy-client", "version": "0.0.0"},
        },
    })
}

/// A running `modern_backend`, killed on drop; [`Fixture::stop`] stops it and reaps it.
enum Fixture {
    Http {
        child: Child,
        url: String,
    },
    Stdio {
        child: Child,
        stdin: Option<ChildStdin>,
        stdout: Lines<BufReader<ChildStdout>>,
    },
}

impl Fixture {
    fn command(log: &Path) -> Command {
        let mut command = Command::new(example_path("modern_backend"));
        command
            .env("MODERN_BACKEND_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn start_http(log: &Path) -> Fixture {
        let mut child = Self::command(log)
            .args(["--http", "127.0.0.1:0"])
            .spawn()
            .expect("start modern_backend --http");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(PATIENCE, stdout.next_line())
            .await
            .expect("the backend announced its address in time")
            .expect("read the backend's stdout")
            .expect("a LISTENING line");
        let url = line
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("a LISTENING line, got {line:?}"))
            .to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
            "{url}"
        );
        Fixture::Http { child, url }
    }

    async fn start_stdio(log: &Path) -> Fixture {
        let mut child = Self::command(log)
            .arg("--stdio")
            .stdin(Stdio::piped())
            .spawn()
            .expect("start modern_backend --stdio");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Fixture::Stdio {
            child,
            stdin,
            stdout,
        }
    }

    #[track_caller]
    fn http_url(&self) -> &str {
        match self {
            Fixture::Http { url, .. } => url,
            Fixture::Stdio { .. } => panic!("a stdio backend has no URL"),
        }
    }

    /// Sends one request and returns its response; notifications before it are skipped.
    async fn request(&mut self, body: &Value) -> Value {
        match self {
            Fixture::Http { url, .. } => {
                let exchange = post_raw(url, body).await;
                exchange
                    .response()
                    .unwrap_or_else(|| panic!("a response to {body}: {}", exchange.body))
                    .clone()
            }
            Fixture::Stdio { stdin, stdout, .. } => {
                let stdin = stdin.as_mut().expect("stdin still open");
                let mut line = body.to_string();
                line.push('\n');
                stdin.write_all(line.as_bytes()).await.expect("write stdin");
                stdin.flush().await.expect("flush stdin");
                loop {
                    let line = tokio::time::timeout(PATIENCE, stdout.next_line())
                        .await
                        .unwrap_or_else(|_| panic!("an answer to {body} in time"))
                        .expect("read stdout")
                        .unwrap_or_else(|| panic!("the backend exited before answering {body}"));
                    let message: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|error| panic!("stdout line {line:?} is JSON: {error}"));
                    if message.get("id") == body.get("id") && message.get("method").is_none() {
                        return message;
                    }
                }
            }
        }
    }

    /// HTTP: kills the process. stdio: closes stdin, which must end the process.
    async fn stop(self) {
        match self {
            Fixture::Http { mut child, .. } => {
                child.kill().await.expect("kill the HTTP backend");
            }
            Fixture::Stdio {
                mut child, stdin, ..
            } => {
                drop(stdin);
                let exited = tokio::time::timeout(PATIENCE, child.wait()).await;
                if exited.is_err() {
                    child.kill().await.expect("kill the stdio backend");
                }
                let status = exited
                    .expect("the stdio backend exits when its input ends")
                    .expect("wait for the stdio backend");
                assert!(status.success(), "the stdio backend ended with {status}");
            }
        }
    }
}

/// The result of `response`, which must be `input_required`: its `requestState` and its only
/// input request, under `key`.
#[track_caller]
fn one_input_request(response: &Value, key: &str) -> (String, Value) {
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    let requests = result["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests: {response}"));
    assert_eq!(
        requests.keys().collect::<Vec<_>>(),
        [key],
        "one input request, {key}: {response}"
    );
    let state = result["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("a requestState: {response}"))
        .to_string();
    (state, requests[key].clone())
}

#[track_caller]
fn complete_text(response: &Value) -> &str {
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("text content: {response}"))
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

async fn discover_names_only_2026_07_28(fixture: &mut Fixture) {
    let discover = modern_request(10, "server/discover", json!({}), &no_caps());
    let response = fixture.request(&discover).await;
    let result = &response["result"];
    assert_eq!(
        result["supportedVersions"],
        json!([PROTOCOL_VERSION]),
        "{response}"
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "modern-backend"
    );
}

async fn ask_name_takes_one_round(fixture: &mut Fixture) {
    let first = tool_call(20, "ask_name", json!({}), &elicitation_caps());
    let round = fixture.request(&first).await;
    let (state, question) = one_input_request(&round, "name");
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["mode"], "form");
    assert_eq!(question["params"]["message"], "What is your name?");
    let retry = retry_of(
        &first,
        json!(21),
        json!({"name": accept(json!({"name": "Ferris"}))}),
        &state,
    );
    assert_eq!(
        complete_text(&fixture.request(&retry).await),
        "Hello, Ferris!"
    );
}

async fn two_rounds_takes_two_rounds(fixture: &mut Fixture) {
    let first = tool_call(30, "two_rounds", json!({}), &elicitation_caps());
    let round_one = fixture.request(&first).await;
    let (state_one, _) = one_input_request(&round_one, "first");
    let retry = retry_of(
        &first,
        json!(31),
        json!({"first": accept(json!({"a": "x"}))}),
        &state_one,
    );
    let round_two = fixture.request(&retry).await;
    let (state_two, question) = one_input_request(&round_two, "second");
    assert_ne!(state_one, state_two, "each round has its own requestState");
    assert_eq!(
        question["params"]["requestedSchema"]["properties"]["b"]["type"],
        "string"
    );
    let last = retry_of(
        &first,
        json!(32),
        json!({"second": accept(json!({"b": "y"}))}),
        &state_two,
    );
    assert_eq!(complete_text(&fixture.request(&last).await), "x+y");
}

/// The backend's log: one JSON object per line.
fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .expect("read the backend log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a log line is JSON"))
        .collect()
}

fn temp_log() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("modern_backend.jsonl");
    (dir, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_only_2026_07_28_is_served() {
    let (_dir, log) = temp_log();
    let mut fixture = Fixture::start_http(&log).await;
    let url = fixture.http_url().to_string();

    // A 2025-11-25 client's first POST: no MCP-Protocol-Version yet.
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let refused = post_raw_with_headers(&url, &legacy_initialize(1), headers).await;
    let error = assert_rpc_error(&refused, 400, -32022);
    assert_eq!(error["data"]["supported"], json!([PROTOCOL_VERSION]));
    assert!(refused.headers.get("mcp-session-id").is_none());

    discover_names_only_2026_07_28(&mut fixture).await;
    ask_name_takes_one_round(&mut fixture).await;
    two_rounds_takes_two_rounds(&mut fixture).await;
    fixture.stop().await;

    let messages = logged(&log);
    let initialize = messages
        .iter()
        .find(|entry| entry["message"]["method"] == "initialize")
        .expect("the initialize is logged");
    assert_eq!(initialize["message"], legacy_initialize(1));
    let discover = messages
        .iter()
        .find(|entry| entry["message"]["method"] == "server/discover")
        .expect("the discover is logged");
    assert_eq!(
        discover["headers"]["mcp-protocol-version"],
        PROTOCOL_VERSION
    );
    assert_eq!(discover["headers"]["mcp-method"], "server/discover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_only_2026_07_28_is_served() {
    let (_dir, log) = temp_log();
    let mut fixture = Fixture::start_stdio(&log).await;

    // Refused as the very first message, and the process serves on.
    let refused = fixture.request(&legacy_initialize(1)).await;
    assert_eq!(refused["error"]["code"], -32022, "{refused}");
    assert_eq!(
        refused["error"]["data"]["supported"],
        json!([PROTOCOL_VERSION])
    );

    discover_names_only_2026_07_28(&mut fixture).await;
    ask_name_takes_one_round(&mut fixture).await;
    two_rounds_takes_two_rounds(&mut fixture).await;

    // Refused again once 2026-07-28 requests have been served.
    let refused = fixture.request(&legacy_initialize(2)).await;
    assert_eq!(refused["error"]["code"], -32022, "{refused}");
    fixture.stop().await;

    let messages = logged(&log);
    assert_eq!(messages[0]["message"], legacy_initialize(1));
    assert!(
        messages.iter().all(|entry| entry["headers"] == json!({})),
        "stdio messages have no headers: {messages:?}"
    );
}
