//! Backfills: created with their steps and audit entry; advanced under their lock
//! (claims up to `parallel`, never a step before the steps it waits for, dates
//! that already succeeded skipped, a claim handed out again only when stale,
//! blocked steps and `done` at the end); pause, resume and cancel through the
//! core's table; progress counted from the runs; backfill runs ranked below other
//! runs waiting for room; retention removes finished backfills whose runs are gone.

use madeira_core::RunState;
use madeira_core::estate::BackfillAction;
use serde_json::json;

use crate::tests::suite::new_run;
use crate::*;

fn audit(action: &str) -> AuditRecord {
    AuditRecord {
        at: 5,
        actor: "ops".into(),
        action: action.into(),
        run_id: None,
        node: None,
        reason: Some("late data".into()),
        details: Some(json!({"backfill": "bf1"})),
    }
}

/// a(d1), b(d1) after a(d1), a(d2), b(d2) after a(d2).
fn backfill(parallel: u32, rerun: &str) -> NewBackfill {
    let step = |flow: &str, date: &str, waits: Vec<usize>| NewBackfillStep {
        flow: flow.into(),
        biz_date: date.into(),
        waits,
    };
    NewBackfill {
        id: "bf1".into(),
        flow: "a".into(),
        date_from: Some("2026-11-02".into()),
        date_to: Some("2026-11-03".into()),
        calendar: None,
        dates: vec!["2026-11-02".into(), "2026-11-03".into()],
        order: "asc".into(),
        parallel,
        with_dependents: true,
        rerun: rerun.into(),
        reason: "late data".into(),
        actor: "ops".into(),
        now_ms: 1,
        steps: vec![
            step("a", "2026-11-02", vec![]),
            step("b", "2026-11-02", vec![0]),
            step("a", "2026-11-03", vec![]),
            step("b", "2026-11-03", vec![2]),
        ],
    }
}

async fn run_for(s: &dyn Store, id: &str, flow: &str, date: &str, state: RunState) {
    let run = NewRun {
        flow: flow.into(),
        biz_date: Some(date.into()),
        trigger: "backfill".into(),
        ..new_run(id, Some(&format!("backfill:bf1:{flow}:{date}")), 0, Overlap::Queue)
    };
    s.create_run(&run).await.expect("create");
    if state != RunState::Queued {
        let write = RunWrite { run_id: id.into(), state, started_at: Some(20), finished_at: Some(30) };
        s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
    }
}

fn seqs(a: &Advanced) -> Vec<u32> {
    a.steps.iter().map(|t| t.seq).collect()
}

