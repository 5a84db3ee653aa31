//! Backfills on the real binary: A → B (B waits for A's run of the same business
//! date). `madeira backfill A` over ten business days with `--with-dependents
//! --parallel 4` runs every (flow, date) exactly once (runs counted by date),
//! never starts B(D) before A(D) succeeded (timestamps from the API), never has
//! more than four runs of it active, and a manual run of another flow created
//! meanwhile starts at once. A second backfill of the same dates skips them all.
//! A backfill paused makes no new run, resumed goes on, cancelled cancels its
//! runs and makes no more. A paused flow is not backfilled: its dates wait
//! (the backfill says so) until the flow is resumed. `after_policy` fails, skips or runs a held run once
//! its `wait` is over. On PostgreSQL, two `serve` replicas share one backfill.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DateTime;
use serde_json::{Value, json};

use crate::console_state::{FORM, form_body};
use crate::support::{Dev, hold_for, wait_until};

const A: &str = "flow: bf-a\nnodes:\n  pull: {run: {builtin: sleep, for: 150ms}}\n";
const B: &str =
    "flow: bf-b\nafter:\n  - {flow: bf-a, date: same}\nnodes:\n  load: {run: {builtin: sleep, for: 50ms}}\n";
const OTHER: &str = "flow: bf-other\nnodes:\n  n: {run: {builtin: noop}}\n";

pub(crate) fn ms(v: &Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("no timestamp: {v}"));
    DateTime::parse_from_rfc3339(text).expect("timestamp").timestamp_millis()
}

