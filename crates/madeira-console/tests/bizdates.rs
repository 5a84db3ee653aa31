//! The flow page's business dates (issue #35), in process over a real SQLite
//! store and engine: the flow's calendar, its next five business-day ticks (no
//! weekend on `weekdays`), and the deadline state of the latest business date's
//! run — missed (succeeded after its deadline), met, on time — in English and
//! zh-CN.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use madeira_engine::TriggerRequest;

mod support;
use support::{App, between, send};

const FLOW: &str = "flow: settle\ntimezone: Asia/Shanghai\ntriggers:\n  - {cron: \"5 1 * * *\", timezone: Asia/Shanghai, calendar: weekdays}\ndeadline: {by: \"06:00\", days: 1}\nnodes:\n  a: {run: {builtin: noop}}\n  sign: {needs: [a], when: 'biz_date == \"2099-02-02\"', manual: {prompt: sign}}\n";

async fn page(app: &App, lang: &str) -> String {
    let request = Request::builder()
        .uri("/flows/settle")
        .header(header::ACCEPT_LANGUAGE, lang)
        .body(Body::empty())
        .expect("request");
    let reply = send(app, request).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.body
}

/// A run of `settle` for `date`, waited until its state is `state`.
async fn run_for(app: &App, date: &str, state: &str) {
    let mut events = app.engine.subscribe();
    let run_id = app
        .engine
        .trigger(TriggerRequest {
            flow: "settle".into(),
            params: serde_json::json!({}),
            idempotency_key: None,
            trigger: "manual".into(),
            actor: "test".into(),
            version: None,
            biz_date: Some(chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").expect("date")),
            at_ms: None,
        })
        .await
        .expect("trigger")
        .run_id;
    let reached = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let event = events.recv().await.expect("events");
            let node_waits = state == "MANUAL_CONFIRM" && event.node.is_some();
            if event.run_id == run_id && event.to == state && (event.node.is_none() || node_waits) {
                break;
            }
        }
    })
    .await;
    assert!(reached.is_ok(), "run for {date} did not reach {state}");
}

fn deadline_state(body: &str) -> String {
    between(body, "id=\"deadline-state\" data-state=\"", "\"")
}

#[tokio::test]
async fn the_flow_page_shows_its_calendar_next_business_day_ticks_and_the_deadline_state() {
    let app = support::app("settle.yaml", FLOW, None).await;
    let body = page(&app, "en").await;
    assert!(between(&body, "id=\"flow-calendars\"", "</div>").contains("weekdays"), "{body}");
    let ticks = between(&body, "<ol id=\"next-ticks\">", "</ol>");
    assert_eq!(ticks.matches("<li>").count(), 5, "{ticks}");
    assert!(!ticks.contains("Sat") && !ticks.contains("Sun"), "a weekend tick on weekdays: {ticks}");
    assert!(ticks.contains("01:05 CST"), "local times in the flow's timezone: {ticks}");

    // Succeeded long after the deadline of 2000-01-03 (06:00 on the 4th): missed.
    run_for(&app, "2000-01-03", "SUCCESS").await;
    let body = page(&app, "en").await;
    assert_eq!(deadline_state(&body), "missed", "{body}");
    assert!(body.contains("2000-01-03"), "the date is named");
    let zh = page(&app, "zh-CN").await;
    assert!(zh.contains("接下来的工作日触发") && zh.contains("已错过"), "{zh}");

    // The latest date decides: a run for 2099 done before its deadline is met.
    run_for(&app, "2099-01-05", "SUCCESS").await;
    assert_eq!(deadline_state(&page(&app, "en").await), "met");
    // Held at its manual node, due in the future, nothing left that takes long: on time.
    run_for(&app, "2099-02-02", "MANUAL_CONFIRM").await;
    let body = page(&app, "en").await;
    assert_eq!(deadline_state(&body), "on time", "{body}");
    assert!(between(&body, "id=\"deadline-state\"", "</div>").contains("2099-02-02"));
}
