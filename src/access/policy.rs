//! A route's `[[route.policy]]` rules, compiled once: which tools, prompts and resources a
//! caller may see and use. The first rule whose globs match an item and whose `when` holds
//! decides it; an item no rule decides is hidden. A `when` that cannot be evaluated hides the
//! item (fails closed) rather than letting a later rule decide.

use std::collections::BTreeSet;

use serde::Deserialize;
use wildmatch::WildMatch;

use crate::config::{Effect, PolicyRule};
use crate::expr::{Expr, Facts};

/// The kinds of item a rule selects, each by its own list of globs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// By tool name.
    Tool,
    /// By prompt name.
    Prompt,
    /// By resource URI, or a resource template's `uriTemplate`.
    Resource,
}

/// What a caller may do with an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Listed and usable.
    Allow,
    /// Listed, but using it needs these scopes (the deciding rule's), which the token lacks.
    StepUp(Vec<String>),
    /// Neither listed nor usable.
    Hidden,
}

/// A route's rules, compiled.
#[derive(Debug)]
pub struct RoutePolicy {
    rules: Vec<Rule>,
    /// Every scope a rule names, once each.
    scopes: Vec<String>,
}

#[derive(Debug)]
struct Rule {
    tools: Vec<WildMatch>,
    prompts: Vec<WildMatch>,
    resources: Vec<WildMatch>,
    when: Option<Expr>,
    scopes: Vec<String>,
    effect: Effect,
}

impl Rule {
    fn selects(&self, kind: ItemKind, name: &str) -> bool {
        let globs = match kind {
            ItemKind::Tool => &self.tools,
            ItemKind::Prompt => &self.prompts,
            ItemKind::Resource => &self.resources,
        };
        globs.iter().any(|g| g.matches(name))
    }
}

/// Rules as a file of `[[policy]]` tables, as the tests, fuzzing and benchmarks write them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rules {
    #[serde(default)]
    policy: Vec<PolicyRule>,
}

impl RoutePolicy {
    /// Compiles a route's rules; `None` without rules (everything is allowed). The error names
    /// the rule's key (`policy[1].when: ...`).
    pub fn compile(rules: &[PolicyRule]) -> Result<Option<RoutePolicy>, String> {
        if rules.is_empty() {
            return Ok(None);
        }
        let mut compiled = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let when = match &rule.when {
                Some(source) => {
                    Some(Expr::compile(source).map_err(|e| format!("policy[{i}].when: {e}"))?)
                }
                None => None,
            };
            compiled.push(Rule {
                tools: globs(i, "tools", &rule.tools)?,
                prompts: globs(i, "prompts", &rule.prompts)?,
                resources: globs(i, "resources", &rule.resources)?,
                when,
                scopes: rule.scopes.clone(),
                effect: rule.effect,
            });
        }
        let scopes: BTreeSet<&String> = rules.iter().flat_map(|r| &r.scopes).collect();
        Ok(Some(RoutePolicy {
            rules: compiled,
            scopes: scopes.into_iter().cloned().collect(),
        }))
    }

    /// Compiles rules written as `[[policy]]` tables.
    pub fn from_toml(text: &str) -> Result<Option<RoutePolicy>, String> {
        let rules: Rules = toml::from_str(text).map_err(|e| e.message().to_string())?;
        Self::compile(&rules.policy)
    }

    /// What the caller may do with the item `name` of `kind`, asked about in a `method`
    /// request.
    pub fn decide(&self, facts: &Facts, method: &str, kind: ItemKind, name: &str) -> Decision {
        // Globs match text: a URI a backend would read as another one (`..`, an escaped
        // character, an upper-case scheme) could slip past a deny rule, so it is hidden.
        if kind == ItemKind::Resource && !lexically_plain(name) {
            return Decision::Hidden;
        }
        for (i, rule) in self.rules.iter().enumerate() {
            // The globs first: they are far cheaper than the condition.
            if !rule.selects(kind, name) {
                continue;
            }
            if let Some(when) = &rule.when {
                match when.test(facts, method, name) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) => {
                        // Fail closed: a later, broader rule must not decide instead.
                        // Debug: a list asks once per item, and one caller's missing claim
                        // would otherwise flood the log.
                        tracing::debug!(rule = i, %error, "policy[{i}].when failed; the item is hidden");
                        return Decision::Hidden;
                    }
                }
            }
            return match rule.effect {
                Effect::Deny => Decision::Hidden,
                Effect::Allow if rule.scopes.iter().all(|s| facts.has_scope(s)) => Decision::Allow,
                Effect::Allow => Decision::StepUp(rule.scopes.clone()),
            };
        }
        Decision::Hidden
    }

    /// Every scope a rule names, each once (for `scopes_supported`).
    pub fn scopes_named(&self) -> impl Iterator<Item = &str> {
        self.scopes.iter().map(String::as_str)
    }
}

/// Whether a resource URI means what its text says: a lower-case scheme, no dot segment, no
/// empty segment after the authority, and no percent-escape (a backend may decode `%2e%2e` or
/// `%65` into what a glob never saw).
fn lexically_plain(uri: &str) -> bool {
    let (scheme, rest) = match uri.split_once(':') {
        Some(parts) => parts,
        None => return !uri.contains(['%', '\\']) && !has_dot_or_empty_segment(uri),
    };
    if scheme.is_empty() || scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let path = match rest.strip_prefix("//") {
        // The authority, then the path (empty, or from its first `/`).
        Some(after) => &after[after.find('/').unwrap_or(after.len())..],
        None => rest,
    };
    !rest.contains(['%', '\\']) && !has_dot_or_empty_segment(path)
}

/// A `.` or `..` segment, or an empty one (`//`), anywhere but at the very end.
fn has_dot_or_empty_segment(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    segments.iter().enumerate().any(|(i, segment)| {
        matches!(*segment, "." | "..") || (segment.is_empty() && i > 0 && i < last)
    })
}

fn globs(rule: usize, key: &str, patterns: &[String]) -> Result<Vec<WildMatch>, String> {
    patterns
        .iter()
        .enumerate()
        .map(|(j, p)| {
            if p.is_empty() {
                Err(format!(
                    "policy[{rule}].{key}[{j}]: an empty glob matches nothing"
                ))
            } else {
                Ok(WildMatch::new(p))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
