//! XXL-JOB registrations and callbacks, shared by every backend: renewed and
//! expired per (app, address), a new lifetime after a silence, the first
//! callback of a logId kept and later ones ignored, both pruned by age.

use crate::*;

fn callback(log_id: i64, code: i64, at_ms: i64) -> XxlCallbackRow {
    XxlCallbackRow { log_id, app: "order".into(), code, msg: Some(format!("code {code}")), at_ms }
}

pub(crate) async fn xxl_executors_are_renewed_expired_and_removed(s: &dyn Store) {
    s.xxl_register("order", "http://b:9999", 1_000, 90_000).await.expect("register b");
    s.xxl_register("order", "http://a:9999", 2_000, 90_000).await.expect("register a");
    s.xxl_register("order", "http://a:9999", 50_000, 90_000).await.expect("renew a");
    s.xxl_register("billing", "http://c:9999", 3_000, 90_000).await.expect("register c");
    let all = s.xxl_executors(0).await.expect("list");
    let names: Vec<(&str, &str, i64, i64)> =
        all.iter().map(|e| (e.app.as_str(), e.address.as_str(), e.since_ms, e.seen_ms)).collect();
    assert_eq!(
        names,
        [
            ("billing", "http://c:9999", 3_000, 3_000),
            ("order", "http://a:9999", 2_000, 50_000),
            ("order", "http://b:9999", 1_000, 1_000),
        ],
        "renewal keeps the first registration's time"
    );
    assert_eq!(s.xxl_executors(10_000).await.expect("recent").len(), 1, "only a was seen since 10 s");
    s.xxl_register("order", "http://b:9999", 200_000, 90_000).await.expect("back after silence");
    let b = s.xxl_executors(150_000).await.expect("b");
    assert_eq!((b[0].since_ms, b[0].seen_ms), (200_000, 200_000), "a new lifetime after a silence: {b:?}");
    assert!(s.xxl_unregister("order", "http://b:9999").await.expect("remove"));
    assert!(!s.xxl_unregister("order", "http://b:9999").await.expect("again"));
    assert_eq!(s.xxl_prune(40_000, 0).await.expect("prune"), 1, "c, not seen since 3 s, is forgotten");
    let left: Vec<String> = s.xxl_executors(0).await.expect("left").into_iter().map(|e| e.address).collect();
    assert_eq!(left, ["http://a:9999"]);
}

pub(crate) async fn the_first_xxl_callback_of_a_log_id_is_kept(s: &dyn Store) {
    assert!(s.xxl_put_callback(&callback(7, 500, 10)).await.expect("first"));
    assert!(!s.xxl_put_callback(&callback(7, 200, 11)).await.expect("repeat"), "a repeat is not new");
    assert!(s.xxl_put_callback(&callback(9, 200, 12)).await.expect("other"));
    let forged = XxlCallbackRow { app: "billing".into(), ..callback(9, 500, 11) };
    assert!(s.xxl_put_callback(&forged).await.expect("another app's"), "kept beside, not instead");
    let kept = s.xxl_callbacks(&[9, 7, 8]).await.expect("read");
    assert_eq!(
        kept,
        [callback(7, 500, 10), forged.clone(), callback(9, 200, 12)],
        "the first stays, unknown ids are absent"
    );
    assert!(s.xxl_callbacks(&[]).await.expect("none").is_empty());
    assert_eq!(s.xxl_prune(0, 12).await.expect("prune"), 2);
    assert_eq!(s.xxl_callbacks(&[7, 9]).await.expect("after prune"), [callback(9, 200, 12)]);
}
