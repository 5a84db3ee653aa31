//! Cron on business-day calendars, on the binary with its scheduler clock moved
//! (`madeira dev --clock-start`, the clock then runs at the real pace): a daily
//! 01:05 Asia/Shanghai flow on `cn-workdays` fires on the make-up Saturday
//! 2026-02-14 (a trading calendar from `calendars/` next to the flows, which
//! excludes weekends, does not), and does not fire on the holiday Monday
//! 2026-02-23: that day is recorded as skipped (audit `cron_tick_skipped`, the
//! flow's `skipped_days`) and the next run is Tuesday's.
//!
//! Calendars applied like flows: `madeira apply -f` of a `calendar: NAME` file
//! stores a version (audited), `/calendars` serves it next to the built-in
//! ones, flows applied afterwards may name it, a built-in name is refused, and
//! on two replicas sharing PostgreSQL the other replica sees it from the store.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use madeira_store::testing::PgTestDb;

use crate::support::{Dev, client, wait_until};

const FLOW: &str = "flow: settle\ntriggers:\n  - cron: \"5 1 * * *\"\n    timezone: Asia/Shanghai\n    calendar: cn-workdays\nnodes:\n  a: {run: {builtin: noop}}\n";
const TRADING: &str = "flow: trade\ntriggers:\n  - cron: \"5 1 * * *\"\n    timezone: Asia/Shanghai\n    calendar: sse\nnodes:\n  a: {run: {builtin: noop}}\n";
const SSE: &str = "name: sse\ndescription: trading days\nbase: cn-workdays\nexclude_weekends: true\n";

/// `madeira dev` with the flows above and its scheduler clock at `start`.
fn dev_at(dir: &Path, start: &str) -> Dev {
    let flows = dir.join("flows");
    std::fs::create_dir_all(flows.join("calendars")).expect("mkdir");
    std::fs::write(flows.join("settle.yaml"), FLOW).expect("write");
    std::fs::write(flows.join("trade.yaml"), TRADING).expect("write");
    std::fs::write(flows.join("calendars/sse.yaml"), SSE).expect("write");
    let flows = flows.to_str().expect("utf-8 path").to_string();
    Dev::start_with(&dir.join("data"), &["--flows", &flows, "--clock-start", start])
}

async fn runs(dev: &Dev, flow: &str) -> Vec<Value> {
    let (_, body) = dev.get(&format!("/runs?flow={flow}")).await;
    body["runs"].as_array().cloned().unwrap_or_default()
}

async fn skipped(dev: &Dev) -> Vec<Value> {
    let (_, body) = dev.get("/audit?actor=scheduler&limit=100").await;
    let entries = body["entries"].as_array().cloned().unwrap_or_default();
    entries.into_iter().filter(|e| e["action"] == "cron_tick_skipped").collect()
}

/// Waits up to `secs` for `done`.
async fn wait_for_it(what: &str, secs: u64, mut done: impl AsyncFnMut() -> bool) {
    wait_until(Duration::from_secs(secs), what, async || done().await).await;
}