pub(crate) async fn a_backfill_advances_within_parallel_and_upstream_first(s: &dyn Store) {
    s.create_backfill(&backfill(1, "skip-existing"), &audit("backfill")).await.expect("create");
    let first = s.advance_backfill("bf1", 100, 30_000).await.expect("advance").expect("found");
    assert_eq!((seqs(&first), first.actor.as_str(), first.finished), (vec![0], "ops", false));
    // Claimed, not linked: not handed out again until stale.
    assert!(seqs(&s.advance_backfill("bf1", 200, 30_000).await.expect("a").expect("f")).is_empty());
    let again = s.advance_backfill("bf1", 40_000, 30_000).await.expect("a").expect("f");
    assert_eq!(seqs(&again), vec![0], "a stale claim is handed out again");
    run_for(s, "r0", "a", "2026-11-02", RunState::Queued).await;
    assert_eq!(
        s.settle_backfill_step("bf1", 0, Some("r0"), None).await.expect("s").as_deref(),
        Some("running")
    );
    assert_eq!(s.backfills_of_runs(&["r0".into(), "x".into()]).await.expect("of"), ["bf1"]);
    assert!(seqs(&s.advance_backfill("bf1", 40_100, 30_000).await.expect("a").expect("f")).is_empty());
    // a(d1) succeeds: b(d1) is next (parallel 1), not a(d2) before it.
    let write = RunWrite {
        run_id: "r0".into(),
        state: RunState::Success,
        started_at: Some(20),
        finished_at: Some(30),
    };
    s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
    let next = s.advance_backfill("bf1", 40_200, 30_000).await.expect("a").expect("f");
    assert_eq!(seqs(&next), vec![1]);
    let (record, steps) = s.get_backfill("bf1").await.expect("get").expect("found");
    assert_eq!((record.progress.total, record.progress.success, record.progress.pending), (4, 1, 3));
    assert_eq!(steps[0].run_id.as_deref(), Some("r0"));
    assert_eq!(steps[0].run_state.as_deref(), Some("SUCCESS"));
    assert_eq!(record.dates, ["2026-11-02", "2026-11-03"]);
    // b(d1) is refused (say, its flow was deleted): a(d2) goes on, b(d2) too once a(d2) succeeds.
    s.settle_backfill_step("bf1", 1, None, Some("flow b does not exist")).await.expect("settle");
    let next = s.advance_backfill("bf1", 40_300, 30_000).await.expect("a").expect("f");
    assert_eq!(seqs(&next), vec![2]);
    run_for(s, "r2", "a", "2026-11-03", RunState::Failed).await;
    s.settle_backfill_step("bf1", 2, Some("r2"), None).await.expect("settle");
    // a(d2) FAILED: nothing in flight, b(d2) is blocked and the backfill is done.
    let last = s.advance_backfill("bf1", 40_400, 30_000).await.expect("a").expect("f");
    assert!(last.finished && last.steps.is_empty(), "{last:?}");
    let (record, steps) = s.get_backfill("bf1").await.expect("get").expect("found");
    assert_eq!(record.state, "done");
    assert_eq!((record.progress.failed, record.progress.blocked), (1, 2));
    assert_eq!(steps[3].note.as_deref(), Some("waits for a 2026-11-03, which did not succeed"));
    assert!(s.active_backfills().await.expect("active").is_empty());
    let listed = s.list_backfills(10).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].progress, record.progress);
    let audit = s.audit(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.expect("audit");
    assert!(audit.iter().any(|a| a.action == "backfill" && a.reason.as_deref() == Some("late data")));
}

pub(crate) async fn a_backfill_skips_dates_that_succeeded_and_pauses_and_cancels(s: &dyn Store) {
    run_for(s, "old", "a", "2026-11-02", RunState::Success).await;
    s.create_backfill(&backfill(4, "skip-existing"), &audit("backfill")).await.expect("create");
    let paused =
        s.change_backfill("bf1", BackfillAction::Pause, 50, &audit("backfill_pause")).await.expect("pause");
    assert!(matches!(paused, BackfillChange::Changed { .. }), "{paused:?}");
    assert!(seqs(&s.advance_backfill("bf1", 100, 30_000).await.expect("a").expect("f")).is_empty());
    let refused =
        s.change_backfill("bf1", BackfillAction::Pause, 60, &audit("backfill_pause")).await.expect("c");
    assert_eq!(refused, BackfillChange::Refused { state: "paused".into() });
    s.change_backfill("bf1", BackfillAction::Resume, 70, &audit("backfill_resume")).await.expect("resume");
    // a(d1) already SUCCESS: skipped, and b(d1) may start with a(d2).
    let next = s.advance_backfill("bf1", 100, 30_000).await.expect("a").expect("f");
    assert_eq!(seqs(&next), vec![1, 2]);
    run_for(s, "r1", "b", "2026-11-02", RunState::Running).await;
    s.settle_backfill_step("bf1", 1, Some("r1"), None).await.expect("settle");
    let cancelled = s
        .change_backfill("bf1", BackfillAction::Cancel, 80, &audit("backfill_cancel"))
        .await
        .expect("cancel");
    let BackfillChange::Changed { to, unfinished, .. } = cancelled else { panic!("{cancelled:?}") };
    assert_eq!((to.as_str(), unfinished), ("cancelled", vec!["r1".to_string()]));
    let (record, _) = s.get_backfill("bf1").await.expect("get").expect("found");
    assert_eq!((record.state.as_str(), record.finished_at), ("cancelled", Some(80)));
    assert_eq!((record.progress.skipped, record.progress.running, record.progress.cancelled), (1, 1, 2));
    assert!(s.advance_backfill("bf1", 200, 30_000).await.expect("a").expect("f").steps.is_empty());
    assert_eq!(s.advance_backfill("nope", 200, 30_000).await.expect("a"), None);
}

