//! A caller under its route's rules, table-driven: what it may use (per method and era), what
//! of a list it sees, what it hears of, and what its backend sessions are told.

use super::*;
use crate::config::Config;
use serde_json::json;

/// A route with `policy` (TOML `[[route.policy]]` tables, or nothing) on an HTTP backend with
/// `backend` settings.
fn access(policy: &str, backend: &str) -> Arc<RouteAccess> {
    let text = format!(
        r#"
[[route]]
path = "/mcp"
backend = "b"
auth = {{ mode = "bearer", tokens = [{{ principal = "ci", token = "t" }}], scopes = ["mcp"] }}
{policy}
[backend.b]
transport = "http"
url = "http://127.0.0.1:9/mcp"
{backend}
"#
    );
    let config = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Arc::new(RouteAccess::new(&config.routes[0], &config.backends["b"], None).unwrap())
}

fn caller(rules: &Arc<RouteAccess>, claims: Value, scopes: &[&str]) -> CallerAccess {
    let Value::Object(claims) = claims else {
        panic!("claims are an object")
    };
    rules.caller(Identity {
        principal: "bearer ci".into(),
        claims: Arc::new(claims),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        token: None,
    })
}

const POLICY: &str = r#"
[[route.policy]]
tools = ["echo"]
prompts = ["greet"]
resources = ["demo://public/*"]
[[route.policy]]
tools = ["admin_*"]
prompts = ["secret"]
resources = ["demo://private/*"]
scopes = ["admin"]
"#;

fn params(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The error's JSON-RPC code and message, or "ok".
fn verdict(result: Result<(), GatewayError>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(GatewayError::InsufficientScope { scopes }) => format!("step-up {}", scopes.join(" ")),
        Err(error) => {
            let e = error.to_jsonrpc();
            match e.data {
                Some(data) => format!("{} {} {data}", e.code, e.message),
                None => format!("{} {}", e.code, e.message),
            }
        }
    }
}

/// Who uses what, with which params, in which era, and the verdict.
type UseCase<'a> = (
    &'a CallerAccess,
    Method,
    Option<&'a str>,
    Value,
    Era,
    &'a str,
);

#[test]
fn a_use_is_allowed_hidden_as_unknown_or_asked_to_step_up() {
    let rules = access(POLICY, "");
    let plain = caller(&rules, json!({}), &["mcp"]);
    let admin = caller(&rules, json!({}), &["mcp", "admin"]);
    let none = json!({});
    let cases: Vec<UseCase<'_>> = vec![
        (&plain, Method::ToolsCall, Some("echo"), none.clone(), Era::Modern, "ok"),
        (&plain, Method::ToolsCall, Some("rm"), none.clone(), Era::Modern, "-32602 Unknown tool: rm"),
        (&plain, Method::ToolsCall, Some("rm"), none.clone(), Era::Legacy, "-32602 Unknown tool: rm"),
        (&plain, Method::ToolsCall, Some("admin_x"), none.clone(), Era::Modern, "step-up mcp admin"),
        (&admin, Method::ToolsCall, Some("admin_x"), none.clone(), Era::Modern, "ok"),
        (&plain, Method::PromptsGet, Some("greet"), none.clone(), Era::Modern, "ok"),
        (&plain, Method::PromptsGet, Some("other"), none.clone(), Era::Legacy, "-32602 Unknown prompt: other"),
        (&plain, Method::PromptsGet, Some("secret"), none.clone(), Era::Legacy, "step-up mcp admin"),
        (&plain, Method::ResourcesRead, Some("demo://public/a"), none.clone(), Era::Modern, "ok"),
        (
            &plain,
            Method::ResourcesRead,
            Some("demo://other"),
            none.clone(),
            Era::Modern,
            r#"-32602 Resource not found {"uri":"demo://other"}"#,
        ),
        (
            &plain,
            Method::ResourcesRead,
            Some("demo://other"),
            none.clone(),
            Era::Legacy,
            r#"-32002 Resource not found {"uri":"demo://other"}"#,
        ),
        (
            &plain,
            Method::CompletionComplete,
            None,
            json!({"ref": {"type": "ref/prompt", "name": "greet"}}),
            Era::Modern,
            "ok",
        ),
        (
            &plain,
            Method::CompletionComplete,
            None,
            json!({"ref": {"type": "ref/prompt", "name": "other"}}),
            Era::Modern,
            "-32602 Unknown prompt: other",
        ),
        (
            &plain,
            Method::CompletionComplete,
            None,
            json!({"ref": {"type": "ref/resource", "uri": "demo://private/x"}}),
            Era::Modern,
            "step-up mcp admin",
        ),
        (
            &plain,
            Method::CompletionComplete,
            None,
            json!({"ref": {"type": "ref/tool", "name": "echo"}}),
            Era::Modern,
            "-32602 Invalid params: completion/complete names no tool, prompt or resource this gateway can read",
        ),
        (
            &plain,
            Method::ToolsCall,
            None,
            none.clone(),
            Era::Legacy,
            "-32602 Invalid params: tools/call names no tool, prompt or resource this gateway can read",
        ),
        (&plain, Method::ToolsList, None, none.clone(), Era::Modern, "ok"),
    ];
    for (who, method, target, p, era, expected) in cases {
        assert_eq!(
            verdict(who.may_use(method, target, &params(p), era)),
            expected,
            "{} {target:?} in {era:?}",
            method.as_str()
        );
    }
    // Without rules everything goes, unreadable names included (the backend judges them).
    let open = access("", "");
    let anyone = caller(&open, json!({}), &[]);
    assert!(anyone
        .may_use(Method::ToolsCall, Some("rm"), &Map::new(), Era::Modern)
        .is_ok());
    assert!(anyone
        .may_use(Method::ToolsCall, None, &Map::new(), Era::Modern)
        .is_ok());
}

