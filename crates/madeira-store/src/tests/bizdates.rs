//! Business dates on runs: kept, listed by, and one scheduled run per date.

use crate::tests::suite::new_run;
use crate::*;
use madeira_core::state::RunState;

fn dated(id: &str, date: &str, trigger: &str) -> NewRun {
    NewRun {
        biz_date: Some(date.into()),
        trigger: trigger.into(),
        one_per_biz_date: trigger.starts_with("cron"),
        ..new_run(id, None, 0, Overlap::Queue)
    }
}

pub(crate) async fn runs_keep_their_business_date_and_are_found_by_it(s: &dyn Store) {
    s.create_run(&dated("r1", "2026-09-30", "manual")).await.expect("create");
    s.create_run(&dated("r2", "2026-10-08", "manual")).await.expect("create");
    s.create_run(&new_run("r3", None, 0, Overlap::Queue)).await.expect("create");
    let stored = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(stored.run.biz_date.as_deref(), Some("2026-09-30"));
    assert_eq!(stored.run.wait_reason, None);
    let undated = s.load_run("r3").await.expect("load").expect("r3");
    assert_eq!(undated.run.biz_date, None);
    let query = RunQuery { biz_date: Some("2026-10-08".into()), limit: 10, ..RunQuery::default() };
    let found: Vec<String> = s.list_runs(&query).await.expect("list").into_iter().map(|r| r.id).collect();
    assert_eq!(found, ["r2"]);
}

pub(crate) async fn scheduled_runs_are_one_per_business_date(s: &dyn Store) {
    let first = s.create_run(&dated("c1", "2026-10-08", "cron")).await.expect("create");
    assert!(matches!(first, CreateOutcome::Created { .. }), "{first:?}");
    // A catch-up tick for the same business date is the same run.
    let again = s.create_run(&dated("c2", "2026-10-08", "cron_catchup")).await.expect("create");
    assert_eq!(again, CreateOutcome::Existing { run_id: "c1".into(), version: 1 });
    // Two in one batch: the second finds the first.
    let batch = [dated("c3", "2026-10-09", "cron"), dated("c4", "2026-10-09", "cron")];
    let outcomes = s.create_runs(&batch).await.expect("batch");
    assert!(matches!(outcomes[0], CreateOutcome::Created { .. }), "{outcomes:?}");
    assert_eq!(outcomes[1], CreateOutcome::Existing { run_id: "c3".into(), version: 1 });
    // An operator's rerun of that date is a new run.
    let rerun = s.create_run(&dated("m1", "2026-10-08", "manual")).await.expect("create");
    assert!(matches!(rerun, CreateOutcome::Created { .. }), "{rerun:?}");
    let query = RunQuery { biz_date: Some("2026-10-08".into()), limit: 10, ..RunQuery::default() };
    assert_eq!(s.list_runs(&query).await.expect("list").len(), 2);
}

pub(crate) async fn a_run_held_for_a_reason_waits_until_released_once(s: &dyn Store) {
    let held = NewRun {
        wait_reason: Some("depends_on_past: the run for 2026-10-07 is FAILED".into()),
        ..dated("h1", "2026-10-08", "cron")
    };
    let created = s.create_run(&held).await.expect("create");
    assert_eq!(
        created,
        CreateOutcome::Created { run_id: "h1".into(), start: false, cancel_previous: vec![] }
    );
    let row = s.load_run("h1").await.expect("load").expect("h1").run;
    assert_eq!((row.admitted_at, row.wait_reason.as_deref()), (None, held.wait_reason.as_deref()));
    // Promotion for room never takes a run held for its own reason.
    assert_eq!(s.promote_queued("f", 1, 20).await.expect("promote"), None);
    let reason = Some("depends_on_past: the run for 2026-10-07 is RUNNING");
    assert!(s.set_wait_reason("h1", reason, None).await.expect("reason"));
    assert_eq!(s.load_run("h1").await.expect("load").expect("h1").run.wait_reason.as_deref(), reason);
    assert!(s.set_wait_reason("h1", None, Some(30)).await.expect("release"));
    let row = s.load_run("h1").await.expect("load").expect("h1").run;
    assert_eq!((row.state, row.admitted_at, row.wait_reason), (RunState::Admitted, Some(30), None));
    let log = s.transitions("h1").await.expect("log");
    let last = log.last().map(|t| (t.edge.from_name(), t.edge.to_name(), t.edge.cause_name()));
    assert_eq!(last, Some(("QUEUED", "ADMITTED", "admitted")), "the release is a recorded edge");
    assert!(!s.set_wait_reason("h1", None, Some(40)).await.expect("again"), "released once");
    // Released without admission (the flow has max_active_runs): promotion takes it.
    s.create_run(&NewRun { wait_reason: Some("x".into()), ..dated("h2", "2026-10-09", "cron") })
        .await
        .expect("h2");
    assert!(s.set_wait_reason("h2", None, None).await.expect("release"));
    assert_eq!(s.promote_queued("f", 5, 50).await.expect("promote").as_deref(), Some("h2"));
}

