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

/// A compiled CEL expression whose value is taken as JSON (SQL bind values).
#[derive(Clone)]
pub struct ValueExpr {
    program: Program,
}

impl fmt::Debug for ValueExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ValueExpr({:?})", self.program.source())
    }
}

impl PartialEq for ValueExpr {
    fn eq(&self, other: &Self) -> bool {
        self.program.source() == other.program.source()
    }
}

impl ValueExpr {
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        Program::compile(source).map(|program| Self { program })
    }

    pub fn source(&self) -> &str {
        self.program.source()
    }

    /// The value as JSON: bytes become lists of numbers, other non-JSON values
    /// (functions, timestamps) their debug text.
    pub fn eval(&self, params: &Json, nodes: &Json) -> Result<Json, ExprError> {
        self.eval_dated(params, nodes, None)
    }

    /// `eval` with the run's business date bound as `biz_date`.
    pub fn eval_dated(&self, params: &Json, nodes: &Json, biz_date: Option<&str>) -> Result<Json, ExprError> {
        self.program.eval_dated(params, nodes, biz_date).map(|v| to_json(&v))
    }
}

fn to_json(value: &cel::Value) -> Json {
    match value {
        cel::Value::Null => Json::Null,
        cel::Value::Bool(b) => Json::Bool(*b),
        cel::Value::Int(i) => Json::from(*i),
        cel::Value::UInt(u) => Json::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f).map(Json::Number).unwrap_or(Json::Null),
        cel::Value::String(s) => Json::String(s.to_string()),
        cel::Value::Bytes(b) => Json::Array(b.iter().map(|x| Json::from(*x)).collect()),
        cel::Value::List(items) => Json::Array(items.iter().map(to_json).collect()),
        cel::Value::Map(map) => Json::Object(
            map.map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        cel::objects::Key::Int(i) => i.to_string(),
                        cel::objects::Key::Uint(u) => u.to_string(),
                        cel::objects::Key::Bool(b) => b.to_string(),
                        cel::objects::Key::String(s) => s.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => Json::String(format!("{other:?}")),
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

    #[test]
    fn values_are_json() {
        let v = ValueExpr::compile("{'a': [1, params.x, 'y'], 'b': null}").expect("compiles");
        assert_eq!(
            v.eval(&json!({"x": 2.5}), &json!({})).expect("evaluates"),
            json!({"a": [1, 2.5, "y"], "b": null})
        );
    }
}
