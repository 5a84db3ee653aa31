//! Fuzzing `parse_flow`: arbitrary text and random edits of a valid flow must never
//! panic, and every error must carry a message and a plausible line.

use proptest::prelude::*;

use super::SETTLEMENT;
use crate::spec::parse_flow;

/// One edit of a flow's text.
#[derive(Debug, Clone)]
enum Edit {
    DeleteChars { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine { line: usize },
    DeleteLine { line: usize },
    SwapLines { a: usize, b: usize },
    ReplaceWord { at: usize, word: String },
}

const WORDS: &[&str] = &[
    "needs",
    "when",
    "run",
    "manual",
    "-1",
    "0",
    "[",
    "]",
    "{",
    "}",
    ":",
    "- ",
    "  ",
    "\n",
    "\"",
    "'",
    "&a",
    "*a",
    "<<: *a",
    "!!binary",
    "weak",
    "strong",
    "nodes.verify.outputs.x",
    "@daily",
    "5 1 * *",
    "1h",
    "verify",
    "notify",
    "~",
    "null",
    "nan",
    "1e999",
    "99999999999999999999",
    "timezone: Mars/Base",
    "kind: weak",
    "builtin: sleep",
    "sleep",
    "---",
    "#",
    "\t",
];

fn edit() -> impl Strategy<Value = Edit> {
    let word = prop::sample::select(WORDS).prop_map(str::to_string);
    prop_oneof![
        (0usize..2000, 1usize..40).prop_map(|(at, len)| Edit::DeleteChars { at, len }),
        (0usize..2000, prop_oneof![word.clone(), "\\PC{0,12}"])
            .prop_map(|(at, text)| Edit::Insert { at, text }),
        (0usize..50).prop_map(|line| Edit::DuplicateLine { line }),
        (0usize..50).prop_map(|line| Edit::DeleteLine { line }),
        (0usize..50, 0usize..50).prop_map(|(a, b)| Edit::SwapLines { a, b }),
        (0usize..2000, word).prop_map(|(at, word)| Edit::ReplaceWord { at, word }),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = chars.len().max(1);
    let l = lines.len().max(1);
    match edit {
        Edit::DeleteChars { at, len } => {
            let start = at % n;
            let end = (start + len).min(chars.len());
            chars.drain(start.min(end)..end);
        }
        Edit::Insert { at, text } => {
            let at = at % n;
            chars.splice(at.min(chars.len())..at.min(chars.len()), text.chars());
        }
        Edit::ReplaceWord { at, word } => {
            let start = (at % n).min(chars.len());
            let end = chars[start..]
                .iter()
                .position(|c| !c.is_alphanumeric() && *c != '_')
                .map_or(chars.len(), |p| start + p);
            chars.splice(start..end, word.chars());
        }
        Edit::DuplicateLine { line } if !lines.is_empty() => {
            let copy = lines[line % l].clone();
            lines.insert(line % l, copy);
            return lines.join("\n");
        }
        Edit::DeleteLine { line } if !lines.is_empty() => {
            lines.remove(line % l);
            return lines.join("\n");
        }
        Edit::SwapLines { a, b } if !lines.is_empty() => {
            lines.swap(a % l, b % l);
            return lines.join("\n");
        }
        _ => {}
    }
    chars.into_iter().collect()
}

/// Parses and checks the shape of the outcome.
fn check(source: &str) -> Result<(), TestCaseError> {
    let line_count = source.lines().count() + 1;
    match parse_flow("fuzz.yaml", source) {
        Ok(flow) => {
            prop_assert_eq!(flow.topo.len(), flow.nodes.len());
            prop_assert_eq!(flow.downstream.len(), flow.nodes.len());
        }
        Err(errors) => {
            prop_assert!(!errors.0.is_empty());
            for e in &errors.0 {
                prop_assert!(!e.message.trim().is_empty(), "empty message in {:?}", e);
                prop_assert_eq!(&e.file, "fuzz.yaml");
                prop_assert!(
                    e.line.is_none_or(|l| l >= 1 && l <= line_count),
                    "line {:?} of {}",
                    e.line,
                    line_count
                );
                prop_assert!(!e.to_string().contains('\n'), "multi-line error {:?}", e.to_string());
            }
        }
    }
    Ok(())
}

/// A flow whose free-text fields (CEL, cron, timezone, durations, rate limit, URL)
/// are `values`, quoted as YAML double-quoted strings.
fn flow_with_fields(values: &[String]) -> String {
    let q = |i: usize| serde_json::to_string(&values[i % values.len()]).unwrap_or_default();
    format!(
        "flow: f\nrate_limit: {}\ntriggers:\n  - {{cron: {}, timezone: {}, jitter: {}}}\n\
         routing: {{default: 1, rules: [{{when: {}, version: 2}}]}}\nnodes:\n  \
         a: {{run: {{http: {{url: {}}}}}, timeout: {}}}\n  b: {{needs: [a], when: {}, run: {{builtin: noop}}}}\n",
        q(0),
        q(1),
        q(2),
        q(3),
        q(4),
        q(5),
        q(6),
        q(7)
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_field_values_never_panic(values in prop::collection::vec("\\PC{0,40}|[a-z._ ()=<>!&|'0-9*/@-]{0,40}", 8)) {
        check(&flow_with_fields(&values))?;
    }

    #[test]
    fn arbitrary_text_never_panics(source in "\\PC{0,300}") {
        check(&source)?;
    }

    #[test]
    fn yaml_like_text_never_panics(source in "[a-z_:{}\\[\\],\\- \n\"'#&*!|>0-9.@]{0,300}") {
        check(&source)?;
    }

    #[test]
    fn edited_flows_never_panic(edits in prop::collection::vec(edit(), 1..6)) {
        let source = edits.iter().fold(SETTLEMENT.to_string(), |text, e| apply(&text, e));
        check(&source)?;
    }
}

#[test]
fn the_unedited_flow_is_valid() {
    assert!(parse_flow("fuzz.yaml", SETTLEMENT).is_ok());
}

#[test]
fn the_field_template_is_valid_with_good_values() {
    let values: Vec<String> = [
        "10/s",
        "5 1 * * *",
        "Asia/Shanghai",
        "30s",
        "params.x == 1",
        "http://h/x",
        "5m",
        "nodes.a.status == 'SUCCESS'",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let source = flow_with_fields(&values);
    assert!(parse_flow("f.yaml", &source).is_ok(), "{source}");
}
