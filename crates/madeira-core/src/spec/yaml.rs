//! Reading the YAML: serde-saphyr into `RawFlow`, and turning its errors into
//! `SpecError`s with a line, the node and key they sit in and a readable message.

use serde_saphyr::{DefaultMessageFormatter, Error, MessageFormatter, Options};

use super::outline::Outline;
use super::raw::RawFlow;
use super::report::{At, Report, did_you_mean, line_of_location, one_of};

/// Most unknown keys reported from one file before the rest are left unsaid.
const MAX_UNKNOWN_KEYS: usize = 32;

/// Parses `source` into the raw flow; on failure, reports why and returns `None`.
/// Every unknown key written as a block key (`key: …` on its own line) is
/// reported, not only the first: each is blanked out, lines kept, and the file
/// read again.
pub(crate) fn load(source: &str, report: &mut Report) -> Option<RawFlow> {
    let mut text = source.to_string();
    let mut unknown = 0;
    loop {
        let error = match serde_saphyr::from_str_with_options::<RawFlow>(&text, options()) {
            Ok(raw) if unknown == 0 => return Some(raw),
            Ok(_) => return None,
            Err(e) => e,
        };
        report_error(&text, &error, report);
        let Error::SerdeUnknownField { field, .. } = innermost(&error) else { return None };
        let line = innermost(&error).location().as_ref().and_then(line_of_location);
        unknown += 1;
        match line.and_then(|l| without_block_key(&text, l, field)) {
            Some(rest) if unknown < MAX_UNKNOWN_KEYS => text = rest,
            _ => return None,
        }
    }
}

/// `text` with the block key `field` at 1-based `line` and the lines nested under
/// it blanked (line numbers kept); `None` when that line is not such a key.
fn without_block_key(text: &str, line: usize, field: &str) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let at = line.checked_sub(1)?;
    let key_line = lines.get(at)?;
    let indent = key_line.len() - key_line.trim_start().len();
    let rest = key_line.trim_start().strip_prefix(field)?;
    if !rest.trim_start().starts_with(':') {
        return None;
    }
    let nested = |l: &str| l.trim().is_empty() || l.len() - l.trim_start().len() > indent;
    let end = at + 1 + lines[at + 1..].iter().take_while(|l| nested(l)).count();
    let kept: Vec<&str> =
        lines.iter().enumerate().map(|(i, l)| if (at..end).contains(&i) { "" } else { *l }).collect();
    Some(kept.join("\n"))
}

/// YAML 1.2 booleans only (`true`/`false`): a node called `y` or `no` stays a name.
fn options() -> Options {
    let mut options = Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    options
}

fn report_error(source: &str, error: &Error, report: &mut Report) {
    let error = innermost(error);
    let location = error.location();
    let line = location.as_ref().and_then(line_of_location);
    let outline = Outline::read(source, options());
    if let Error::DuplicateMappingKey { key, .. } = error {
        let dups = outline.as_ref().map(Outline::duplicates).unwrap_or_default();
        if dups.is_empty() {
            let key = key.as_deref().unwrap_or("?");
            report.push(At::top(line), format!("duplicate key `{key}`; keep only one"));
        }
        for dup in dups {
            dup.report(report);
        }
        return;
    }
    let node = outline.as_ref().zip(line).and_then(|(o, l)| o.node_at(l));
    let mut message = describe(error);
    // Name the field a bad value belongs to (not for unknown fields: they name themselves).
    let column = location.map(|l| usize::try_from(l.column()).unwrap_or(0));
    if !matches!(error, Error::SerdeUnknownField { .. })
        && let (Some(outline), Some(line), Some(column)) = (&outline, line, column)
        && let Some(key) = outline.key_before(line, column)
    {
        message = format!("`{key}`: {message}");
    }
    let at = At { node: node.as_deref(), line };
    report.push(at, message);
}

/// Unwraps snippet and alias wrappers down to the error that says what is wrong.
fn innermost(error: &Error) -> &Error {
    match error.without_snippet() {
        Error::AliasError { error, .. } => innermost(error),
        other => other,
    }
}

fn describe(error: &Error) -> String {
    match error {
        Error::SerdeUnknownField { field, expected, .. } => {
            let hint = did_you_mean(field, expected.iter().copied());
            if hint.is_empty() {
                format!("unknown field `{field}`; expected {}", one_of(expected))
            } else {
                format!("unknown field `{field}`{hint}")
            }
        }
        Error::InvalidScalar { ty, .. } if ty.starts_with('f') => "expected a number".to_string(),
        Error::InvalidScalar { ty, .. } if ty.starts_with(['i', 'u']) => {
            "expected a whole number".to_string()
        }
        Error::InvalidScalar { ty: "bool", .. } => "expected `true` or `false`".to_string(),
        Error::Eof { .. } => "unexpected end of file; a flow needs at least `flow:` and `nodes:`".to_string(),
        Error::MultipleDocuments { .. } => {
            "more than one YAML document (`---`); put one flow per file".to_string()
        }
        Error::Unexpected { expected, .. } => match *expected {
            "sequence start" => "expected a list, e.g. `[a, b]`".to_string(),
            "mapping start" => "expected a mapping, e.g. `{key: value}`".to_string(),
            "string scalar" => "expected a single value, not a list or mapping".to_string(),
            other => format!("expected {other}"),
        },
        Error::Budget { .. } => "the YAML is too large or nested too deeply (at most 64 levels)".to_string(),
        other => DefaultMessageFormatter.format_message(other).into_owned(),
    }
}
