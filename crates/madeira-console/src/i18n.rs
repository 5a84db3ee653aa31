//! English and Simplified Chinese. Pages are written with their English text;
//! `t` looks the Chinese up in one table. Values from the store (states, alert
//! severities, triggers, audit actions) are translated by `terms`, which keeps
//! the raw value beside the text.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    ZhCn,
}

impl Lang {
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        if s.starts_with("zh") {
            Some(Self::ZhCn)
        } else if s.starts_with("en") {
            Some(Self::En)
        } else {
            None
        }
    }

    /// The first supported language in an `Accept-Language` header (English by default).
    pub fn from_accept(header: Option<&str>) -> Self {
        let Some(header) = header else { return Self::En };
        let mut ranked: Vec<(f32, &str)> = header
            .split(',')
            .map(|part| {
                let mut it = part.split(';');
                let tag = it.next().unwrap_or("").trim();
                let q = it
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .and_then(|q| q.parse::<f32>().ok())
                    .unwrap_or(1.0);
                (q, tag)
            })
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranked.into_iter().find_map(|(_, tag)| Self::parse(tag)).unwrap_or(Self::En)
    }

    pub fn code(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::ZhCn => "zh-CN",
        }
    }
}

/// `text` in `lang` (the English text when no translation is known).
pub fn t(lang: Lang, text: &'static str) -> &'static str {
    match lang {
        Lang::En => text,
        Lang::ZhCn => ZH.iter().find(|(en, _)| *en == text).map_or(text, |(_, zh)| zh),
    }
}

/// A state's gloss in `lang`.
pub fn state_gloss(lang: Lang, state: &str) -> &'static str {
    let en = match state {
        "INIT" => "waiting",
        "QUEUED" => "queued",
        "ADMITTED" => "admitted to start",
        "RUNNING" => "running",
        "SUCCESS" => "succeeded",
        "FAILED" => "failed",
        "RETRYING" => "retrying",
        "SKIPPED" => "skipped",
        "MANUAL_CONFIRM" => "needs confirmation",
        "CANCELLED" => "cancelled",
        _ => "unknown",
    };
    t(lang, en)
}

