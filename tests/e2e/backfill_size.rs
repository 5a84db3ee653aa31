//! A backfill at size on the real binary (issue #36's done-means): 30 business
//! days of the `weekdays` calendar, three flows A → B → C for the same business
//! date, `--with-dependents --parallel 4`, while a cron flow ticks every second.
//! Every (flow, date) runs exactly once; B(D) starts only after A(D) ended
//! SUCCESS and C(D) after B(D); never more than four of the backfill's runs
//! overlap; and each cron tick during the backfill starts within 1 s of its
//! scheduled instant (a backfill's queue never delays a scheduled run).

use std::time::Instant;

use serde_json::Value;

use crate::backfill::{ms, runs_by_date, steps_by_pair, until_done};
use crate::support::{Dev, cron_runs, max_overlap};

const A: &str = "flow: bs-a\nnodes:\n  pull: {run: {builtin: sleep, for: 300ms}}\n";
const B: &str =
    "flow: bs-b\nafter:\n  - {flow: bs-a}\nnodes:\n  clean: {run: {builtin: sleep, for: 100ms}}\n";
const C: &str = "flow: bs-c\nafter:\n  - {flow: bs-b}\nnodes:\n  settle: {run: {builtin: noop}}\n";
const TICK: &str =
    "flow: bs-tick\ntriggers:\n  - cron: \"* * * * * *\"\nnodes:\n  n: {run: {builtin: noop}}\n";

/// (scheduled instant, started_at) of every cron run of `flow`, in ms.
async fn cron_starts(dev: &Dev, flow: &str) -> Vec<(i64, i64)> {
    let (runs, _) = cron_runs(dev, flow).await;
    runs.iter()
        .filter(|(_, detail)| detail["started_at"].is_string())
        .map(|(tick, detail)| (tick.timestamp_millis(), ms(&detail["started_at"])))
        .collect()
}

#[tokio::test]
async fn thirty_business_days_of_three_flows_run_once_each_upstream_first_while_cron_ticks_on_time() {
    let (_dir, dev) = Dev::start();
    for yaml in [A, B, C, TICK] {
        dev.put_flow(yaml).await;
    }
    let began = Instant::now();
    let out = dev.cli(&[
        "backfill",
        "bs-a",
        "--from",
        "2026-09-01",
        "--to",
        "2026-10-12",
        "--calendar",
        "weekdays",
        "--with-dependents",
        "--parallel",
        "4",
        "--reason",
        "thirty days",
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(made["dates"].as_array().map(Vec::len), Some(30), "30 weekdays: {made}");
    assert_eq!(made["runs"], 90, "{made}");
    let id = made["id"].as_str().expect("id").to_string();
    let done = until_done(&dev, &id, 4, 120).await;
    let wall = began.elapsed();
    assert_eq!(done["progress"]["success"], 90, "{done}");
    // Exactly once per (flow, date).
    let step = steps_by_pair(&done);
    let mut spans = Vec::new();
    for flow in ["bs-a", "bs-b", "bs-c"] {
        let runs = runs_by_date(&dev, flow).await;
        assert_eq!(runs.len(), 30, "{flow}: every date");
        for (date, list) in &runs {
            assert_eq!(list.len(), 1, "{flow} {date} ran {} times", list.len());
            let s = &step[&(flow.to_string(), date.clone())];
            assert_eq!(s["run_id"], list[0]["run_id"], "{s}");
            spans.push((ms(&s["started_at"]), ms(&s["finished_at"])));
        }
    }
    // Upstream first, for every date.
    for (up, down) in [("bs-a", "bs-b"), ("bs-b", "bs-c")] {
        for date in runs_by_date(&dev, up).await.keys() {
            let (u, d) = (&step[&(up.to_string(), date.clone())], &step[&(down.to_string(), date.clone())]);
            assert!(
                ms(&d["started_at"]) >= ms(&u["finished_at"]),
                "{down} {date} started before {up}: {d} {u}"
            );
        }
    }
    let most = max_overlap(&spans);
    assert!(most <= 4, "{most} runs of the backfill overlapped, parallel 4");
    // The cron flow's ticks during the backfill started on time.
    let (from, to) = (ms(&done["created_at"]), ms(&done["finished_at"]));
    let ticks: Vec<(i64, i64)> =
        cron_starts(&dev, "bs-tick").await.into_iter().filter(|(t, _)| *t >= from && *t <= to).collect();
    assert!(ticks.len() >= 2, "at least two ticks during the {} ms backfill: {ticks:?}", to - from);
    let late: Vec<i64> = ticks.iter().map(|(t, s)| s - t).collect();
    assert!(late.iter().all(|&l| l <= 1000), "tick start delays (ms): {late:?}");
    println!(
        "backfill at size: 90 runs in {} ms (wall {:?}), max overlap {most}, {} ticks, start delays {:?} ms",
        to - from,
        wall,
        ticks.len(),
        late
    );
}
