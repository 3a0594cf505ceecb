//! The CEL expressions written in the configuration about the caller: policy rules' `when` and
//! identity values (headers and environment variables computed from the caller). It owns the
//! one environment they share, what they may name (`principal`, `claims`, `scopes`, `method`,
//! `name`), the caller's variables built once per request (`Facts`), and evaluation errors that
//! name the expression but never the caller's values.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr as Node, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, Program, Value};
use serde_json::{Map, Value as Json};

/// The variables an expression may name.
const VARIABLES: [&str; 5] = ["principal", "claims", "scopes", "method", "name"];

/// Type names CEL resolves as identifiers (`type(claims.sub) == string`).
const TYPE_NAMES: [&str; 11] = [
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// The standard environment, built once: every expression is compiled and run against it.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

/// An expression that failed, or yielded the wrong type. Its text names the expression and the
/// kind of problem, never a value of the caller's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExprError {
    #[error("`{expr}` failed: {problem}")]
    Failed { expr: Arc<str>, problem: String },
    #[error("`{expr}` yields {got}, not a {want}")]
    WrongType {
        expr: Arc<str>,
        got: String,
        want: &'static str,
    },
}

/// A CEL expression, compiled once.
pub struct Expr {
    source: Arc<str>,
    program: Program,
    /// Whether it names `method` or `name`: only then is a scope made per evaluation.
    per_call: bool,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

impl Expr {
    /// Parses `source`; the error is readable: the parse errors with their positions, or the
    /// variables named that are not the caller's.
    pub fn compile(source: &str) -> Result<Expr, String> {
        let program = env().compile(source).map_err(|errors| {
            errors
                .errors
                .iter()
                .map(|e| format!("{}:{}: {}", e.pos.0, e.pos.1, e.msg))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let mut names = BTreeSet::new();
        free_names(program.expression(), &mut Vec::new(), &mut names);
        let unknown: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !VARIABLES.contains(n) && !TYPE_NAMES.contains(n))
            .collect();
        if !unknown.is_empty() {
            let plural = if unknown.len() == 1 { "" } else { "s" };
            return Err(format!(
                "unknown variable{plural} {} (known: {})",
                unknown.join(", "),
                VARIABLES.join(", ")
            ));
        }
        let per_call = names.contains("method") || names.contains("name");
        Ok(Expr {
            source: source.into(),
            program,
            per_call,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// A condition about the caller using `name` by `method`; anything but a bool is an error.
    pub fn test(&self, facts: &Facts, method: &str, name: &str) -> Result<bool, ExprError> {
        match self.eval(facts, method, name)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.wrong_type(&other, "bool")),
        }
    }

    /// A text about the caller (`method` and `name` are empty); anything but a string is an
    /// error, numbers included.
    pub fn text(&self, facts: &Facts) -> Result<String, ExprError> {
        match self.eval(facts, "", "")? {
            Value::String(s) => Ok(Arc::unwrap_or_clone(s)),
            other => Err(self.wrong_type(&other, "string")),
        }
    }

    fn eval(&self, facts: &Facts, method: &str, name: &str) -> Result<Value, ExprError> {
        let result = if self.per_call {
            let call = Call { method, name };
            let base: &Context<'_, '_> = &facts.context;
            let mut scope = base.new_inner_scope();
            scope.set_variable_resolver(&call);
            self.program.execute(&scope)
        } else {
            self.program.execute(&facts.context)
        };
        result.map_err(|e| ExprError::Failed {
            expr: self.source.clone(),
            problem: describe(&e),
        })
    }

    fn wrong_type(&self, value: &Value, want: &'static str) -> ExprError {
        ExprError::WrongType {
            expr: self.source.clone(),
            got: value.type_of().to_string(),
            want,
        }
    }
}

/// The names an expression reads that no comprehension of its own binds.
fn free_names<'e>(e: &'e IdedExpr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<&'e str>) {
    match &e.expr {
        Node::Ident(name) => {
            let name = name.strip_prefix('.').unwrap_or(name);
            // `@`-names are the macros' own accumulators.
            if !name.starts_with('@') && !bound.contains(&name) {
                out.insert(name);
            }
        }
        Node::Call(call) => {
            if let Some(target) = &call.target {
                free_names(target, bound, out);
            }
            for arg in &call.args {
                free_names(arg, bound, out);
            }
        }
        Node::Comprehension(c) => {
            free_names(&c.iter_range, bound, out);
            free_names(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(&c.iter_var);
            bound.extend(c.iter_var2.as_deref());
            bound.push(&c.accu_var);
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                free_names(part, bound, out);
            }
            bound.truncate(depth);
        }
        Node::List(list) => {
            for element in &list.elements {
                free_names(element, bound, out);
            }
        }
        Node::Map(map) => entries(&map.entries, bound, out),
        Node::Struct(s) => entries(&s.entries, bound, out),
        Node::Select(select) => free_names(&select.operand, bound, out),
        Node::Literal(_) | Node::Unspecified => {}
    }
}

fn entries<'e>(
    entries: &'e [cel::common::ast::IdedEntryExpr],
    bound: &mut Vec<&'e str>,
    out: &mut BTreeSet<&'e str>,
) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(field) => free_names(&field.value, bound, out),
            EntryExpr::MapEntry(pair) => {
                free_names(&pair.key, bound, out);
                free_names(&pair.value, bound, out);
            }
        }
    }
}