#[test]
fn a_list_keeps_what_the_caller_may_use_or_step_up_to() {
    let rules = access(POLICY, "");
    let plain = caller(&rules, json!({}), &["mcp"]);
    let cases = [
        (
            Method::ToolsList,
            json!({"tools": [{"name": "echo"}, {"name": "rm"}, {"name": "admin_x"}, {"title": "nameless"}], "nextCursor": "c", "_meta": {"k": 1}}),
            json!({"tools": [{"name": "echo"}, {"name": "admin_x"}], "nextCursor": "c", "_meta": {"k": 1}}),
        ),
        (
            Method::PromptsList,
            json!({"prompts": [{"name": "greet"}, {"name": "secret"}, {"name": "other"}]}),
            json!({"prompts": [{"name": "greet"}, {"name": "secret"}]}),
        ),
        (
            Method::ResourcesList,
            json!({"resources": [{"uri": "demo://public/a"}, {"uri": "demo://other"}, {"uri": "demo://public/../private/x"}]}),
            json!({"resources": [{"uri": "demo://public/a"}]}),
        ),
        (
            Method::ResourcesTemplatesList,
            json!({"resourceTemplates": [{"uriTemplate": "demo://public/{id}"}, {"uriTemplate": "demo://other/{id}"}]}),
            json!({"resourceTemplates": [{"uriTemplate": "demo://public/{id}"}]}),
        ),
    ];
    for (method, list, expected) in cases {
        let Value::Object(mut result) = list else {
            unreachable!()
        };
        assert!(
            plain.filter_list(method, &mut result),
            "{}",
            method.as_str()
        );
        assert_eq!(Value::Object(result), expected, "{}", method.as_str());
    }
    let Value::Object(mut other) = json!({"content": [{"name": "rm"}]}) else {
        unreachable!()
    };
    assert!(!plain.filter_list(Method::ToolsCall, &mut other));
    let open = access("", "");
    let Value::Object(mut tools) = json!({"tools": [{"name": "rm"}]}) else {
        unreachable!()
    };
    assert!(!caller(&open, json!({}), &[]).filter_list(Method::ToolsList, &mut tools));
    assert_eq!(tools["tools"][0]["name"], "rm");
}

#[test]
fn a_caller_hears_of_the_resources_it_may_see() {
    let rules = access(POLICY, "");
    let plain = caller(&rules, json!({}), &["mcp"]);
    assert!(plain.hears_of("demo://public/a"));
    assert!(plain.hears_of("demo://private/a"), "a step-up away");
    assert!(!plain.hears_of("demo://other"));
    assert!(caller(&access("", ""), json!({}), &[]).hears_of("demo://other"));
}

#[tokio::test]
async fn a_backend_is_told_who_calls_or_the_request_is_refused() {
    let rules = access(
        "",
        r#"identity_headers = { "X-MCP-User" = "claims.sub", "X-MCP-Principal" = "principal", "X-MCP-Count" = "size(claims.groups)" }"#,
    );
    let told = |claims: Value| {
        let caller = caller(&rules, claims, &[]);
        async move { caller.session_identity().await }
    };
    // `size(...)` is an int: not a header value.
    let error = told(json!({"sub": "alice", "groups": ["a"]}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, GatewayError::IdentityUnavailable(m) if m.starts_with("identity_headers.x-mcp-count")),
        "{error}"
    );

    let rules = access(
        "",
        r#"identity_headers = { "X-MCP-User" = "claims.sub", "X-MCP-Principal" = "principal" }"#,
    );
    let told = |claims: Value| {
        let caller = caller(&rules, claims, &[]);
        async move { caller.session_identity().await }
    };
    let alice = told(json!({"sub": "alice"})).await.unwrap();
    let headers: Vec<(String, String)> = alice
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        headers,
        [
            ("x-mcp-principal".to_string(), "bearer ci".to_string()),
            ("x-mcp-user".to_string(), "alice".to_string()),
        ]
    );
    assert_eq!(
        alice.fingerprint(),
        told(json!({"sub": "alice"})).await.unwrap().fingerprint()
    );
    assert_ne!(
        alice.fingerprint(),
        told(json!({"sub": "bob"})).await.unwrap().fingerprint()
    );
    for (claims, problem) in [
        (json!({}), "identity_headers.x-mcp-user"),
        (
            json!({"sub": "a\nb"}),
            "identity_headers.x-mcp-user: the value is not a valid header value",
        ),
        (json!({"sub": 7}), "identity_headers.x-mcp-user"),
    ] {
        let error = told(claims.clone()).await.unwrap_err();
        assert!(
            matches!(&error, GatewayError::IdentityUnavailable(m) if m.starts_with(problem)),
            "{claims}: {error}"
        );
    }
    // Nothing to tell: the one identity of every caller.
    let plain = caller(&access("", ""), json!({"sub": "alice"}), &[]);
    assert_eq!(
        plain.session_identity().await.unwrap().fingerprint(),
        SessionIdentity::none().fingerprint()
    );
}
