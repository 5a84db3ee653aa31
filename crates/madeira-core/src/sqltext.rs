//! SQL text as far as Madeira needs to understand it: `:name` placeholders and the
//! `;` between the statements of a script, found outside string literals, quoted
//! identifiers, comments and PostgreSQL dollar quotes (and never in a `::` cast).
//! The validator uses it to check that every placeholder has a value; the SQL
//! executor to turn placeholders into positional binds (`$1` or `?`).

use std::ops::Range;

/// A `:name` placeholder: where it is in the statement and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub span: Range<usize>,
    pub name: String,
}

/// How the executor's database numbers its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindStyle {
    /// PostgreSQL: `$1`, `$2`, … (a name used twice is one parameter).
    Dollar,
    /// MySQL/MariaDB: `?` per occurrence.
    Question,
}

/// The byte ranges of `text` that are SQL code (not literals, identifiers in
/// quotes or comments), in order. Unterminated quotes run to the end.
fn code_ranges(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut start) = (0, 0);
    while i < bytes.len() {
        let end_of_skip = match bytes[i] {
            quote @ (b'\'' | b'"' | b'`') => Some(skip_quoted(bytes, i, quote)),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                Some(bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| i + p))
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                Some(text[i + 2..].find("*/").map_or(bytes.len(), |p| i + 2 + p + 2))
            }
            b'$' => dollar_tag(text, i).map(|tag| {
                let body = i + tag.len();
                text[body..].find(tag).map_or(bytes.len(), |p| body + p + tag.len())
            }),
            _ => None,
        };
        match end_of_skip {
            Some(end) => {
                if start < i {
                    out.push(start..i);
                }
                i = end;
                start = end;
            }
            None => i += 1,
        }
    }
    if start < bytes.len() {
        out.push(start..bytes.len());
    }
    out
}

/// The end of a quoted run starting at `at`; a doubled quote (or, for `'`, a
/// backslash escape as MySQL reads it) stays inside.
fn skip_quoted(bytes: &[u8], at: usize, quote: u8) -> usize {
    let mut i = at + 1;
    while i < bytes.len() {
        if quote == b'\'' && bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    bytes.len()
}

/// `$tag$` or `$$` at `at` (PostgreSQL dollar quoting), not `$1`.
fn dollar_tag(text: &str, at: usize) -> Option<&str> {
    let rest = &text[at + 1..];
    let close = rest.find('$')?;
    let tag = &rest[..close];
    let ok = tag.is_empty()
        || (tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !tag.starts_with(|c: char| c.is_ascii_digit()));
    ok.then(|| &text[at..at + close + 2])
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every `:name` placeholder of one statement, in order.
pub fn placeholders(statement: &str) -> Vec<Placeholder> {
    let bytes = statement.as_bytes();
    let mut out = Vec::new();
    for range in code_ranges(statement) {
        let mut i = range.start;
        while i < range.end {
            if bytes[i] != b':' {
                i += 1;
                continue;
            }
            // `::type` is a cast; `a:b` after an identifier char is not ours either.
            if bytes.get(i + 1) == Some(&b':') {
                i += 2;
                continue;
            }
            let after_word = i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
            if !after_word && i + 1 < range.end && is_ident_start(bytes[i + 1]) {
                let mut end = i + 1;
                while end < range.end && is_ident(bytes[end]) {
                    end += 1;
                }
                out.push(Placeholder { span: i..end, name: statement[i + 1..end].to_string() });
                i = end;
                continue;
            }
            i += 1;
        }
    }
    out
}

/// The statements of a script, split at `;` outside literals and comments; empty
/// ones (only whitespace or comments) left out.
pub fn split_script(script: &str) -> Vec<String> {
    let bytes = script.as_bytes();
    let mut cuts = Vec::new();
    for range in code_ranges(script) {
        cuts.extend(range.clone().filter(|&i| bytes[i] == b';'));
    }
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain(std::iter::once(script.len())) {
        let piece = script[start..cut].trim();
        if !code_ranges(piece).iter().all(|r| piece[r.clone()].trim().is_empty()) {
            out.push(piece.to_string());
        }
        start = (cut + 1).min(script.len());
    }
    out
}

/// `statement` with its placeholders replaced for `style`, and the names to bind,
/// in parameter order.
pub fn rewrite(statement: &str, style: BindStyle) -> (String, Vec<String>) {
    let mut sql = String::with_capacity(statement.len());
    let mut names: Vec<String> = Vec::new();
    let mut last = 0;
    for p in placeholders(statement) {
        sql.push_str(&statement[last..p.span.start]);
        match style {
            BindStyle::Question => {
                names.push(p.name);
                sql.push('?');
            }
            BindStyle::Dollar => {
                let n = match names.iter().position(|n| *n == p.name) {
                    Some(i) => i + 1,
                    None => {
                        names.push(p.name);
                        names.len()
                    }
                };
                sql.push('$');
                sql.push_str(&n.to_string());
            }
        }
        last = p.span.end;
    }
    sql.push_str(&statement[last..]);
    (sql, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &str) -> Vec<String> {
        placeholders(s).into_iter().map(|p| p.name).collect()
    }

    #[test]
    fn finds_placeholders_outside_literals_comments_and_casts() {
        assert_eq!(
            names("SELECT :a, ':b', \":c\", `:d` -- :e\n, :f::date /* :g */, $$ :h $$, x:y"),
            ["a", "f"]
        );
        assert_eq!(names("select 'it''s :no', :yes"), ["yes"]);
        assert_eq!(names("select $tag$ :no $tag$, :run_id"), ["run_id"]);
    }

    #[test]
    fn rewrites_for_each_style() {
        let (pg, order) = rewrite("insert into t values (:a, :b, :a)", BindStyle::Dollar);
        assert_eq!((pg.as_str(), order), ("insert into t values ($1, $2, $1)", vec!["a".into(), "b".into()]));
        let (my, order) = rewrite("insert into t values (:a, :b, :a)", BindStyle::Question);
        assert_eq!(my, "insert into t values (?, ?, ?)");
        assert_eq!(order, ["a", "b", "a"]);
    }

    #[test]
    fn splits_scripts_at_top_level_semicolons() {
        let parts = split_script("insert into t values ('a;b');\n-- note;\nupdate t set x = 1; ;\n");
        assert_eq!(parts, ["insert into t values ('a;b')", "-- note;\nupdate t set x = 1"]);
        assert_eq!(split_script("do $$ begin perform 1; end $$;"), ["do $$ begin perform 1; end $$"]);
    }
}
