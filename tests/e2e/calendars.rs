//! Cron on business-day calendars, on the binary with its scheduler clock moved
//! (`madeira dev --clock-start`, the clock then runs at the real pace): a daily
//! 01:05 Asia/Shanghai flow on `cn-workdays` fires on the make-up Saturday
//! 2026-02-14 (a trading calendar from `calendars/` next to the flows, which
//! excludes weekends, does not), and does not fire on the holiday Monday
//! 2026-02-23: that day is recorded as skipped (audit `cron_tick_skipped`, the
//! flow's `skipped_days`) and the next run is Tuesday's.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::Dev;

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

async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    secs: u64,
    mut done: impl FnMut() -> F,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

    wait_until("the make-up Saturday's run", 60, || async { !runs(&saturday, "settle").await.is_empty() })
        .await;
    let settle = runs(&saturday, "settle").await;
    assert_eq!(settle.len(), 1, "{settle:?}");
    assert_eq!(settle[0]["trigger"], "cron");
    let run_id = settle[0]["run_id"].as_str().expect("run id");
    let (_, run) = saturday.get(&format!("/runs/{run_id}")).await;
    let scheduled = run["params"]["scheduled_at"].as_str().unwrap_or_default();
    assert_eq!(scheduled, "2026-02-13T17:05:00+00:00", "the Saturday 01:05 tick: {run}");
    // The trading calendar skips the same Saturday (exclude_weekends), recorded once.
    wait_until("the trading flow's skipped Saturday", 20, || async {
        skipped(&saturday).await.iter().any(|e| e["details"]["flow"] == "trade")
    })
    .await;
    assert!(runs(&saturday, "trade").await.is_empty(), "no trading run on a Saturday");

    wait_until("the holiday Monday's tick to be skipped", 60, || async {
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
