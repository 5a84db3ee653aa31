//! What a message says, independent of the channel: a title and lines (the root
//! cause, its error and attempts, the skipped nodes, the run link, the commands to
//! act, the runs of other flows held behind it), rendered as markdown or plain text, cut to a byte limit with a note (at a
//! character boundary: Chinese text is fine), and @mentions sorted by kind.

use std::sync::Arc;

use crate::model::{Alert, AlertStatus};

/// What a delivery carries.
#[derive(Debug, Clone)]
pub enum Content {
    Firing(Arc<Alert>),
    /// A firing alert that grew since its last message (new count, newest run).
    Update(Arc<Alert>),
    /// A critical alert still unresolved `repeat_interval` after its last message.
    Reminder(Arc<Alert>),
    Resolved(Arc<Alert>),
    /// Several alerts merged into one post (rate limit overflow; Alertmanager batches).
    Digest(Vec<Arc<Alert>>),
    Test {
        channel: String,
    },
}

/// Who to @mention: user ids, mobile numbers, everyone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mentions {
    pub users: Vec<String>,
    pub mobiles: Vec<String>,
    pub all: bool,
}

impl Mentions {
    /// `@all`/`all` mentions everyone; digits (optionally with `+`) are mobiles;
    /// anything else is a user id.
    pub fn parse(entries: &[String]) -> Self {
        let mut m = Mentions::default();
        for e in entries {
            let e = e.trim();
            if e.eq_ignore_ascii_case("@all") || e.eq_ignore_ascii_case("all") {
                m.all = true;
            } else if !e.is_empty() && e.trim_start_matches('+').chars().all(|c| c.is_ascii_digit()) {
                push_unique(&mut m.mobiles, e);
            } else if !e.is_empty() {
                push_unique(&mut m.users, e.trim_start_matches('@'));
            }
        }
        m
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.mobiles.is_empty() && !self.all
    }
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    if !list.iter().any(|v| v == value) {
        list.push(value.to_string());
    }
}

enum Line {
    Field(&'static str, String),
    Text(String),
    Code(String),
    Link(String, String),
}

/// A rendered message before it is shaped for a channel.
pub struct Message {
    pub title: String,
    lines: Vec<Line>,
}

impl Message {
    pub fn markdown(&self) -> String {
        let mut out = format!("## {}\n", self.title);
        for line in &self.lines {
            match line {
                Line::Field(label, value) => out.push_str(&format!("**{label}:** {value}\n")),
                Line::Text(text) => out.push_str(&format!("{text}\n")),
                Line::Code(code) => out.push_str(&format!("`{code}`\n")),
                Line::Link(text, url) => out.push_str(&format!("[{text}]({url})\n")),
            }
        }
        out
    }

