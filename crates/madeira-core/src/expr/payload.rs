//! CEL over a consumed message (message triggers' `key`, `params` and `when`):
//! `payload` (the JSON body), `headers` (string map) and `message` (`id`,
//! `subject`, `deliveries`), evaluated within the same budget as conditions, to
//! a JSON value.

use std::fmt;

use serde_json::Value as Json;

use super::{ExprError, Program};

/// The variables a message expression may read.
pub const MESSAGE_VARIABLES: &[&str] = &["payload", "headers", "message"];

/// A compiled CEL expression over a message.
#[derive(Clone)]
pub struct MessageExpr {
    program: Program,
}

impl fmt::Debug for MessageExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageExpr({:?})", self.program.source())
    }
}

impl MessageExpr {
    /// Calendar names the expression gives as literals to `cal.*` functions.
    pub fn calendar_names(&self) -> &[String] {
        self.program.calendar_names()
    }

    /// Parses `source`; reading anything but `payload`, `headers` or `message` is an error.
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        let program = Program::compile(source)?;
        if let Some(other) =
            program.free_variables().iter().find(|v| !MESSAGE_VARIABLES.contains(&v.as_str()))
        {
            return Err(ExprError(format!(
                "`{source}` reads `{other}`; a message expression reads `payload`, `headers` or `message` \
                 (e.g. `payload.payment_id`)"
            )));
        }
        Ok(Self { program })
    }

    pub fn source(&self) -> &str {
        self.program.source()
    }

    /// The value, as JSON, with the message's parts bound.
    pub fn eval(&self, payload: &Json, headers: &Json, message: &Json) -> Result<Json, ExprError> {
        let value =
            self.program.eval_vars(&[("payload", payload), ("headers", headers), ("message", message)])?;
        to_json(&value).map_err(|why| ExprError(format!("`{}`: {why}", self.program.source())))
    }

    /// The value as text (a run key): strings as they are, numbers and booleans
    /// printed; null, lists and maps are refused.
    pub fn eval_text(&self, payload: &Json, headers: &Json, message: &Json) -> Result<String, ExprError> {
        match self.eval(payload, headers, message)? {
            Json::String(s) if !s.is_empty() => Ok(s),
            Json::Number(n) => Ok(n.to_string()),
            Json::Bool(b) => Ok(b.to_string()),
            other => Err(ExprError(format!(
                "`{}` must give a non-empty string or a number, got {}",
                self.program.source(),
                super::sanitize(&other.to_string().chars().take(80).collect::<String>())
            ))),
        }
    }

    /// True or false; anything else is an error.
    pub fn eval_bool(&self, payload: &Json, headers: &Json, message: &Json) -> Result<bool, ExprError> {
        match self.eval(payload, headers, message)? {
            Json::Bool(b) => Ok(b),
            other => Err(ExprError(format!(
                "`{}` must evaluate to a boolean, got {}",
                self.program.source(),
                super::sanitize(&other.to_string().chars().take(80).collect::<String>())
            ))),
        }
    }
}

fn to_json(value: &cel::Value) -> Result<Json, String> {
    Ok(match value {
        cel::Value::Null => Json::Null,
        cel::Value::Bool(b) => Json::Bool(*b),
        cel::Value::Int(i) => Json::from(*i),
        cel::Value::UInt(u) => Json::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f).map(Json::Number).unwrap_or(Json::Null),
        cel::Value::String(s) => Json::String(s.to_string()),
        cel::Value::List(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        cel::Value::Map(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            Json::Object(out)
        }
        other => return Err(format!("gives a {:?}, which has no JSON form", other.type_of())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_payload_and_refuses_other_variables() {
        let key = MessageExpr::compile("payload.payment_id").expect("compiles");
        let none = json!({});
        assert_eq!(key.eval_text(&json!({"payment_id": "p-1"}), &none, &none).expect("key"), "p-1");
        assert_eq!(key.eval_text(&json!({"payment_id": 7}), &none, &none).expect("key"), "7");
        assert!(key.eval_text(&json!({"other": 1}), &none, &none).is_err(), "missing field is an error");
        let when = MessageExpr::compile("payload.amount > 0").expect("compiles");
        assert!(when.eval_bool(&json!({"amount": 5}), &none, &none).expect("when"));
        assert!(!when.eval_bool(&json!({"amount": 0}), &none, &none).expect("when"));
        let err = MessageExpr::compile("params.x").expect_err("params is not a message variable");
        assert!(err.0.contains("payload"), "{err}");
        let map = MessageExpr::compile("{'d': payload.d, 'n': [1, 2]}").expect("compiles");
        assert_eq!(
            map.eval(&json!({"d": "2026"}), &none, &none).expect("map"),
            json!({"d": "2026", "n": [1, 2]})
        );
        let header = MessageExpr::compile("headers['x-id']").expect("compiles");
        assert_eq!(header.eval_text(&none, &json!({"x-id": "h"}), &none).expect("header"), "h");
    }
}
