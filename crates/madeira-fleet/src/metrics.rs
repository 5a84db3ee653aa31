//! Control-plane metrics of the fleet: `madeira_sidecars_connected{group}` and
//! `madeira_sidecar_results_fenced_total{group}` (results of moved attempts refused),
//! `madeira_sidecar_results_refused_total{group,reason}` (results that answer no
//! attempt placed on their sender: `provenance.rs`) and
//! `madeira_exec_reports_refused_total{group,reason}` (exec reports outside the
//! sidecar's observe list or the group's flow cap: `observe.rs`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub group: String,
    pub reason: String,
}

#[derive(Clone, Default)]
pub struct FleetMetrics {
    pub connected: Family<GroupLabels, Gauge>,
    pub fenced: Family<GroupLabels, Counter>,
    pub refused: Family<RefusedLabels, Counter>,
    pub exec_refused: Family<RefusedLabels, Counter>,
}

impl FleetMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("madeira_sidecars_connected", "Sidecars connected, by group", m.connected.clone());
        registry.register(
            "madeira_sidecar_results_fenced",
            "Results of attempts that had moved to another sidecar, refused (never applied)",
            m.fenced.clone(),
        );
        registry.register(
            "madeira_sidecar_results_refused",
            "Results that answer no attempt placed on the sidecar sending them, refused (never applied)",
            m.refused.clone(),
        );
        registry.register(
            "madeira_exec_reports_refused",
            "Exec reports outside the sending sidecar's observe list or its group's flow cap, refused",
            m.exec_refused.clone(),
        );
        m
    }

    pub(crate) fn fenced(&self, group: &str) {
        self.fenced.get_or_create(&GroupLabels { group: group.to_string() }).inc();
    }

    pub(crate) fn refused(&self, group: &str, reason: &str) {
        self.refused
            .get_or_create(&RefusedLabels { group: group.to_string(), reason: reason.to_string() })
            .inc();
    }

    pub(crate) fn exec_refused(&self, group: &str, reason: &str) {
        let labels = RefusedLabels { group: group.to_string(), reason: reason.to_string() };
        self.exec_refused.get_or_create(&labels).inc();
    }

    pub(crate) fn connected(&self, group: &str, n: i64) {
        self.connected.get_or_create(&GroupLabels { group: group.to_string() }).set(n);
    }
}
