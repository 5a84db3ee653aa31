//! What `GET /api/v1/alerts` and `madeira alerts` show: each alert with its
//! deliveries (channel, status, attempts, last error). Built from stored rows;
//! nothing here can hold a secret (errors were scrubbed before they were stored).

use madeira_store::{AlertRow, DeliveryRow};
use serde_json::{Value as Json, json};

/// RFC 3339 (UTC, milliseconds) of a Unix-milliseconds instant.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn delivery_json(d: &DeliveryRow) -> Json {
    json!({
        "id": d.id,
        "channel": d.channel,
        "kind": d.kind,
        "status": d.status,
        "attempts": d.attempts,
        "last_error": d.last_error,
        "digest_id": d.digest_id,
        "created_at": rfc3339(d.created_at),
        "sent_at": d.sent_at.map(rfc3339),
    })
}

/// An operator's mark (`model::Mark`) with its instants as RFC 3339; null when none.
fn mark_json(m: &Json) -> Json {
    if !m.is_object() {
        return Json::Null;
    }
    json!({
        "by": m["by"],
        "at": m["at"].as_i64().map(rfc3339),
        "reason": m["reason"],
        "until": m["until"].as_i64().map(rfc3339),
    })
}

/// One alert row and its deliveries as JSON.
pub fn alert_json(row: &AlertRow, deliveries: &[&DeliveryRow]) -> Json {
    let d = &row.details;
    json!({
        "id": row.id,
        "status": row.status,
        "severity": row.severity,
        "alertname": d["alertname"],
        "flow": row.flow,
        "node": row.node,
        "summary": d["summary"],
        "description": d["description"],
        "labels": d["labels"],
        "causes": d["causes"],
        "runs": d["runs"],
        "count": d["count"],
        "fixed": d["fixed"],
        "holds": d.get("holds").cloned().unwrap_or_else(|| json!([])),
        "created_at": rfc3339(row.created_at),
        "notify_at": rfc3339(row.notify_at),
        "resolved_at": row.resolved_at.map(rfc3339),
        "acknowledged": mark_json(&d["acknowledged"]),
        "silenced": mark_json(&d["silenced"]),
        "deliveries": deliveries.iter().map(|d| delivery_json(d)).collect::<Vec<_>>(),
    })
}
