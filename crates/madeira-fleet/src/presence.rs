//! Which sidecars this replica has, told to the other replicas of a shared store:
//! every `PUBLISH_EVERY`, and at once when who is live changes, the replica
//! rewrites its rows of the store's presence table (group → jobs declared by its
//! live sidecars). A replica holding a run that waits for one of those groups
//! hands the run over (see the engine's handover). The rows go on shutdown; a
//! killed replica's rows go stale and stop attracting work.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use madeira_store::SidecarPresence;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::Fleet;

const PUBLISH_EVERY: Duration = Duration::from_secs(2);

impl Fleet {
    /// This replica's live sidecars, by group.
    fn presence(&self) -> Vec<SidecarPresence> {
        let state = self.state();
        let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for sidecar in state.sidecars.values().filter(|s| s.live()) {
            groups
                .entry(sidecar.group.clone())
                .or_default()
                .extend(sidecar.jobs.iter().map(|j| j.name.clone()));
        }
        groups
            .into_iter()
            .map(|(group, jobs)| SidecarPresence { group, jobs: jobs.into_iter().collect() })
            .collect()
    }

    /// Publishes until `cancel` (only with an engine attached).
    pub(crate) async fn publish_presence(self, cancel: CancellationToken) {
        let Some(engine) = self.inner.engine.get().cloned() else { return };
        let mut changed = self.inner.changed.subscribe();
        let mut tick = tokio::time::interval(PUBLISH_EVERY);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
                _ = changed.changed() => {}
            }
            let now = madeira_engine::now_ms();
            match engine.presence.publish_sidecars(engine.replica_id(), &self.presence(), now).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    warn!(error = %e, "cannot tell the other replicas which sidecars are connected here");
                }
                Err(_) => {}
            }
        }
        let _ = engine.presence.publish_sidecars(engine.replica_id(), &[], madeira_engine::now_ms()).await;
    }
}