/// The backfill runs of `flow`, by business date.
pub(crate) async fn runs_by_date(dev: &Dev, flow: &str) -> BTreeMap<String, Vec<Value>> {
    let (status, body) = dev.get(&format!("/runs?flow={flow}&limit=1000")).await;
    assert_eq!(status, 200, "{body}");
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for run in body["runs"].as_array().into_iter().flatten() {
        if run["trigger"] == "backfill" {
            out.entry(run["biz_date"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(run.clone());
        }
    }
    out
}

/// A backfill's steps (each with its run's id and times) by (flow, date).
pub(crate) fn steps_by_pair(backfill: &Value) -> BTreeMap<(String, String), Value> {
    let steps = backfill["steps"].as_array().into_iter().flatten();
    steps
        .map(|s| {
            let key = (
                s["flow"].as_str().unwrap_or_default().to_string(),
                s["biz_date"].as_str().unwrap_or_default().to_string(),
            );
            (key, s.clone())
        })
        .collect()
}

pub(crate) async fn backfill(dev: &Dev, id: &str) -> Value {
    let (status, body) = dev.get(&format!("/backfills/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits for the backfill to be done, checking on the way that no more than
/// `parallel` of its runs are active.
pub(crate) async fn until_done(dev: &Dev, id: &str, parallel: u64, secs: u64) -> Value {
    wait_until(Duration::from_secs(secs), "the backfill to be done", async || {
        let b = backfill(dev, id).await;
        let p = &b["progress"];
        let active = p["running"].as_u64().unwrap_or(0) + p["queued"].as_u64().unwrap_or(0);
        assert!(active <= parallel, "{active} runs of the backfill active, parallel {parallel}: {p}");
        if b["state"] == "done" { Ok(b) } else { Err(p.to_string()) }
    })
    .await
}

#[tokio::test]
async fn a_backfill_with_dependents_runs_each_date_once_upstream_first_beside_other_runs() {
    let (_dir, dev) = Dev::start();
    for yaml in [A, B, OTHER] {
        dev.put_flow(yaml).await;
    }
    let out = dev.cli(&[
        "backfill",
        "bf-a",
        "--from",
        "2026-11-02",
        "--to",
        "2026-11-15",
        "--calendar",
        "weekdays",
        "--with-dependents",
        "--parallel",
        "4",
        "--reason",
        "payments reloaded",
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = made["id"].as_str().expect("id").to_string();
    assert_eq!(made["dates"].as_array().map(Vec::len), Some(10), "ten weekdays: {made}");
    assert_eq!(made["flows"], json!(["bf-a", "bf-b"]), "{made}");
    assert_eq!(made["runs"], 20);
    // A manual run of another flow, created while the backfill runs, starts at once.
    let other = dev.trigger("bf-other", json!({})).await;
    let other = dev.finished(&other).await;
    let waited = ms(&other["started_at"]) - ms(&other["created_at"]);
    assert!(waited < 1000, "the manual run waited {waited} ms behind the backfill: {other}");
    let done = until_done(&dev, &id, 4, 60).await;
    assert_eq!(done["progress"]["success"], 20, "{done}");
    let (a, b) = (runs_by_date(&dev, "bf-a").await, runs_by_date(&dev, "bf-b").await);
    assert_eq!((a.len(), b.len()), (10, 10), "every date of both flows");
    let step = steps_by_pair(&done);
    for (date, runs) in &a {
        assert_eq!(runs.len(), 1, "bf-a {date} ran {} times", runs.len());
        assert_eq!(b[date].len(), 1, "bf-b {date} ran {} times", b[date].len());
        let up = &runs[0];
        assert_eq!((up["status"].as_str(), up["actor"].as_str()), (Some("SUCCESS"), Some("local")), "{up}");
        let (up, down) =
            (&step[&("bf-a".to_string(), date.clone())], &step[&("bf-b".to_string(), date.clone())]);
        assert_eq!(up["run_id"], runs[0]["run_id"]);
        assert!(
            ms(&down["started_at"]) >= ms(&up["finished_at"]),
            "bf-b {date} started before bf-a {date} succeeded: {down} {up}"
        );
    }
    // Steps list each run, in dependency order within a date.
    let steps = done["steps"].as_array().expect("steps");
    assert_eq!((steps[0]["flow"].as_str(), steps[1]["flow"].as_str()), (Some("bf-a"), Some("bf-b")));
    let (_, audit) = dev.get("/audit?limit=50").await;
    let entry = audit["entries"].as_array().into_iter().flatten().find(|e| e["action"] == "backfill");
    let entry = entry.unwrap_or_else(|| panic!("no backfill audit entry: {audit}"));
    assert_eq!(
        (entry["actor"].as_str(), entry["reason"].as_str()),
        (Some("local"), Some("payments reloaded"))
    );
    // The same dates again: every one already succeeded, nothing runs.
    let (status, again) = dev
        .post(
            "/flows/bf-a/backfills",
            json!({"from": "2026-11-02", "to": "2026-11-15", "calendar": "weekdays", "with_dependents": true,
                   "reason": "again"}),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{again}");
    let again = until_done(&dev, again["id"].as_str().expect("id"), 1, 10).await;
    assert_eq!(again["progress"]["skipped"], 20, "{again}");
    assert_eq!(runs_by_date(&dev, "bf-a").await.values().map(Vec::len).sum::<usize>(), 10);
    let text = dev.cli(&["backfills"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("{id}  bf-a  2026-11-02..2026-11-15  [done]  20/20 settled")), "{text}");
}

#[tokio::test]
async fn a_backfill_pauses_resumes_and_cancels_its_runs() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: bf-slow\nnodes:\n  n: {run: {builtin: sleep, for: 1500ms}}\n").await;
    let (status, made) = dev
        .post(
            "/flows/bf-slow/backfills",
            json!({"dates": ["2026-10-01", "2026-10-02", "2026-10-05", "2026-10-06", "2026-10-07", "2026-10-08"],
                   "parallel": 2, "order": "desc", "reason": "rebuild october"}),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().expect("id").to_string();
    assert_eq!(made["dates"][0], "2026-10-08", "desc: newest first: {made}");
    let (status, body) = dev.post(&format!("/backfills/{id}/pause"), json!({}), &[]).await;
    assert_eq!((status, body["error"]["details"]["field"].as_str()), (400, Some("reason")), "{body}");
    let (status, paused) =
        dev.post(&format!("/backfills/{id}/pause"), json!({"reason": "db busy"}), &[]).await;
    assert_eq!((status, paused["state"].as_str()), (200, Some("paused")), "{paused}");
    let (status, body) = dev.post(&format!("/backfills/{id}/pause"), json!({"reason": "again"}), &[]).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("refused")), "{body}");
    // The two runs made before the pause finish; no third one is made while paused.
    wait_until(Duration::from_secs(20), "the runs made before the pause to finish", async || {
        let p = backfill(&dev, &id).await["progress"].clone();
        if p["success"] == 2 { Ok(()) } else { Err(p.to_string()) }
    })
    .await;
    hold_for(Duration::from_millis(800), "no new run while paused", async || {
        runs_by_date(&dev, "bf-slow").await.len() == 2
    })
    .await;
    let (status, resumed) =
        dev.post(&format!("/backfills/{id}/resume"), json!({"reason": "db free"}), &[]).await;
    assert_eq!((status, resumed["state"].as_str()), (200, Some("running")), "{resumed}");
    wait_until(Duration::from_secs(10), "runs of the resumed backfill", async || {
        let p = backfill(&dev, &id).await["progress"].clone();
        if p["running"].as_u64().unwrap_or(0) + p["queued"].as_u64().unwrap_or(0) > 0 {
            Ok(())
        } else {
            Err(p.to_string())
        }
    })
    .await;
    let out = dev.cli(&["backfills", "cancel", &id, "--reason", "wrong source"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cancelled = wait_until(Duration::from_secs(10), "the backfill's runs cancelled", async || {
        let b = backfill(&dev, &id).await;
        let p = &b["progress"];
        if b["state"] == "cancelled" && p["running"] == 0 && p["queued"] == 0 {
            Ok(b)
        } else {
            Err(b.to_string())
        }
    })
    .await;
    let p = &cancelled["progress"];
    assert_eq!((p["success"].as_u64(), p["cancelled"].as_u64()), (Some(2), Some(4)), "{cancelled}");
    let made_runs = runs_by_date(&dev, "bf-slow").await;
    assert_eq!(made_runs.len(), 4, "two before the pause, two after the resume: {made_runs:?}");
    hold_for(Duration::from_millis(800), "no run after the cancel", async || {
        runs_by_date(&dev, "bf-slow").await.len() == 4
    })
    .await;
    let (_, audit) = dev.get("/audit?limit=50").await;
    let actions: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["action"].as_str()?, e["reason"].as_str()?)))
        .collect();
    for expected in
        [("backfill_pause", "db busy"), ("backfill_resume", "db free"), ("backfill_cancel", "wrong source")]
    {
        assert!(actions.contains(&expected), "{expected:?} not in {actions:?}");
    }
    assert!(
        actions.iter().any(|(a, r)| *a == "cancel" && r.contains("wrong source")),
        "its running runs were cancelled with the reason: {actions:?}"
    );
}

/// `madeira pause FLOW` stops a backfill of it from starting new runs (those
/// running finish), the backfill says it waits for the flow's resume, and
/// `madeira resume FLOW` lets it go on to the end, each date once.
#[tokio::test]
async fn a_paused_flow_is_not_backfilled_until_resumed() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: bf-pause\nnodes:\n  n: {run: {builtin: sleep, for: 700ms}}\n").await;
    let dates = ["2026-10-01", "2026-10-02", "2026-10-05", "2026-10-06", "2026-10-07", "2026-10-08"];
    let (status, made) = dev
        .post("/flows/bf-pause/backfills", json!({"dates": dates, "parallel": 2, "reason": "october"}), &[])
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().expect("id").to_string();
    wait_until(Duration::from_secs(10), "a run of the backfill running", async || {
        let p = backfill(&dev, &id).await["progress"].clone();
        if p["running"].as_u64().unwrap_or(0) > 0 { Ok(()) } else { Err(p.to_string()) }
    })
    .await;
    let out = dev.cli(&["pause", "bf-pause", "--reason", "source down"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The runs already made are not killed: they finish SUCCESS.
    let settled = wait_until(Duration::from_secs(15), "the runs made before the pause to end", async || {
        let b = backfill(&dev, &id).await;
        let p = &b["progress"];
        if p["running"] == 0 && p["queued"] == 0 { Ok(b) } else { Err(p.to_string()) }
    })
    .await;
    let p = &settled["progress"];
    let before = p["success"].as_u64().expect("success");
    assert!((1..6).contains(&before) && p["failed"] == 0 && p["cancelled"] == 0, "{settled}");
    assert_eq!(settled["paused_flows"], json!(["bf-pause"]), "it says why it waits: {settled}");
    hold_for(Duration::from_millis(1500), "no new run of the paused flow", async || {
        let b = backfill(&dev, &id).await;
        b["state"] == "running"
            && b["progress"]["success"] == before
            && b["progress"]["pending"] == 6 - before
            && runs_by_date(&dev, "bf-pause").await.len() as u64 == before
    })
    .await;
    let text = dev.cli(&["backfills"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(waits: flow bf-pause paused)"), "{text}");
    let out = dev.cli(&["resume", "bf-pause", "--reason", "source back"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done = until_done(&dev, &id, 2, 30).await;
    assert_eq!(
        (done["progress"]["success"].as_u64(), &done["paused_flows"]),
        (Some(6), &json!([])),
        "{done}"
    );
    let runs = runs_by_date(&dev, "bf-pause").await;
    assert_eq!(runs.len(), 6, "{runs:?}");
    assert!(runs.values().all(|r| r.len() == 1), "each date once: {runs:?}");
}

#[tokio::test]
async fn after_policy_fails_skips_or_runs_a_run_held_past_its_wait() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: ap-up\nnodes:\n  n: {run: {builtin: noop}}\n").await;
    let day = "2026-12-01";
    let mut runs = Vec::new();
    for then in ["fail", "skip", "run"] {
        let yaml = format!(
            "flow: ap-{then}\nafter:\n  - {{flow: ap-up}}\nafter_policy: {{wait: 2s, then: {then}}}\nnodes:\n  n: {{run: {{builtin: noop}}}}\n"
        );
        dev.put_flow(&yaml).await;
        let (status, body) = dev.post(&format!("/flows/ap-{then}/runs"), json!({"biz_date": day}), &[]).await;
        assert_eq!(status, 201, "{body}");
        runs.push(body["run_id"].as_str().expect("run_id").to_string());
    }
    let held = dev.wait_run(&runs[0], 10, |r| r["waiting_reason"].is_string()).await;
    assert_eq!(held["status"], "QUEUED", "{held}");
    let mut ended = Vec::new();
    for (run, want) in runs.iter().zip(["FAILED", "CANCELLED", "SUCCESS"]) {
        let r = dev.wait_run(run, 15, |r| r["status"] == want).await;
        let held_for = ms(&r["finished_at"]) - ms(&r["created_at"]);
        assert!(held_for >= 2000, "{want} after {held_for} ms, before the 2s wait: {r}");
        ended.push(r);
    }
    let reason = ended[0]["nodes"]["n"]["reason"].as_str().or(ended[0]["nodes"][0]["reason"].as_str());
    assert!(reason.is_some_and(|r| r.contains("after_policy")), "the failed node says why: {}", ended[0]);
    let (_, audit) = dev.get("/audit?limit=50").await;
    for (action, run) in
        [("after_policy_fail", &runs[0]), ("after_policy_skip", &runs[1]), ("after_policy_run", &runs[2])]
    {
        let entry = audit["entries"].as_array().into_iter().flatten().find(|e| e["action"] == action);
        let entry = entry.unwrap_or_else(|| panic!("no {action} audit entry: {audit}"));
        assert_eq!(
            (entry["run_id"].as_str(), entry["actor"].as_str()),
            (Some(run.as_str()), Some("after_policy"))
        );
        let why = entry["reason"].as_str().unwrap_or_default();
        assert!(
            why.contains(&format!("waited 2s for ap-up {day}"))
                || why.contains(&format!("ap-up {day} after waiting 2s")),
            "{entry}"
        );
    }
}

/// Two `madeira serve` replicas on one PostgreSQL database: the backfill is made
/// on one, its runs are created by whichever replica commits a finished one;
/// each (flow, date) still runs once, upstream first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_across_two_replicas_on_postgres_runs_each_date_once() {
    let Some(pg) = crate::support::pg_replicas("", &[]).await else { return };
    let (r1, r2) = (&pg.r1, &pg.r2);
    for yaml in [A, B] {
        r1.put_flow(yaml).await;
    }
    let (status, made) = r2
        .post(
            "/flows/bf-a/backfills",
            json!({"from": "2026-09-01", "to": "2026-09-10", "calendar": "weekdays", "with_dependents": true,
                   "parallel": 4, "reason": "replicas"}),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let done = until_done(r1, made["id"].as_str().expect("id"), 4, 90).await;
    assert_eq!(done["progress"]["success"], 16, "eight weekdays, two flows: {done}");
    let (a, b) = (runs_by_date(r1, "bf-a").await, runs_by_date(r1, "bf-b").await);
    assert_eq!((a.len(), b.len()), (8, 8));
    let step = steps_by_pair(&done);
    for (date, runs) in &a {
        assert_eq!((runs.len(), b[date].len()), (1, 1), "{date}");
        let (up, down) =
            (&step[&("bf-a".to_string(), date.clone())], &step[&("bf-b".to_string(), date.clone())]);
        assert!(ms(&down["started_at"]) >= ms(&up["finished_at"]), "bf-b {date} before bf-a: {down} {up}");
    }
}

/// The console: the flow page's "Backfill" form starts one, `/backfills` shows
/// its progress (in English and Chinese) and cancels it.
#[tokio::test]
async fn the_console_starts_shows_and_cancels_a_backfill() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: bf-console\nnodes:\n  n: {run: {builtin: sleep, for: 2s}}\n").await;
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let page = http.get(format!("{}/flows/bf-console", dev.base)).send().await.expect("flow page");
    let html = page.text().await.expect("html");
    assert!(html.contains("action=\"/flows/bf-console/backfill\""), "the flow page has the Backfill form");
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("csrf");
    let form = [
        ("csrf", csrf),
        ("from", "2026-08-03"),
        ("to", "2026-08-07"),
        ("parallel", "2"),
        ("reason", "console backfill"),
    ];
    let reply = http
        .post(format!("{}/flows/bf-console/backfill", dev.base))
        .header(reqwest::header::CONTENT_TYPE, FORM)
        .body(form_body(&form))
        .send()
        .await
        .expect("post");
    assert_eq!(reply.status().as_u16(), 303, "{}", reply.text().await.unwrap_or_default());
    let (_, list) = dev.get("/backfills").await;
    let made = &list["backfills"][0];
    let id = made["id"].as_str().expect("id").to_string();
    assert_eq!(
        (made["parallel"].as_u64(), made["dates"].as_array().map(Vec::len)),
        (Some(2), Some(5)),
        "{made}"
    );
    let page = |lang: &'static str| {
        let http = http.clone();
        let url = format!("{}/backfills", dev.base);
        async move {
            let reply = http.get(url).header("accept-language", lang).send().await.expect("page");
            reply.text().await.expect("html")
        }
    };
    let en = page("en").await;
    assert!(en.contains(&format!("data-backfill=\"{id}\"")) && en.contains("<progress"), "{en}");
    assert!(en.contains("Cancel backfill"), "an operator may cancel it");
    let zh = page("zh-CN").await;
    assert!(zh.contains("补数") && zh.contains("进度") && zh.contains("取消补数"), "{zh}");
    let empty = [("csrf", csrf), ("reason", " ")];
    let reply = http
        .post(format!("{}/backfills/{id}/cancel", dev.base))
        .header(reqwest::header::CONTENT_TYPE, FORM)
        .body(form_body(&empty))
        .send()
        .await
        .expect("post");
    assert_eq!(reply.status().as_u16(), 400, "a blank reason is refused");
    let form = [("csrf", csrf), ("reason", "wrong month")];
    let reply = http
        .post(format!("{}/backfills/{id}/cancel", dev.base))
        .header(reqwest::header::CONTENT_TYPE, FORM)
        .body(form_body(&form))
        .send()
        .await
        .expect("post");
    assert_eq!(reply.status().as_u16(), 303);
    let b = backfill(&dev, &id).await;
    assert_eq!(b["state"], "cancelled", "{b}");
    assert!(page("en").await.contains(&format!("data-backfill=\"{id}\" data-state=\"cancelled\"")));
}
