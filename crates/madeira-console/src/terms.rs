//! The console's data vocabulary in the reader's language: node and run states,
//! attempt outcomes, alert statuses and severities, delivery statuses, run
//! triggers and audit actions. These values come from the store as fixed English words; a page
//! shows the translation and keeps the raw value in `data-value` and `title`
//! (scripts, tests and a reader searching the docs find it there). An unknown
//! value, or any value in English, is shown as it is.

use maud::{Markup, html};

use crate::i18n::{Lang, state_gloss};

/// Which vocabulary a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Outcome,
    AlertStatus,
    Severity,
    Delivery,
    Trigger,
    Action,
}

const OUTCOME: &[(&str, &str)] = &[
    ("SUCCESS", "成功"),
    ("FAILED", "失败"),
    ("RUNNING", "运行中"),
    ("RETRYABLE", "失败（可重试）"),
    ("ABORTED", "已中止"),
];

const ALERT_STATUS: &[(&str, &str)] = &[("pending", "待发送"), ("firing", "告警中"), ("resolved", "已恢复")];

const SEVERITY: &[(&str, &str)] = &[("critical", "严重"), ("warning", "警告"), ("info", "提示")];

const DELIVERY: &[(&str, &str)] = &[("pending", "待投递"), ("sent", "已送达"), ("failed", "投递失败")];

const TRIGGER: &[(&str, &str)] = &[
    ("manual", "手动"),
    ("cron", "定时"),
    ("cron_catchup", "定时补跑"),
    ("event", "事件"),
    ("message", "消息"),
    ("exec", "外部执行"),
    ("api", "API"),
    ("bench", "压测"),
    ("after", "上游完成"),
    ("backfill", "补数"),
];

const ACTION: &[(&str, &str)] = &[
    ("confirm", "确认"),
    ("reject", "驳回"),
    ("rerun", "重跑"),
    ("rerun_downstream", "重跑（含下游）"),
    ("rerun-failed", "重跑失败节点"),
    ("mark_success", "标记成功"),
    ("skip", "跳过"),
    ("cancel", "取消运行"),
    ("pause", "暂停"),
    ("alert_acknowledge", "认领告警"),
    ("alert_silence", "静默告警"),
    ("resume", "恢复"),
    ("adopt", "接管"),
    ("confirm_overdue", "确认超时"),
    ("event_dropped", "事件丢弃"),
    ("delete_flow", "删除流程"),
    ("promote", "转为托管"),
    ("demote", "转为仅观察"),
    ("routing_fallback", "路由兜底"),
    ("cron_run_not_created", "定时运行未创建"),
    ("cron_tick_skipped", "非工作日，定时未触发"),
    ("missed_run", "错过运行"),
    ("backfill", "发起补数"),
    ("backfill_pause", "暂停补数"),
    ("backfill_resume", "恢复补数"),
    ("backfill_cancel", "取消补数"),
    ("after_policy_fail", "上游等待超时：失败"),
    ("after_policy_skip", "上游等待超时：跳过"),
    ("after_policy_run", "上游等待超时：照常运行"),
];

fn table(kind: Term) -> &'static [(&'static str, &'static str)] {
    match kind {
        Term::Outcome => OUTCOME,
        Term::AlertStatus => ALERT_STATUS,
        Term::Severity => SEVERITY,
        Term::Delivery => DELIVERY,
        Term::Trigger => TRIGGER,
        Term::Action => ACTION,
    }
}

/// `raw` in `lang`: its translation when one is known, else `raw`.
pub fn term(lang: Lang, kind: Term, raw: &str) -> &str {
    match lang {
        Lang::En => raw,
        Lang::ZhCn => table(kind).iter().find(|(en, _)| *en == raw).map_or(raw, |(_, zh)| zh),
    }
}

/// `raw` as text in `lang`; translated, it carries the raw value in `data-value`
/// and `title`.
pub fn term_markup(lang: Lang, kind: Term, raw: &str) -> Markup {
    let shown = term(lang, kind, raw);
    html! {
        @if shown == raw { (raw) } @else { span.term data-value=(raw) title=(raw) { (shown) } }
    }
}

/// A state's badge text in `lang`: the SPEC name in English, the gloss in
/// Chinese (the name when the state is unknown).
pub fn state_label(lang: Lang, state: &str) -> &str {
    match lang {
        Lang::En => state,
        Lang::ZhCn => match state_gloss(lang, state) {
            "未知" => state,
            gloss => gloss,
        },
    }
}

/// Every state's badge text in `lang` as a JSON object, for the page scripts
/// that draw badges on live updates (`body[data-state-labels]`).
pub fn state_labels_json(lang: Lang) -> String {
    let map: serde_json::Map<String, serde_json::Value> = [
        "INIT",
        "QUEUED",
        "RUNNING",
        "SUCCESS",
        "FAILED",
        "RETRYING",
        "SKIPPED",
        "MANUAL_CONFIRM",
        "CANCELLED",
    ]
    .iter()
    .map(|s| (s.to_string(), serde_json::Value::from(state_label(lang, s))))
    .collect();
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_translates_known_values_and_keeps_the_rest() {
        assert_eq!(term(Lang::ZhCn, Term::Severity, "critical"), "严重");
        assert_eq!(term(Lang::ZhCn, Term::AlertStatus, "firing"), "告警中");
        assert_eq!(term(Lang::ZhCn, Term::Action, "mark_success"), "标记成功");
        assert_eq!(term(Lang::ZhCn, Term::Trigger, "cron"), "定时");
        assert_eq!(term(Lang::ZhCn, Term::Action, "brand_new_action"), "brand_new_action");
        assert_eq!(term(Lang::En, Term::Severity, "critical"), "critical");
        assert_eq!(state_label(Lang::ZhCn, "FAILED"), "失败");
        assert_eq!(state_label(Lang::ZhCn, "WEIRD"), "WEIRD");
        assert_eq!(state_label(Lang::En, "FAILED"), "FAILED");
        let zh = term_markup(Lang::ZhCn, Term::Action, "confirm").into_string();
        assert_eq!(zh, r#"<span class="term" data-value="confirm" title="confirm">确认</span>"#);
        assert_eq!(term_markup(Lang::En, Term::Action, "confirm").into_string(), "confirm");
        let json: serde_json::Value = serde_json::from_str(&state_labels_json(Lang::ZhCn)).expect("json");
        assert_eq!(json["SUCCESS"], "成功");
        assert_eq!(json["MANUAL_CONFIRM"], "待确认");
    }

    #[test]
    fn no_value_is_listed_twice() {
        for kind in
            [Term::Outcome, Term::AlertStatus, Term::Severity, Term::Delivery, Term::Trigger, Term::Action]
        {
            let mut seen = std::collections::HashSet::new();
            for (en, _) in table(kind) {
                assert!(seen.insert(en), "{kind:?}: duplicate {en}");
            }
        }
    }
}
