//! Hostile authorization headers and claims: the input's lines are an `Authorization` value, a
//! claims object (JSON), scopes (one per line of the rest) and, as the last line, an identity
//! expression. Each is read as the gateway reads it: the bearer token, the token's scopes, the
//! `insufficient_scope` challenge (a valid header value or none), and the expression's value
//! as a header value (valid, or refused). Never a crash.
#![no_main]

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use mrtr_gateway::internals::{
    bearer_token_of, insufficient_scope_challenge, scopes_of_claims, Expr, Facts,
};
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let authorization = lines.next().unwrap_or_default();
    if let Some(token) = bearer_token_of(authorization) {
        assert!(!token.is_empty() && !token.starts_with(' '), "{token:?}");
    }
    let claims = lines
        .next()
        .and_then(|line| serde_json::from_slice::<Map<String, Value>>(line).ok())
        .unwrap_or_default();
    let scopes = scopes_of_claims(&claims);
    assert!(scopes.iter().all(|s| !s.is_empty()), "{scopes:?}");
    let rest: Vec<String> = lines
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect();
    let (expression, named) = rest
        .split_last()
        .map_or(("", &[][..]), |(last, others)| (last.as_str(), others));
    if let Some(challenge) = insufficient_scope_challenge(
        "https://gw.example/.well-known/oauth-protected-resource/mcp",
        named.to_vec(),
    ) {
        assert!(HeaderValue::from_str(&challenge).is_ok(), "{challenge:?}");
    }
    let facts = Facts::new("fuzz", &claims, &scopes);
    if let Ok(expr) = Expr::compile(expression) {
        if let Ok(text) = expr.text(&facts) {
            // The gateway refuses the request when this fails; it must only fail, not panic.
            let _ = HeaderValue::from_str(&text);
        }
    }
});
