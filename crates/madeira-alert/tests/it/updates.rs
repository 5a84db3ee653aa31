//! Alerts that grow are announced again (Alertmanager's model), with a manual
//! clock: 30 more failures of one root cause after the first message give one
//! update per channel `group_interval` after it — the new count and the newest
//! run — and nothing more while nothing changes; an unresolved critical alert is
//! reminded every `repeat_interval`; the schedule lives in the store, so another
//! aggregator on the same store (a new alert leader) neither repeats nor forgets.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Harness, Mode, Receiver, failed_run, flow, settings};

const SEC: Duration = Duration::from_secs(1);
const MIN: Duration = Duration::from_secs(60);

struct Channels {
    wecom: Receiver,
    hook: Receiver,
    am: Receiver,
}

impl Channels {
    async fn start() -> Channels {
        Channels {
            wecom: Receiver::start(Mode::Ok).await,
            hook: Receiver::start(Mode::Ok).await,
            am: Receiver::start(Mode::Ok).await,
        }
    }

    fn config(&self) -> Value {
        json!({"group_wait": "10s", "group_interval": "5m", "repeat_interval": "4h",
            "resend_every": "1h", "external_url": "http://madeira.test:7070",
            "channels": [
                {"name": "wecom", "type": "wecom", "url": self.wecom.url("/send?key=k")},
                {"name": "hook", "type": "webhook", "url": self.hook.url("/hook")},
                {"name": "am", "type": "alertmanager", "url": self.am.url("")}]})
    }

