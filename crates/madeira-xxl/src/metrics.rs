//! Metrics of the XXL-JOB admin side: `madeira_xxl_requests_refused_total{reason}`
//! (wrong or missing token, app mismatch, bad body) and
//! `madeira_xxl_callbacks_total{app, result}` (`accepted`, `late`, `unknown`,
//! `wrong_app`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallbackLabels {
    pub app: String,
    pub result: String,
}

#[derive(Clone, Default)]
pub struct XxlMetrics {
    pub refused: Family<RefusedLabels, Counter>,
    pub callbacks: Family<CallbackLabels, Counter>,
}

impl XxlMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "madeira_xxl_requests_refused",
            "XXL-JOB admin requests refused (wrong or missing access token, app mismatch, bad body)",
            m.refused.clone(),
        );
        registry.register(
            "madeira_xxl_callbacks",
            "XXL-JOB callbacks by result: accepted, late (attempt already decided), unknown, wrong_app",
            m.callbacks.clone(),
        );
        m
    }

    pub fn refused(&self, reason: &str) {
        self.refused.get_or_create(&RefusedLabels { reason: reason.to_string() }).inc();
    }

    pub fn callback(&self, app: &str, result: &str) {
        self.callbacks
            .get_or_create(&CallbackLabels { app: app.to_string(), result: result.to_string() })
            .inc();
    }
}
