//! A +2 h wall-clock jump on a running `madeira dev` (libfaketime, its offset file
//! rewritten while the server runs; the monotonic clock left alone, as a step of
//! the system clock does): every-minute flows fire the ticks it skipped over by
//! their misfire policy — `skip` none, `run_once` one, `run_all` the 30 in its
//! `catchup_window: 30m`, as `cron_catchup` runs — not 120 `cron` runs each; the
//! jump is counted on `/metrics`. Skipped (with a note) where libfaketime is not
//! installed (`apt-get install faketime`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Dev, wait_until};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const FLOWS: [(&str, &str, usize); 3] =
    [("jump-skip", "skip", 0), ("jump-once", "run_once", 1), ("jump-all", "run_all", 30)];

async fn metrics(dev: &Dev) -> String {
    let resp = dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("scrape");
    resp.text().await.expect("metrics body")
}

async fn runs(dev: &Dev, flow: &str) -> Vec<Value> {
    let (_, body) = dev.get(&format!("/runs?flow={flow}&limit=500")).await;
    body["runs"].as_array().cloned().unwrap_or_default()
}

fn by_trigger(runs: &[Value], trigger: &str) -> Vec<Value> {
    runs.iter().filter(|r| r["trigger"] == trigger).cloned().collect()
}

#[tokio::test]
async fn a_forward_wall_clock_jump_fires_skipped_ticks_by_misfire_policy() {
    if !Path::new(LIBFAKETIME).exists() {
        eprintln!("skipped: {LIBFAKETIME} is missing (apt-get install faketime)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let offset = dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").expect("offset file");
    let env = [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME_TIMESTAMP_FILE", offset.to_str().expect("utf-8 path")),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("FAKETIME_CACHE_DURATION", "1"),
    ];
    let dev = Dev::start_with_all(&dir.path().join("data"), &[], &env);
    for (name, misfire, _) in FLOWS {
        dev.put_flow(&format!(
            "flow: {name}\ntriggers:\n  - cron: \"* * * * *\"\n    misfire: {misfire}\n    catchup_window: 30m\n\
             nodes:\n  a: {{run: {{builtin: noop}}}}\n"
        ))
        .await;
    }
    wait_until(Duration::from_secs(20), "the scheduler to load the flows", async || {
        let text = metrics(&dev).await;
        FLOWS
            .iter()
            .all(|(f, ..)| text.contains(&format!("madeira_flow_next_run_timestamp_seconds{{flow=\"{f}\"}}")))
    })
    .await;

    let before = chrono::Utc::now();
    std::fs::write(&offset, "+2h\n").expect("jump");
    let after = before + chrono::Duration::hours(2);
    // Before the fix: 120 `cron` runs per flow at once, no catch-up run.
    wait_until(Duration::from_secs(30), "the jump's runs", async || {
        let (all, once) = (runs(&dev, "jump-all").await, runs(&dev, "jump-once").await);
        let enough = |runs: &[Value], catchup| {
            by_trigger(runs, "cron_catchup").len() >= catchup || by_trigger(runs, "cron").len() > 2
        };
        enough(&all, 30) && enough(&once, 1)
    })
    .await;
    for (name, misfire, expected) in FLOWS {
        let runs = runs(&dev, name).await;
        assert_eq!(by_trigger(&runs, "cron_catchup").len(), expected, "{name} ({misfire}): {runs:?}");
        // A tick just before the jump, or the first after it, fires on time;
        // none of those the jump skipped over does.
        let on_time = by_trigger(&runs, "cron");
        assert!(
            on_time.len() <= 2,
            "{name} ({misfire}): the skipped ticks fired as cron: {} runs",
            on_time.len()
        );
        for run in on_time {
            let id = run["run_id"].as_str().expect("run id");
            let (_, detail) = dev.get(&format!("/runs/{id}")).await;
            let at = detail["params"]["scheduled_at"].as_str().expect("scheduled_at");
            let at = chrono::DateTime::parse_from_rfc3339(at).expect("rfc3339").with_timezone(&chrono::Utc);
            let skipped_over =
                at > before + chrono::Duration::seconds(5) && at < after - chrono::Duration::seconds(5);
            assert!(!skipped_over, "{name}: tick {at} was skipped over by the jump, fired as cron");
        }
    }
    wait_until(Duration::from_secs(20), "the jump to be counted", async || {
        metrics(&dev).await.lines().any(|l| l == "madeira_cron_clock_jumps_total 1")
    })
    .await;
}