    pub fn plain(&self) -> String {
        let mut out = format!("{}\n", self.title);
        for line in &self.lines {
            match line {
                Line::Field(label, value) => out.push_str(&format!("{label}: {value}\n")),
                Line::Text(text) | Line::Code(text) => out.push_str(&format!("{text}\n")),
                Line::Link(text, url) => out.push_str(&format!("{text}: {url}\n")),
            }
        }
        out
    }
}

/// Most names listed inline before "+N more".
const LIST_MAX: usize = 20;

fn list(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(LIST_MAX).map(String::as_str).collect();
    let mut text = shown.join(", ");
    if names.len() > LIST_MAX {
        text.push_str(&format!(" (+{} more)", names.len() - LIST_MAX));
    }
    text
}

/// The console's run page (`external_url` + `/runs/<id>`, SPEC §9.1).
pub fn run_link(base: Option<&str>, run_id: &str) -> Option<String> {
    base.map(|b| format!("{b}/runs/{run_id}"))
}

pub fn render(content: &Content, base: Option<&str>) -> Message {
    match content {
        Content::Firing(alert) => {
            let mut message = firing(alert, base);
            if let Some(moved) = &alert.moved {
                message.lines.insert(0, Line::Field("Moved", moved.clone()));
            }
            message
        }
        Content::Update(alert) => again(alert, base, "update"),
        Content::Reminder(alert) => again(alert, base, "reminder"),
        Content::Resolved(alert) => resolved(alert),
        Content::Digest(alerts) => digest(alerts, base),
        Content::Test { channel } => Message {
            title: "[test] Madeira alert channel test / 告警通道测试".into(),
            lines: vec![Line::Text(format!(
                "Channel `{channel}` reaches this receiver. 通道 {channel} 配置正确。"
            ))],
        },
    }
}

fn title(alert: &Alert, tag: &str) -> String {
    match &alert.flow {
        Some(flow) => format!("[{tag}] {} · flow {flow}", alert.alertname),
        None => format!("[{tag}] {}", alert.alertname),
    }
}

pub(crate) fn firing(alert: &Alert, base: Option<&str>) -> Message {
    let mut lines = Vec::new();
    if alert.causes.is_empty() {
        lines.push(Line::Text(alert.summary.clone()));
        if let Some(d) = &alert.description {
            lines.push(Line::Text(d.clone()));
        }
    }
    for cause in &alert.causes {
        let plural = if cause.attempts == 1 { "" } else { "s" };
        lines.push(Line::Field(
            "Root cause",
            format!("node `{}` failed after {} attempt{plural}", cause.node, cause.attempts),
        ));
        lines.push(Line::Field("Error", cause.error.clone().unwrap_or_else(|| "(no message)".into())));
        if !cause.skipped.is_empty() {
            lines.push(Line::Field(
                "Skipped because of it",
                format!("{} ({})", list(&cause.skipped), cause.skipped.len()),
            ));
        }
    }
    if alert.count > 1 {
        lines.push(Line::Field("Grouped", format!("{} runs failed the same way", alert.count)));
    }
    if !alert.holds.is_empty() {
        lines.push(Line::Text(format!("holds: {}", holds(alert))));
    }
    if let Some(run) = alert.latest_run() {
        match run_link(base, run) {
            Some(url) => lines.push(Line::Link(format!("Run {run}"), url)),
            None => lines.push(Line::Field("Run", run.to_string())),
        }
        for cause in &alert.causes {
            lines.push(Line::Code(format!("madeira rerun {run} {} --reason \"…\"", cause.node)));
            lines.push(Line::Code(format!("madeira mark-success {run} {} --reason \"…\"", cause.node)));
        }
        if alert.runs.len() > 1
            && let Some(flow) = &alert.flow
        {
            lines.push(Line::Code(format!("madeira runs --flow {flow} --status FAILED")));
        }
        if alert.alertname == "MadeiraConfirmOverdue"
            && let Some(node) = &alert.node
        {
            lines.push(Line::Code(format!("madeira confirm {run} {node} --reason \"…\"")));
        }
    }
    Message { title: title(alert, alert.severity.as_str()), lines }
}

/// An update or a reminder: the firing message, tagged, opening with what changed.
fn again(alert: &Alert, base: Option<&str>, what: &str) -> Message {
    let mut message = firing(alert, base);
    message.title = title(alert, &format!("{} · {what}", alert.severity.as_str()));
    let noun = if alert.causes.is_empty() { "event" } else { "failed run" };
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let since = crate::view::rfc3339(alert.created_at);
    let line = if let (true, Some(moved)) = (what == "update", &alert.moved) {
        moved.clone()
    } else if what == "update" && alert.added == 0 && alert.holds_added > 0 {
        let n = alert.holds.len() as u64;
        format!(
            "{n} run{} of other flows held behind it now, {} change{} since the last message (firing since {since})",
            plural(n),
            alert.holds_added,
            plural(alert.holds_added)
        )
    } else if what == "update" {
        format!(
            "{} {noun}{} now, {} new since the last message (firing since {since})",
            alert.count,
            plural(alert.count),
            alert.added
        )
    } else {
        format!("still unresolved: {} {noun}{}, firing since {since}", alert.count, plural(alert.count))
    };
    let label = if what == "update" { "Update" } else { "Reminder" };
    message.lines.insert(0, Line::Field(label, line));
    message
}

/// `warehouse-clean 2026-12-04, finance-settle 2026-12-04 (deadline missed)`.
fn holds(alert: &Alert) -> String {
    list(&alert.holds.iter().map(crate::model::Hold::label).collect::<Vec<_>>())
}

fn resolved(alert: &Alert) -> Message {
    let mut lines = vec![Line::Text(alert.summary.clone())];
    if !alert.holds.is_empty() {
        lines.push(Line::Text(format!("released (they start once their waits are met): {}", holds(alert))));
    }
    if let Some(resolution) = &alert.resolution {
        lines.push(Line::Field("Fallback", resolution.clone()));
        return Message { title: title(alert, "fallback ran"), lines };
    }
    if let Some(moved) = &alert.moved {
        lines.push(Line::Field("Resolved", moved.clone()));
        return Message { title: title(alert, "resolved"), lines };
    }
    if let Some(run) = &alert.recovered_by {
        lines.push(Line::Field("Resolved", format!("a later run of the flow succeeded ({run})")));
        return Message { title: title(alert, "resolved"), lines };
    }
    if alert.fixed > 0 {
        lines.push(Line::Field(
            "Resolved",
            format!("{} failed run(s) succeeded again (rerun or mark-success)", alert.fixed),
        ));
    } else {
        lines.push(Line::Field("Resolved", "the condition cleared".into()));
    }
    Message { title: title(alert, "resolved"), lines }
}

fn digest(alerts: &[Arc<Alert>], base: Option<&str>) -> Message {
    let mut lines = Vec::new();
    for alert in alerts {
        let tag = if alert.status == AlertStatus::Resolved { "resolved" } else { alert.severity.as_str() };
        let mut line = format!("- [{tag}] {}", alert.summary);
        if let Some(error) = alert.causes.first().and_then(|c| c.error.as_deref()) {
            line.push_str(&format!(" — {}", error.lines().next().unwrap_or("")));
        }
        if alert.count > 1 {
            line.push_str(&format!(" ({} runs)", alert.count));
        }
        if !alert.holds.is_empty() {
            line.push_str(&format!(" · holds {}", alert.holds.len()));
        }
        if let Some(run) = alert.latest_run() {
            line.push_str(&format!(" · run {}", run_link(base, run).unwrap_or_else(|| run.to_string())));
        }
        lines.push(Line::Text(line));
    }
    Message { title: format!("[digest] {} alerts merged (channel rate limit reached)", alerts.len()), lines }
}

/// `text` cut to at most `max` bytes at a character boundary, ending with a note
/// saying how much was cut.
pub fn fit(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let note = |cut: usize| format!("\n…(truncated {cut} bytes; `madeira alerts` has the full alert)");
    let mut keep = max.saturating_sub(note(text.len()).len());
    while keep > 0 && !text.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{}", &text[..keep], note(text.len() - keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_cuts_at_a_char_boundary_with_a_note() {
        let text = "告警".repeat(1000);
        let cut = fit(&text, 500);
        assert!(cut.len() <= 500, "{}", cut.len());
        assert!(cut.contains("truncated"));
        assert!(cut.starts_with("告警告警"));
        assert_eq!(fit("short", 500), "short");
    }

    #[test]
    fn mentions_sort_mobiles_users_and_all() {
        let m =
            Mentions::parse(&["13800000000".into(), "@zhangsan".into(), "@all".into(), "zhangsan".into()]);
        assert_eq!(m.mobiles, ["13800000000"]);
        assert_eq!(m.users, ["zhangsan"]);
        assert!(m.all);
    }
}
