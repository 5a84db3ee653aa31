//! Rendering a registry for `/metrics`: OpenMetrics 1.0 when the scraper asks for
//! it (Prometheus does), else the classic Prometheus text format 0.0.4 (what
//! `curl`, `promtool check metrics` and older scrapers read). The classic form is
//! derived from the OpenMetrics text: family names take their sample suffix
//! (`_total`, `_info`), `info` becomes `gauge`, and `# UNIT`/`# EOF` go.

use std::sync::Arc;

use prometheus_client::registry::Registry;

pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The frozen registry behind `/metrics`; cheap to clone.
#[derive(Clone, Debug)]
pub struct Exposition {
    registry: Arc<Registry>,
}

impl Exposition {
    pub fn new(registry: Registry) -> Self {
        Self { registry: Arc::new(registry) }
    }

    /// The body and content type to answer a scrape whose `Accept` header is `accept`.
    pub fn render_for(&self, accept: Option<&str>) -> (String, &'static str) {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            (self.render_openmetrics(), OPENMETRICS_CONTENT_TYPE)
        } else {
            (self.render_text(), TEXT_CONTENT_TYPE)
        }
    }

    pub fn render_openmetrics(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        out
    }

    pub fn render_text(&self) -> String {
        openmetrics_to_text(&self.render_openmetrics())
    }
}

/// Converts OpenMetrics text to the Prometheus text format 0.0.4.
pub fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let lines: Vec<&str> = om.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("# EOF") || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")) {
            let is_help = line.starts_with("# HELP ");
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = if is_help { family_type(&lines[i..], name) } else { tail };
            let renamed = match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                "info" => format!("{name}_info"),
                _ => name.to_string(),
            };
            let tail = match (is_help, kind) {
                (false, "info") => "gauge",
                (false, "unknown" | "stateset" | "gaugehistogram") => "untyped",
                _ => tail,
            };
            out.push_str(if is_help { "# HELP " } else { "# TYPE " });
            out.push_str(&renamed);
            out.push(' ');
            out.push_str(tail);
            out.push('\n');
            continue;
        }
        // Drop exemplars (` # {...} v`), which 0.0.4 does not know.
        let sample = line.split_once(" # ").map_or(*line, |(s, _)| s);
        out.push_str(sample);
        out.push('\n');
    }
    out
}

/// The `# TYPE` of family `name`, looked up in the lines that follow its `# HELP`.
fn family_type<'a>(lines: &[&'a str], name: &str) -> &'a str {
    lines
        .iter()
        .take(4)
        .find_map(|l| l.strip_prefix("# TYPE ").and_then(|r| r.strip_prefix(name)).map(str::trim))
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_becomes_classic_text() {
        let om = "# HELP madeira_runs Finished runs.\n# TYPE madeira_runs counter\n\
                  madeira_runs_total{flow=\"a\",status=\"SUCCESS\"} 1\n\
                  # HELP madeira_build Build.\n# TYPE madeira_build info\nmadeira_build_info{version=\"1\"} 1\n\
                  # HELP x_seconds Lat.\n# TYPE x_seconds histogram\n# UNIT x_seconds seconds\n\
                  x_seconds_bucket{le=\"+Inf\"} 1 # {trace=\"t\"} 0.5\n# EOF\n";
        let text = openmetrics_to_text(om);
        assert_eq!(
            text,
            "# HELP madeira_runs_total Finished runs.\n# TYPE madeira_runs_total counter\n\
             madeira_runs_total{flow=\"a\",status=\"SUCCESS\"} 1\n\
             # HELP madeira_build_info Build.\n# TYPE madeira_build_info gauge\nmadeira_build_info{version=\"1\"} 1\n\
             # HELP x_seconds Lat.\n# TYPE x_seconds histogram\nx_seconds_bucket{le=\"+Inf\"} 1\n"
        );
    }
}