const ZH: &[(&str, &str)] = &[
    ("Backfills", "补数"),
    ("Backfill", "补数"),
    ("No backfills yet: start one from a flow's page.", "还没有补数：在流程页面发起。"),
    ("Dates", "日期"),
    ("Progress", "进度"),
    ("with dependents", "含下游"),
    ("Cancel backfill", "取消补数"),
    ("waits for the resume of paused flow", "等待已暂停的流程恢复："),
    ("To", "结束日期"),
    ("Parallel runs", "并行运行数"),
    ("Start backfill", "开始补数"),
    ("success", "成功"),
    ("blocked", "受阻"),
    ("done", "已完成"),
    ("Overview", "概览"),
    ("Approvals", "待确认"),
    ("Flows", "流程"),
    ("Runs", "运行"),
    ("Audit", "审计"),
    ("Alerts", "告警"),
    ("Sidecars", "边车"),
    ("Sign in", "登录"),
    ("Sign out", "退出"),
    ("Token", "令牌"),
    ("Unknown token.", "未知令牌。"),
    ("The form expired: try again.", "表单已过期，请重试。"),
    (
        "Paste a bearer token from auth.tokens. It is checked once and never stored in the browser; you get a session cookie.",
        "粘贴 auth.tokens 中的 Bearer 令牌。令牌只校验一次，不会保存在浏览器中；登录后获得会话 Cookie。",
    ),
    (
        "Missing or wrong CSRF token: reload the page and try again.",
        "CSRF 令牌缺失或错误：请刷新页面后重试。",
    ),
    ("Your token", "您的令牌"),
    ("this needs", "此操作需要"),
    ("signed in as", "当前用户"),
    ("dev mode: no sign-in", "开发模式：无需登录"),
    ("waiting", "等待中"),
    ("queued", "排队中"),
    ("admitted to start", "已准入，待启动"),
    ("running", "运行中"),
    ("succeeded", "成功"),
    ("failed", "失败"),
    ("retrying", "重试中"),
    ("skipped", "已跳过"),
    ("needs confirmation", "待确认"),
    ("cancelled", "已取消"),
    ("unknown", "未知"),
    ("Runs by state (24 h)", "近 24 小时运行状态"),
    ("Running now", "正在运行"),
    ("Recently failed", "最近失败"),
    ("Waiting for confirmation", "等待人工确认"),
    ("Sidecars online", "在线边车"),
    ("Sidecars lost", "失联边车"),
    ("Open alerts", "未恢复告警"),
    ("Next cron fires", "下次定时触发"),
    ("none", "无"),
    ("Flow", "流程"),
    ("Run", "运行"),
    ("Node", "节点"),
    ("State", "状态"),
    ("Prompt", "提示"),
    ("Waiting for", "已等待"),
    ("Escalates", "升级时间"),
    ("Falls back", "兜底于"),
    ("Reason", "原因"),
    ("Reason (required)", "原因（必填）"),
    ("Confirm", "确认"),
    ("Reject", "驳回"),
    ("Acknowledge", "认领"),
    ("Acknowledged by", "已认领："),
    ("Silence", "静默"),
    ("Silence for", "静默时长"),
    ("Silenced until", "静默至"),
    ("Confirm selected", "批量确认所选"),
    ("Select all", "全选"),
    ("Times", "时间显示"),
    ("Relative", "相对时间"),
    ("Flow timezone", "流程时区"),
    ("Select", "选择"),
    ("runs selected", "个运行已选"),
    ("Cancel selected", "取消所选运行"),
    ("Rerun failed nodes of selected", "重跑所选运行的失败节点"),
    ("no FAILED node to rerun", "没有可重跑的失败节点"),
    ("Nothing waits for confirmation.", "没有等待确认的节点。"),
    ("Rerun", "重跑"),
    ("Rerun with downstream", "重跑（含下游）"),
    ("Mark success", "标记成功"),
    ("Skip", "跳过"),
    ("Cancel run", "取消运行"),
    ("Cancel", "取消"),
    ("Close", "关闭"),
    ("Pause", "暂停"),
    ("Resume", "恢复"),
    ("Run now", "立即运行"),
    ("Parameters (JSON object)", "参数（JSON 对象）"),
    ("paused", "已暂停"),
    ("active", "启用"),
    ("Versions", "版本"),
    ("Recent runs", "最近运行"),
    ("Triggers", "触发器"),
    ("Labels", "标签"),
    ("Routing", "路由"),
    ("Version", "版本"),
    ("Trigger", "触发方式"),
    ("Params", "参数"),
    ("Created", "创建时间"),
    ("Started", "开始"),
    ("Finished", "结束"),
    ("Duration", "耗时"),
    ("Attempts", "尝试次数"),
    ("Attempt", "尝试"),
    ("Timeline", "时间线"),
    ("Nodes", "节点"),
    ("Outputs", "输出"),
    ("Error", "错误"),
    ("Idempotency key", "幂等键"),
    ("Data version", "数据版本"),
    ("stale", "已过期"),
    ("Log", "日志"),
    ("Download", "下载"),
    ("Search the log", "搜索日志"),
    ("No output kept for this attempt yet.", "此尝试暂无输出。"),
    ("This attempt printed nothing.", "此尝试没有任何输出。"),
    ("Audit trail", "审计记录"),
    ("Actions", "操作"),
    ("Actor", "操作者"),
    ("Business date", "业务日期"),
    ("Business dates", "业务日期与截止"),
    ("Calendar", "日历"),
    ("none (every day)", "无（每天）"),
    ("Next business-day ticks", "接下来的工作日触发"),
    ("Deadline", "截止时间"),
    ("due", "截止于"),
    ("on time", "按时"),
    ("at risk", "有延误风险"),
    ("missed", "已错过"),
    ("met", "已按时完成"),
    ("Waiting because", "等待原因"),
    ("Action", "动作"),
    ("Time", "时间"),
    ("Details", "详情"),
    ("Filter", "筛选"),
    ("Search", "搜索"),
    ("From", "起始"),
    ("Until", "截止"),
    ("States", "状态"),
    ("Older", "更早"),
    ("Newest", "最新"),
    ("Export CSV", "导出 CSV"),
    ("No runs match.", "没有匹配的运行。"),
    ("Firing", "告警中"),
    ("Resolved", "已恢复"),
    ("Severity", "级别"),
    ("Summary", "摘要"),
    ("Deliveries", "投递"),
    ("Group", "分组"),
    ("Jobs", "作业"),
    ("Heartbeat", "心跳"),
    ("Connected", "已连接"),
    ("Lost", "失联"),
    ("Nodes waiting for a sidecar", "等待边车的节点"),
    ("Alerting is not running here.", "此控制面未启用告警。"),
    ("The sidecar link is off.", "边车连接未启用。"),
    ("touches", "影响"),
    ("nodes", "个节点"),
    ("Find a node", "查找节点"),
    ("Large flow: showing the selected node and its neighbours.", "大型流程：仅显示所选节点及其相邻层。"),
    ("Show all", "显示全部"),
    ("levels", "层"),
    ("Live", "实时"),
    ("Reconnecting…", "重新连接中…"),
    ("Live updates lost: polling every 5 s.", "实时连接中断：每 5 秒轮询。"),
    ("Done.", "已完成。"),
    ("more", "更多"),
    ("Language", "语言"),
    ("strong", "强依赖"),
    ("weak", "弱依赖"),
    ("conditional", "条件"),
    ("Not found", "未找到"),
    ("Runs in this view are capped; narrow the filter.", "结果已截断，请缩小筛选范围。"),
    ("Sidecar", "边车"),
    ("Child run", "子运行"),
    ("Host", "主机"),
    ("Shards", "分片"),
    ("Reason for the record", "记录原因"),
    ("reason required", "必须填写原因"),
    ("transitions", "次状态变更"),
    ("Ran on", "运行于"),
    ("control plane", "控制面"),
    ("token name, scheduler, message:…", "令牌名、scheduler、message:…"),
    ("all", "全部"),
    ("Name", "名称"),
    ("default", "默认"),
    ("node", "节点"),
    ("run", "运行"),
    ("refused", "被拒绝"),
    ("Failed node", "失败节点"),
    ("RETRYABLE: no retry left", "RETRYABLE：已无重试次数"),
    ("marked by", "标记者"),
    ("skipped by", "跳过者"),
    ("Estate", "全景"),
    ("Estate for business date", "业务日期全景"),
    ("Previous day", "前一天"),
    ("Next day", "后一天"),
    ("Show", "查看"),
    ("the latest business date with runs", "最近有运行的业务日期"),
    ("today (server time): no run has a business date yet", "今天（服务器时区）：尚无带业务日期的运行"),
    ("No flows.", "没有流程。"),
    ("held", "被阻塞"),
    ("no run", "未运行"),
    ("late", "已逾期"),
    ("outside your scope", "不在您的权限范围内"),
    ("waits for", "等待"),
    ("holds", "阻塞了"),
    ("root cause", "根因"),
    ("failed: holds", "失败，阻塞了"),
    ("held behind a failure", "因上游失败而阻塞"),
    ("held behind a failure outside your scope", "被您权限范围外的失败阻塞"),
    ("Nothing is held behind a failure on this date.", "此业务日期没有因上游失败而阻塞的流程。"),
    ("no run for this date", "此日期无运行"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_the_best_supported() {
        assert_eq!(Lang::from_accept(Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::ZhCn);
        assert_eq!(Lang::from_accept(Some("fr-FR, en;q=0.5, zh;q=0.4")), Lang::En);
        assert_eq!(Lang::from_accept(Some("de")), Lang::En);
        assert_eq!(Lang::from_accept(Some("en;q=0.1, zh-TW;q=0.9")), Lang::ZhCn);
        assert_eq!(Lang::from_accept(None), Lang::En);
    }

    #[test]
    fn chinese_is_looked_up_and_english_is_the_fallback() {
        assert_eq!(t(Lang::ZhCn, "Approvals"), "待确认");
        assert_eq!(t(Lang::En, "Approvals"), "Approvals");
        assert_eq!(t(Lang::ZhCn, "no such text"), "no such text");
        assert_eq!(state_gloss(Lang::ZhCn, "SUCCESS"), "成功");
        let mut seen = std::collections::HashSet::new();
        for (en, _) in ZH {
            assert!(seen.insert(en), "duplicate entry {en}");
        }
    }
}
