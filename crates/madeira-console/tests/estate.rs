//! The estate page over a real engine and SQLite store: three flows A → B → C for
//! one business date; A fails, B and C are held. The page (en and zh-CN) draws
//! every flow across and again top to bottom (the phone's copy) with its state,
//! names A's failed node as the root holding B and C, says whom each held flow
//! waits for, links each flow's run for the date, and leaves out (and does not
//! name) a flow the signed-in token's scope does not cover.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use madeira_engine::TriggerRequest;
use madeira_server::{Role, TokenEntry};

mod support;
use support::{App, Reply, send};

const A: &str =
    "flow: est-pull\nlabels: {team: pay}\nnodes:\n  pull: {run: {builtin: fail, message: upstream down}}\n";
const B: &str = "flow: est-clean\nlabels: {team: dw}\nafter:\n  - {flow: est-pull}\nnodes:\n  clean: {run: {builtin: noop}}\n";
const C: &str = "flow: est-settle\nlabels: {team: dw}\nafter:\n  - {flow: est-clean}\nnodes:\n  settle: {run: {builtin: noop}}\n";
const DAY: &str = "2026-12-04";

async fn start(app: &App, flow: &str) -> String {
    let request = TriggerRequest {
        flow: flow.into(),
        params: serde_json::json!({}),
        idempotency_key: None,
        trigger: "manual".into(),
        actor: "test".into(),
        version: None,
        biz_date: Some(DAY.parse().expect("date")),
        at_ms: None,
    };
    app.engine.trigger(request).await.expect("trigger").run_id
}

/// Polls the store until run `id` satisfies `ok` (10 s at most).
async fn wait_run(app: &App, id: &str, what: &str, ok: impl Fn(&madeira_store::RunRow) -> bool) {
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let stored = app.store.load_run(id).await.expect("load").expect("run");
            if ok(&stored.run) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "run {id} never became {what}");
}

/// A, B, C started for DAY; A FAILED, B and C held.
async fn estate(tokens: Option<Vec<TokenEntry>>) -> (App, [String; 3]) {
    let app = support::app("est-pull.yaml", A, tokens).await;
    app.engine.apply_flow("est-clean.yaml", B).await.expect("B");
    app.engine.apply_flow("est-settle.yaml", C).await.expect("C");
    let a = start(&app, "est-pull").await;
    let b = start(&app, "est-clean").await;
    let c = start(&app, "est-settle").await;
    wait_run(&app, &a, "FAILED", |r| r.state.as_str() == "FAILED").await;
    for id in [&b, &c] {
        wait_run(&app, id, "held", |r| r.state.as_str() == "QUEUED" && r.wait_reason.is_some()).await;
    }
    (app, [a, b, c])
}

async fn get(app: &App, uri: &str, lang: &str, cookie: Option<&str>) -> Reply {
    let mut request = Request::builder().uri(uri).header(header::ACCEPT_LANGUAGE, lang);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    send(app, request.body(Body::empty()).expect("request")).await
}

/// The markup of the box `id` (`n-…` or `v-n-…`): from its `<g` to its `</g>`.
fn node<'a>(body: &'a str, id: &str) -> &'a str {
    let at = body.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no box {id}"));
    let start = body[..at].rfind("<g ").expect("box start");
    let end = body[at..].find("</g>").expect("box end") + at;
    &body[start..end]
}

#[tokio::test]
async fn a_failed_upstream_shows_as_one_root_holding_the_flows_behind_it() {
    let (app, [a, b, c]) = estate(None).await;
    let page = get(&app, &format!("/estate?date={DAY}"), "en", None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = &page.body;
    assert!(body.contains(r#"<li class="root-line" data-root="est-pull.pull">"#), "{body}");
    assert!(body.contains("failed: holds <strong>est-clean, est-settle</strong>"), "{body}");
    for prefix in ["", "v-"] {
        let pull = node(body, &format!("{prefix}n-est-pull"));
        assert!(pull.contains("st-FAILED") && pull.contains("failed · holds 2"), "{pull}");
        let clean = node(body, &format!("{prefix}n-est-clean"));
        assert!(clean.contains(r#"data-state="held""#) && clean.contains("waits for est-pull"), "{clean}");
        let settle = node(body, &format!("{prefix}n-est-settle"));
        assert!(settle.contains("waits for est-clean"), "{settle}");
        assert!(body.contains(&format!("id=\"{prefix}e-est-pull-est-clean\" class=\"edge holding\"")));
        assert!(body.contains(&format!("id=\"{prefix}e-est-clean-est-settle\"")));
    }
    for run in [&a, &b, &c] {
        assert!(body.contains(&format!("href=\"/runs/{run}\"")), "a link to run {run}");
    }
    assert!(body.contains(r#"id="row-est-settle" data-state="held""#), "{body}");
    assert!(body.contains("root cause <code>est-pull.pull</code>"), "{body}");
    assert!(body.contains(r#"href="/estate""#), "the nav entry");

    let zh = get(&app, &format!("/estate?date={DAY}"), "zh-CN", None).await;
    assert_eq!(zh.status, StatusCode::OK);
    assert!(zh.body.contains("业务日期全景") && zh.body.contains("失败，阻塞了"), "{}", zh.body);
    assert!(node(&zh.body, "n-est-clean").contains("等待 est-pull"), "{}", zh.body);

    // Another date: nothing ran, nothing is held.
    let empty = get(&app, "/estate?date=2026-12-05", "en", None).await;
    assert!(empty.body.contains("Nothing is held behind a failure on this date."), "{}", empty.body);
    assert!(node(&empty.body, "n-est-clean").contains(r#"data-state="none""#));
    // Without a date: the latest business date with runs.
    let default = get(&app, "/estate", "en", None).await;
    assert!(default.body.contains(&format!(r#"data-date="{DAY}""#)), "{}", default.body);
    assert!(default.body.contains("the latest business date with runs"));
    // A bad date is refused, naming the parameter and the form.
    let bad = get(&app, "/estate?date=04.12.2026", "en", None).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("date: bad business date") && bad.body.contains("YYYY-MM-DD"), "{}", bad.body);
}

#[tokio::test]
async fn a_team_sees_its_flows_and_another_teams_upstream_only_as_a_plain_box() {
    let token = "estate-dw-token-0123456789abcdef";
    let dw = TokenEntry {
        name: "dw".into(),
        role: Role::Viewer,
        token: token.into(),
        scope: Some([("team".to_string(), "dw".to_string())].into_iter().collect()),
    };
    let (app, [a, b, _]) = estate(Some(vec![dw])).await;
    let cookie = support::sign_in(&app, token).await;
    let page = get(&app, &format!("/estate?date={DAY}"), "en", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = &page.body;
    let pull = node(body, "n-est-pull");
    assert!(pull.contains(r#"data-state="hidden""#) && !pull.contains("failed"), "{pull}");
    assert!(!body.contains(&a), "the other team's run is not linked");
    assert!(!body.contains("est-pull.pull"), "nor its failed node named");
    assert!(body.contains(&format!("href=\"/runs/{b}\"")));
    assert!(body.contains("held behind a failure outside your scope"), "{body}");
}