    /// The webhook's bodies of `kind`.
    fn hook_kinds(&self) -> Vec<String> {
        self.hook
            .delivered()
            .iter()
            .map(|h| h.body["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn wecom_titles(&self) -> Vec<String> {
        self.wecom
            .delivered()
            .iter()
            .map(|h| {
                let text = h.body["markdown"]["content"].as_str().unwrap_or_default();
                text.lines().next().unwrap_or_default().to_string()
            })
            .collect()
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

#[tokio::test]
async fn thirty_more_failures_give_one_update_per_channel_with_the_new_count_and_newest_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ch = Channels::start().await;
    let h = Harness::start(dir.path(), settings(ch.config(), &[]), clock()).await;
    let observer = h.handle.observer();
    let settle = flow("settle", 0);
    let created = madeira_alert::Clock::now_ms(&h.clock);
    observer.run_finished(&failed_run(&settle, "run-1", "HTTP 503 from ledger"));
    h.advance(11 * SEC, SEC).await;
    assert_eq!((ch.wecom.count(), ch.hook_kinds(), ch.am.count()), (1, vec!["firing".to_string()], 1));

    // 30 more runs fail the same way during the next minute.
    for i in 2..=31 {
        observer.run_finished(&failed_run(&settle, &format!("run-{i}"), "HTTP 502 from ledger"));
        h.advance(2 * SEC, SEC).await;
    }
    assert_eq!(ch.wecom.count(), 1, "no message per failure");
    // group_interval after the first message (sent at +10 s): one update.
    h.advance(4 * MIN, 10 * SEC).await;
    assert_eq!((ch.wecom.count(), ch.hook.count()), (2, 2));
    let since = rfc3339(created);
    let expected = format!(
        "## [critical · update] MadeiraRunFailed · flow settle
**Update:** 31 failed runs now, 30 new since the last message (firing since {since})
**Root cause:** node `root` failed after 3 attempts
**Error:** HTTP 502 from ledger
**Grouped:** 31 runs failed the same way
[Run run-31](http://madeira.test:7070/runs/run-31)
`madeira rerun run-31 root --reason \"…\"`
`madeira mark-success run-31 root --reason \"…\"`
`madeira runs --flow settle --status FAILED`
"
    );
    assert_eq!(
        ch.wecom.delivered()[1].body,
        json!({"msgtype": "markdown", "markdown": {"content": expected}})
    );
    let update = &ch.hook.delivered()[1].body;
    assert_eq!(update["kind"], "update", "{update}");
    assert_eq!(update["title"], "[critical · update] MadeiraRunFailed · flow settle");
    let alert = &update["alerts"][0];
    assert_eq!((alert["count"].clone(), alert["added"].clone()), (json!(31), json!(30)), "{alert}");
    assert_eq!(alert["run_url"], "http://madeira.test:7070/runs/run-31");
    assert_eq!(alert["runs"].as_array().map(Vec::len), Some(31));
    let first_id = ch.hook.delivered()[0].body["alerts"][0]["id"].clone();
    assert_eq!(alert["id"], first_id, "the same alert, announced again");
    // Alertmanager: the alert re-posted with the newest run and the new count.
    let am = ch.am.delivered().last().expect("am post").body.clone();
    assert_eq!(am[0]["labels"]["alert_id"], first_id, "{am}");
    assert_eq!(am[0]["annotations"]["run_id"], "run-31", "{am}");
    let description = am[0]["annotations"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("31 runs failed the same way"), "{description}");

    // Nothing new: no further message until the reminder.
    h.advance(30 * MIN, MIN).await;
    assert_eq!((ch.wecom.count(), ch.hook.count()), (2, 2), "{:?}", ch.hook_kinds());
    h.stop().await;
}

#[tokio::test]
async fn an_unresolved_critical_alert_is_reminded_and_a_new_leader_keeps_the_schedule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ch = Channels::start().await;
    let clock = clock();
    let h = Harness::start(dir.path(), settings(ch.config(), &[]), clock.clone()).await;
    let settle = flow("settle", 0);
    h.handle.observer().run_finished(&failed_run(&settle, "run-1", "disk full"));
    h.advance(11 * SEC, SEC).await;
    h.handle.observer().run_finished(&failed_run(&settle, "run-2", "disk full"));
    h.advance(MIN, 10 * SEC).await;
    assert_eq!(ch.hook_kinds(), ["firing"]);
    // The aggregating process stops before the update is due; another one takes
    // over the same store (as a new alert leader does).
    h.stop().await;
    let h = Harness::start(dir.path(), settings(ch.config(), &[]), clock.clone()).await;
    h.advance(3 * MIN, 10 * SEC).await;
    assert_eq!(ch.hook_kinds(), ["firing"], "not before group_interval after the first message");
    h.advance(MIN + 10 * SEC, 10 * SEC).await;
    assert_eq!(ch.hook_kinds(), ["firing", "update"], "the update is not forgotten");
    h.stop().await;
    let h = Harness::start(dir.path(), settings(ch.config(), &[]), clock.clone()).await;
    h.advance(3 * 60 * MIN, 5 * MIN).await;
    assert_eq!(ch.hook_kinds(), ["firing", "update"], "nor repeated after a restart");
    h.advance(60 * MIN, 5 * MIN).await;
    assert_eq!(ch.hook_kinds(), ["firing", "update", "reminder"], "4 h after the update");
    assert_eq!(
        ch.wecom_titles(),
        [
            "## [critical] MadeiraRunFailed · flow settle",
            "## [critical · update] MadeiraRunFailed · flow settle",
            "## [critical · reminder] MadeiraRunFailed · flow settle",
        ]
    );
    let reminder = &ch.wecom.delivered()[2].body["markdown"]["content"];
    let text = reminder.as_str().unwrap_or_default();
    assert!(text.contains("**Reminder:** still unresolved: 2 failed runs, firing since"), "{text}");
    // A run that succeeds again resolves it: `resolved`, and no more reminders.
    let mut fixed = failed_run(&settle, "run-1", "disk full");
    fixed.state = madeira_core::RunState::Success;
    h.handle.observer().run_finished(&fixed);
    fixed.run_id = "run-2".into();
    h.handle.observer().run_finished(&fixed);
    h.advance(10 * 60 * MIN, 30 * MIN).await;
    assert_eq!(ch.hook_kinds(), ["firing", "update", "reminder", "resolved"]);
    h.stop().await;
}
