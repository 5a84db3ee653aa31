//! CEL key expressions (`sidecar.hash_key`): evaluated over `params` and `nodes`
//! to a string that picks a sidecar by consistent hashing.

use std::fmt;

use serde_json::Value as Json;

use crate::expr::{ExprError, Program};

/// A compiled CEL expression whose value, as text, is a routing key.
#[derive(Clone)]
pub struct KeyExpr {
    program: Program,
}

impl fmt::Debug for KeyExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyExpr({:?})", self.program.source())
    }
}

impl PartialEq for KeyExpr {
    fn eq(&self, other: &Self) -> bool {
        self.program.source() == other.program.source()
    }
}

impl KeyExpr {
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        Program::compile(source).map(|program| Self { program })
    }

    pub fn source(&self) -> &str {
        self.program.source()
    }

    /// The key: strings as they are, numbers and booleans printed, null empty.
    pub fn eval(&self, params: &Json, nodes: &Json) -> Result<String, ExprError> {
        match self.program.eval(params, nodes) {
            Ok(cel::Value::String(s)) => Ok(s.to_string()),
            Ok(cel::Value::Int(i)) => Ok(i.to_string()),
            Ok(cel::Value::UInt(u)) => Ok(u.to_string()),
            Ok(cel::Value::Float(f)) => Ok(f.to_string()),
            Ok(cel::Value::Bool(b)) => Ok(b.to_string()),
            Ok(cel::Value::Null) => Ok(String::new()),
            Ok(other) => Ok(format!("{other:?}")),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_to_text() {
        let k = KeyExpr::compile("params.tenant").expect("compiles");
        assert_eq!(k.eval(&json!({"tenant": "t1"}), &json!({})).expect("evaluates"), "t1");
        let n = KeyExpr::compile("params.shop_id").expect("compiles");
        assert_eq!(n.eval(&json!({"shop_id": 123}), &json!({})).expect("evaluates"), "123");
        assert!(KeyExpr::compile("params.").is_err());
    }
}