pub(crate) async fn a_deadline_miss_is_recorded_once(s: &dyn Store) {
    assert!(s.record_deadline_miss("f", "2026-10-08", 10).await.expect("first"));
    assert!(!s.record_deadline_miss("f", "2026-10-08", 20).await.expect("again"), "once per flow and date");
    assert!(s.record_deadline_miss("f", "2026-10-09", 30).await.expect("next date"));
    assert!(s.record_deadline_miss("g", "2026-10-08", 40).await.expect("other flow"));
}

pub(crate) async fn a_warning_key_fires_once(s: &dyn Store) {
    assert!(s.record_once("f", "deadline_at_risk:f:2026-10-08", 10).await.expect("first"));
    assert!(!s.record_once("f", "deadline_at_risk:f:2026-10-08", 20).await.expect("again"), "once per key");
    assert!(s.record_once("f", "max_duration:r1", 30).await.expect("other key"));
}

fn attempt(run: &str, node: &str, n: u32, start: i64, end: i64, outcome: &str) -> AttemptRecord {
    AttemptRecord {
        run_id: run.into(),
        node: node.into(),
        attempt: n,
        started_at: start,
        finished_at: Some(end),
        outcome: Some(outcome.into()),
        error: None,
        host: None,
    }
}

pub(crate) async fn node_durations_are_the_latest_runs_successes_newest_first(s: &dyn Store) {
    for id in ["r1", "r2", "r3"] {
        s.create_run(&new_run(id, None, 0, Overlap::Queue)).await.expect("create");
    }
    let attempts = vec![
        attempt("r1", "a", 1, 0, 1_000, "SUCCESS"),
        attempt("r2", "a", 1, 0, 2_000, "SUCCESS"),
        attempt("r2", "b", 1, 0, 9_000, "FAILED"),
        attempt("r2", "b", 2, 10_000, 15_000, "SUCCESS"),
        attempt("r3", "a", 1, 0, 3_000, "SUCCESS"),
    ];
    s.commit(&Batch { attempts, ..Batch::default() }).await.expect("attempts");
    let all = s.node_durations("f", 10).await.expect("durations");
    assert_eq!(
        all,
        [("a".to_string(), 3_000), ("b".into(), 5_000), ("a".into(), 2_000), ("a".into(), 1_000)]
    );
    let latest = s.node_durations("f", 1).await.expect("durations");
    assert_eq!(latest, [("a".to_string(), 3_000)], "only the latest run");
    assert!(s.node_durations("other", 10).await.expect("durations").is_empty());
}

pub(crate) async fn applied_calendars_are_versioned_by_content(s: &dyn Store) {
    assert!(s.calendars().await.expect("none").is_empty());
    assert_eq!(
        s.put_calendar("sse", "x", "h1", 1).await.expect("put"),
        PutFlow { version: 1, created: true }
    );
    assert_eq!(
        s.put_calendar("sse", "x", "h1", 2).await.expect("put"),
        PutFlow { version: 1, created: false }
    );
    assert_eq!(
        s.put_calendar("sse", "y", "h2", 3).await.expect("put"),
        PutFlow { version: 2, created: true }
    );
    s.put_calendar("plant", "p", "h3", 4).await.expect("put");
    let latest: Vec<(String, u32, String)> =
        s.calendars().await.expect("list").into_iter().map(|c| (c.name, c.version, c.source)).collect();
    assert_eq!(latest, [("plant".to_string(), 1, "p".to_string()), ("sse".into(), 2, "y".into())]);
}
