//! The per-channel rate limit: 30 failing runs within a minute give at most 20
//! posts per channel, the window's last post a digest of what waited for it
//! (sent within the window), the rest merged once the window moves; a robot's
//! "slow down" holds the channel for a whole window.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use crate::support::{Harness, Mode, Receiver, failed_run, flow, settings, wait_for};

const SEC: Duration = Duration::from_secs(1);

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

async fn two_channels(group_wait: &str) -> (tempfile::TempDir, Harness, Receiver, Receiver) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wecom = Receiver::start(Mode::Ok).await;
    let hook = Receiver::start(Mode::Ok).await;
    let config = json!({"group_wait": group_wait, "channels": [
        {"name": "wecom", "type": "wecom", "url": wecom.url("/send?key=k")},
        {"name": "hook", "type": "webhook", "url": hook.url("/hook")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    (dir, h, wecom, hook)
}

/// Alert ids a webhook post carried.
fn ids(hook: &Receiver) -> Vec<String> {
    hook.delivered()
        .iter()
        .flat_map(|h| h.body["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| a["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn thirty_failures_spread_over_a_minute_overflow_into_a_digest_within_the_window() {
    let (_dir, h, wecom, hook) = two_channels("0s").await;
    let observer = h.handle.observer();
    for i in 0..30 {
        if i > 0 {
            h.advance(2 * SEC, SEC).await;
        }
        observer.run_finished(&failed_run(&flow(&format!("flow-{i}"), 1), &format!("run-{i}"), "boom"));
    }
    // 58 s after the first failure: 19 posts (0..36 s), then the window's last post,
    // 10 s (`digest_wait`) after the 20th alert queued: a digest of the 5 that waited.
    wait_for("20 posts per channel", || wecom.count() == 20 && hook.count() == 20).await;
    let digest = wecom.delivered()[19].body["markdown"]["content"].as_str().expect("content").to_string();
    assert!(digest.starts_with("## [digest] 5 alerts merged"), "{digest}");
    assert_eq!(digest.matches("\n- [critical]").count(), 5, "{digest}");
    let ts = |i: usize| -> i64 {
        let header = &hook.delivered()[i].headers["x-madeira-timestamp"];
        header.to_str().expect("ascii").parse().expect("seconds")
    };
    assert!((47..=48).contains(&(ts(19) - ts(0))), "sent within the window: {}", ts(19) - ts(0));
    assert_eq!(hook.delivered()[19].body["alerts"].as_array().map(Vec::len), Some(5));
    h.advance(SEC, SEC).await;
    assert_eq!((wecom.count(), hook.count()), (20, 20), "no 21st post within the minute");
    // The first post ages out of the window at 60 s: one digest carries the rest.
    h.advance(3 * SEC, SEC).await;
    wait_for("the second digests", || wecom.count() == 21 && hook.count() == 21).await;
    let digest = wecom.delivered()[20].body["markdown"]["content"].as_str().expect("content").to_string();
    assert!(digest.starts_with("## [digest] 6 alerts merged"), "{digest}");
    assert_eq!(hook.delivered()[20].body["kind"], "digest");
    let all: HashSet<String> = ids(&hook).into_iter().collect();
    assert_eq!((all.len(), ids(&hook).len()), (30, 30), "every alert reached the webhook once");
    h.advance(Duration::from_secs(180), 10 * SEC).await;
    assert_eq!((wecom.count(), hook.count()), (21, 21));
    let states = h.delivery_states().await;
    let merged = states.iter().filter(|(c, _, s)| c == "wecom" && s == "merged").count();
    assert_eq!(merged, 11);
    h.stop().await;
}

#[tokio::test]
async fn a_burst_of_thirty_gives_nineteen_posts_and_a_digest_of_eleven() {
    let (_dir, h, wecom, hook) = two_channels("5s").await;
    let observer = h.handle.observer();
    for i in 0..30 {
        observer.run_finished(&failed_run(&flow(&format!("flow-{i}"), 1), &format!("run-{i}"), "boom"));
    }
    h.advance(6 * SEC, SEC).await;
    wait_for("19 posts per channel", || wecom.count() == 19 && hook.count() == 19).await;
    // The last post of the window gathers for `digest_wait` (10 s) and carries the rest.
    h.advance(10 * SEC, SEC).await;
    wait_for("20 posts per channel", || wecom.count() == 20 && hook.count() == 20).await;
    h.advance(Duration::from_secs(300), 10 * SEC).await;
    assert_eq!((wecom.count(), hook.count()), (20, 20), "at most 20 posts, ever, for this burst");
    let last = &hook.delivered()[19].body;
    assert_eq!((last["kind"].clone(), last["alerts"].as_array().map(Vec::len)), (json!("digest"), Some(11)));
    assert_eq!(ids(&hook).into_iter().collect::<HashSet<_>>().len(), 30);
    h.stop().await;
}

#[tokio::test]
async fn slow_down_holds_the_channel_for_a_whole_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wecom = Receiver::start(Mode::SlowDown).await;
    let config = json!({"group_wait": "0s", "channels": [{"name": "w", "type": "wecom", "url": wecom.url("/s?key=k")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    h.handle.observer().run_finished(&failed_run(&flow("f", 1), "r", "boom"));
    h.advance(SEC, SEC).await;
    wait_for("the first try", || wecom.requests() == 1).await;
    wecom.set(Mode::Ok);
    h.advance(Duration::from_secs(50), 5 * SEC).await;
    assert_eq!(wecom.requests(), 1, "45009 means wait: no retry inside the window");
    h.advance(Duration::from_secs(15), 5 * SEC).await;
    wait_for("the retry after the window", || wecom.count() == 1).await;
    h.stop().await;
}
