//! What the pages show, in process over a real SQLite store and engine in dev
//! mode (no sign-in): the zh-CN vocabulary (state badges, triggers, audit
//! actions, filters, the action toast) with the raw values kept in attributes;
//! the icon; the audit CSV's byte order mark; the failed node named on the
//! overview; attempt outcomes; a node marked a success showing who, not a time.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use madeira_engine::{ActionRequest, NodeActionKind};

mod support;
use support::{App, Reply, between, send, trigger};

/// `load` fails both of its attempts (the second with no retry left); `report`
/// is skipped because of it.
const FLOW: &str = "flow: nightly\nnodes:\n  prep: {run: {builtin: noop}}\n  load:\n    needs: [prep]\n    run: {builtin: fail, message: disk full}\n    retry: {attempts: 2, backoff: 10ms, jitter: 0s}\n  report: {needs: [load], run: {builtin: noop}}\n";

async fn app() -> App {
    support::app("nightly.yaml", FLOW, None).await
}

/// A GET in `lang` (an `Accept-Language` value).
async fn get(app: &App, uri: &str, lang: &str) -> Reply {
    let request = Request::builder()
        .uri(uri)
        .header(header::ACCEPT_LANGUAGE, lang)
        .body(Body::empty())
        .expect("request");
    let reply = send(app, request).await;
    assert_eq!(reply.status, StatusCode::OK, "GET {uri}: {}", reply.body);
    reply
}

/// An htmx POST in `lang` with the page's CSRF token.
async fn post(app: &App, uri: &str, lang: &str, form: &str) -> Reply {
    let csrf = between(&get(app, "/", lang).await.body, "&quot;X-CSRF-Token&quot;:&quot;", "&quot;");
    let request = Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT_LANGUAGE, lang)
        .header("HX-Request", "true")
        .body(Body::from(format!("{form}&csrf={csrf}")))
        .expect("request");
    send(app, request).await
}

/// Starts a run of `nightly` and waits until the run reaches `state`.
async fn run_until(app: &App, state: &str) -> String {
    let mut events = app.engine.subscribe();
    let run = trigger(app, "nightly").await;
    wait_run(&mut events, &run, state).await;
    run
}

async fn wait_run(
    events: &mut tokio::sync::broadcast::Receiver<Arc<madeira_engine::RunEvent>>,
    run: &str,
    state: &str,
) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = events.recv().await.expect("event");
            if e.run_id == run && e.node.is_none() && e.to == state {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("run {run} never reached {state}"));
}

/// Marks `load` of the failed `run` a success as `otto`; waits for the run's end.
async fn mark_load_success(app: &App, run: &str) {
    let mut events = app.engine.subscribe();
    app.engine
        .act(ActionRequest {
            run_id: run.into(),
            node: Some("load".into()),
            kind: Some(NodeActionKind::MarkSuccess),
            actor: "otto".into(),
            reason: Some("loaded by hand".into()),
        })
        .await
        .expect("mark-success");
    wait_run(&mut events, run, "SUCCESS").await;
}

const ZH: &str = "zh-CN,zh;q=0.9";

