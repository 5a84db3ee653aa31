//! The sidecar's metrics (SPEC §8), registered on the registry it is given, and a
//! small `/metrics` endpoint for the daemon.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobStatusLabels {
    pub job: String,
    /// `success`, `failed`, `retryable`, `cancelled` or `refused`.
    pub status: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0])
}

/// Handles on the sidecar's metrics; cheap to clone.
#[derive(Clone)]
pub struct SidecarMetrics {
    pub job_runs: Family<JobStatusLabels, Counter>,
    pub job_duration: Family<JobLabels, Histogram, fn() -> Histogram>,
    pub jobs_running: Family<JobLabels, Gauge>,
    pub spool_pending: Gauge,
}

impl SidecarMetrics {
    /// Registers every metric on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        registry.register(
            "madeira_sidecar_job_runs",
            "Finished job runs on this sidecar, by job and status",
            m.job_runs.clone(),
        );
        registry.register_with_unit(
            "madeira_sidecar_job_duration",
            "Duration of job runs on this sidecar",
            prometheus_client::registry::Unit::Seconds,
            m.job_duration.clone(),
        );
        registry.register("madeira_sidecar_jobs_running", "Jobs running now, by job", m.jobs_running.clone());
        registry.register(
            "madeira_sidecar_spool_pending",
            "Reports spooled on disk, not yet delivered to the control plane",
            m.spool_pending.clone(),
        );
        m
    }

    /// Metrics that are counted but exported nowhere (tests, embedded use).
    pub fn unregistered() -> Self {
        Self {
            job_runs: Family::default(),
            job_duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            jobs_running: Family::default(),
            spool_pending: Gauge::default(),
        }
    }

    pub fn finished(&self, job: &str, status: &str, seconds: f64) {
        self.job_runs.get_or_create(&JobStatusLabels { job: job.into(), status: status.into() }).inc();
        self.job_duration.get_or_create(&JobLabels { job: job.into() }).observe(seconds);
    }
}

/// Serves `registry` as Prometheus text on `listener` (`/metrics`) until `cancel`.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    use axum::response::IntoResponse;
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                let mut text = String::new();
                match prometheus_client::encoding::text::encode(&mut text, &registry) {
                    Ok(()) => (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        text,
                    )
                        .into_response(),
                    Err(_) => {
                        ([(axum::http::header::CONTENT_TYPE, "text/plain")], "encoding failed".to_string())
                            .into_response()
                    }
                }
            }
        }),
    );
    axum::serve(listener, app.into_make_service()).with_graceful_shutdown(cancel.cancelled_owned()).await
}

/// Binds the metrics address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
