//! Generic JSON webhook: the alerts as JSON plus the rendered text (`kind`:
//! `firing`, `update`, `reminder`, `resolved`, `digest` or `test`), with
//! `X-Madeira-Timestamp` (Unix seconds) and, when a secret is given,
//! `X-Madeira-Signature: sha256=<hex HmacSHA256(secret, timestamp + "." + body)>`.

use serde_json::{Value as Json, json};

use super::{Outgoing, Request};
use crate::model::Alert;
use crate::render::{Content, fit, render, run_link};
use crate::sign;

const TEXT_MAX: usize = 64 * 1024;

pub(super) fn build(url: reqwest::Url, secret: Option<&str>, out: &Outgoing<'_>) -> Result<Request, String> {
    let (kind, alerts): (&str, Vec<&Alert>) = match out.content {
        Content::Firing(a) => ("firing", vec![a]),
        Content::Resolved(a) => ("resolved", vec![a]),
        Content::Update(a) => ("update", vec![a]),
        Content::Reminder(a) => ("reminder", vec![a]),
        Content::Digest(list) => ("digest", list.iter().map(|a| a.as_ref()).collect()),
        Content::Test { .. } => ("test", vec![]),
    };
    let message = render(out.content, out.base);
    let body = json!({
        "version": "1",
        "kind": kind,
        "title": message.title,
        "text": fit(&message.markdown(), TEXT_MAX),
        "alerts": alerts.iter().map(|a| alert_json(a, out.base)).collect::<Vec<_>>(),
        "mentions": out.mentions.users.iter().chain(&out.mentions.mobiles).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes();
    let ts = out.now_ms.div_euclid(1000);
    let mut headers =
        vec![("content-type", "application/json".to_string()), ("x-madeira-timestamp", ts.to_string())];
    if let Some(secret) = secret {
        headers.push(("x-madeira-signature", sign::webhook(ts, secret, &body).ok_or("signing failed")?));
    }
    Ok(Request { url, headers, body })
}

pub(crate) fn alert_json(a: &Alert, base: Option<&str>) -> Json {
    json!({
        "id": a.id,
        "alertname": a.alertname,
        "status": a.status.as_str(),
        "severity": a.severity.as_str(),
        "flow": a.flow,
        "node": a.node,
        "labels": a.labels,
        "summary": a.summary,
        "description": a.description,
        "causes": a.causes,
        "runs": a.runs,
        "count": a.count,
        "added": a.added,
        "fixed": a.fixed,
        "moved": a.moved,
        "holds": a.holds,
        "run_url": a.link_run().and_then(|r| run_link(base, r)),
        "created_at": crate::view::rfc3339(a.created_at),
        "resolved_at": a.resolved_at.map(crate::view::rfc3339),
    })
}
