//! Global throttle permits, shared by every backend: at most `max` unfinished runs
//! hold one, a holder keeps it, a commit frees it, finished runs' rows don't count.

use super::suite::new_run;
use crate::*;

fn key(run: &str) -> PermitKey {
    PermitKey { flow: "f".into(), node: "n".into(), run_id: run.into() }
}

pub(crate) async fn permits_are_capped_across_holders_and_freed_by_commits(s: &dyn Store) {
    for i in 0..4 {
        s.create_run(&new_run(&format!("r{i}"), None, 0, Overlap::Queue)).await.expect("create");
    }
    let (l0, l1, l2) = (key("r0"), key("r1"), key("r2"));
    let (a, b, c) = futures::join!(
        s.try_permit(&l0, "a", 2, 1),
        s.try_permit(&l1, "b", 2, 1),
        s.try_permit(&l2, "a", 2, 1)
    );
    let granted = [a.expect("r0"), b.expect("r1"), c.expect("r2")].iter().filter(|g| **g).count();
    assert_eq!(granted, 2, "two permits among three concurrent asks");
    let holder = if s.try_permit(&l0, "b", 2, 2).await.expect("r0 again") { "r0" } else { "r1" };
    assert!(s.try_permit(&key(holder), "b", 2, 3).await.expect("holder keeps it"));
    assert!(!s.try_permit(&key("r3"), "a", 2, 3).await.expect("full"));
    s.commit(&Batch { permit_releases: vec![key(holder)], ..Batch::default() }).await.expect("release");
    assert!(s.try_permit(&key("r3"), "a", 2, 4).await.expect("freed by the commit"));
    assert!(!s.try_permit(&key(holder), "a", 2, 5).await.expect("full again"));
    let finished = RunWrite {
        run_id: "r3".into(),
        state: madeira_core::RunState::Success,
        started_at: None,
        finished_at: Some(6),
    };
    s.commit(&Batch { runs: vec![finished], ..Batch::default() }).await.expect("r3 finished");
    assert!(s.try_permit(&key(holder), "a", 2, 7).await.expect("a finished run's row does not count"));
    let other_node = PermitKey { node: "m".into(), ..key("r0") };
    assert!(s.try_permit(&other_node, "a", 1, 8).await.expect("nodes are counted apart"));
}
