//! CEL conditions (`when:` and routing rules): compiled once at validation, evaluated
//! over `params` and `nodes.X.{status,outputs}`; `cel` does the parsing and evaluation.

use std::fmt;
use std::sync::Arc;

use serde_json::Value as Json;

/// A compiled CEL boolean expression, with its source kept for display.
#[derive(Clone)]
pub struct Condition {
    source: String,
    program: Arc<cel::Program>,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Condition({:?})", self.source)
    }
}

/// A CEL expression that failed to parse or to evaluate to a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExprError(pub String);

impl Condition {
    /// Parses `source`; the error text comes from the CEL parser.
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        let program = cel::Program::compile(source).map_err(|e| ExprError(e.to_string()))?;
        Ok(Self { source: source.to_string(), program: Arc::new(program) })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Top-level variables the expression reads (`params`, `nodes`, ...).
    pub fn variables(&self) -> Vec<String> {
        self.program.references().variables().into_iter().map(str::to_string).collect()
    }

    /// Node names the expression selects as `nodes.NAME` (string literals ignored).
    pub fn referenced_nodes(&self) -> Vec<String> {
        referenced_nodes(&self.source)
    }

    /// Evaluates to a boolean with `params` and `nodes` bound.
    pub fn eval(&self, params: &Json, nodes: &Json) -> Result<bool, ExprError> {
        let mut ctx = cel::Context::default();
        ctx.add_variable("params", params).map_err(|e| ExprError(e.to_string()))?;
        ctx.add_variable("nodes", nodes).map_err(|e| ExprError(e.to_string()))?;
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => {
                Err(ExprError(format!("`{}` must evaluate to a boolean, got {other:?}", self.source)))
            }
            Err(e) => Err(ExprError(format!("`{}`: {e}", self.source))),
        }
    }
}

/// Scans `source` for `nodes.IDENT`, skipping quoted string literals.
fn referenced_nodes(source: &str) -> Vec<String> {
    let bytes = source.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' || c == b'\'' {
            i = skip_string(bytes, i);
            continue;
        }
        let at_word_start = i == 0 || !is_ident_byte(bytes[i - 1]) && bytes[i - 1] != b'.';
        if at_word_start && source[i..].starts_with("nodes.") {
            let start = i + "nodes.".len();
            let end = start + bytes[start..].iter().take_while(|b| is_ident_byte(**b)).count();
            if end > start {
                let name = source[start..end].to_string();
                if !found.contains(&name) {
                    found.push(name);
                }
            }
            i = end;
            continue;
        }
        i += 1;
    }
    found
}

fn skip_string(bytes: &[u8], open: usize) -> usize {
    let quote = bytes[open];
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_over_params_and_nodes() {
        let c = Condition::compile("nodes.pull.outputs.refund_count > 0 && params.tenant == 't1'")
            .expect("compiles");
        let nodes = json!({"pull": {"status": "SUCCESS", "outputs": {"refund_count": 3}}});
        assert_eq!(c.eval(&json!({"tenant": "t1"}), &nodes), Ok(true));
        assert_eq!(c.eval(&json!({"tenant": "t2"}), &nodes), Ok(false));
    }

    #[test]
    fn non_boolean_is_an_error() {
        let c = Condition::compile("1 + 1").expect("compiles");
        assert!(c.eval(&json!({}), &json!({})).is_err());
    }

    #[test]
    fn finds_node_references_outside_strings() {
        let c =
            Condition::compile("nodes.a.status == 'nodes.b' || nodes.c_1.outputs.x > 1").expect("compiles");
        assert_eq!(c.referenced_nodes(), vec!["a".to_string(), "c_1".to_string()]);
    }

    #[test]
    fn bad_syntax_is_reported() {
        assert!(Condition::compile("nodes.a.status ==").is_err());
    }
}
