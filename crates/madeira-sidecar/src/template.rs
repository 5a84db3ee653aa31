//! argv templates: `{{ params.date }}`, `{{ nodes.X.outputs.k }}`, `{{ run_id }}` …
//! Each template renders to exactly one argument, whatever the value contains
//! (spaces, quotes, `;`), so a parameter can never inject a command or an argument.

use serde_json::Value as Json;

/// Roots a placeholder may start with.
const ROOTS: &[&str] = &[
    "params",
    "nodes",
    "run_id",
    "flow",
    "node",
    "attempt",
    "idempotency_key",
    "shard_index",
    "shard_total",
    "biz_date",
];

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    /// A dotted path, e.g. `["params", "date"]`.
    Var(Vec<String>),
}

/// One argv entry, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text`; `{{` without a closing `}}`, or an unknown root, is an error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| format!("`{{{{` without `}}}}` in `{text}`"))?;
            let path: Vec<String> = after[..close].trim().split('.').map(|s| s.trim().to_string()).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("empty placeholder in `{text}`"));
            }
            if !ROOTS.contains(&path[0].as_str()) {
                return Err(format!(
                    "unknown placeholder `{}`; use one of {}",
                    path.join("."),
                    ROOTS.join(", ")
                ));
            }
            pieces.push(Piece::Var(path));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(Self { pieces })
    }

    pub fn is_literal(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    /// Renders with `vars` (`{"params": …, "nodes": …, "run_id": …}`) into one argument.
    pub fn render(&self, vars: &Json) -> Result<String, String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(path) => {
                    let value = path
                        .iter()
                        .try_fold(vars, |v, key| v.get(key))
                        .ok_or_else(|| format!("`{}` is not set", path.join(".")))?;
                    match value {
                        Json::String(s) => out.push_str(s),
                        Json::Null => return Err(format!("`{}` is null", path.join("."))),
                        other => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        if out.contains('\0') {
            return Err("a rendered argument contains a NUL byte".into());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_stays_one_argument() {
        let t = Template::parse("--date={{ params.date }}").expect("parses");
        let vars = json!({"params": {"date": "2026-11-30; rm -rf / #"}});
        assert_eq!(t.render(&vars).expect("renders"), "--date=2026-11-30; rm -rf / #");
    }

    #[test]
    fn reads_nested_outputs_and_numbers() {
        let t = Template::parse("{{nodes.pull.outputs.count}}").expect("parses");
        assert_eq!(t.render(&json!({"nodes": {"pull": {"outputs": {"count": 3}}}})).expect("renders"), "3");
    }

    #[test]
    fn missing_values_and_bad_syntax_are_errors() {
        let t = Template::parse("{{ params.date }}").expect("parses");
        assert!(t.render(&json!({"params": {}})).is_err());
        assert!(Template::parse("{{ params.date").is_err());
        assert!(Template::parse("{{ env.HOME }}").is_err());
        assert!(Template::parse("plain").expect("parses").is_literal());
    }
}
