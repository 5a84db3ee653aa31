//! Channels: the kinds Madeira delivers to, the HTTP request each message becomes
//! (body shaped and cut to the channel's byte limit, signed where the channel
//! signs), and how a receiver's answer is read — robots answer HTTP 200 with an
//! `errcode`, and 45009/130101/11232 mean "slow down".

mod alertmanager;
mod robots;
mod webhook;

use serde_json::Value as Json;

pub use crate::config::ChannelKind;
use crate::config::ChannelSpec;
use crate::render::{Content, Mentions};

/// One message to shape.
pub struct Outgoing<'a> {
    pub content: &'a Content,
    pub mentions: &'a Mentions,
    pub now_ms: i64,
    /// Base URL for run links.
    pub base: Option<&'a str>,
}

/// An HTTP POST ready to send. Its URL holds the channel's key: never print it.
pub struct Request {
    pub url: reqwest::Url,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// How the receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// The receiver's rate limit: wait a whole window before the next post.
    SlowDown(String),
    Failed(String),
}

/// Builds the request for `out` on `spec`; the error never holds a secret.
pub fn build(spec: &ChannelSpec, out: &Outgoing<'_>) -> Result<Request, String> {
    let url =
        reqwest::Url::parse(spec.url.expose()).map_err(|_| "the channel URL does not parse".to_string())?;
    let secret = spec.secret.as_ref().map(|s| s.expose());
    match spec.kind {
        ChannelKind::Wecom => Ok(robots::wecom(url, out)),
        ChannelKind::Dingtalk => robots::dingtalk(url, secret, out),
        ChannelKind::Feishu => robots::feishu(url, secret, out),
        ChannelKind::Webhook => webhook::build(url, secret, out),
        ChannelKind::Alertmanager => Ok(alertmanager::build(url, out)),
    }
}

/// Reads a receiver's answer.
pub fn read_answer(kind: ChannelKind, status: u16, body: &str) -> Answer {
    let snippet: String = body.chars().take(200).collect();
    if status == 429 {
        return Answer::SlowDown(format!("HTTP 429: {snippet}"));
    }
    if !(200..300).contains(&status) {
        return Answer::Failed(format!("HTTP {status}: {snippet}"));
    }
    let (code_field, slow_codes): (&[&str], &[i64]) = match kind {
        ChannelKind::Wecom => (&["errcode"], &[45009]),
        ChannelKind::Dingtalk => (&["errcode"], &[130101]),
        ChannelKind::Feishu => (&["code", "StatusCode"], &[11232]),
        ChannelKind::Webhook | ChannelKind::Alertmanager => return Answer::Ok,
    };
    let Ok(json) = serde_json::from_str::<Json>(body) else {
        return Answer::Failed(format!("HTTP {status} but the answer is not JSON: {snippet}"));
    };
    let Some(code) = code_field.iter().find_map(|f| json.get(*f).and_then(Json::as_i64)) else {
        return Answer::Failed(format!("HTTP {status} but the answer has no {}: {snippet}", code_field[0]));
    };
    let message = ["errmsg", "msg", "StatusMessage"]
        .iter()
        .find_map(|f| json.get(*f).and_then(Json::as_str))
        .unwrap_or("");
    match code {
        0 => Answer::Ok,
        c if slow_codes.contains(&c) => Answer::SlowDown(format!("errcode {c}: {message}")),
        c => Answer::Failed(format!("errcode {c}: {message}")),
    }
}

/// Serialises `make(text cut to a limit)` so the body stays within `max_body`
/// bytes, cutting the text further if escaping made the body too large.
fn fit_body(text: &str, max_body: usize, make: impl Fn(&str) -> Json) -> Vec<u8> {
    let mut limit = max_body.saturating_sub(1024);
    loop {
        let body = make(&crate::render::fit(text, limit)).to_string().into_bytes();
        if body.len() <= max_body || limit < 256 {
            return body;
        }
        limit = limit.saturating_sub(body.len() - max_body + 64);
    }
}

#[cfg(test)]
mod tests;