pub(crate) async fn backfill_runs_wait_behind_other_runs_for_room(s: &dyn Store) {
    let make = |id: &str, trigger: &str, now_ms: i64| NewRun {
        trigger: trigger.into(),
        now_ms,
        ..new_run(id, None, 1, Overlap::Queue)
    };
    s.create_run(&make("r1", "manual", 10)).await.expect("r1");
    s.create_run(&make("r2-backfill", "backfill", 20)).await.expect("r2");
    // A manual run created after a waiting backfill run is not held behind it.
    let manual = s.create_run(&make("r3-manual", "manual", 30)).await.expect("r3");
    assert!(matches!(manual, CreateOutcome::Created { start: false, .. }), "no room yet: {manual:?}");
    let write = RunWrite {
        run_id: "r1".into(),
        state: RunState::Success,
        started_at: Some(11),
        finished_at: Some(40),
    };
    s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
    assert_eq!(s.promote_queued("f", 1, 50).await.expect("promote").as_deref(), Some("r3-manual"));
    let write = RunWrite {
        run_id: "r3-manual".into(),
        state: RunState::Success,
        started_at: Some(51),
        finished_at: Some(60),
    };
    s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
    // A backfill run waiting longer than BACKFILL_DEFER_MS goes before a newer one.
    s.create_run(&make("r4-manual", "manual", 20 + madeira_core::admit::BACKFILL_DEFER_MS + 1))
        .await
        .expect("r4");
    assert_eq!(s.promote_queued("f", 1, 70).await.expect("promote").as_deref(), Some("r2-backfill"));
}

pub(crate) async fn retention_removes_finished_backfills_once_their_runs_are_gone(s: &dyn Store) {
    s.create_backfill(&backfill(2, "existing"), &audit("backfill")).await.expect("create");
    let running = NewBackfill { id: "bf2".into(), ..backfill(1, "existing") };
    s.create_backfill(&running, &audit("backfill")).await.expect("create bf2");
    // bf1: a(d1) finished at 30, b(d1) at 200; then it is cancelled at 80.
    run_for(s, "r0", "a", "2026-11-02", RunState::Success).await;
    s.settle_backfill_step("bf1", 0, Some("r0"), None).await.expect("settle");
    run_for(s, "r1", "b", "2026-11-02", RunState::Queued).await;
    let write = RunWrite {
        run_id: "r1".into(),
        state: RunState::Success,
        started_at: Some(20),
        finished_at: Some(200),
    };
    s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
    s.settle_backfill_step("bf1", 1, Some("r1"), None).await.expect("settle");
    s.change_backfill("bf1", BackfillAction::Cancel, 80, &audit("backfill_cancel")).await.expect("cancel");
    // Cutoff 100: r0 goes; bf1 ended before it but keeps r1, so it stays.
    assert_eq!(s.prune(100, 100).await.expect("prune"), 1);
    let (kept, steps) = s.get_backfill("bf1").await.expect("get").expect("bf1 kept while r1 is there");
    assert_eq!((kept.state.as_str(), steps.len()), ("cancelled", 4));
    // Cutoff 300: r1 goes, and bf1 with its steps in the same batch; bf2, running, stays.
    assert_eq!(s.prune(300, 100).await.expect("prune"), 1);
    assert_eq!(s.get_backfill("bf1").await.expect("get"), None);
    let left: Vec<String> = s.list_backfills(10).await.expect("list").into_iter().map(|b| b.id).collect();
    assert_eq!(left, ["bf2"]);
    assert_eq!(s.active_backfills().await.expect("active"), ["bf2"]);
    // A done backfill is removed by a later sweep once it finished before the cutoff.
    s.change_backfill("bf2", BackfillAction::Cancel, 400, &audit("backfill_cancel")).await.expect("cancel");
    assert_eq!(s.prune(300, 100).await.expect("prune"), 0);
    assert!(s.get_backfill("bf2").await.expect("get").is_some(), "ended after the cutoff");
    s.prune(500, 100).await.expect("prune");
    assert!(s.list_backfills(10).await.expect("list").is_empty());
}
