//! Alert metrics (SPEC §8), registered explicitly on the registry handed in:
//! `madeira_alerts_sent_total{channel,severity}`,
//! `madeira_alerts_suppressed_total{channel,reason}` (grouped, merged,
//! rate_limited) and `madeira_alert_delivery_failures_total{channel}`. Counters
//! are registered without `_total`; the encoder appends it. Declared, so their
//! `# HELP`/`# TYPE` lines are served before the first alert.

use madeira_telemetry::Declared;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

#[derive(Clone, Default, Debug)]
pub struct AlertMetrics {
    sent: Family<Labels, Counter>,
    suppressed: Family<Labels, Counter>,
    failures: Family<Labels, Counter>,
}

impl AlertMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "madeira_alerts_sent",
            "Alert messages delivered, by channel and severity (critical, warning, resolved, test)",
            Declared(metrics.sent.clone()),
        );
        registry.register(
            "madeira_alerts_suppressed",
            "Alerts not sent on their own: grouped into an open alert, merged into a digest, or held back by a receiver's rate limit",
            Declared(metrics.suppressed.clone()),
        );
        registry.register(
            "madeira_alert_delivery_failures",
            "Failed delivery attempts (network errors, HTTP errors, robot errcode != 0)",
            Declared(metrics.failures.clone()),
        );
        metrics
    }

    pub fn sent(&self, channel: &str, severity: &str, n: u64) {
        self.sent
            .get_or_create(&vec![("channel", channel.to_string()), ("severity", severity.to_string())])
            .inc_by(n);
    }

    pub fn suppressed(&self, channel: &str, reason: &'static str, n: u64) {
        self.suppressed
            .get_or_create(&vec![("channel", channel.to_string()), ("reason", reason.to_string())])
            .inc_by(n);
    }

    pub fn failure(&self, channel: &str) {
        self.failures.get_or_create(&vec![("channel", channel.to_string())]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_names_match_the_spec() {
        let mut registry = Registry::default();
        let m = AlertMetrics::register(&mut registry);
        m.sent("ops", "critical", 2);
        m.suppressed("ops", "merged", 1);
        m.failure("ops");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("madeira_alerts_sent_total{channel=\"ops\",severity=\"critical\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("madeira_alerts_suppressed_total{channel=\"ops\",reason=\"merged\"} 1"),
            "{text}"
        );
        assert!(text.contains("madeira_alert_delivery_failures_total{channel=\"ops\"} 1"), "{text}");
    }
}
