//! Readable CEL parse errors: `at column C: what`, one clause per problem, with
//! the parser's internals (`No ConditionalAndContextAll!`, token sets, recursion
//! errors) left out.

use cel::ParseErrors;

/// Condenses `errors` for `source` into one line.
pub(crate) fn parse_errors(source: &str, errors: &ParseErrors) -> String {
    let multiline = source.contains('\n');
    let mut clauses: Vec<String> = Vec::new();
    let mut first_pos = None;
    for e in &errors.errors {
        let (line, column) = e.pos;
        first_pos.get_or_insert((line, column));
        let Some(what) = readable(&e.msg) else { continue };
        let at = if multiline {
            format!("at line {line}, column {column}")
        } else {
            format!("at column {column}")
        };
        let clause = format!("{at}: {what}");
        if !clauses.contains(&clause) {
            clauses.push(clause);
        }
    }
    if clauses.is_empty() {
        // Only internal errors: the parser gave up without saying where or why.
        return match first_pos {
            Some((line, column)) if line > 0 && column > 0 => {
                format!("at column {column}: the expression is incomplete")
            }
            _ => "the expression is incomplete or nested too deeply".to_string(),
        };
    }
    clauses.join("; ")
}

/// The user-facing part of one parser message, `None` for internals.
fn readable(msg: &str) -> Option<String> {
    let msg = msg.strip_prefix("Syntax error: ").unwrap_or(msg);
    if is_internal(msg) {
        return None;
    }
    let msg = msg.split(" expecting ").next().unwrap_or(msg);
    let msg = msg
        .replace("mismatched input '<EOF>'", "the expression ends too early")
        .replace("extraneous input '<EOF>'", "the expression ends too early")
        .replace("at '<EOF>'", "at the end");
    Some(super::sanitize(msg.trim()))
}

/// Messages about the parser's own state, not about the expression.
fn is_internal(msg: &str) -> bool {
    msg == "UNKNOWN"
        || msg.contains("OtherError")
        || msg.contains("ParseError {")
        || (msg.ends_with('!') && (msg.starts_with("No `") || msg.starts_with("Incomplete `")))
        || msg.starts_with("Recursion limit")
        || msg.starts_with("error recovery attempt limit")
}
