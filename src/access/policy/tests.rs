//! The semantics of a route's rules, as a table: rules, caller, request, item, decision.

use super::*;
use serde_json::{json, Value};

use Decision::{Allow, Hidden, StepUp};
use ItemKind::{Prompt, Resource, Tool};

/// Readers may use `echo` and the `list_*` tools; editors anything, with `tools:all`.
const READERS_EDITORS: &str = r#"
    [[policy]]
    tools = ["echo", "list_*"]
    when = '"readers" in claims.groups'
    [[policy]]
    tools = ["*"]
    when = '"editors" in claims.groups'
    scopes = ["tools:all"]
"#;

struct Case {
    what: &'static str,
    rules: &'static str,
    principal: &'static str,
    claims: Value,
    scopes: &'static [&'static str],
    method: &'static str,
    kind: ItemKind,
    name: &'static str,
    expected: Decision,
}

fn case(what: &'static str, rules: &'static str) -> Case {
    Case {
        what,
        rules,
        principal: "alice",
        claims: json!({"sub": "alice", "groups": ["readers"]}),
        scopes: &[],
        method: "tools/call",
        kind: Tool,
        name: "echo",
        expected: Allow,
    }
}

impl Case {
    fn claims(mut self, claims: Value) -> Self {
        self.claims = claims;
        self
    }
    fn scopes(mut self, scopes: &'static [&'static str]) -> Self {
        self.scopes = scopes;
        self
    }
    fn principal(mut self, principal: &'static str) -> Self {
        self.principal = principal;
        self
    }
    fn method(mut self, method: &'static str) -> Self {
        self.method = method;
        self
    }
    fn item(mut self, kind: ItemKind, name: &'static str) -> Self {
        self.kind = kind;
        self.name = name;
        self
    }
    fn is(mut self, expected: Decision) -> Self {
        self.expected = expected;
        self
    }
}

fn step_up(scopes: &[&str]) -> Decision {
    StepUp(scopes.iter().map(|s| s.to_string()).collect())
}

fn cases() -> Vec<Case> {
    let editor = json!({"groups": ["editors"]});
    vec![
        case("a reader's listed tool", READERS_EDITORS),
        case("a reader's glob", READERS_EDITORS).item(Tool, "list_files"),
        case("no rule matches: hidden", READERS_EDITORS)
            .item(Tool, "delete")
            .is(Hidden),
        case("no group claimed: hidden", READERS_EDITORS)
            .claims(json!({"groups": []}))
            .is(Hidden),
        case("an editor without the step-up scope", READERS_EDITORS)
            .claims(editor.clone())
            .item(Tool, "delete")
            .is(step_up(&["tools:all"])),
        case("an editor with it", READERS_EDITORS)
            .claims(editor.clone())
            .scopes(&["openid", "tools:all"])
            .item(Tool, "delete"),
        case("a reader who is also an editor is decided by the first rule", READERS_EDITORS)
            .claims(json!({"groups": ["readers", "editors"]})),
        case(
            "allow then deny: allowed",
            "[[policy]]\ntools = ['echo']\n[[policy]]\ntools = ['*']\neffect = 'deny'",
        ),
        case(
            "deny then allow: hidden",
            "[[policy]]\ntools = ['ec*']\neffect = 'deny'\n[[policy]]\ntools = ['echo']",
        )
        .is(Hidden),
        case(
            "a false condition goes on to the next rule",
            "[[policy]]\ntools = ['*']\nwhen = 'false'\neffect = 'deny'\n[[policy]]\ntools = ['*']",
        ),
        case(
            "a failing condition hides, whatever follows",
            "[[policy]]\ntools = ['*']\nwhen = '1 / 0 == 1'\n[[policy]]\ntools = ['*']",
        )
        .is(Hidden),
        case(
            "a non-bool condition hides, whatever follows",
            "[[policy]]\ntools = ['*']\nwhen = 'claims.sub'\n[[policy]]\ntools = ['*']",
        )
        .is(Hidden),
        case(
            "a missing claim is an error: hidden",
            "[[policy]]\ntools = ['*']\nwhen = '\"x\" in claims.teams'\n[[policy]]\ntools = ['*']",
        )
        .is(Hidden),
        case(
            "a condition on an item no glob selects is not evaluated",
            "[[policy]]\ntools = ['other']\nwhen = '1 / 0 == 1'\n[[policy]]\ntools = ['echo']",
        ),
        case("`*` spans `/` in URIs", "[[policy]]\nresources = ['file:///docs/*']")
            .item(Resource, "file:///docs/a/b/c.md"),
        case("a URI glob is anchored", "[[policy]]\nresources = ['file:///docs/*']")
            .item(Resource, "file:///etc/docs/x")
            .is(Hidden),
        case("a template's uriTemplate", "[[policy]]\nresources = ['db://{table}/*']")
            .item(Resource, "db://{table}/{id}"),
        case("`?` is one character", "[[policy]]\ntools = ['echo?']").item(Tool, "echo2"),
        case("`?` is exactly one", "[[policy]]\ntools = ['echo?']")
            .item(Tool, "echo")
            .is(Hidden),
        case("an exact name is the whole name", "[[policy]]\ntools = ['echo']")
            .item(Tool, "echo_all")
            .is(Hidden),
        case("names are case-sensitive", "[[policy]]\ntools = ['echo']")
            .item(Tool, "Echo")
            .is(Hidden),
        case("a tools rule never selects a prompt", "[[policy]]\ntools = ['*']")
            .item(Prompt, "echo")
            .is(Hidden),
        case("a prompts rule selects prompts", "[[policy]]\nprompts = ['summar*']")
            .item(Prompt, "summarize"),
        case("a prompts rule never selects a resource", "[[policy]]\nprompts = ['*']")
            .item(Resource, "echo")
            .is(Hidden),
        case(
            "`method` in a condition: listing",
            "[[policy]]\ntools = ['*']\nwhen = 'method != \"tools/call\"'",
        )
        .method("tools/list"),
        case(
            "`method` in a condition: calling",
            "[[policy]]\ntools = ['*']\nwhen = 'method != \"tools/call\"'",
        )
        .is(Hidden),
        case(
            "`name` in a condition",
            "[[policy]]\ntools = ['*']\nwhen = 'name.startsWith(\"ec\") && size(name) == 4'",
        ),
        case(
            "`principal` in a condition",
            "[[policy]]\ntools = ['*']\nwhen = 'principal == \"bob\"'",
        )
        .principal("bob"),
        case(
            "`principal` in a condition, someone else",
            "[[policy]]\ntools = ['*']\nwhen = 'principal == \"bob\"'",
        )
        .is(Hidden),
        case(
            "`scopes` in a condition",
            "[[policy]]\ntools = ['*']\nwhen = '\"a\" in scopes'",
        )
        .scopes(&["a"]),
        case(
            "`scopes` in a condition, without it",
            "[[policy]]\ntools = ['*']\nwhen = '\"a\" in scopes'",
        )
        .scopes(&["b"])
        .is(Hidden),
        case(
            "step-up names all of the rule's scopes, even those held",
            "[[policy]]\ntools = ['*']\nscopes = ['a', 'b']",
        )
        .scopes(&["a"])
        .is(step_up(&["a", "b"])),
        case(
            "a deny rule with a condition that holds",
            "[[policy]]\ntools = ['*']\nwhen = 'claims.sub == \"alice\"'\neffect = 'deny'\n[[policy]]\ntools = ['*']",
        )
        .is(Hidden),
    ]
}

