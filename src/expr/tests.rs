//! Compiling expressions (parse errors, unknown names) and evaluating them over a caller.

use super::*;
use serde_json::json;

fn facts() -> Facts {
    let claims = match json!({
        "sub": "alice",
        "groups": ["readers", "editors"],
        "level": 3,
        "secret": "s3cr3t-value",
        "org": {"id": "acme"}
    }) {
        Json::Object(map) => map,
        _ => unreachable!(),
    };
    Facts::new("alice", &claims, &["read".to_string(), "write".to_string()])
}

fn compile(source: &str) -> Expr {
    Expr::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"))
}

#[test]
fn facts_and_compiled_expressions_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Facts>();
    send_sync::<Expr>();
}

#[test]
fn parse_errors_are_readable() {
    let err = Expr::compile("claims.groups ==").unwrap_err();
    assert!(err.starts_with("1:"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn only_the_callers_variables_may_be_named() {
    let err = Expr::compile("request.user == principal && size(other) > 0").unwrap_err();
    assert_eq!(
        err,
        "unknown variables other, request (known: principal, claims, scopes, method, name)"
    );
    let err = Expr::compile("foo").unwrap_err();
    assert!(err.starts_with("unknown variable foo ("), "{err}");
    // Names a macro binds, and type names, are not variables.
    compile("claims.groups.exists(g, g.startsWith('ed'))");
    compile("type(claims.sub) == string");
    compile(".principal == 'a'");
}

#[test]
fn test_yields_a_bool() {
    let f = facts();
    assert!(compile("'editors' in claims.groups")
        .test(&f, "", "")
        .unwrap());
    assert!(!compile("'admins' in claims.groups")
        .test(&f, "", "")
        .unwrap());
    assert!(compile("principal == 'alice' && 'write' in scopes")
        .test(&f, "", "")
        .unwrap());
    assert!(compile("claims.org.id == 'acme' && claims.level > 2")
        .test(&f, "", "")
        .unwrap());
    let call = compile("method == 'tools/call' && name.startsWith('list_')");
    assert!(call.test(&f, "tools/call", "list_files").unwrap());
    assert!(!call.test(&f, "tools/list", "list_files").unwrap());
}

#[test]
fn a_non_bool_condition_is_an_error() {
    let err = compile("claims.level").test(&facts(), "", "").unwrap_err();
    assert_eq!(err.to_string(), "`claims.level` yields int, not a bool");
}

#[test]
fn errors_name_the_expression_not_the_values() {
    let f = facts();
    let err = compile("'x' in claims.missing")
        .test(&f, "", "")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`'x' in claims.missing` failed: no such key: missing"
    );
    for source in [
        "claims.secret + 1 == 2",
        "claims.secret < 1",
        "claims.secret[5] == 'x'",
    ] {
        let err = compile(source).test(&f, "", "").unwrap_err().to_string();
        assert!(err.starts_with(&format!("`{source}` failed: ")), "{err}");
        assert!(!err.contains("s3cr3t"), "{err}");
    }
}

#[test]
fn text_yields_a_string_and_never_converts() {
    let f = facts();
    assert_eq!(compile("claims.sub").text(&f).unwrap(), "alice");
    assert_eq!(
        compile("principal + '@' + claims.org.id").text(&f).unwrap(),
        "alice@acme"
    );
    // Outside a call `method` and `name` are empty.
    assert_eq!(compile("method + name").text(&f).unwrap(), "");
    let err = compile("claims.level").text(&f).unwrap_err();
    assert_eq!(err.to_string(), "`claims.level` yields int, not a string");
    assert_eq!(compile("claims.sub").source(), "claims.sub");
}

#[test]
fn claims_keep_their_json_types() {
    let claims = match json!({"n": 18446744073709551615u64, "f": 1.5, "z": null, "b": true}) {
        Json::Object(map) => map,
        _ => unreachable!(),
    };
    let f = Facts::new("p", &claims, &[]);
    assert!(compile("claims.n == 18446744073709551615u && claims.f == 1.5 && claims.z == null && claims.b && size(scopes) == 0")
        .test(&f, "", "")
        .unwrap());
    assert!(!f.has_scope("x"));
}
