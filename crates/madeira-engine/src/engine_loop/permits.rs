//! `throttle.max_permits` shared by every replica of a store (`shared_store`):
//! a ready throttled node waits in this engine's FIFO while the permit is taken
//! in the store (`try_permit`, one row per holding run); a permit is given back in
//! the same commit as the transition that frees it, then every replica is woken
//! (Redis) to retry its waiters — or finds out at its next poll.

use madeira_core::Command;
use madeira_store::PermitKey;
use tracing::{debug, warn};

use super::Engine;
use crate::clock::now_ms;
use crate::record::Work;

impl Engine {
    /// Hands permits of `(flow, node)` to this engine's waiters, oldest first,
    /// while the store grants them.
    pub(super) async fn poll_permits(&mut self, flow: &str, node: usize, work: &mut Work) {
        while let Some(waiter) = self.step.throttle.peek(flow, node).cloned() {
            let def = self.step.runs.get(&waiter.run_id).and_then(|s| s.flow.nodes.get(node).cloned());
            let Some((name, max)) = def.and_then(|d| d.throttle.map(|t| (d.id.clone(), t.max_permits)))
            else {
                self.step.throttle.pop(flow, node);
                continue;
            };
            let key = PermitKey { flow: flow.into(), node: name.clone(), run_id: waiter.run_id.clone() };
            match self.store.try_permit(&key, &self.holder.owner, max, now_ms()).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    warn!(flow = %flow, node = %name, error = %e, "cannot take a permit; retrying at the next poll");
                    return;
                }
            }
            self.step.throttle.pop(flow, node);
            self.step.throttle.held(flow, node, &waiter.run_id);
            work.throttled.insert((flow.to_string(), node), name.clone());
            work.ready_at.insert((waiter.run_id.clone(), node), waiter.ready_at);
            if let Err(e) = self.step.apply(&waiter.run_id, Command::Dispatch { node }, "engine", work) {
                debug!(run_id = %waiter.run_id, error = %e, "permit granted but dispatch not applied");
                self.step.release_global_permit(&waiter.run_id, flow, node, &name, work);
            }
        }
    }
}
