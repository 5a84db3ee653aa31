//! Fencing of sidecars that come back (SPEC §4.1): every placement of an attempt
//! carries a new epoch, and a result older than the attempt's latest placement is
//! refused (counted, logged, never applied). A sidecar declared lost (silent past
//! `sidecar_lost_after`, e.g. a frozen host) that speaks again on its old
//! connection is re-registered at once and told to kill the copies of the
//! attempts that moved off it; one that reconnects is told the same after its
//! hello. It then receives work again. What fencing cannot prevent: a frozen
//! host's job may act on external systems before it is killed; the idempotency
//! key (the same for the moved attempt) is what lets the job recognise a repeat.

use std::time::{Instant, SystemTime};

use madeira_proto::v1::{Cancel, Hello};
use madeira_proto::{ControlMessage, ControlMsg};
use tracing::{info, warn};

use crate::Fleet;
use crate::registry::Outbound;

/// What the registry knows of the sidecar behind a connection.
pub(crate) enum Presence {
    Known,
    /// Declared lost while its connection stayed up: re-register it.
    Forgotten,
    /// The name belongs to another connection now: this one is stale.
    Replaced,
}

/// Notes that the sidecar on connection `conn` spoke.
pub(crate) fn touch(fleet: &Fleet, name: &str, conn: u64) -> Presence {
    let mut state = fleet.state();
    match state.sidecars.get_mut(name) {
        Some(s) if s.conn == conn => {
            s.last_seen = Instant::now();
            s.last_seen_at = SystemTime::now();
            Presence::Known
        }
        Some(_) => Presence::Replaced,
        None => Presence::Forgotten,
    }
}

/// Re-registers a sidecar that was declared lost but kept its connection, and
/// tells it to kill the attempts that moved off it.
pub(crate) async fn reattach(
    fleet: &Fleet,
    hello: &Hello,
    peer: Option<std::net::SocketAddr>,
    conn: u64,
    tx: &Outbound,
) {
    let stale = match crate::attach::register(fleet, hello.clone(), peer, tx.clone()) {
        Ok((_, stale)) => stale,
        Err(reason) => {
            warn!(sidecar = %hello.name, "{reason}");
            return;
        }
    };
    {
        let mut state = fleet.state();
        if let Some(s) = state.sidecars.get_mut(&hello.name) {
            // Same stream as before: keep its number, and its spool went out already.
            s.conn = conn;
            s.ready = true;
        }
    }
    info!(sidecar = %hello.name, stale = stale.len(), "lost sidecar is back on its connection; re-registered");
    kill_stale(&hello.name, stale, tx).await;
    fleet.notify();
}

/// Tells the sidecar to kill its copies of attempts that moved elsewhere.
pub(crate) async fn kill_stale(name: &str, stale: Vec<String>, tx: &Outbound) {
    for assignment_id in stale {
        warn!(sidecar = %name, assignment = %assignment_id, "killing the stale copy of an attempt that moved to another sidecar");
        let reason = "this attempt moved to another sidecar while this one was lost (fenced)".to_string();
        let msg = ControlMessage { msg: Some(ControlMsg::Cancel(Cancel { assignment_id, reason })) };
        let _ = tx.send(Ok(msg)).await;
    }
}
