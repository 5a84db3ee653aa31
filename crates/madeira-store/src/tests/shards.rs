//! Kept shard results, shared by every backend: replaced per shard, read per
//! node and idempotency key in shard order, deleted with their run.

use madeira_core::RunState;

use super::suite::new_run;
use crate::*;

fn shard(run: &str, key: &str, shard: u32, outputs: &str) -> ShardResult {
    ShardResult {
        run_id: run.into(),
        node: "a".into(),
        key: key.into(),
        shard,
        input_hash: "h".into(),
        outputs: outputs.into(),
        at_ms: 20,
    }
}

pub(crate) async fn shard_results_are_kept_per_key_and_pruned_with_their_run(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    for r in
        [shard("r1", "k1", 2, r#"{"n":2}"#), shard("r1", "k1", 0, r#"{"n":0}"#), shard("r1", "k2", 1, "{}")]
    {
        s.put_shard_result(&r).await.expect("put");
    }
    s.put_shard_result(&shard("r1", "k1", 2, r#"{"n":22}"#)).await.expect("replace");
    let kept = s.shard_results("r1", "a", "k1").await.expect("list");
    assert_eq!(kept, [shard("r1", "k1", 0, r#"{"n":0}"#), shard("r1", "k1", 2, r#"{"n":22}"#)]);
    assert!(s.shard_results("r1", "b", "k1").await.expect("other node").is_empty());
    assert_eq!(s.shard_results("r1", "a", "k2").await.expect("other key").len(), 1);
    let done =
        RunWrite { run_id: "r1".into(), state: RunState::Success, started_at: None, finished_at: Some(30) };
    s.commit(&Batch { runs: vec![done], ..Batch::default() }).await.expect("finish");
    assert_eq!(s.prune(40, 100).await.expect("prune"), 1);
    assert!(s.shard_results("r1", "a", "k1").await.expect("after prune").is_empty(), "deleted with the run");
}
