//! Each section's check on a valid base configuration with one value spoiled: the error names
//! the key.

use super::*;

use crate::config::tests::STDIO as BASE;
use crate::config::{Config, ConfigError};

fn parse(text: &str) -> Config {
    toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn message(result: Result<(), ConfigError>) -> String {
    match result {
        Ok(()) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_base_passes_every_check() {
    let c = parse(BASE);
    check_server(&c.server).unwrap();
    check_routes(&c).unwrap();
    check_auth(&c.routes).unwrap();
    check_policy(&c.routes).unwrap();
    check_backends(&c.backends).unwrap();
    check_mrtr(&c.mrtr).unwrap();
}

#[test]
fn server_check_names_the_key() {
    let c = parse(&format!("[server]\nmax_connections = 0\n{BASE}"));
    assert_eq!(
        message(check_server(&c.server)),
        "server.max_connections: must be at least 1"
    );
    let c = parse(&format!("[server]\nmax_body_bytes = 10\n{BASE}"));
    assert_eq!(
        message(check_server(&c.server)),
        "server.max_body_bytes: must be at least 1024"
    );
}

#[test]
fn routes_check_names_the_key() {
    let c = parse(&BASE.replace("path = \"/mcp\"", "path = \"mcp\""));
    assert_eq!(
        message(check_routes(&c)),
        "route[0].path: must be an absolute URL path like \"/mcp\""
    );
    let c = parse(&format!("[server]\nlisten = \"0.0.0.0:8080\"\n{BASE}"));
    assert_eq!(
        message(check_routes(&c)),
        "route[0].auth: mode = \"none\" needs a loopback server.listen (or server.allow_unauthenticated = true)"
    );
}

#[test]
fn auth_check_names_the_key() {
    let bearer = |token: &str| {
        parse(&BASE.replace(
            "backend = \"b\"",
            &format!("backend = \"b\"\nauth = {{ mode = \"bearer\", tokens = [{token}] }}"),
        ))
    };
    let c = bearer("{ principal = \"p\", sha256 = \"abc\" }");
    assert_eq!(
        message(check_auth(&c.routes)),
        "route[0].auth.tokens[0].sha256: must be 64 hex digits"
    );
    let c = bearer("{ principal = \"p\" }");
    assert_eq!(
        message(check_auth(&c.routes)),
        "route[0].auth.tokens[0]: needs exactly one of sha256 and token"
    );
    let c = parse(&BASE.replace(
        "backend = \"b\"",
        "backend = \"b\"\nauth = { mode = \"jwt\", issuer = \"i\", audience = \"a\", jwks_url = \"http://example.com/jwks\" }",
    ));
    assert_eq!(
        message(check_auth(&c.routes)),
        "route[0].auth.jwks_url: must be an https:// URL (http:// only on loopback)"
    );
}

/// The base with `rules` (`[[route.policy]]` tables) on its route, and bearer auth unless
/// `anonymous`.
fn with_policy(rules: &str, anonymous: bool) -> Config {
    let auth = if anonymous {
        ""
    } else {
        "auth = { mode = \"bearer\", tokens = [{ principal = \"p\", token = \"t\" }] }\n"
    };
    parse(&BASE.replace(
        "backend = \"b\"",
        &format!("backend = \"b\"\n{auth}{rules}"),
    ))
}

#[test]
fn policy_check_passes_good_rules() {
    let c = with_policy(
        "[[route.policy]]\ntools = [\"list_*\"]\nwhen = '\"readers\" in claims.groups'\n\
         [[route.policy]]\nresources = [\"file:///*\"]\nscopes = [\"files:read\"]\n\
         [[route.policy]]\nprompts = [\"*\"]\neffect = \"deny\"",
        false,
    );
    check_policy(&c.routes).unwrap();
    let anonymous = with_policy("[[route.policy]]\ntools = [\"echo\"]", true);
    check_policy(&anonymous.routes).unwrap();
}

#[test]
fn policy_check_names_the_key() {
    let cases = [
        (
            "[[route.policy]]\nwhen = 'true'",
            "route[0].policy[0]: needs at least one of tools, prompts and resources",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\n[[route.policy]]\nprompts = [\"a\", \"\"]",
            "route[0].policy[1].prompts[1]: an empty glob matches nothing",
        ),
        (
            "[[route.policy]]\nresources = [\"\"]",
            "route[0].policy[0].resources[0]: an empty glob matches nothing",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\nwhen = 'user.admin'",
            "route[0].policy[0].when: unknown variable user (known: principal, claims, scopes, method, name)",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\neffect = \"deny\"\nscopes = [\"a\"]",
            "route[0].policy[0].scopes: means nothing on a rule with effect = \"deny\"",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\nscopes = [\"a\", \"b c\"]",
            "route[0].policy[0].scopes[1]: must be a non-empty scope without spaces, '\"' or '\\'",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\nscopes = [\"\"]",
            "route[0].policy[0].scopes[0]: must be a non-empty scope without spaces, '\"' or '\\'",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\nscopes = ['a\"b']",
            "route[0].policy[0].scopes[0]: must be a non-empty scope without spaces, '\"' or '\\'",
        ),
        (
            "[[route.policy]]\ntools = [\"*\"]\nscopes = ['a\\b']",
            "route[0].policy[0].scopes[0]: must be a non-empty scope without spaces, '\"' or '\\'",
        ),
    ];
    for (rules, expected) in cases {
        let c = with_policy(rules, false);
        assert_eq!(message(check_policy(&c.routes)), expected, "{rules}");
    }
    let c = with_policy(
        "[[route.policy]]\ntools = [\"*\"]\nwhen = 'claims.('",
        false,
    );
    let when = message(check_policy(&c.routes));
    assert!(when.starts_with("route[0].policy[0].when: 1:"), "{when}");
    let c = with_policy("[[route.policy]]\ntools = [\"*\"]\nscopes = [\"a\"]", true);
    assert_eq!(
        message(check_policy(&c.routes)),
        "route[0].policy[0].scopes: an anonymous caller has no scopes (route auth mode = \"none\")"
    );
}

#[test]
fn backends_check_names_the_key() {
    let c = parse(&format!(
        "{BASE}\npool = {{ max_sessions = 2, min_idle = 3 }}"
    ));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.pool.min_idle: must not exceed pool.max_sessions"
    );
    let c = parse(&BASE.replace(
        "transport = \"stdio\"\n        command = \"server\"",
        "transport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { X = \"a\\nb\" }",
    ));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.headers.X: not a valid header value"
    );
    let c = parse(&format!(
        "{BASE}\nstatic_roots = [{{ uri = \"https://example.com\" }}]"
    ));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.static_roots[0].uri: must be a file:// URI"
    );
    // Each key is named as itself.
    let c = parse(&format!("{BASE}\ninit_timeout = \"0s\""));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.init_timeout: must be greater than 0"
    );
    let c = parse(&format!("{BASE}\nrequest_timeout = \"0s\""));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.request_timeout: must be greater than 0"
    );
    let c = parse(&format!("{BASE}\nheaders = {{ X = \"a\" }}"));
    assert_eq!(
        message(check_backends(&c.backends)),
        "backend.b.headers: applies to transport = \"http\" only"
    );
}

#[test]
fn zero_max_rounds_names_max_rounds() {
    let c = parse(&format!("{BASE}\n[mrtr]\nmax_rounds = 0"));
    assert_eq!(
        message(check_mrtr(&c.mrtr)),
        "mrtr.max_rounds: must be at least 1"
    );
}

#[test]
fn the_principal_share_is_within_the_pool() {
    for share in [0, 3] {
        let c = parse(&format!(
            "{BASE}\npool = {{ max_sessions = 2, max_sessions_per_principal = {share} }}"
        ));
        assert_eq!(
            message(check_backends(&c.backends)),
            "backend.b.pool.max_sessions_per_principal: must be between 1 and pool.max_sessions",
            "{share}"
        );
    }
    let defaulted = parse(&format!("{BASE}\npool = {{ max_sessions = 32 }}"));
    assert_eq!(defaulted.backends["b"].pool.principal_share(), 8);
    let small = parse(&format!("{BASE}\npool = {{ max_sessions = 2 }}"));
    assert_eq!(small.backends["b"].pool.principal_share(), 1);
}

#[test]
fn zero_max_held_names_max_held() {
    let c = parse(&format!("{BASE}\n[mrtr]\nmax_held = 0"));
    assert_eq!(
        message(check_mrtr(&c.mrtr)),
        "mrtr.max_held: must be at least 1"
    );
}

#[test]
fn zero_max_held_per_principal_names_max_held_per_principal() {
    let c = parse(&format!("{BASE}\n[mrtr]\nmax_held_per_principal = 0"));
    assert_eq!(
        message(check_mrtr(&c.mrtr)),
        "mrtr.max_held_per_principal: must be at least 1"
    );
}

#[test]
fn mrtr_check_names_the_key() {
    let c = parse(&format!("{BASE}\n[mrtr]\nsettle_window = \"500ms\""));
    assert_eq!(
        message(check_mrtr(&c.mrtr)),
        "mrtr.settle_window: must be below 500ms"
    );
    let c = parse(&format!("{BASE}\n[mrtr]\nkeys = [\"c2hvcnQ=\"]"));
    assert_eq!(
        message(check_mrtr(&c.mrtr)),
        "mrtr.keys: key 0: must be exactly 32 bytes (got 5)"
    );
}

#[test]
fn fleet_check_names_the_key_and_wants_shared_keys() {
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let fleet = |table: &str| {
        parse(&format!(
            "{BASE}\n[mrtr]\nkeys = [\"{key}\"]\n[fleet]\n{table}"
        ))
    };
    assert!(check_fleet(&fleet("advertise = \"10.0.0.7:8080\"")).is_ok());
    assert!(check_fleet(&fleet(
        "advertise = \"[::1]:8080\"\nallowed_peers = [\"::1/128\"]"
    ))
    .is_ok());
    assert!(check_fleet(&fleet("advertise = \"gw-0.gw:8080\"")).is_ok());
    for bad in ["10.0.0.7", "10.0.0.7:0", ":8080", "u@h:1", "a b:1"] {
        assert_eq!(
            message(check_fleet(&fleet(&format!("advertise = \"{bad}\"")))),
            "fleet.advertise: must be HOST:PORT",
            "{bad}"
        );
    }
    assert!(message(check_fleet(&fleet("advertise = \"0.0.0.0:8080\""))).contains("wildcard"));
    assert_eq!(
        message(check_fleet(&fleet(
            "advertise = \"h:1\"\npeer_timeout = \"10ms\""
        ))),
        "fleet.peer_timeout: must be between 100ms and 60s"
    );
    let without_keys = parse(&format!("{BASE}\n[fleet]\nadvertise = \"h:1\""));
    assert!(
        message(check_fleet(&without_keys)).starts_with("fleet: needs keys every replica shares")
    );
    assert!(toml::from_str::<Config>(&format!(
        "{BASE}\n[fleet]\nadvertise = \"h:1\"\nallowed_peers = [\"10.0.0.0/33\"]"
    ))
    .is_err());
}

/// An HTTP backend behind a route authenticating with one static token.
const HTTP_BASE: &str = r#"
[[route]]
path = "/mcp"
backend = "h"
auth = { mode = "bearer", tokens = [{ principal = "ci", token = "t" }] }
[backend.h]
transport = "http"
url = "http://127.0.0.1:9/mcp"
"#;

/// [`HTTP_BASE`] with a route that takes JWTs, whose tokens a backend may exchange.
fn jwt_http_base() -> String {
    HTTP_BASE.replace(
        r#"auth = { mode = "bearer", tokens = [{ principal = "ci", token = "t" }] }"#,
        r#"auth = { mode = "jwt", issuer = "https://issuer.example", audience = "gw", jwks_url = "https://issuer.example/jwks" }"#,
    )
}

#[test]
fn identity_check_names_the_key() {
    let jwt = jwt_http_base();
    let jwt = jwt.as_str();
    let check = |extra: &str, base: &str| {
        let c = parse(&format!("{base}{extra}\n"));
        check_identity(&c.backends, &c.routes)
    };
    let exchange = r#"token_exchange = { endpoint = "https://as.example/token", client_id = "gw", client_secret = "s" }"#;
    check(exchange, jwt).unwrap();
    check(
        r#"identity_headers = { "X-MCP-User" = "claims.sub" }"#,
        HTTP_BASE,
    )
    .unwrap();
    check(r#"identity_env = { MCP_USER = "claims.sub" }"#, BASE).unwrap();
    let cases = [
        (
            HTTP_BASE,
            r#"identity_headers = { Authorization = "claims.sub" }"#,
            "backend.h.identity_headers.Authorization: the gateway sets this header itself (a credential for the backend comes from token_exchange)",
        ),
        (
            HTTP_BASE,
            r#"identity_headers = { "X User" = "claims.sub" }"#,
            "backend.h.identity_headers.X User: not a valid header name",
        ),
        (
            HTTP_BASE,
            "identity_headers = { X-User = \"claims.sub\" }\nheaders = { x-user = \"static\" }",
            "backend.h.identity_headers.X-User: also set in headers",
        ),
        (
            HTTP_BASE,
            r#"identity_headers = { X-User = "claims.sub +" }"#,
            "backend.h.identity_headers.X-User: ",
        ),
        (
            HTTP_BASE,
            r#"identity_headers = { X-User = "token" }"#,
            "backend.h.identity_headers.X-User: ",
        ),
        (
            HTTP_BASE,
            r#"identity_env = { MCP_USER = "claims.sub" }"#,
            "backend.h.identity_env: applies to transport = \"stdio\" only (identity_headers is HTTP's)",
        ),
        (
            BASE,
            r#"identity_headers = { X-User = "claims.sub" }"#,
            "backend.b.identity_headers: applies to transport = \"http\" only (identity_env is stdio's)",
        ),
        (
            BASE,
            "identity_env = { MCP_USER = \"claims.sub\" }\nenv = { MCP_USER = \"x\" }",
            "backend.b.identity_env.MCP_USER: also set in env",
        ),
        (
            BASE,
            r#"identity_env = { "A=B" = "claims.sub" }"#,
            "backend.b.identity_env.A=B: not a valid environment variable name",
        ),
        (
            BASE,
            exchange,
            "backend.b.token_exchange: applies to transport = \"http\" only",
        ),
        (
            jwt,
            &format!("{exchange}\nheaders = {{ authorization = \"Bearer static\" }}"),
            "backend.h.headers.Authorization: cannot be combined with token_exchange, which sets Authorization",
        ),
        (
            jwt,
            &exchange.replace("https://as.example/token", "http://as.example/token"),
            "backend.h.token_exchange.endpoint: must be an https:// URL (plain http:// only on loopback)",
        ),
        (
            jwt,
            &format!("{exchange}\n[backend.h.pool]\nwarm_profiles = [{{}}]"),
            "backend.h.pool.warm_profiles: a backend told who calls has no sessions for nobody",
        ),
        (
            jwt,
            &exchange.replace("https://as.example/token", "/token"),
            "backend.h.token_exchange.endpoint: must be an https:// URL (plain http:// only on loopback)",
        ),
        (
            jwt,
            &exchange.replace("client_secret = \"s\"", "client_secret = \"\""),
            "backend.h.token_exchange.client_secret: must not be empty",
        ),
        (
            jwt,
            &exchange.replace(" }", ", scopes = [\"a b\"] }"),
            "backend.h.token_exchange.scopes[0]: must be a non-empty scope without spaces",
        ),
        (
            &HTTP_BASE.replace(
                "auth = { mode = \"bearer\", tokens = [{ principal = \"ci\", token = \"t\" }] }",
                "",
            ),
            exchange,
            "route[0].auth: backend h exchanges the caller's token (token_exchange): the route must take JWTs (mode = \"jwt\")",
        ),
        (
            HTTP_BASE,
            exchange,
            "route[0].auth: backend h exchanges the caller's token (token_exchange): the route must take JWTs (mode = \"jwt\")",
        ),
    ];
    for (base, extra, expected) in cases {
        let error = message(check(extra, base));
        assert!(error.starts_with(expected), "{extra}: {error}");
    }
}

#[test]
fn route_and_token_scopes_are_scope_words() {
    let c = parse(&HTTP_BASE.replace(
        "token = \"t\" }]",
        "token = \"t\", scopes = [\"a b\"] }], scopes = [\"mcp\"]",
    ));
    assert!(message(check_auth(&c.routes))
        .starts_with("route[0].auth.tokens[0].scopes[0]: must be a non-empty scope"));
    let c = parse(&HTTP_BASE.replace("token = \"t\" }]", "token = \"t\" }], scopes = [\"\"]"));
    assert!(message(check_auth(&c.routes))
        .starts_with("route[0].auth.scopes[0]: must be a non-empty scope"));
    let c = parse(&HTTP_BASE.replace(
        "token = \"t\" }]",
        "token = \"t\", scopes = [\"tools:all\"] }], scopes = [\"mcp\"]",
    ));
    check_auth(&c.routes).unwrap();
}

#[test]
fn audit_check_names_the_key() {
    let audit = |text: &str| parse(&format!("{BASE}\n[audit]\n{text}\n")).audit;
    check_audit(audit("file = \"-\"").as_ref()).unwrap();
    check_audit(None).unwrap();
    assert_eq!(
        message(check_audit(audit("file = \" \"").as_ref())),
        "audit.file: a path, or \"-\" for standard output"
    );
    assert_eq!(
        message(check_audit(audit("file = \"-\"\nqueue = 0").as_ref())),
        "audit.queue: must be between 1 and 1000000"
    );
}

/// The README's worked example of a policy (readers and editors) is a configuration the
/// gateway loads.
#[test]
fn the_readme_s_policy_example_loads() {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("A worked example, readers and editors:")
        .expect("the example");
    let block = &readme[start..];
    let toml_start = block.find("```toml\n").expect("its TOML") + "```toml\n".len();
    let toml_end = block[toml_start..].find("```").expect("its end") + toml_start;
    let example = &block[toml_start..toml_end];
    let text = format!(
        "{example}\n[backend.tickets]\ntransport = \"http\"\nurl = \"https://tickets.example/mcp\"\n"
    );
    let config = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.routes[0].policy.len(), 3);
}

#[test]
fn a_2026_backend_refuses_what_only_sessions_have() {
    for (extra, key) in [
        (
            "[backend.b.pool]\nwarm_profiles = [{}]",
            "pool.warm_profiles",
        ),
        ("[backend.b.pool]\nmin_idle = 1", "pool.min_idle"),
        ("unsolicited = \"error\"", "unsolicited"),
    ] {
        let text = format!("{BASE}era = \"2026-07-28\"\n{extra}\n");
        let error = message(check_backends(&parse(&text).backends));
        assert!(
            error.starts_with(&format!(
                "backend.b.{key}: a 2026-07-28 backend has no sessions"
            )),
            "{error}"
        );
        // Detected or legacy, the same keys are fine.
        let auto = format!("{BASE}era = \"auto\"\n{extra}\n");
        check_backends(&parse(&auto).backends).unwrap();
    }
    let bad = format!("{BASE}era = \"2027-01-01\"\n");
    assert!(toml::from_str::<Config>(&bad).is_err());
}

/// A route over the backends `a`, `b` and `c`, with `extra` lines on the route.
fn over_three(extra: &str) -> String {
    format!(
        r#"
        [[route]]
        path = "/mcp"
        backends = ["a", "b", "c"]
        {extra}
        [backend.a]
        transport = "stdio"
        command = "a"
        [backend.b]
        transport = "stdio"
        command = "b"
        [backend.c]
        transport = "stdio"
        command = "c"
    "#
    )
}

#[test]
fn routes_over_several_backends_are_checked() {
    check_routes(&parse(&over_three(""))).unwrap();
    let ok = over_three(
        "on_backend_error = \"fail\"\nprefixes = { a = \"files\", b = \"tickets.v2\" }\nresource_prefixes = { a = \"file:///\", c = \"tickets://\" }",
    );
    check_routes(&parse(&ok)).unwrap();
    let cases = [
        (
            "backend = \"a\"",
            "route[0]: needs exactly one of backend and backends",
        ),
        (
            "prefixes = { a = \"x\", b = \"x\" }",
            "route[0].prefixes.b: \"x\" is the prefix of another backend too",
        ),
        (
            "prefixes = { c = \"a\" }",
            "route[0].prefixes.c: \"a\" is the prefix of another backend too",
        ),
        (
            "prefixes = { a = \"my__files\" }",
            "route[0].prefixes.a: \"my__files\" must be letters, digits, '_', '-' or '.', without \"__\" and not ending in '_'",
        ),
        (
            "prefixes = { a = \"fi les\" }",
            "route[0].prefixes.a: \"fi les\" must be letters, digits, '_', '-' or '.', without \"__\" and not ending in '_'",
        ),
        (
            "prefixes = { a = \"\" }",
            "route[0].prefixes.a: \"\" must be letters, digits, '_', '-' or '.', without \"__\" and not ending in '_'",
        ),
        (
            "prefixes = { z = \"zed\" }",
            "route[0].prefixes.z: is not one of the route's backends",
        ),
        (
            "resource_prefixes = { a = \"file:///\", b = \"file:///srv/\" }",
            "route[0].resource_prefixes.b: overlaps backend a's: a URI could go to either",
        ),
        (
            "resource_prefixes = { a = \"\" }",
            "route[0].resource_prefixes.a: must not be empty",
        ),
        (
            "prefixes = { a = \"files_\" }",
            "route[0].prefixes.a: \"files_\" must be letters, digits, '_', '-' or '.', without \"__\" and not ending in '_'",
        ),
        ("list_timeout = \"0s\"", "route[0].list_timeout: must be more than 0"),
    ];
    for (extra, expected) in cases {
        let text = over_three(extra);
        assert_eq!(message(check_routes(&parse(&text))), expected, "{extra}");
    }
    let twice = over_three("").replace("[\"a\", \"b\", \"c\"]", "[\"a\", \"b\", \"a\"]");
    assert_eq!(
        message(check_routes(&parse(&twice))),
        "route[0].backends: \"a\" is named twice"
    );
    let unknown = over_three("").replace("\"c\"]", "\"d\"]");
    assert_eq!(
        message(check_routes(&parse(&unknown))),
        "route[0].backends: no [backend.d] is defined"
    );
    let neither = BASE.replace("backend = \"b\"", "");
    assert_eq!(
        message(check_routes(&parse(&neither))),
        "route[0]: needs exactly one of backend and backends"
    );
    let on_one = BASE.replace(
        "backend = \"b\"",
        "backend = \"b\"\nprefixes = { b = \"x\" }",
    );
    assert_eq!(
        message(check_routes(&parse(&on_one))),
        "route[0].prefixes: applies to a route over several backends (backends = [...])"
    );
}
