//! `madeira alerts` (alerts with each delivery's status) and `madeira alerts test
//! CHANNEL` (send a test message now), over the API.

use std::process::ExitCode;

use anyhow::Result;
use reqwest::Method;
use serde_json::{Value, json};

use crate::cli::{AlertsArgs, AlertsCommand, Output, ServerArgs};
use crate::client::{Body, Client};

pub async fn run(args: AlertsArgs) -> Result<ExitCode> {
    match args.command {
        Some(AlertsCommand::Test { channel, server }) => test(&channel, &server).await,
        None => list(&args).await,
    }
}

async fn list(args: &AlertsArgs) -> Result<ExitCode> {
    let mut query = format!("/alerts?limit={}", args.limit);
    if let Some(s) = &args.status {
        query.push_str(&format!("&status={s}"));
    }
    if let Some(f) = &args.flow {
        query.push_str(&format!("&flow={f}"));
    }
    let body = Client::new(&args.server)?.get(&query).await?;
    match args.server.output {
        Output::Json => println!("{body}"),
        Output::Text => print!("{}", list_text(&body)),
    }
    Ok(ExitCode::SUCCESS)
}

async fn test(channel: &str, server: &ServerArgs) -> Result<ExitCode> {
    let body = Body::Json(json!({"channel": channel}));
    let reply = Client::new(server)?.call(Method::POST, "/alerts/test", Some(body), &[]).await?;
    let delivered = reply.body["delivered"].as_bool().unwrap_or(false);
    match server.output {
        Output::Json => println!("{}", reply.body),
        Output::Text if delivered => println!("test message delivered on {channel}"),
        Output::Text => {
            println!("test message NOT delivered on {channel}: {}", text(&reply.body["error"]))
        }
    }
    Ok(if delivered { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn text(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| if v.is_null() { "-".into() } else { v.to_string() })
}

fn list_text(body: &Value) -> String {
    let alerts = body["alerts"].as_array().cloned().unwrap_or_default();
    if alerts.is_empty() {
        return "no alerts\n".into();
    }
    let mut out = String::new();
    for a in alerts {
        out.push_str(&format!(
            "{} {:<8} {:<8} {} (x{}) since {}\n",
            text(&a["id"]),
            text(&a["status"]),
            text(&a["severity"]),
            text(&a["summary"]),
            a["count"],
            text(&a["created_at"]),
        ));
        if let Some(cause) = a["causes"].as_array().and_then(|c| c.first()) {
            out.push_str(&format!("    error: {}\n", text(&cause["error"])));
        }
        for d in a["deliveries"].as_array().cloned().unwrap_or_default() {
            out.push_str(&format!(
                "    -> {:<16} {:<8} {:<7} attempts {} {}\n",
                text(&d["channel"]),
                text(&d["kind"]),
                text(&d["status"]),
                d["attempts"],
                d["last_error"].as_str().map(|e| format!("last error: {e}")).unwrap_or_default(),
            ));
        }
    }
    out
}
