//! The binary as a user runs it: the embedded default (demo backend, no configuration) and
//! `check-config`.

use serde_json::json;
use tokio::process::Command;

use crate::support::gateway::GatewayProcess;
use crate::support::modern_client::{answer_only_input, modern_request, post_raw};
use crate::support::rpc::{elicitation_caps, no_caps, post_with_bearer, result_text, tool_call};

const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_serves_the_demo_backend_with_mrtr() {
    let gateway = GatewayProcess::start(&["--listen", "127.0.0.1:0"], &[]).await;
    let url = gateway.url.clone();

    let caps = elicitation_caps();
    let discover = post_raw(
        &url,
        &modern_request(1, "server/discover", json!({}), &caps),
    )
    .await;
    assert_eq!(
        discover.result().unwrap()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mrtr-gateway-demo"
    );
    let first = modern_request(2, "tools/call", json!({"name": "ask_name"}), &caps);
    let round = post_raw(&url, &first).await;
    let result = round.result().expect("a result");
    assert_eq!(result["resultType"], "input_required", "{}", round.body);
    let retry = answer_only_input(
        &first,
        json!(3),
        result,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    let done = post_raw(&url, &retry).await;
    assert_eq!(done.result().unwrap()["content"][0]["text"], "Hello, Ada!");
    gateway.stop().await;
}

#[tokio::test]
async fn check_config_accepts_the_examples_and_names_the_bad_key() {
    let root = env!("CARGO_MANIFEST_DIR");
    let ok = Command::new(BIN)
        .args(["check-config", &format!("{root}/config/stdio.example.toml")])
        .output()
        .await
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok (1 route(s), 1 backend(s))"));
    let many = Command::new(BIN)
        .args(["check-config", &format!("{root}/config/many.example.toml")])
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&many.stdout).contains("ok (1 route(s), 3 backend(s))"),
        "{}",
        String::from_utf8_lossy(&many.stderr)
    );
    let http = Command::new(BIN)
        .args(["check-config", &format!("{root}/config/http.example.toml")])
        .env("TICKETS_EXCHANGE_SECRET", "example-secret")
        .output()
        .await
        .unwrap();
    assert!(
        http.status.success(),
        "{}",
        String::from_utf8_lossy(&http.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[route]]\npath = \"/mcp\"\nbackend = \"b\"\n[backend.b]\ntransport = \"http\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config", &bad.display().to_string()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("backend.b.url: required when transport = \"http\""));

    let key = Command::new(BIN).arg("keygen").output().await.unwrap();
    let key = String::from_utf8_lossy(&key.stdout).trim().to_string();
    assert!(mrtr_gateway::state::KeyRing::from_base64(std::slice::from_ref(&key)).is_ok());

    // A fleet cannot work without keys every replica shares.
    let route = "[[route]]\npath = \"/mcp\"\nbackend = \"b\"\n[backend.b]\ntransport = \"stdio\"\ncommand = \"b\"\n";
    let fleet = "[fleet]\nadvertise = \"${MRTR_TEST_POD_IP}:8080\"\n";
    let check = |text: String| {
        let path = dir.path().join("fleet.toml");
        std::fs::write(&path, text).unwrap();
        Command::new(BIN)
            .args(["check-config", &path.display().to_string()])
            .env("MRTR_TEST_POD_IP", "10.0.0.7")
            .output()
    };
    let keyless = check(format!("{route}{fleet}")).await.unwrap();
    assert_eq!(keyless.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&keyless.stderr).contains("fleet: needs keys every replica shares"),
        "{}",
        String::from_utf8_lossy(&keyless.stderr)
    );
    let keyed = check(format!("{route}[mrtr]\nkeys = [\"{key}\"]\n{fleet}"))
        .await
        .unwrap();
    assert!(
        keyed.status.success(),
        "{}",
        String::from_utf8_lossy(&keyed.stderr)
    );
}

/// `--listen` is validated like the file: an unauthenticated route may not leave loopback.
#[tokio::test]
async fn listen_override_cannot_expose_an_unauthenticated_route() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[[route]]\npath = \"/mcp\"\nbackend = \"b\"\n[backend.b]\ntransport = \"stdio\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "--config",
            &config.display().to_string(),
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("route[0].auth"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A full flow with the gateway logging at debug: no bearer token, requestState or elicitation
/// content appears in its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_logs_hold_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    let fixture = crate::support::gateway::fixture_path();
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_delay = \"0s\"\n[[route]]\npath = \"/mcp\"\nbackend = \"b\"\nauth = {{ mode = \"bearer\", tokens = [{{ principal = \"p\", token = \"tok-SECRET-4711\" }}] }}\n[backend.b]\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"--stdio\"]\nenv = {{ RUST_LOG = \"error\" }}\n",
            fixture.display().to_string()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let gateway = GatewayProcess::start(
        &["--config", &config, "--log-format", "json"],
        &[("RUST_LOG", "debug")],
    )
    .await;
    let url = gateway.url.clone();

    let first = modern_request(
        1,
        "tools/call",
        json!({"name": "ask_name"}),
        &elicitation_caps(),
    );
    let round = post_with_bearer(&url, Some("tok-SECRET-4711"), &first).await;
    let result = round.result().expect("a round").clone();
    let state = result["requestState"].as_str().unwrap().to_string();
    let retry = answer_only_input(
        &first,
        json!(2),
        &result,
        json!({"action": "accept", "content": {"name": "Zyxwvut-Private"}}),
    );
    let done = post_with_bearer(&url, Some("tok-SECRET-4711"), &retry).await;
    assert_eq!(
        done.result().unwrap()["content"][0]["text"],
        "Hello, Zyxwvut-Private!"
    );

    let (status, output) = gateway.stop().await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the gateway exits cleanly after SIGTERM: {status:?}"
    );
    assert!(output.contains("request"), "debug logs were written");
    for secret in ["tok-SECRET-4711", state.as_str(), "Zyxwvut-Private"] {
        assert!(!output.contains(secret), "{secret} leaked into the logs");
    }
}

/// SIGTERM starts the lame-duck period, in which the gateway still serves; a second SIGTERM
/// cuts it short, and the gateway drains and exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_cuts_the_lame_duck_period_short() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_delay = \"30s\"\n[[route]]\npath = \"/mcp\"\nbackend = \"b\"\nauth = {{ mode = \"none\" }}\n[backend.b]\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"--stdio\"]\nenv = {{ RUST_LOG = \"error\" }}\n",
            crate::support::gateway::fixture_path().display().to_string()
        ),
    )
    .unwrap();
    let mut gateway =
        GatewayProcess::start(&["--config", &config.display().to_string()], &[]).await;
    let echo = |id: i64| tool_call(id, "echo", json!({"text": "served"}), &no_caps());
    gateway.signal(libc::SIGTERM);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let served = post_raw(&gateway.url, &echo(1)).await;
    assert_eq!(result_text(&served), "served", "{}", served.body);

    gateway.signal(libc::SIGTERM);
    let status = gateway
        .wait_exit(std::time::Duration::from_secs(5))
        .await
        .unwrap_or_else(|| {
            panic!(
                "still running 5 s after the second SIGTERM: {}",
                gateway.stderr()
            )
        });
    assert!(status.success(), "{status:?}");
}
