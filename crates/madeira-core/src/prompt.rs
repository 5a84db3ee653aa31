//! Manual prompts: `{{ params.K }}`, `{{ nodes.X.outputs.K }}` (nested keys by
//! dots) and `{{ nodes.X.status }}` replaced by the run's values. One renderer for
//! the API, the console and alert messages; each caller says how to look a path up.

use serde_json::Value as Json;

use crate::plan::RunSnapshot;

/// `prompt` with every `{{ path }}` replaced by `lookup(path)`, or by
/// `<path: not available>` when the run has no such value.
pub fn render(prompt: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = prompt;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let path = rest[start + 2..start + end].trim();
        out.push_str(&lookup(path).unwrap_or_else(|| format!("<{path}: not available>")));
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

/// A JSON value as a prompt shows it: strings without quotes.
pub fn shown(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `path` looked up in a run's snapshot (params, node outputs, node status).
pub fn lookup_in(snap: &RunSnapshot, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let node = |id: &str| snap.flow.node_index(id).map(|i| &snap.nodes[i]);
    let value = match parts.as_slice() {
        ["params", key @ ..] => key.iter().try_fold(&snap.params, |v, k| v.get(k))?,
        ["nodes", id, "outputs", key @ ..] => {
            let first = node(id)?.outputs.get(*key.first()?)?;
            key[1..].iter().try_fold(first, |v, k| v.get(k))?
        }
        ["nodes", id, "status"] => return node(id).map(|n| n.state.to_string()),
        _ => return None,
    };
    Some(shown(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_replaced_and_missing_ones_named() {
        let lookup = |p: &str| (p == "nodes.calc.outputs.diff").then(|| "12.50".to_string());
        assert_eq!(
            render("diff {{ nodes.calc.outputs.diff }} for {{params.date}}; ok?", lookup),
            "diff 12.50 for <params.date: not available>; ok?"
        );
        assert_eq!(render("unclosed {{ x", lookup), "unclosed {{ x");
    }
}
