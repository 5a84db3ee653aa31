//! One failed run is one incident (issue 33 item 8), through the real planner
//! and a webhook receiver: `mark-success` on the root cause sends exactly one
//! `resolved`; a rerun with `--downstream` that fixes the root cause but fails a
//! node the alert named as skipped updates the same alert once ("root cause
//! moved") instead of paging a second critical alert, and the run's later
//! success then resolves that one alert once; a root cause outside what the
//! alert named says so, still in one `update`; a run that leaves an alert other
//! runs still hold opens its own alert, whose firing message says where it came from.

use std::collections::HashMap;
use std::time::Duration;

use madeira_core::{Command, RunSnapshot, RunState};
use serde_json::{Value, json};

use crate::support::{Harness, Mode, Receiver, drive, failed_run, flow, settings, wait_for};

const SEC: Duration = Duration::from_secs(1);

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

fn config(hook: &Receiver) -> Value {
    json!({"group_wait": "10s", "group_interval": "5m", "repeat_interval": "4h",
        "external_url": "http://madeira.test",
        "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/hook")}]})
}

/// `(kind, alert id)` of every webhook body so far.
fn sent(hook: &Receiver) -> Vec<(String, String)> {
    hook.delivered()
        .iter()
        .map(|h| {
            let kind = h.body["kind"].as_str().unwrap_or_default().to_string();
            (kind, h.body["alerts"][0]["id"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

fn kinds(hook: &Receiver) -> Vec<String> {
    sent(hook).into_iter().map(|(k, _)| k).collect()
}

/// An operator's command on a finished run, driven to the run's next end.
fn act(snap: &mut RunSnapshot, cmd: Command, failing: &[(&str, &str)]) {
    drive(snap, cmd, &failing.iter().copied().collect::<HashMap<_, _>>());
}

#[tokio::test]
async fn mark_success_of_the_root_cause_sends_exactly_one_resolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock()).await;
    let settle = flow("settle", 3);
    let mut snap = failed_run(&settle, "run-1", "HTTP 503 from ledger");
    h.handle.observer().run_finished(&snap);
    h.advance(11 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"]);

    act(&mut snap, Command::MarkSuccess { node: 0 }, &[]);
    assert_eq!(snap.state, RunState::Success);
    h.handle.observer().run_finished(&snap);
    wait_for("a resolved message", || hook.count() >= 2).await;
    h.advance(30 * 60 * SEC, 60 * SEC).await;
    let sent = sent(&hook);
    assert_eq!(kinds(&hook), ["firing", "resolved"], "exactly one resolved: {sent:?}");
    assert_eq!(sent[0].1, sent[1].1, "the same alert");
    h.stop().await;
}

/// The report's sequence: fail at `root`, rerun it with its downstream, `d0` (named
/// as skipped because of `root`) fails, then mark-success `d0`.
#[tokio::test]
async fn fixing_half_an_incident_updates_its_alert_and_the_end_resolves_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock()).await;
    let settle = flow("settle", 3);
    let mut snap = failed_run(&settle, "run-1", "HTTP 503 from ledger");
    h.handle.observer().run_finished(&snap);
    h.advance(11 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"]);
    let fired = hook.delivered()[0].body["alerts"][0].clone();
    assert_eq!(fired["causes"][0]["skipped"], json!(["d0", "d1", "d2"]), "{fired}");

    act(&mut snap, Command::Rerun { node: 0, downstream: true }, &[("d0", "balance mismatch 42")]);
    assert_eq!(snap.state, RunState::Failed, "d0 fails after root is fixed");
    h.handle.observer().run_finished(&snap);
    wait_for("the update", || hook.count() >= 2).await;
    h.advance(60 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing", "update"], "no second page");
    let update = hook.delivered()[1].body.clone();
    let alert = &update["alerts"][0];
    assert_eq!(alert["id"], fired["id"], "the same alert, updated");
    assert_eq!(alert["status"], "firing");
    assert_eq!(alert["node"], "d0");
    assert_eq!(alert["causes"][0]["node"], "d0", "{alert}");
    assert_eq!(alert["runs"], json!(["run-1"]));
    assert_eq!(alert["count"], 1, "one failed run still");
    let text = update["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("## [critical · update] MadeiraRunFailed · flow settle\n"), "{text}");
    assert!(
        text.contains(
            "**Update:** root cause moved in run run-1: node `root` no longer fails; node `d0` (skipped before because of `root`) failed\n"
        ),
        "{text}"
    );
    assert!(text.contains("**Root cause:** node `d0` failed after 3 attempts\n"), "{text}");
    assert!(text.contains("`madeira mark-success run-1 d0 --reason \"…\"`"), "{text}");

    act(&mut snap, Command::MarkSuccess { node: 1 }, &[]);
    assert_eq!(snap.state, RunState::Success);
    h.handle.observer().run_finished(&snap);
    wait_for("the resolved message", || hook.count() >= 3).await;
    h.advance(30 * 60 * SEC, 60 * SEC).await;
    let sent = sent(&hook);
    assert_eq!(kinds(&hook), ["firing", "update", "resolved"], "exactly one resolved: {sent:?}");
    assert!(sent.iter().all(|(_, id)| *id == sent[0].1), "one alert throughout: {sent:?}");
    h.stop().await;
}

/// The rerun fails the same node with another kind of error: a new root cause
/// in the same run, said in the one update; later runs failing that way join it.
#[tokio::test]
async fn a_new_root_cause_in_the_same_run_is_said_in_one_update_and_later_runs_join_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock()).await;
    let settle = flow("settle", 1);
    let mut snap = failed_run(&settle, "run-1", "HTTP 503 from ledger");
    h.handle.observer().run_finished(&snap);
    h.advance(11 * SEC, SEC).await;
    act(&mut snap, Command::Rerun { node: 0, downstream: false }, &[("root", "disk full")]);
    assert_eq!(snap.state, RunState::Failed);
    h.handle.observer().run_finished(&snap);
    wait_for("the update", || hook.count() >= 2).await;
    let text = hook.delivered()[1].body["text"].as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("**Update:** new root cause in run run-1: node `root` now fails with another error\n"),
        "{text}"
    );
    assert!(text.contains("**Error:** disk full\n"), "{text}");
    // Another run failing the new way joins the same alert (no new page).
    h.handle.observer().run_finished(&failed_run(&settle, "run-2", "disk full"));
    h.advance(60 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing", "update"]);
    let list =
        h.handle.list(&madeira_store::AlertQuery { status: None, flow: None, limit: 10, before: None }).await;
    let list = list.expect("list");
    let alerts = list["alerts"].as_array().cloned().unwrap_or_default();
    assert_eq!(alerts.len(), 1, "{list}");
    assert_eq!(alerts[0]["runs"], json!(["run-1", "run-2"]), "{list}");
    h.stop().await;
}

/// An alert grouping two runs: one is rerun and fails elsewhere. The other still
/// fails at `root`, so the alert stays; the moved run gets its own alert, whose
/// one firing message names the alert it came from.
#[tokio::test]
async fn a_run_moving_off_a_shared_alert_opens_its_own_saying_where_it_came_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock()).await;
    let settle = flow("settle", 2);
    let mut snap = failed_run(&settle, "run-1", "HTTP 503 from ledger");
    h.handle.observer().run_finished(&snap);
    h.handle.observer().run_finished(&failed_run(&settle, "run-2", "HTTP 503 from ledger"));
    h.advance(11 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"]);
    let first = sent(&hook)[0].1.clone();
    act(&mut snap, Command::Rerun { node: 0, downstream: true }, &[("d1", "no quota")]);
    h.handle.observer().run_finished(&snap);
    h.advance(11 * SEC, SEC).await;
    let sent = sent(&hook);
    assert_eq!(kinds(&hook), ["firing", "firing"], "{sent:?}");
    assert_ne!(sent[1].1, first);
    let text = hook.delivered()[1].body["text"].as_str().unwrap_or_default().to_string();
    assert!(
        text.contains(&format!(
            "**Moved:** run run-1 was on alert {first}: node `root` no longer fails; node `d1` (skipped before because of `root`) failed\n"
        )),
        "{text}"
    );
    let list =
        h.handle.list(&madeira_store::AlertQuery { status: None, flow: None, limit: 10, before: None }).await;
    let list = list.expect("list");
    let old = list["alerts"].as_array().into_iter().flatten().find(|a| a["id"] == first.as_str());
    assert_eq!(old.map(|a| a["runs"].clone()), Some(json!(["run-2"])), "{list}");
    h.stop().await;
}
