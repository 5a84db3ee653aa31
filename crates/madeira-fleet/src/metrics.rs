//! Control-plane metrics of the fleet: `madeira_sidecars_connected{group}`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

#[derive(Clone, Default)]
pub struct FleetMetrics {
    pub connected: Family<GroupLabels, Gauge>,
}

impl FleetMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("madeira_sidecars_connected", "Sidecars connected, by group", m.connected.clone());
        m
    }

    pub(crate) fn connected(&self, group: &str, n: i64) {
        self.connected.get_or_create(&GroupLabels { group: group.to_string() }).set(n);
    }
}
