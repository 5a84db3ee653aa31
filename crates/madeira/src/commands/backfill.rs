//! `madeira backfill FLOW --from --to …` (`POST /flows/{name}/backfills`, with
//! `--wait` until it is done) and `madeira backfills [show ID | pause | resume |
//! cancel ID --reason R]`: the backfill's arguments and its printed progress.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use reqwest::Method;
use serde_json::{Value, json};

use super::client_cmds::print;
use crate::cli_backfill::{BackfillArgs, BackfillsCommand, ChangeArgs};
use crate::client::{Body, Client};
use crate::server_args::ServerArgs;

pub async fn backfill(a: BackfillArgs) -> Result<ExitCode> {
    let mut body = json!({
        "order": a.order, "parallel": a.parallel, "with_dependents": a.with_dependents,
        "rerun": a.rerun, "reason": a.reason,
    });
    match (&a.dates, &a.from, &a.to) {
        (Some(dates), ..) => body["dates"] = json!(dates),
        (None, Some(from), Some(to)) => {
            body["from"] = json!(from);
            body["to"] = json!(to);
        }
        _ => bail!("give --from and --to, or --dates"),
    }
    if let Some(c) = &a.calendar {
        body["calendar"] = json!(c);
    }
    let client = Client::new(&a.server)?;
    let path = format!("/flows/{}/backfills", a.flow);
    let made = client.call(Method::POST, &path, Some(Body::Json(body)), &[]).await?.body;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    if !a.wait {
        return print(&a.server, made, created_text);
    }
    eprintln!("{}", created_text(&made));
    loop {
        let b = client.get(&format!("/backfills/{id}")).await?;
        if matches!(b["state"].as_str(), Some("done" | "cancelled")) {
            let p = &b["progress"];
            let bad = p["failed"].as_u64().unwrap_or(0) + p["blocked"].as_u64().unwrap_or(0);
            print(&a.server, b, detail_text)?;
            return Ok(if bad > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        }
        // Polling the API: the command has no stream of backfill changes to follow.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn backfills(command: Option<BackfillsCommand>, server: ServerArgs) -> Result<ExitCode> {
    let change = |a: ChangeArgs, action: &'static str| async move {
        let body = Body::Json(json!({"reason": a.reason}));
        let path = format!("/backfills/{}/{action}", a.id);
        let reply = Client::new(&a.server)?.call(Method::POST, &path, Some(body), &[]).await?;
        print(&a.server, reply.body, summary_text)
    };
    match command {
        None => print(&server, Client::new(&server)?.get("/backfills").await?, list_text),
        Some(BackfillsCommand::Show { id, server }) => {
            print(&server, Client::new(&server)?.get(&format!("/backfills/{id}")).await?, detail_text)
        }
        Some(BackfillsCommand::Pause(a)) => change(a, "pause").await,
        Some(BackfillsCommand::Resume(a)) => change(a, "resume").await,
        Some(BackfillsCommand::Cancel(a)) => change(a, "cancel").await,
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}

fn created_text(b: &Value) -> String {
    let dates = b["dates"].as_array().map_or(0, Vec::len);
    let flows: Vec<&str> = b["flows"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    format!(
        "backfill {} of {}: {} dates, {} runs at most ({})",
        s(&b["id"]),
        s(&b["flow"]),
        dates,
        b["runs"],
        flows.join(", ")
    )
}

/// `done 12/20  running 4  queued 0  failed 1 …`
fn progress_text(p: &Value) -> String {
    let n = |k: &str| p[k].as_u64().unwrap_or(0);
    let settled = n("success") + n("failed") + n("cancelled") + n("skipped") + n("blocked");
    let mut out = format!("{settled}/{} settled", n("total"));
    for key in ["running", "queued", "pending", "success", "failed", "skipped", "blocked", "cancelled"] {
        if n(key) > 0 {
            out.push_str(&format!("  {key} {}", n(key)));
        }
    }
    out
}

fn summary_text(b: &Value) -> String {
    let span = match (b["date_from"].as_str(), b["date_to"].as_str()) {
        (Some(f), Some(t)) => format!("{f}..{t}"),
        _ => format!("{} dates", b["dates"].as_array().map_or(0, Vec::len)),
    };
    let paused: Vec<&str> =
        b["paused_flows"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let waits = match paused.as_slice() {
        [] => String::new(),
        flows => format!("  (waits: flow {} paused)", flows.join(", ")),
    };
    format!(
        "{}  {}  {}  [{}]  {}{waits}  by {}: {}",
        s(&b["id"]),
        s(&b["flow"]),
        span,
        s(&b["state"]),
        progress_text(&b["progress"]),
        s(&b["actor"]),
        s(&b["reason"])
    )
}

fn list_text(body: &Value) -> String {
    let list = body["backfills"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "no backfills".into();
    }
    list.iter().map(summary_text).collect::<Vec<_>>().join("\n")
}

fn detail_text(b: &Value) -> String {
    let mut out = summary_text(b);
    for step in b["steps"].as_array().into_iter().flatten() {
        let state = step["run_state"].as_str().or(step["outcome"].as_str()).unwrap_or("pending");
        out.push_str(&format!(
            "\n  {:<24} {}  {:<10} {}",
            s(&step["flow"]),
            s(&step["biz_date"]),
            state,
            step["run_id"].as_str().or(step["note"].as_str()).unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_names_what_is_settled_and_what_is_not() {
        let p = json!({"total": 20, "success": 11, "failed": 1, "running": 4, "pending": 4});
        assert_eq!(progress_text(&p), "12/20 settled  running 4  pending 4  success 11  failed 1");
        let b = json!({"id": "b1", "flow": "a", "date_from": "2026-11-02", "date_to": "2026-11-13",
                       "state": "running", "progress": p, "actor": "ops", "reason": "late data",
                       "steps": [{"flow": "a", "biz_date": "2026-11-02", "run_state": "SUCCESS", "run_id": "r1"},
                                 {"flow": "b", "biz_date": "2026-11-02", "outcome": "blocked", "note": "waits for a"}]});
        let text = detail_text(&b);
        assert!(text.starts_with("b1  a  2026-11-02..2026-11-13  [running]  12/20 settled"), "{text}");
        assert!(text.contains("2026-11-02  SUCCESS    r1"), "{text}");
        assert!(text.contains("blocked    waits for a"), "{text}");
        let waiting = json!({"id": "b2", "flow": "a", "state": "running", "dates": ["2026-11-02"],
                             "progress": {"total": 1, "pending": 1}, "paused_flows": ["a"], "actor": "ops", "reason": "r"});
        assert_eq!(
            summary_text(&waiting),
            "b2  a  1 dates  [running]  0/1 settled  pending 1  (waits: flow a paused)  by ops: r"
        );
    }
}
