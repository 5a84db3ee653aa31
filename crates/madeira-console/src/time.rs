//! Times on pages: a `<time datetime>` element (UTC in its title) whose text the
//! page's script shows as the reader chose in the header: relative (`5 min ago`,
//! the default and what the server renders), in the flow's timezone (the
//! `data-tz` of the closest element that has one: the timezone of the flow's
//! first cron trigger, else UTC), or in UTC.

use maud::{Markup, html};

use crate::i18n::Lang;

/// The timezone a flow's times are shown in: its first cron trigger's, else UTC.
pub fn flow_tz(def: &madeira_core::FlowDef) -> &str {
    def.triggers
        .iter()
        .find_map(|t| match t {
            madeira_core::TriggerDef::Cron(c) => Some(c.timezone.as_str()),
            _ => None,
        })
        .unwrap_or("UTC")
}

/// `ms` (Unix milliseconds) as UTC text.
pub fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "-".into())
}

/// RFC 3339 of `ms`, for `datetime` attributes and CSV.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// How long ago (or until) `ms`, from `now_ms`.
pub fn relative(lang: Lang, ms: i64, now_ms: i64) -> String {
    let delta = now_ms - ms;
    let future = delta < 0;
    let text = span_text(lang, delta.unsigned_abs() / 1000);
    match (lang, future) {
        (Lang::En, false) => format!("{text} ago"),
        (Lang::En, true) => format!("in {text}"),
        (Lang::ZhCn, false) => format!("{text}前"),
        (Lang::ZhCn, true) => format!("{text}后"),
    }
}

/// A length of time in seconds as `3 s`, `5 min`, `2 h 5 min`, `3 d`.
pub fn span_text(lang: Lang, secs: u64) -> String {
    let (s, m, h, d) = match lang {
        Lang::En => (" s", " min", " h", " d"),
        Lang::ZhCn => (" 秒", " 分钟", " 小时", " 天"),
    };
    match secs {
        0..60 => format!("{secs}{s}"),
        60..3600 => format!("{}{m}", secs / 60),
        3600..86_400 => format!("{}{h} {}{m}", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}{d}", secs / 86_400),
    }
}

/// A duration in milliseconds, compact (`850 ms`, `12.4 s`, `3 min`).
pub fn duration_ms(lang: Lang, ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        span_text(lang, (ms / 1000) as u64)
    }
}

/// `<time>` with UTC text and the relative gloss.
pub fn stamp(lang: Lang, ms: Option<i64>, now_ms: i64) -> Markup {
    match ms {
        None => html! { span.muted { "-" } },
        Some(ms) => html! {
            time datetime=(rfc3339(ms)) title=(utc(ms)) { (relative(lang, ms, now_ms)) }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(relative(Lang::En, 0, 5_000), "5 s ago");
        assert_eq!(relative(Lang::En, 3_600_000 + 300_000, 0), "in 1 h 5 min");
        assert_eq!(relative(Lang::ZhCn, 0, 120_000), "2 分钟前");
        assert_eq!(duration_ms(Lang::En, 850), "850 ms");
        assert_eq!(duration_ms(Lang::En, 12_400), "12.4 s");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    }
}
