//! Error collection for the validator: a `Report` gathers every `SpecError` of one
//! file, so a user sees all problems at once; plus the helpers every check uses
//! (line of a spanned value, "did you mean" suggestions, checked integer ranges).

use serde_saphyr::{Location, Spanned};

use super::{SpecError, SpecErrors};

/// Where a problem is: the node (when it belongs to one) and the line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct At<'a> {
    pub node: Option<&'a str>,
    pub line: Option<usize>,
}

impl<'a> At<'a> {
    pub fn top(line: Option<usize>) -> Self {
        Self { node: None, line }
    }

    /// The same node, another line (keeps this line when `line` is unknown).
    pub fn on(self, line: Option<usize>) -> Self {
        Self { node: self.node, line: line.or(self.line) }
    }

    /// The same node, at the line of `value`.
    pub fn at<T>(self, value: &Spanned<T>) -> Self {
        self.on(line_of(value))
    }
}

/// Collects the problems found in one flow file.
#[derive(Debug)]
pub(crate) struct Report {
    file: String,
    errors: Vec<SpecError>,
}

impl Report {
    pub fn new(file: &str) -> Self {
        Self { file: file.to_string(), errors: Vec::new() }
    }

    pub fn push(&mut self, at: At<'_>, message: impl AsRef<str>) {
        let message = sanitize(message.as_ref());
        self.errors.push(SpecError {
            file: self.file.clone(),
            line: at.line,
            node: at.node.map(sanitize),
            message: if message.is_empty() { "invalid flow".to_string() } else { message },
        });
    }

    /// `Ok(value)` when nothing was reported; errors sorted by line, stable otherwise.
    pub fn finish<T>(mut self, value: Option<T>) -> Result<T, SpecErrors> {
        match value {
            Some(v) if self.errors.is_empty() => return Ok(v),
            None if self.errors.is_empty() => self.push(At::default(), "invalid flow"),
            _ => {}
        }
        self.errors.sort_by_key(|e| e.line.unwrap_or(0));
        Err(SpecErrors(self.errors))
    }

    /// Reads an integer limit: at least `min`, at most `u32::MAX`.
    pub fn limit(&mut self, at: At<'_>, field: &str, value: &Spanned<i64>, min: i64) -> Option<u32> {
        let at = at.at(value);
        let v = value.value;
        if v < min {
            let hint = match min {
                0 => "0 or more".to_string(),
                _ => format!("at least {min}"),
            };
            self.push(at, format!("`{field}` must be {hint}, got {v}"));
            return None;
        }
        match u32::try_from(v) {
            Ok(n) => Some(n),
            Err(_) => {
                self.push(at, format!("`{field}` is too large: {v} (at most {})", u32::MAX));
                None
            }
        }
    }

    /// Parses a duration field, reporting a bad one.
    pub fn duration(
        &mut self,
        at: At<'_>,
        field: &str,
        value: &Spanned<String>,
    ) -> Option<std::time::Duration> {
        match super::parse_duration(&value.value) {
            Ok(d) => Some(d),
            Err(e) => {
                self.push(at.at(value), format!("`{field}`: {e}"));
                None
            }
        }
    }
}

/// 1-based line of a location, `None` when unknown.
pub(crate) fn line_of_location(loc: &Location) -> Option<usize> {
    usize::try_from(loc.line()).ok().filter(|l| *l > 0)
}

pub(crate) fn line_of<T>(value: &Spanned<T>) -> Option<usize> {
    line_of_location(&value.referenced)
}

/// The candidate closest to `word` (case-insensitive edit distance), if close enough
/// to be a plausible typo.
pub(crate) fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = word.to_lowercase();
    let len = lower.chars().count();
    // A third of the word may be wrong, and never all of it.
    let limit = (len / 3).max(1).min(len.saturating_sub(1));
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, c)| (*d <= limit || *d == 0) && *c != word)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `"; did you mean `x`?"` or an empty string.
pub(crate) fn did_you_mean<'a, I>(word: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates).map(|c| format!("; did you mean `{c}`?")).unwrap_or_default()
}

/// `` `a`, `b` or `c` ``.
pub(crate) fn one_of(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| format!("`{o}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// Escapes control characters so one error stays on one line.
pub(crate) fn sanitize(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() }).collect()
}