/// What went wrong, by kind and type only: CEL's own messages may quote the values.
fn describe(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::UndeclaredReference(name) => format!("undeclared reference to {name}"),
        ExecutionError::NoSuchOverload(overload) => overload.to_string(),
        ExecutionError::UnexpectedType { got, want } => format!("got {got}, want {want}"),
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("expected {expected} arguments, got {actual}")
        }
        ExecutionError::UnsupportedTargetType { target } => {
            format!("a {} is not a valid target", target.type_of())
        }
        ExecutionError::NotSupportedAsMethod { method, target } => {
            format!("{method} is not a method of {}", target.type_of())
        }
        ExecutionError::UnsupportedKeyType(key) => format!("a {} is not a map key", key.type_of()),
        ExecutionError::ValuesNotComparable(a, b) => {
            format!("a {} can not be compared to a {}", a.type_of(), b.type_of())
        }
        ExecutionError::UnsupportedBinaryOperator(op, a, b) => {
            format!("no {op} for {} and {}", a.type_of(), b.type_of())
        }
        ExecutionError::UnsupportedIndex(index, target) => {
            format!("a {} can not index a {}", index.type_of(), target.type_of())
        }
        ExecutionError::FunctionError { function, .. } => format!("{function} failed"),
        ExecutionError::DivisionByZero(_) | ExecutionError::RemainderByZero(_) => {
            "division by zero".into()
        }
        ExecutionError::Overflow(op, _, _) => format!("overflow in {op}"),
        ExecutionError::IndexOutOfBounds(_) => "index out of bounds".into(),
        ExecutionError::MissingArgumentOrTarget => "missing argument or target".into(),
        ExecutionError::DuplicateKey(_) => "duplicate map key".into(),
        _ => "evaluation failed".into(),
    }
}

/// `method` and `name` of one evaluation, read in place: no copy, no map.
struct Call<'a> {
    method: &'a str,
    name: &'a str,
}

impl VariableResolver for Call<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let text = match variable {
            "method" => self.method,
            "name" => self.name,
            _ => return None,
        };
        Some(CowVal::Owned(Box::new(CelString::from(text))))
    }
}

/// The caller as expressions see it, built once per request: `principal`, `claims` (converted
/// from JSON once) and `scopes`.
pub struct Facts {
    context: Context<'static, 'static>,
    scopes: Vec<String>,
}

impl std::fmt::Debug for Facts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The claims stay out of logs.
        f.debug_struct("Facts").finish_non_exhaustive()
    }
}

impl Facts {
    pub fn new(principal: &str, claims: &Map<String, Json>, scopes: &[String]) -> Facts {
        let mut context = Context::with_env(env().clone());
        context.add_variable_as_val("principal", Box::new(CelString::from(principal.to_owned())));
        context.add_variable_as_val("claims", object(claims));
        let list: Vec<Box<dyn Val>> = scopes
            .iter()
            .map(|s| Box::new(CelString::from(s.clone())) as Box<dyn Val>)
            .collect();
        context.add_variable_as_val("scopes", Box::new(CelList::from(list)));
        Facts {
            context,
            scopes: scopes.to_vec(),
        }
    }

    /// Whether the token carries `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

fn object(map: &Map<String, Json>) -> Box<dyn Val> {
    let entries: HashMap<CelMapKey<'static>, Box<dyn Val>> = map
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.clone()), json(v)))
        .collect();
    Box::new(CelMap::from(entries))
}

fn json(value: &Json) -> Box<dyn Val> {
    match value {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            (None, None) => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.clone())),
        Json::Array(items) => Box::new(CelList::from(items.iter().map(json).collect::<Vec<_>>())),
        Json::Object(map) => object(map),
    }
}

#[cfg(test)]
mod tests;
