//! `[[route.policy]]`: each rule selects something, its globs and scopes are well formed, its
//! `when` compiles, and its scopes can be met (not on a deny rule, not on an anonymous route).

use crate::config::{invalid, AuthConfig, ConfigError, Effect, RouteConfig};
use crate::expr::Expr;

/// `route[i].policy[r]` of every route.
pub(crate) fn check_policy(routes: &[RouteConfig]) -> Result<(), ConfigError> {
    for (i, route) in routes.iter().enumerate() {
        for (r, rule) in route.policy.iter().enumerate() {
            let key = format!("route[{i}].policy[{r}]");
            if rule.tools.is_empty() && rule.prompts.is_empty() && rule.resources.is_empty() {
                return Err(invalid(
                    key,
                    "needs at least one of tools, prompts and resources",
                ));
            }
            for (name, globs) in [
                ("tools", &rule.tools),
                ("prompts", &rule.prompts),
                ("resources", &rule.resources),
            ] {
                if let Some(j) = globs.iter().position(String::is_empty) {
                    return Err(invalid(
                        format!("{key}.{name}[{j}]"),
                        "an empty glob matches nothing",
                    ));
                }
            }
            if let Some(when) = &rule.when {
                Expr::compile(when).map_err(|e| invalid(format!("{key}.when"), e))?;
            }
            if rule.scopes.is_empty() {
                continue;
            }
            if rule.effect == Effect::Deny {
                return Err(invalid(
                    format!("{key}.scopes"),
                    "means nothing on a rule with effect = \"deny\"",
                ));
            }
            if let Some(k) = rule.scopes.iter().position(|s| !valid_scope(s)) {
                return Err(invalid(
                    format!("{key}.scopes[{k}]"),
                    "must be a non-empty scope without spaces, '\"' or '\\'",
                ));
            }
            if matches!(route.auth, AuthConfig::None) {
                return Err(invalid(
                    format!("{key}.scopes"),
                    "an anonymous caller has no scopes (route auth mode = \"none\")",
                ));
            }
        }
    }
    Ok(())
}

/// A scope token as RFC 6749 §3.3 allows it, less what would need escaping in a
/// `WWW-Authenticate` header.
pub(super) fn valid_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '\\')
}