#[tokio::test]
async fn zh_cn_pages_translate_states_triggers_actions_and_filters() {
    let app = app().await;
    let failed = run_until(&app, "FAILED").await;
    // State badges: the text in Chinese, the SPEC name in data-state and title.
    let overview = get(&app, "/", ZH).await.body;
    assert!(
        overview.contains(
            r#"data-state="FAILED" title="FAILED"><span class="icon" aria-hidden="true">✗</span> 失败</span>"#
        ),
        "{overview}"
    );
    assert!(!overview.contains("✗</span> FAILED"), "no English badge text");
    assert!(
        overview.contains(r#"data-state-labels="{"#)
            && overview.contains("&quot;SUCCESS&quot;:&quot;成功&quot;")
    );
    // English keeps the SPEC names as the badge text, glossed in the title.
    let en = get(&app, "/", "en").await.body;
    assert!(en.contains(r#"data-state="FAILED" title="failed"><span class="icon" aria-hidden="true">✗</span> FAILED</span>"#), "{en}");
    // The runs search: state checkboxes and the trigger column.
    let runs = get(&app, "/runs?flow=nightly", ZH).await.body;
    assert!(runs.contains(r#"<span title="SUCCESS">成功</span>"#), "state filter");
    assert!(runs.contains(r#"<span class="term" data-value="manual" title="manual">手动</span>"#), "trigger");
    assert!(!runs.contains("<td>manual</td>"));
    // The run page: badge, trigger and the transitions list.
    let page = get(&app, &format!("/runs/{failed}"), ZH).await.body;
    assert!(page.contains("✗</span> 失败</span> <span class=\"muted\">FAILED</span>"), "run state");
    assert!(page.contains("运行中 → 失败"), "transitions in Chinese");
    // The alerts filter.
    let alerts = get(&app, "/alerts", ZH).await.body;
    assert!(alerts.contains(r#"<a href="/alerts">全部</a>"#) && !alerts.contains(">all<"), "{alerts}");
    // The toast of an action, then the audit trail naming it.
    let toast = post(&app, &format!("/runs/{failed}/nodes/load/mark-success"), ZH, "reason=ok").await;
    assert_eq!(toast.status, StatusCode::OK, "{}", toast.body);
    assert!(
        toast.body.contains(&format!("标记成功 · 节点 load · 运行 {failed}：已完成。")),
        "{}",
        toast.body
    );
    assert!(!toast.body.contains("mark_success"), "{}", toast.body);
    let audit = get(&app, "/audit", ZH).await.body;
    assert!(
        audit
            .contains(r#"<span class="term" data-value="mark_success" title="mark_success">标记成功</span>"#),
        "{audit}"
    );
    let en_audit = get(&app, "/audit", "en").await.body;
    assert!(
        en_audit.contains(r#"<td data-label="Action">mark_success</td>"#),
        "English shows the action name"
    );
}

#[tokio::test]
async fn the_icon_is_linked_and_favicon_ico_answers_it() {
    let app = app().await;
    let page = get(&app, "/", "en").await.body;
    let href = between(&page, r#"<link rel="icon" type="image/svg+xml" href=""#, "\"");
    assert!(href.starts_with("/assets/favicon.") && href.ends_with(".svg"), "{href}");
    let linked = get(&app, &href, "en").await;
    assert_eq!(linked.headers[header::CONTENT_TYPE], "image/svg+xml");
    let ico = get(&app, "/favicon.ico", "en").await;
    assert_eq!(ico.headers[header::CONTENT_TYPE], "image/svg+xml");
    assert!(ico.body.starts_with("<svg") && ico.bytes == linked.bytes, "the same icon");
}

#[tokio::test]
async fn the_audit_csv_starts_with_a_utf8_byte_order_mark() {
    let app = app().await;
    let failed = run_until(&app, "FAILED").await;
    let done = post(&app, &format!("/runs/{failed}/nodes/load/mark-success"), ZH, "reason=手工导入").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let csv = get(&app, "/audit.csv", "en").await;
    assert_eq!(csv.headers[header::CONTENT_TYPE], "text/csv; charset=utf-8");
    assert_eq!(&csv.bytes[..3], b"\xEF\xBB\xBF", "BOM first");
    let text = std::str::from_utf8(&csv.bytes[3..]).expect("utf-8");
    assert!(text.starts_with("at,actor,action,"), "{text}");
    assert!(text.contains("\"mark_success\"") && text.contains("\"手工导入\""), "{text}");
}

#[tokio::test]
async fn recently_failed_names_the_node_that_failed_the_run_and_its_error() {
    let app = app().await;
    let failed = run_until(&app, "FAILED").await;
    let overview = get(&app, "/", "en").await.body;
    let section = between(&overview, "Recently failed", "</section>");
    assert!(section.contains("<th>Failed node</th>"), "{section}");
    assert!(
        section.contains(&format!(r#"<a href="/runs/{failed}?node=load"><code>load</code></a>"#)),
        "names the failed node, not the skipped one: {section}"
    );
    assert!(!section.contains("<code>report</code>"), "report was only skipped: {section}");
    assert!(section.contains("<td class=\"error\"><div>disk full</div></td>"), "{section}");
    let zh = get(&app, "/", ZH).await.body;
    assert!(between(&zh, "最近失败", "</section>").contains("<th>失败节点</th>"));
}

#[tokio::test]
async fn a_failed_nodes_last_attempt_reads_failed_not_retryable() {
    let app = app().await;
    let failed = run_until(&app, "FAILED").await;
    let panel = get(&app, &format!("/runs/{failed}/nodes/load"), "en").await.body;
    let attempts = between(&panel, "<table class=\"attempts\">", "</table>");
    let outcomes: Vec<String> = attempts
        .split("data-outcome=\"")
        .skip(1)
        .map(|s| s[..s.find('"').expect("quote")].to_string())
        .collect();
    assert_eq!(
        outcomes,
        ["RETRYABLE", "FAILED"],
        "the first was retried, the second ended the node: {attempts}"
    );
    assert!(
        attempts.contains(r#"data-outcome="FAILED" title="RETRYABLE: no retry left">FAILED</td>"#),
        "{attempts}"
    );
    let zh = get(&app, &format!("/runs/{failed}/nodes/load"), ZH).await.body;
    let attempts = between(&zh, "<table class=\"attempts\">", "</table>");
    assert!(attempts.contains(r#"title="FAILED">失败</span>"#), "{attempts}");
    assert!(attempts.contains(r#"title="RETRYABLE">失败（可重试）</span>"#), "{attempts}");
}

#[tokio::test]
async fn a_node_marked_a_success_names_who_instead_of_a_duration() {
    let app = app().await;
    let run = run_until(&app, "FAILED").await;
    mark_load_success(&app, &run).await;
    let page = get(&app, &format!("/runs/{run}"), "en").await.body;
    let row = |node: &str| between(&page, &format!("<tr id=\"r-{node}\""), "</tr>");
    let load = row("load");
    assert!(load.contains("data-state=\"SUCCESS\""), "{load}");
    assert!(
        load.contains(
            r#"<td class="by-hand" data-action="mark_success" title="mark_success">marked by otto</td>"#
        ),
        "{load}"
    );
    assert!(!load.contains(" ms</td>") && !load.contains(" s</td>"), "no duration: {load}");
    let prep = row("prep");
    assert!(!prep.contains("by-hand") && prep.contains(" ms</td>"), "prep ran to completion: {prep}");
    let zh = get(&app, &format!("/runs/{run}"), ZH).await.body;
    let load = between(&zh, "<tr id=\"r-load\"", "</tr>");
    assert!(load.contains(r#"title="标记成功">标记者 otto</td>"#), "{load}");
}

#[tokio::test]
async fn the_overview_counts_the_last_days_runs_by_state() {
    let app = app().await;
    run_until(&app, "FAILED").await;
    run_until(&app, "FAILED").await;
    let page = get(&app, "/", "en").await.body;
    let failed = between(&page, "/runs?state=FAILED&amp;since=", "</a>");
    assert!(failed.contains(r#"<span class="num">2</span>"#), "two failed runs counted: {failed}");
    let cancelled = between(&page, "/runs?state=CANCELLED&amp;since=", "</a>");
    assert!(cancelled.contains(r#"<span class="num">0</span>"#), "none cancelled: {cancelled}");
}
