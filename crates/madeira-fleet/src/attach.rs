//! Attaching a sidecar to the registry: its hello makes (or replaces) its entry,
//! a name held by another live process is refused, the attempts it still runs
//! that the fleet has no record of become orphans to adopt, and the assignments
//! moved off it while it was lost come back as stale ones it must kill. Used by
//! the link service on hello and by `fencing` when a lost sidecar is back.

use std::collections::HashSet;
use std::time::{Instant, SystemTime};

use madeira_proto::v1::Hello;
use tracing::info;

use crate::Fleet;
use crate::registry::{Orphan, Outbound, Sidecar};

/// Registers (or re-registers) the sidecar; returns its connection number and the
/// stale assignments it must kill (moved off it while it was lost). A name held by
/// another live process is refused: the reason names the holder.
pub(crate) fn register(
    fleet: &Fleet,
    hello: Hello,
    peer: Option<std::net::SocketAddr>,
    tx: Outbound,
) -> Result<(u64, Vec<String>), String> {
    let mut state = fleet.state();
    if let Some(holder) = state.sidecars.get(&hello.name)
        && holder.instance != hello.instance
        && holder.holds_name(fleet.inner.options.heartbeat)
    {
        return Err(format!(
            "sidecar name `{}` is held by a live sidecar (group {}, {}, attached {}s ago, last heard {:.1}s ago);              names are unique: give this sidecar another `name:` or stop the other one",
            hello.name,
            holder.group,
            holder.peer.map_or_else(|| "address unknown".to_string(), |a| format!("from {a}")),
            holder.attached_at.elapsed().as_secs(),
            holder.last_seen.elapsed().as_secs_f64(),
        ));
    }
    state.next_conn += 1;
    let conn = state.next_conn;
    let hello_running: HashSet<String> = hello.running.iter().map(|r| r.assignment_id.clone()).collect();
    for r in &hello.running {
        if !state.pending.contains_key(&r.assignment_id) {
            let orphan = Orphan {
                sidecar: hello.name.clone(),
                assignment_id: r.assignment_id.clone(),
                since: Instant::now(),
                epoch: r.epoch,
            };
            state.orphans.insert((r.idempotency_key.clone(), r.shard_index), orphan);
        }
    }
    info!(
        sidecar = %hello.name, group = %hello.group, version = %hello.version,
        jobs = hello.jobs.len(), running = hello.running.len(), spooled = hello.spooled, "sidecar attached"
    );
    if let Some(listener) = fleet.listener() {
        listener.sidecar_attached(&hello.name, &hello.group);
    }
    state.sidecars.insert(
        hello.name.clone(),
        Sidecar {
            group: hello.group,
            version: hello.version,
            jobs: hello.jobs,
            conn,
            tx: Some(tx),
            ready: false,
            last_seen: Instant::now(),
            last_seen_at: SystemTime::now(),
            reported_running: u32::try_from(hello.running.len()).unwrap_or(u32::MAX),
            hello_running,
            instance: hello.instance,
            peer,
            attached_at: Instant::now(),
            stale_refused: 0,
            observe: hello.observe,
            observe_max_flows: hello.observe_max_flows,
        },
    );
    let mut stale: Vec<String> = state.moved.remove(&hello.name).unwrap_or_default().into_iter().collect();
    stale.extend(
        hello
            .running
            .iter()
            .filter(|r| state.is_stale(&(r.idempotency_key.clone(), r.shard_index), r.epoch))
            .map(|r| r.assignment_id.clone()),
    );
    Ok((conn, stale))
}