#[test]
fn the_first_rule_that_matches_decides() {
    for c in cases() {
        let policy = RoutePolicy::from_toml(c.rules)
            .unwrap_or_else(|e| panic!("{}: {e}", c.what))
            .unwrap_or_else(|| panic!("{}: no rules", c.what));
        let Value::Object(claims) = &c.claims else {
            panic!("{}: claims must be an object", c.what);
        };
        let scopes: Vec<String> = c.scopes.iter().map(|s| s.to_string()).collect();
        let facts = Facts::new(c.principal, claims, &scopes);
        assert_eq!(
            policy.decide(&facts, c.method, c.kind, c.name),
            c.expected,
            "{}",
            c.what
        );
    }
}

#[test]
fn no_rules_is_no_policy() {
    assert!(RoutePolicy::compile(&[]).unwrap().is_none());
    assert!(RoutePolicy::from_toml("").unwrap().is_none());
}

#[test]
fn compile_errors_name_the_rule() {
    let err = RoutePolicy::from_toml(
        "[[policy]]\ntools = ['*']\n[[policy]]\ntools = ['*']\nwhen = 'nobody == 1'",
    )
    .unwrap_err();
    assert!(
        err.starts_with("policy[1].when: unknown variable nobody"),
        "{err}"
    );
    let err = RoutePolicy::from_toml("[[policy]]\ntools = ['a', '']").unwrap_err();
    assert_eq!(err, "policy[0].tools[1]: an empty glob matches nothing");
    let err = RoutePolicy::from_toml("[[policy]]\nprompts = ['*']\nwhen = '(('").unwrap_err();
    assert!(err.starts_with("policy[0].when: 1:"), "{err}");
}

#[test]
fn scopes_named_lists_each_once() {
    let policy = RoutePolicy::from_toml(
        "[[policy]]\ntools = ['a']\nscopes = ['w', 'r']\n[[policy]]\ntools = ['b']\nscopes = ['r']",
    )
    .unwrap()
    .unwrap();
    assert_eq!(policy.scopes_named().collect::<Vec<_>>(), ["r", "w"]);
}

#[test]
fn a_policy_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RoutePolicy>();
}

#[test]
fn a_resource_uri_a_backend_would_read_otherwise_is_hidden() {
    // A deny on /etc, then everything: only URIs that mean what they say reach the allow.
    let policy = RoutePolicy::from_toml(
        "[[policy]]\nresources = ['file:///etc/*']\neffect = 'deny'\n[[policy]]\nresources = ['*']",
    )
    .unwrap()
    .unwrap();
    let facts = Facts::new("p", &serde_json::Map::new(), &[]);
    for (uri, expected) in [
        ("file:///tmp/notes.txt", Allow),
        ("file:///dir/", Allow),
        ("demo://item/7", Allow),
        ("demo://item/{id}", Allow),
        ("urn:isbn:0451450523", Allow),
        ("file:///etc/passwd", Hidden),
        ("file:///tmp/../etc/passwd", Hidden),
        ("file:///tmp/./x", Hidden),
        ("file:///tmp/..", Hidden),
        ("file:////etc/passwd", Hidden),
        ("FILE:///etc/passwd", Hidden),
        ("file:///%65tc/passwd", Hidden),
        ("file:///tmp/a%2F..%2Fetc", Hidden),
        ("file:///tmp\\..\\etc", Hidden),
        (":nothing", Hidden),
    ] {
        assert_eq!(
            policy.decide(&facts, "resources/read", Resource, uri),
            expected,
            "{uri}"
        );
    }
    // Tools and prompts are names, not URIs: no such rule for them.
    let tools = RoutePolicy::from_toml("[[policy]]\ntools = ['*']")
        .unwrap()
        .unwrap();
    assert_eq!(tools.decide(&facts, "tools/call", Tool, "a%2e..b"), Allow);
}
