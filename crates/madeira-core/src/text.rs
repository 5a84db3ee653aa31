//! Text every store can keep: PostgreSQL refuses the NUL character in `text` and
//! `jsonb`, so Madeira refuses it wherever text enters (params, keys, event ids,
//! reasons, flow sources), on every backend alike, naming the field. Also the
//! one way errors are printed with their causes (`error_chain`).

use serde_json::Value;

/// The path (`params.items[2].name`) of the first string or key under `value`
/// that contains NUL, `root` naming `value` itself.
pub fn find_nul(value: &Value, root: &str) -> Option<String> {
    match value {
        Value::String(s) if s.contains('\0') => Some(root.to_string()),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, v)| find_nul(v, &format!("{root}[{i}]")))
        }
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                return Some(format!("{root} (a key)"));
            }
            find_nul(v, &format!("{root}.{k}"))
        }),
        _ => None,
    }
}

/// `Err(message)` when `text` (named `field`) contains NUL.
pub fn check_text(field: &str, text: &str) -> Result<(), String> {
    match text.contains('\0') {
        true => Err(nul_message(field)),
        false => Ok(()),
    }
}

/// `Err(message)` when a key or a string under a value of `map` (named `field`) contains NUL.
pub fn check_map(field: &str, map: &serde_json::Map<String, Value>) -> Result<(), String> {
    let path = map.iter().find_map(|(k, v)| match k.contains('\0') {
        true => Some(format!("{field} (a key)")),
        false => find_nul(v, &format!("{field}.{k}")),
    });
    path.map_or(Ok(()), |p| Err(nul_message(&p)))
}

/// `Err(message)` when a string or key under `value` (named `field`) contains NUL.
pub fn check_json(field: &str, value: &Value) -> Result<(), String> {
    match find_nul(value, field) {
        Some(path) => Err(nul_message(&path)),
        None => Ok(()),
    }
}

/// An error with its sources, `a: b: c` (transport errors keep the cause there).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

fn nul_message(field: &str) -> String {
    format!("{field}: contains the NUL character (\\u0000), which the store cannot keep; remove it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_path_of_the_first_nul() {
        let v = json!({"a": 1, "b": ["ok", {"c": "x\u{0}y"}]});
        assert_eq!(find_nul(&v, "params").as_deref(), Some("params.b[1].c"));
        assert_eq!(find_nul(&json!({"k\u{0}": 1}), "params").as_deref(), Some("params (a key)"));
        assert_eq!(find_nul(&json!({"a": "fine", "n": null}), "params"), None);
        assert!(check_text("reason", "a\u{0}").unwrap_err().starts_with("reason: contains the NUL"));
        assert!(check_json("params", &json!("ok")).is_ok());
        let map = json!({"a": {"b": "x\u{0}"}}).as_object().cloned().expect("object");
        assert!(check_map("outputs", &map).unwrap_err().starts_with("outputs.a.b: contains the NUL"));
    }
}
