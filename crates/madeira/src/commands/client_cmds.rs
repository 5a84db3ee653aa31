//! Client commands: apply, flows, run, runs, show, node actions, cancel, logs, audit
//! (flow deletion, promote and demote are in `lifecycle`, dispatched by `commands`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::cli::{Command, FlowsCommand, NodeActionArgs, Output, RunArgs, ServerArgs};
use crate::client::{Body, Client};

pub async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Apply { files, server } => apply(&files, &server).await,
        Command::Flows { command: None, server } => {
            print(&server, Client::new(&server)?.get("/flows").await?, flows_text)
        }
        Command::Flows { command: Some(FlowsCommand::History { name, diff, server }), .. } => {
            history(&name, diff, &server).await
        }
        Command::Run(args) => trigger(args).await,
        Command::Pause { flow, reason, server } => pause(&flow, "pause", reason, &server).await,
        Command::Resume { flow, reason, server } => pause(&flow, "resume", reason, &server).await,
        Command::Runs { flow, status, actor, biz_date, limit, since, until, server } => {
            let mut query = format!("/runs?limit={limit}");
            let filters = [
                ("flow", flow),
                ("status", status),
                ("actor", actor),
                ("biz_date", biz_date),
                ("since", since),
                ("until", until),
            ];
            for (key, value) in filters {
                if let Some(v) = value {
                    query.push_str(&format!("&{key}={}", query_value(&v)));
                }
            }
            print(&server, Client::new(&server)?.get(&query).await?, runs_text)
        }
        Command::Show { run_id, server } => {
            let link = format!("{}/runs/{run_id}", console_url(&server.server));
            print(&server, Client::new(&server)?.get(&format!("/runs/{run_id}")).await?, |r| {
                format!("{}\n  {link}", show_text(r))
            })
        }
        Command::Confirm(a) => node_action(a, "confirm").await,
        Command::Reject(a) => node_action(a, "reject").await,
        Command::Rerun(a) => node_action(a, "rerun").await,
        Command::MarkSuccess(a) => node_action(a, "mark-success").await,
        Command::Skip(a) => node_action(a, "skip").await,
        Command::Cancel { run_id, reason, server } => {
            let body = Body::Json(json!({"reason": reason}));
            let reply = Client::new(&server)?
                .call(Method::POST, &format!("/runs/{run_id}/cancel"), Some(body), &[])
                .await?;
            print(&server, reply.body, |b| format!("run {} cancelled", str_of(&b["run_id"])))
        }
        Command::Logs { run_id, node, follow: true, attempt, server } => {
            super::follow_logs::follow(&server, &run_id, &node, attempt).await
        }
        Command::Logs { run_id, node, follow: false, attempt, server } => {
            let query = attempt.map(|a| format!("?attempt={a}")).unwrap_or_default();
            let body = Client::new(&server)?.get(&format!("/runs/{run_id}/nodes/{node}/logs{query}")).await?;
            print(&server, body, logs_text)
        }
        Command::Audit { run, actor, limit, server } => {
            let mut query = format!("/audit?limit={limit}");
            if let Some(r) = run {
                query.push_str(&format!("&run_id={r}"));
            }
            if let Some(a) = actor {
                query.push_str(&format!("&actor={a}"));
            }
            print(&server, Client::new(&server)?.get(&query).await?, audit_text)
        }
        Command::Sidecars { server } => {
            print(&server, Client::new(&server)?.get("/sidecars").await?, super::sidecar::fleet_text)
        }
        Command::Datasources { server } => {
            print(&server, Client::new(&server)?.get("/datasources").await?, datasources_text)
        }
        Command::Sources { server } => {
            print(&server, Client::new(&server)?.get("/sources").await?, crate::sources::sources_text)
        }
        Command::Estate { date, server } => {
            let query = date.map(|d| format!("?date={d}")).unwrap_or_default();
            print(
                &server,
                Client::new(&server)?.get(&format!("/estate{query}")).await?,
                super::estate::tree_text,
            )
        }
        _ => bail!("not a client command"),
    }
}

