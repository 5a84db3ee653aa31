//! JSON data as CEL values. Whole numbers become CEL `int` (signed 64-bit), so
//! `params.n + 1` and `payload.count % 2 == 0` work with CEL's `int` literals;
//! only a whole number above `i64::MAX` becomes `uint`, and any other number a
//! `double`. (Binding `serde_json` values through `cel`'s serializer makes every
//! non-negative integer a `uint`, which CEL refuses to mix with `1`.)

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use serde_json::Value as Json;

/// The CEL value of `json`: objects become maps with string keys, arrays lists.
pub(crate) fn to_cel(json: &Json) -> cel::Value {
    match json {
        Json::Null => cel::Value::Null,
        Json::Bool(b) => cel::Value::Bool(*b),
        Json::Number(n) => number(n),
        Json::String(s) => cel::Value::String(Arc::new(s.clone())),
        Json::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Json::Object(fields) => {
            let map: HashMap<Key, cel::Value> =
                fields.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

fn number(n: &serde_json::Number) -> cel::Value {
    if let Some(i) = n.as_i64() {
        cel::Value::Int(i)
    } else if let Some(u) = n.as_u64() {
        cel::Value::UInt(u)
    } else {
        // Neither fits a 64-bit integer: a fraction, an exponent, or (with
        // serde_json's `arbitrary_precision`) a huge literal read as f64.
        cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_numbers_are_signed_unless_too_large() {
        assert_eq!(to_cel(&json!(4)), cel::Value::Int(4));
        assert_eq!(to_cel(&json!(-4)), cel::Value::Int(-4));
        assert_eq!(to_cel(&json!(i64::MAX)), cel::Value::Int(i64::MAX));
        assert_eq!(to_cel(&json!(u64::MAX)), cel::Value::UInt(u64::MAX));
        assert_eq!(to_cel(&json!(1.5)), cel::Value::Float(1.5));
        let nested = to_cel(&json!({"a": [1, {"b": 2}]}));
        let cel::Value::Map(map) = nested else { panic!("a map: {nested:?}") };
        let key = Key::String(Arc::new("a".to_string()));
        let cel::Value::List(items) = &map.map[&key] else { panic!("a list") };
        assert_eq!(items[0], cel::Value::Int(1));
    }
}
