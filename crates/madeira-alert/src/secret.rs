//! Secrets (robot URLs with their keys, signing secrets): a wrapper that never
//! prints its value, and a scrubber that blanks known secret strings out of any
//! text (errors from HTTP clients, receiver answers) before it is logged or stored.

use std::fmt;

use serde::Deserialize;

/// A value that must never reach a log, an API answer or an error message.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for building the request. Never format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Replaces every known secret fragment in a text with `***`.
#[derive(Clone, Default)]
pub struct Scrubber {
    fragments: Vec<String>,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scrubber({} fragments)", self.fragments.len())
    }
}

impl Scrubber {
    /// Fragments of a webhook URL that identify it: the whole URL, every query
    /// value (`key=…`, `access_token=…`) and path segments long enough to be a
    /// token (Feishu's `/hook/<id>`), plus the signing secret.
    pub fn for_channel(url: &Secret, secret: Option<&Secret>) -> Self {
        let mut fragments = vec![url.expose().to_string()];
        if let Ok(parsed) = reqwest::Url::parse(url.expose()) {
            fragments.extend(parsed.query_pairs().map(|(_, v)| v.into_owned()));
            if let Some(segments) = parsed.path_segments() {
                fragments.extend(segments.filter(|s| s.len() >= 16).map(str::to_string));
            }
            if let Some(query) = parsed.query() {
                fragments.push(query.to_string());
            }
        }
        if let Some(secret) = secret {
            fragments.push(secret.expose().to_string());
        }
        fragments.retain(|f| f.len() >= 4);
        // Longest first, so a whole URL is blanked before its parts.
        fragments.sort_by_key(|f| std::cmp::Reverse(f.len()));
        fragments.dedup();
        Self { fragments }
    }

    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for fragment in &self.fragments {
            if out.contains(fragment.as_str()) {
                out = out.replace(fragment.as_str(), "***");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value_and_scrub_blanks_url_parts() {
        let url = Secret::new("https://robot.example/cgi-bin/webhook/send?key=abcd-1234-efgh");
        assert_eq!(format!("{url:?}"), "Secret(***)");
        let scrubber = Scrubber::for_channel(&url, Some(&Secret::new("SECsigning")));
        let text = format!("error for url ({}) key abcd-1234-efgh, SECsigning", url.expose());
        let clean = scrubber.scrub(&text);
        assert!(!clean.contains("abcd-1234-efgh") && !clean.contains("SECsigning"), "{clean}");
        let feishu = Secret::new("https://open.example/open-apis/bot/v2/hook/0123456789abcdef0123");
        let scrubber = Scrubber::for_channel(&feishu, None);
        assert_eq!(scrubber.scrub("hook 0123456789abcdef0123 refused"), "hook *** refused");
    }
}