pub(super) fn print(server: &ServerArgs, body: Value, text: impl Fn(&Value) -> String) -> Result<ExitCode> {
    match server.output {
        Output::Json => println!("{body}"),
        Output::Text => println!("{}", text(&body)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Validates every file (a directory: its *.yaml/*.yml) before applying any:
/// one invalid file and nothing is applied, and every problem is listed as
/// `file:line: message`.
async fn apply(paths: &[std::path::PathBuf], server: &ServerArgs) -> Result<ExitCode> {
    let mut flows: Vec<(String, String, String)> = Vec::new();
    // Calendar files (`calendar: NAME`): applied first, so flows may name them.
    let mut calendars: Vec<(String, String, String)> = Vec::new();
    let mut estate = madeira_core::estate::Estate::default();
    let mut problems = Vec::new();
    for path in paths {
        let files = if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            let files = crate::files::yaml_files(path)?;
            if files.is_empty() {
                problems.push(format!("{}: no *.yaml or *.yml flow files in this directory", path.display()));
            }
            files.into_iter().map(|f| (f, Some(path.as_path()))).collect()
        } else {
            vec![(path.clone(), None)]
        };
        for (file, dir) in files {
            let confine = dir.map_or(crate::files::Confine::Parent, crate::files::Confine::Within);
            let shown = file.display().to_string();
            let source = match crate::files::read_text(&file, confine) {
                Ok(source) => source,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            if crate::calendars::is_calendar_file(&source) {
                match madeira_calendar::parse_definitions(&source) {
                    Ok(defs) if defs.len() == 1 => {
                        let name = defs[0].name.clone();
                        match calendars.iter().find(|(n, _, _)| *n == name) {
                            Some((_, _, first)) => problems
                                .push(format!("{shown}:1: calendar `{name}` is also defined in {first}")),
                            None => calendars.push((name, source, shown)),
                        }
                    }
                    Ok(_) => problems.push(format!("{shown}:1: a calendar file to apply holds one calendar")),
                    Err(e) => problems.push(format!("{shown}: {e}")),
                }
                continue;
            }
            match madeira_core::spec::parse_flow(&shown, &source) {
                Ok(def) => match flows.iter().find(|(name, _, _)| *name == def.name) {
                    Some((_, _, first)) => {
                        problems.push(format!("{shown}:1: flow `{}` is also defined in {first}", def.name))
                    }
                    None => {
                        estate.insert(madeira_core::estate::EstateFlow::from_def(&shown, &def));
                        flows.push((def.name, source, shown));
                    }
                },
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    problems.extend(estate.cycle().map(|c| madeira_core::estate::EstateError::Cycle(c).to_string()));
    problems.extend(
        estate
            .flows()
            .find_map(|f| estate.subflow_cycle_through(&f.name))
            .map(|c| madeira_core::estate::EstateError::SubflowCycle(c).to_string()),
    );
    if !problems.is_empty() {
        bail!("nothing applied; fix these first:\n{}", problems.join("\n"));
    }
    // Upstream flows first, so an `after` names a flow the server already has.
    let order = estate.topo();
    flows.sort_by_key(|(name, _, _)| order.iter().position(|n| n == name));
    let client = Client::new(server)?;
    let mut results = Vec::new();
    for (name, source, shown) in calendars {
        let reply = client
            .call(Method::PUT, &format!("/calendars/{name}"), Some(Body::Yaml(source)), &[])
            .await
            .map_err(|e| {
                anyhow::anyhow!(e.to_string().replace(&format!("{name}.yaml:"), &format!("{shown}:")))
            })
            .with_context(|| format!("{shown}: applying calendar {name}"))?;
        results.push(reply.body);
    }
    for (name, source, shown) in flows {
        // The server checks what only it knows (sources, datasources) and names
        // the file `NAME.yaml`: its errors are told with this file's path.
        let reply = client
            .call(Method::PUT, &format!("/flows/{name}"), Some(Body::Yaml(source)), &[])
            .await
            .map_err(|e| {
                anyhow::anyhow!(e.to_string().replace(&format!("{name}.yaml:"), &format!("{shown}:")))
            })
            .with_context(|| format!("{shown}: applying flow {name}"))?;
        results.push(reply.body);
    }
    print(server, json!({"applied": results}), |v| {
        v["applied"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        let verb = if r["created"] == json!(true) { "created" } else { "unchanged" };
                        match r["calendar"].as_str() {
                            Some(calendar) => {
                                format!("calendar {calendar} version {} ({verb})", r["version"])
                            }
                            None => format!("flow {} version {} ({verb})", str_of(&r["flow"]), r["version"]),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    })
}

/// Percent-encodes a query-string value (RFC 3986 unreserved characters pass).
pub(super) fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn pause(flow: &str, action: &str, reason: Option<String>, server: &ServerArgs) -> Result<ExitCode> {
    let body = Body::Json(json!({"reason": reason}));
    let reply =
        Client::new(server)?.call(Method::POST, &format!("/flows/{flow}/{action}"), Some(body), &[]).await?;
    print(server, reply.body, |b| {
        let state = if b["paused"] == json!(true) { "paused" } else { "resumed" };
        let started = b["started"].as_array().map_or(0, Vec::len);
        let waiting = b["queued_events"].as_u64().unwrap_or(0);
        let mut out = format!("flow {} {state}", str_of(&b["flow"]));
        if started > 0 {
            out.push_str(&format!("; started {started} event(s) kept while paused"));
        }
        if waiting > 0 {
            out.push_str(&format!("; {waiting} event(s) waiting"));
        }
        out
    })
}

async fn history(name: &str, diff: Option<Vec<u32>>, server: &ServerArgs) -> Result<ExitCode> {
    let client = Client::new(server)?;
    let Some(pair) = diff else {
        let body = client.get(&format!("/flows/{name}/versions")).await?;
        return print(server, body, |b| {
            let mut out = format!("{:>7}  {:<29}  {}\n", "VERSION", "CREATED", "CONTENT");
            for v in b["versions"].as_array().into_iter().flatten() {
                let hash = str_of(&v["content_hash"]);
                out.push_str(&format!(
                    "{:>7}  {:<29}  {}\n",
                    v["version"],
                    str_of(&v["created_at"]),
                    &hash[..12.min(hash.len())]
                ));
            }
            out.trim_end().to_string()
        });
    };
    let (a, b) = (pair[0], pair[1]);
    let old = client.get(&format!("/flows/{name}/versions/{a}")).await?;
    let new = client.get(&format!("/flows/{name}/versions/{b}")).await?;
    let (old, new) = (str_of(&old["source"]), str_of(&new["source"]));
    let text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .header(&format!("{name} v{a}"), &format!("{name} v{b}"))
        .to_string();
    print(server, json!({"flow": name, "from": a, "to": b, "diff": text}), |v| str_of(&v["diff"]))
}

fn parse_params(params: &[String]) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for p in params {
        let (k, v) = p.split_once('=').with_context(|| format!("--param `{p}`: write key=value"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        map.insert(k.to_string(), value);
    }
    Ok(map)
}

async fn trigger(args: RunArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let params = parse_params(&args.params)?;
    let headers: Vec<(&str, String)> =
        args.idempotency_key.iter().map(|k| ("Idempotency-Key", k.clone())).collect();
    let reply = client
        .call(
            Method::POST,
            &format!("/flows/{}/runs", args.flow),
            Some(Body::Json(match &args.biz_date {
                Some(d) => json!({"params": params, "biz_date": d}),
                None => json!({"params": params}),
            })),
            &headers,
        )
        .await?;
    let run_id = str_of(&reply.body["run_id"]);
    if !args.wait {
        let mut body = reply.body;
        body["existing"] = json!(reply.status == reqwest::StatusCode::OK);
        let console = console_url(&args.server.server);
        return print(&args.server, body, |b| {
            let existing =
                if b["existing"] == json!(true) { " (already made by this idempotency key)" } else { "" };
            let run_id = str_of(&b["run_id"]);
            format!(
                "run {run_id} of {} v{}{existing}\n  {console}/runs/{run_id}",
                str_of(&b["flow"]),
                b["version"]
            )
        });
    }
    if args.server.output == Output::Text {
        eprintln!("run {run_id} started; waiting");
    }
    let mut announced = std::collections::HashSet::new();
    loop {
        let run = client.get(&format!("/runs/{run_id}")).await?;
        let status = str_of(&run["status"]);
        for (node, detail) in run["nodes"].as_object().into_iter().flatten() {
            if detail["status"] == "MANUAL_CONFIRM" && announced.insert(node.clone()) {
                eprintln!("{}", awaiting_text(&args.server.server, &run_id, node, detail));
            }
        }
        if matches!(status.as_str(), "SUCCESS" | "FAILED" | "CANCELLED") {
            let link = format!("{}/runs/{run_id}", console_url(&args.server.server));
            print(&args.server, run, |r| format!("{}\n  {link}", show_text(r)))?;
            return Ok(if status == "SUCCESS" { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `run --wait` says when the run reaches a manual node: it keeps waiting
/// for a person, and says where and how they decide.
fn awaiting_text(server: &str, run_id: &str, node: &str, detail: &Value) -> String {
    let prompt = detail["prompt"].as_str().filter(|p| !p.trim().is_empty()).unwrap_or("(no prompt)");
    format!(
        "waiting for a person to confirm node {node}: {prompt}\n  \
         decide: madeira confirm {run_id} {node} --reason \"…\"  |  madeira reject {run_id} {node} --reason \"…\"\n  \
         console: {}/runs/{run_id}\n  (still waiting; Ctrl-C stops waiting, not the run)",
        console_url(server)
    )
}

async fn node_action(args: NodeActionArgs, action: &str) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let body = json!({"reason": args.reason, "downstream": args.downstream});
    let path = format!("/runs/{}/nodes/{}/{action}", args.run_id, args.node);
    let reply = client.call(Method::POST, &path, Some(Body::Json(body)), &[]).await?;
    print(&args.server, reply.body, |b| {
        format!("{} {}: {}", str_of(&b["run_id"]), str_of(&b["node"]), str_of(&b["action"]))
    })
}

pub(super) fn str_of(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}

fn flows_text(body: &Value) -> String {
    let mut out = format!("{:<32} {:>7} {:<7} {:>6} {}\n", "FLOW", "VERSION", "PAUSED", "EVENTS", "NEXT RUN");
    for f in body["flows"].as_array().into_iter().flatten() {
        let next = f["triggers"]
            .as_array()
            .and_then(|t| t.iter().find_map(|t| t["next_run"].as_str()))
            .unwrap_or("-");
        out.push_str(&format!(
            "{:<32} {:>7} {:<7} {:>6} {next}\n",
            str_of(&f["flow"]),
            f["version"],
            f["paused"],
            f["queued_events"].as_u64().unwrap_or(0)
        ));
    }
    out.trim_end().to_string()
}

fn runs_text(body: &Value) -> String {
    let mut out = format!(
        "{:<38} {:<24} {:>3} {:<10} {:<10} {:<24} {}\n",
        "RUN", "FLOW", "V", "STATUS", "BIZ DATE", "CREATED", "ACTOR"
    );
    for r in body["runs"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<38} {:<24} {:>3} {:<10} {:<10} {:<24} {}\n",
            str_of(&r["run_id"]),
            str_of(&r["flow"]),
            r["version"],
            str_of(&r["status"]),
            r["biz_date"].as_str().unwrap_or("-"),
            str_of(&r["created_at"]),
            str_of(&r["actor"])
        ));
    }
    if let Some(next) = body["next"].as_str() {
        out.push_str(&format!("(more: --cursor {next})\n"));
    }
    out.trim_end().to_string()
}

/// The web console's base URL on `server` (the API's address; SPEC §9.1).
fn console_url(server: &str) -> String {
    server.trim_end_matches('/').trim_end_matches("/api/v1").to_string()
}

pub fn show_text(run: &Value) -> String {
    let mut out = format!(
        "run {} · flow {} v{} · {} · by {}\n",
        str_of(&run["run_id"]),
        str_of(&run["flow"]),
        run["version"],
        str_of(&run["status"]),
        str_of(&run["actor"])
    );
    if let Some(d) = run["biz_date"].as_str() {
        out.push_str(&format!("business date {d}\n"));
    }
    if let Some(why) = run["waiting_reason"].as_str() {
        out.push_str(&format!("waiting: {why}\n"));
    }
    out.push_str(&format!(
        "{:<20} {:<15} {:>8} {:>4} {:<6} {}\n",
        "NODE", "STATUS", "ATTEMPTS", "DATA", "STALE", "REASON"
    ));
    for name in run["order"].as_array().into_iter().flatten() {
        let name = str_of(name);
        let n = &run["nodes"][&name];
        // One line per node: a failure's last output lines are in `madeira logs`.
        let mut reason = n["reason"].as_str().unwrap_or("").lines().next().unwrap_or("").to_string();
        if let Some(t) = n.get("throttle")
            && str_of(&n["status"]) == "INIT"
            && let Some(pos) = t["queue_position"].as_u64()
        {
            reason = format!(
                "queued {pos}/{} for a permit ({}/{} in use)",
                t["queue_depth"], t["permits_in_use"], t["max_permits"]
            );
        }
        if let Some(prompt) = n["prompt"].as_str()
            && str_of(&n["status"]) == "MANUAL_CONFIRM"
        {
            reason = format!("waiting: {prompt}");
        }
        out.push_str(&format!(
            "{:<20} {:<15} {:>8} {:>4} {:<6} {}\n",
            name,
            str_of(&n["status"]),
            n["attempts"],
            n["data_version"],
            if n["stale"] == json!(true) { "stale" } else { "" },
            reason
        ));
    }
    out.trim_end().to_string()
}

fn logs_text(body: &Value) -> String {
    let mut out = String::new();
    for l in body["logs"].as_array().into_iter().flatten() {
        let live = if l["live"] == json!(true) { " (running)" } else { "" };
        out.push_str(&format!("--- attempt {}{live} ---\n{}", l["attempt"], str_of(&l["content"])));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out.trim_end().to_string()
}

fn audit_text(body: &Value) -> String {
    let mut out = String::new();
    for e in body["entries"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{} {:<12} {:<16} run={} node={} reason={}\n",
            str_of(&e["at"]),
            str_of(&e["actor"]),
            str_of(&e["action"]),
            str_of(&e["run_id"]),
            str_of(&e["node"]),
            str_of(&e["reason"])
        ));
    }
    out.trim_end().to_string()
}

/// `madeira datasources` as a table.
fn datasources_text(body: &Value) -> String {
    let mut out = format!(
        "{:<20} {:<9} {:>4} {:>7} {:>7} {:>5} {:>5}  {}\n",
        "NAME", "KIND", "MAX", "IN_USE", "WAITING", "OPEN", "IDLE", "MODE"
    );
    for d in body["datasources"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<20} {:<9} {:>4} {:>7} {:>7} {:>5} {:>5}  {}\n",
            d["name"].as_str().unwrap_or(""),
            d["kind"].as_str().unwrap_or(""),
            d["max_connections"],
            d["in_use"],
            d["waiting"],
            d["open"],
            d["idle"],
            if d["read_only"].as_bool() == Some(true) { "read-only" } else { "read-write" },
        ));
    }
    out.trim_end().to_string()
}
