//! Prometheus Alertmanager: `POST {url}/api/v2/alerts` with a JSON array of
//! `{labels, annotations, startsAt, endsAt?, generatorURL?}`. Labels: `alertname`,
//! `severity`, `flow`, `node` (the root cause), `alert_id` and the flow's labels;
//! annotations `summary`, `description`, `run_id` and `holds` (the runs of other
//! flows held behind it, when any). Firing alerts are sent again
//! while they fire; a resolved one carries `endsAt`.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::{Outgoing, Request};
use crate::model::{Alert, AlertStatus};
use crate::render::{Content, firing, fit, run_link};
use crate::view::rfc3339;

const DESCRIPTION_MAX: usize = 8 * 1024;

pub(super) fn build(mut url: reqwest::Url, out: &Outgoing<'_>) -> Request {
    let path = format!("{}/api/v2/alerts", url.path().trim_end_matches('/'));
    url.set_path(&path);
    let items: Vec<Json> = match out.content {
        Content::Firing(a) | Content::Resolved(a) | Content::Update(a) | Content::Reminder(a) => {
            vec![item(a, out)]
        }
        Content::Digest(list) => list.iter().map(|a| item(a, out)).collect(),
        Content::Test { channel } => vec![json!({
            "labels": {"alertname": "MadeiraTest", "severity": "info", "channel": channel},
            "annotations": {"summary": "Madeira alert channel test", "description": "test message"},
            "startsAt": rfc3339(out.now_ms),
            "endsAt": rfc3339(out.now_ms + 5 * 60 * 1000),
        })],
    };
    let body = Json::Array(items).to_string().into_bytes();
    Request { url, headers: vec![("content-type", "application/json".into())], body }
}

fn item(alert: &Alert, out: &Outgoing<'_>) -> Json {
    let mut labels = BTreeMap::new();
    for (k, v) in &alert.labels {
        labels.insert(label_name(k), v.clone());
    }
    labels.insert("alertname".into(), alert.alertname.clone());
    labels.insert("severity".into(), alert.severity.as_str().to_string());
    labels.insert("alert_id".into(), alert.id.clone());
    if let Some(flow) = &alert.flow {
        labels.insert("flow".into(), flow.clone());
    }
    if let Some(node) = &alert.node {
        labels.insert("node".into(), node.clone());
    }
    let description = fit(&firing(alert, out.base).plain(), DESCRIPTION_MAX);
    let mut annotations = json!({"summary": alert.summary, "description": description});
    if let Some(run) = alert.link_run() {
        annotations["run_id"] = json!(run);
    }
    if !alert.holds.is_empty() {
        let held: Vec<String> = alert.holds.iter().map(crate::model::Hold::label).collect();
        annotations["holds"] = json!(held.join(", "));
    }
    let mut item =
        json!({"labels": labels, "annotations": annotations, "startsAt": rfc3339(alert.created_at)});
    if alert.status == AlertStatus::Resolved {
        item["endsAt"] = json!(rfc3339(alert.resolved_at.unwrap_or(out.now_ms)));
    }
    if let Some(url) = alert.link_run().and_then(|r| run_link(out.base, r)) {
        item["generatorURL"] = json!(url);
    }
    item
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn label_name(key: &str) -> String {
    let mut name: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, '_');
    }
    name
}