#[tokio::test]
async fn cn_workdays_fires_on_the_make_up_saturday_and_not_on_the_holiday_monday() {
    let (saturday_dir, monday_dir) =
        (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    // 01:04:35 in Shanghai on each day: the 01:05 tick is 25 s away.
    let saturday = dev_at(saturday_dir.path(), "2026-02-13T17:04:35Z");
    let monday = dev_at(monday_dir.path(), "2026-02-22T17:04:35Z");

    let (_, calendars) = saturday.get("/calendars").await;
    let names: Vec<&str> =
        calendars["calendars"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert!(names.contains(&"sse") && names.contains(&"cn-workdays"), "{calendars}");

    wait_for_it("the make-up Saturday's run", 60, async || !runs(&saturday, "settle").await.is_empty()).await;
    let settle = runs(&saturday, "settle").await;
    assert_eq!(settle.len(), 1, "{settle:?}");
    assert_eq!(settle[0]["trigger"], "cron");
    let run_id = settle[0]["run_id"].as_str().expect("run id");
    let (_, run) = saturday.get(&format!("/runs/{run_id}")).await;
    let scheduled = run["params"]["scheduled_at"].as_str().unwrap_or_default();
    assert_eq!(scheduled, "2026-02-13T17:05:00+00:00", "the Saturday 01:05 tick: {run}");
    // The trading calendar skips the same Saturday (exclude_weekends), recorded once.
    wait_for_it("the trading flow's skipped Saturday", 20, async || {
        skipped(&saturday).await.iter().any(|e| e["details"]["flow"] == "trade")
    })
    .await;
    assert!(runs(&saturday, "trade").await.is_empty(), "no trading run on a Saturday");

    wait_for_it("the holiday Monday's tick to be skipped", 60, async || {
        skipped(&monday).await.iter().any(|e| e["details"]["flow"] == "settle")
    })
    .await;
    let entry = skipped(&monday).await.into_iter().find(|e| e["details"]["flow"] == "settle").expect("entry");
    assert_eq!(entry["details"]["day"], "2026-02-23", "{entry}");
    assert_eq!(entry["details"]["calendar"], "cn-workdays", "{entry}");
    assert!(runs(&monday, "settle").await.is_empty(), "no run on the holiday Monday");
    let (_, detail) = monday.get("/flows/settle").await;
    let trigger = &detail["triggers"][0];
    assert_eq!(trigger["calendar"], "cn-workdays", "{detail}");
    assert_eq!(trigger["skipped_days"][0]["day"], "2026-02-23", "{detail}");
    // Not a delay: the scheduler's next run is Tuesday's 01:05 (2026-02-23T17:05:00Z).
    let metrics = monday.http.get(format!("{}/metrics", monday.base)).send().await.expect("scrape");
    let text = metrics.text().await.expect("metrics");
    let next = "madeira_flow_next_run_timestamp_seconds{flow=\"settle\"} 1771866300";
    assert!(
        text.contains(next),
        "{}",
        text.lines().filter(|l| l.contains("next_run")).collect::<Vec<_>>().join("\n")
    );
}

const ADMIN: &str = "calendar-admin-token-0123456789";
const PLANT: &str =
    "calendar: plant\ndescription: plant days\nbase: all_days\nholidays: [\"2026-08-03..2026-08-07\"]\n";
const USES_PLANT: &str = "flow: shifts\ntriggers:\n  - {cron: \"0 6 * * *\", timezone: UTC, calendar: plant}\nnodes:\n  a: {run: {builtin: noop}}\n";

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test]
async fn a_calendar_file_is_applied_versioned_audited_and_usable_by_flows() {
    let (dir, dev) = Dev::start();
    let cal = dir.path().join("plant.yaml");
    std::fs::write(&cal, PLANT).expect("write");
    let flow = dir.path().join("shifts.yaml");
    std::fs::write(&flow, USES_PLANT).expect("write");
    let (cal, flow) = (cal.to_str().expect("utf-8"), flow.to_str().expect("utf-8"));
    // Offline first: validate reads the calendar file and checks the flow against it.
    let checked = dev.cli(&["validate", cal, flow]);
    assert!(checked.status.success(), "{}", text(&checked));
    // Before the calendar exists, the flow naming it is refused with its line.
    let refused = dev.cli(&["apply", "-f", flow]);
    assert!(!refused.status.success());
    assert!(text(&refused).contains("unknown calendar `plant`"), "{}", text(&refused));
    // Calendar and flow in one apply: the calendar goes first.
    let applied = dev.cli(&["apply", "-f", cal, "-f", flow]);
    assert!(applied.status.success(), "{}", text(&applied));
    let said = text(&applied);
    assert!(said.contains("calendar plant version 1 (created)") && said.contains("flow shifts"), "{said}");
    let again = dev.cli(&["apply", "-f", cal]);
    assert!(text(&again).contains("calendar plant version 1 (unchanged)"), "{}", text(&again));
    std::fs::write(cal, PLANT.replace("2026-08-07", "2026-08-10")).expect("write");
    let changed = dev.cli(&["apply", "-f", cal]);
    assert!(text(&changed).contains("calendar plant version 2 (created)"), "{}", text(&changed));

    let (_, listed) = dev.get("/calendars").await;
    let plant = listed["calendars"].as_array().into_iter().flatten().find(|c| c["name"] == "plant");
    let plant = plant.expect("plant listed");
    assert_eq!((&plant["origin"], &plant["version"]), (&json!("applied"), &json!(2)), "{plant}");
    let builtin = listed["calendars"].as_array().into_iter().flatten().find(|c| c["name"] == "cn-workdays");
    assert_eq!(builtin.expect("cn-workdays")["origin"], "builtin");
    let (_, year) = dev.get("/calendars/plant?year=2026").await;
    assert_eq!(year["business_days"], 365 - 8, "the holidays of version 2: {year}");
    // The scheduler plans on it: the flow's next run is a day of the calendar.
    let (_, shifts) = dev.get("/flows/shifts").await;
    assert_eq!(shifts["triggers"][0]["calendar"], "plant", "{shifts}");
    assert!(shifts["triggers"][0]["next_run"].is_string(), "{shifts}");
    // Audited, twice (the unchanged apply too, as created: false).
    let (_, audit) = dev.get("/audit?limit=50").await;
    let entries: Vec<&Value> = audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"] == "calendar_apply")
        .collect();
    assert_eq!(entries.len(), 3, "{audit}");
    assert!(
        entries.iter().any(|e| e["details"]["version"] == 2 && e["details"]["created"] == true),
        "{audit}"
    );
    // A built-in name is refused, saying why and what to do.
    std::fs::write(cal, "calendar: cn-workdays\nbase: weekdays\n").expect("write");
    let clash = dev.cli(&["apply", "-f", cal]);
    assert!(!clash.status.success());
    let said = text(&clash);
    assert!(said.contains("calendar `cn-workdays` is built in") && said.contains("another name"), "{said}");
    // An unknown base names the known ones.
    std::fs::write(cal, "calendar: night\nbase: plantt\n").expect("write");
    let unknown = dev.cli(&["apply", "-f", cal]);
    assert!(text(&unknown).contains("unknown base `plantt`"), "{}", text(&unknown));
    // `validate` names the line of a `biz_date:` calendar it does not know.
    let dated = dir.path().join("dated.yaml");
    let source = "flow: dated\ntimezone: UTC\nbiz_date:\n  offset: -1\n  calendar: plantt\nnodes:\n  a: {run: {builtin: noop}}\n";
    std::fs::write(&dated, source).expect("write");
    let out = dev.cli(&["validate", dated.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(text(&out).contains("dated.yaml:5: biz_date: unknown calendar `plantt`"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_calendar_applied_on_one_replica_is_used_by_the_other() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    let auth = "auth:\n  tokens:\n    - {name: ci, role: admin, token_env: MADEIRA_T_ADMIN}\n";
    std::fs::write(&config, format!("http: 127.0.0.1:0\nstore: {}\n{auth}", db.url)).expect("config");
    let env = |id| [("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)];
    let a = Dev::serve(&config, &env("a"), Some(ADMIN));
    let b = Dev::serve(&config, &env("b"), Some(ADMIN));
    let http = client(Some(ADMIN));
    let put = http.put(a.url("/calendars/plant")).body(PLANT).send().await.expect("put");
    assert_eq!(put.status().as_u16(), 201);
    // Replica b reads the store when a flow is applied: the flow naming it is accepted at once.
    b.put_flow(USES_PLANT).await;
    // And b lists it within its refresh period.
    wait_for_it("replica b to list the applied calendar", 15, async || {
        let (_, listed) = b.get("/calendars").await;
        listed["calendars"].as_array().into_iter().flatten().any(|c| c["name"] == "plant")
    })
    .await;
    drop((a, b));
}
