//! Micro benchmarks of the per-request work on the gateway's hot path: sealing and opening a
//! `requestState`, the params digest it binds, the held-call table, validation of a typical
//! `tools/call` POST and the stamping of its result, and the route policy's decision on a call.
//!
//! `cargo bench --features internal-benches --bench micro`; `-- --quick` for a short run.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use mrtr_gateway::config::RouteConfig;
use mrtr_gateway::internals::{
    now_ms, params_digest, parse, random_id, raw_json, stamp_result, Decision, Facts, HeldTable,
    ItemKind, Method, RoutePolicy,
};
use mrtr_gateway::state::{principal_digest, KeyRing, StatePayload};
use serde_json::{json, Map, Value};

fn typical_params() -> Map<String, Value> {
    match json!({
        "name": "search_tickets",
        "arguments": {"query": "login fails after password reset", "limit": 20, "status": ["open", "pending"]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "progressToken": 7
        }
    }) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn payload() -> StatePayload {
    StatePayload {
        held_id: random_id(),
        owner: "gw-7f3a9c".into(),
        owner_address: None,
        route: "/mcp/tickets".into(),
        principal: principal_digest("alice@example.com"),
        method: "tools/call".into(),
        params_digest: params_digest(
            Method::ToolsCall,
            Some("search_tickets"),
            typical_params().get("arguments"),
        ),
        round: 1,
        expires_ms: now_ms() + 300_000,
    }
}

fn request_state(c: &mut Criterion) {
    let keys = KeyRing::ephemeral();
    let payload = payload();
    let token = keys.seal(&payload);
    let mut group = c.benchmark_group("requestState");
    group.bench_function("seal", |b| b.iter(|| keys.seal(black_box(&payload))));
    group.bench_function("open", |b| b.iter(|| keys.open(black_box(&token))));
    group.bench_function("seal+open", |b| {
        b.iter(|| {
            let token = keys.seal(black_box(&payload));
            keys.open(&token)
        })
    });
    group.finish();
    let params = typical_params();
    c.bench_function("params_digest/tools_call", |b| {
        b.iter(|| {
            params_digest(
                Method::ToolsCall,
                black_box(Some("search_tickets")),
                black_box(params.get("arguments")),
            )
        })
    });
}

fn held_table(c: &mut Criterion) {
    let mut group = c.benchmark_group("held_table");
    for prefilled in [0usize, 10_000] {
        let table = HeldTable::new(usize::MAX, usize::MAX);
        for n in 0..prefilled {
            if let Ok(place) = table.admit(principal_digest(&format!("p{}", n % 64))) {
                table.insert(random_id(), place, n);
            }
        }
        let principal = principal_digest("alice@example.com");
        group.bench_function(format!("insert+take/{prefilled}_held"), |b| {
            b.iter(|| {
                let id = random_id();
                if let Ok(place) = table.admit(principal.clone()) {
                    table.insert(id.clone(), place, 1usize);
                }
                table.take(black_box(&id))
            })
        });
    }
    group.finish();
}

fn front(c: &mut Criterion) {
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": 42,
        "method": "tools/call",
        "params": typical_params(),
    }))
    .unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("host", "127.0.0.1:8080"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "search_tickets"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    assert!(
        parse(&headers, &body).is_ok(),
        "the benchmarked request is valid"
    );
    c.bench_function("validate/tools_call", |b| {
        b.iter(|| parse(black_box(&headers), black_box(&body)).is_ok())
    });

    let route: Option<RouteConfig> =
        serde_json::from_value(json!({"path": "/mcp", "backend": "tickets"})).ok();
    let Some(route) = route else {
        panic!("route config");
    };
    let server_info = json!({"name": "tickets", "version": "3.2.1"});
    let result = json!({
        "content": [{"type": "text", "text": "3 tickets match: #4411 login loop, #4415 reset link expired, #4420 SSO"}],
        "structuredContent": {"count": 3, "ids": [4411, 4415, 4420]},
        "isError": false
    });
    c.bench_function("stamp/tools_call_result", |b| {
        let result = raw_json(&result);
        b.iter(|| {
            stamp_result(
                Method::ToolsCall,
                &result,
                &route,
                Some(&server_info),
                false,
            )
        })
    });
}

/// A JWT's claims as an identity provider issues them: ten, one of them the caller's groups.
fn typical_claims() -> Map<String, Value> {
    match json!({
        "iss": "https://id.example.com/",
        "sub": "alice@example.com",
        "aud": "https://gw.example.com/mcp",
        "exp": 1_900_000_000,
        "iat": 1_899_996_400,
        "azp": "agent-cli",
        "email": "alice@example.com",
        "name": "Alice Example",
        "tenant": "acme",
        "groups": ["staff", "group7", "oncall", "reviewers"]
    }) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn policy(c: &mut Criterion) {
    // Ten rules on every tool, each with a condition on the groups: only the tenth holds.
    let rules: String = (0..10)
        .map(|i| {
            let group = if i == 9 { 7 } else { 100 + i };
            format!("[[policy]]\ntools = [\"*\"]\nwhen = '\"group{group}\" in claims.groups'\n")
        })
        .collect();
    let Ok(Some(policy)) = RoutePolicy::from_toml(&rules) else {
        panic!("the benchmarked rules compile");
    };
    let claims = typical_claims();
    let scopes = vec!["openid".to_string(), "tools:call".to_string()];
    let facts = Facts::new("alice@example.com", &claims, &scopes);
    assert_eq!(
        policy.decide(&facts, "tools/call", ItemKind::Tool, "search_tickets"),
        Decision::Allow,
        "the tenth rule decides"
    );
    let mut group = c.benchmark_group("policy");
    group.bench_function("decide one call against 10 rules", |b| {
        b.iter(|| {
            policy.decide(
                black_box(&facts),
                "tools/call",
                ItemKind::Tool,
                black_box("search_tickets"),
            )
        })
    });
    group.bench_function("facts per request", |b| {
        b.iter(|| Facts::new("alice@example.com", black_box(&claims), black_box(&scopes)))
    });
    group.finish();
}

criterion_group!(benches, request_state, held_table, front, policy);
criterion_main!(benches);
