//! Dashboards and alert rules checked against a live `/metrics`: every metric name
//! they use exists after a run; the dashboards are importable JSON; `promtool`
//! accepts the rules, their unit tests and a real scrape. `promtool` is required
//! under `CI=true` (`.ci/run` installs it) and skipped with a note elsewhere.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{Dev, wait_until};

/// Metric families that other components register on the same registry (sidecar,
/// alerting) and that this build does not have yet. Each merge that brings one in
/// must delete it here: the test fails while a listed name is already served.
const PENDING_FAMILIES_OF_OTHER_COMPONENTS: &[&str] = &[
    "madeira_sidecar_job_runs_total",
    "madeira_sidecar_job_duration_seconds_bucket",
    "madeira_sidecar_jobs_running",
];

/// Families with series only when the server config names what they measure
/// (message `sources:`); `tests/e2e/messages.rs` checks them on a configured server.
const FAMILIES_ONLY_WHEN_CONFIGURED: &[&str] = &["madeira_trigger_source_up"];

pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = repo_file("dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "expected overview, flow and sidecar dashboards in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read dashboard");
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, json)
        })
        .collect()
}

/// `madeira_*` and `process_*` identifiers in a PromQL text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    for prefix in ["madeira_", "process_"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix).map(|i| i + from) {
            let end = at + text[at..].bytes().take_while(|b| ident(*b)).count();
            if at == 0 || !ident(bytes[at - 1]) {
                names.insert(text[at..end].to_string());
            }
            from = end.max(at + 1);
        }
    }
    names
}

/// Every query of a dashboard: panel targets and variable queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.extend(target["expr"].as_str().map(str::to_string));
        }
    }
    for var in dashboard["templating"]["list"].as_array().expect("templating.list") {
        out.extend(var["definition"].as_str().map(str::to_string));
    }
    out
}

/// Names a scrape offers: sample names, plus every family named by `# TYPE`
/// (with the `_bucket`/`_sum`/`_count` series of histograms).
pub fn served_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else { continue };
            names.insert(name.to_string());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Starts dev, runs a flow that retries, throttles and succeeds, returns the scrape.
pub async fn scrape_after_a_run(dev: &Dev) -> String {
    dev.put_flow(
        "flow: obs
nodes:
  pull: {run: {builtin: noop}}
  flaky: {needs: [pull], run: {builtin: fail, message: boom}, retry: {attempts: 2, backoff: 10ms}}
  export: {needs: [{node: flaky, kind: weak}], throttle: {max_permits: 1, queue_size: 5}, run: {builtin: noop}}
",
    )
    .await;
    let run_id = dev.trigger("obs", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let resp = dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("scrape");
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().expect("ct").to_string();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    resp.text().await.expect("body")
}

#[tokio::test]
async fn every_metric_of_dashboards_and_alerts_is_served_after_a_run() {
    let (_dir, dev) = Dev::start();
    let scrape = scrape_after_a_run(&dev).await;
    for fixed in ["madeira_runs_total", "madeira_node_attempts_total", "madeira_build_info"] {
        assert!(scrape.contains(fixed), "{fixed} missing:\n{scrape}");
    }
    assert!(scrape.contains("madeira_runs_total{flow=\"obs\",status=\"SUCCESS\"} 1"), "{scrape}");
    assert!(scrape.contains("madeira_node_retries_total{flow=\"obs\",node=\"flaky\"} 1"), "{scrape}");
    let served = served_names(&scrape);
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, dashboard) in dashboards() {
        for query in queries(&dashboard) {
            used.extend(metric_names(&query).into_iter().map(|n| (n, path.display().to_string())));
        }
    }
    let rules = repo_file("alerts/madeira.rules.yml");
    let text = std::fs::read_to_string(&rules).expect("alerts/madeira.rules.yml");
    used.extend(metric_names(&text).into_iter().map(|n| (n, rules.display().to_string())));
    assert!(used.len() > 20, "too few metric uses found: {used:?}");
    let mut missing = Vec::new();
    for (name, file) in &used {
        if FAMILIES_ONLY_WHEN_CONFIGURED.contains(&name.as_str()) {
            continue;
        }
        let pending = PENDING_FAMILIES_OF_OTHER_COMPONENTS.contains(&name.as_str());
        match (served.contains(name), pending) {
            (true, true) => missing
                .push(format!("{name} is served now: delete it from PENDING_FAMILIES_OF_OTHER_COMPONENTS")),
            (false, false) => missing.push(format!("{name} (used in {file}) is not on /metrics")),
            _ => {}
        }
    }
    assert!(missing.is_empty(), "{}\n--- scrape:\n{scrape}", missing.join("\n"));
}

#[test]
fn dashboards_are_importable_and_use_the_datasource_variable() {
    let mut uids = BTreeSet::new();
    for (path, d) in dashboards() {
        let name = path.display();
        assert!(d["id"].is_null(), "{name}: id must be null");
        let uid = d["uid"].as_str().unwrap_or_else(|| panic!("{name}: no uid"));
        assert!(uids.insert(uid.to_string()), "{name}: duplicate uid {uid}");
        assert!(d["schemaVersion"].as_u64().is_some(), "{name}: schemaVersion");
        assert!(d.get("__inputs").is_none(), "{name}: __inputs breaks file provisioning");
        let vars = d["templating"]["list"].as_array().expect("templating.list");
        assert!(
            vars.iter().any(|v| v["name"] == "DS_PROMETHEUS" && v["type"] == "datasource"),
            "{name}: no DS_PROMETHEUS datasource variable"
        );
        let panels = d["panels"].as_array().expect("panels");
        assert!(!panels.is_empty(), "{name}: no panels");
        for p in panels {
            let title = p["title"].as_str().unwrap_or("?");
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{name}: panel {title}");
            assert!(p["gridPos"]["w"].as_u64().is_some(), "{name}: panel {title} has no gridPos");
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name}: panel {title} has no query");
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{name}: panel {title}");
                let expr = t["expr"].as_str().unwrap_or("");
                assert!(!metric_names(expr).is_empty(), "{name}: panel {title}: `{expr}` names no metric");
            }
        }
    }
}

/// The `promtool` binary, or `None` (a failure under CI) when it is not installed.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()))
        .unwrap_or_default();
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`{name}` is not installed; under CI it is required (.ci/run installs the Debian package prometheus)"
        );
        eprintln!("note: `{name}` not installed; skipping (apt-get install prometheus)");
    }
    found
}

fn promtool(promtool: &Path, args: &[&str], stdin: Option<&str>, dir: &Path) -> String {
    let mut child = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[tokio::test]
async fn promtool_accepts_the_rules_their_tests_and_a_real_scrape() {
    let Some(bin) = tool("promtool") else { return };
    let alerts = repo_file("alerts");
    promtool(&bin, &["check", "rules", "madeira.rules.yml"], None, &alerts);
    promtool(&bin, &["test", "rules", "madeira.rules.test.yml"], None, &alerts.join("tests"));
    let (_dir, dev) = Dev::start();
    let scrape = scrape_after_a_run(&dev).await;
    let lint = promtool(&bin, &["check", "metrics"], Some(&scrape), &alerts);
    assert!(lint.trim().is_empty(), "promtool check metrics found problems:\n{lint}");
}

async fn scrape(dev: &Dev) -> String {
    dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("scrape").text().await.expect("body")
}

#[tokio::test]
async fn gauges_are_right_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    dev.put_flow(
        "flow: waits\nnodes:\n  a: {run: {builtin: noop}}\n  ok: {needs: [a], manual: {prompt: sure?}}\n",
    )
    .await;
    let run_id = dev.trigger("waits", json!({})).await;
    dev.wait_run(&run_id, 20, |r| crate::support::status_of(r, "ok") == "MANUAL_CONFIRM").await;
    let active = "madeira_runs_active{flow=\"waits\"} 1";
    let pending = "madeira_manual_confirm_pending{flow=\"waits\",node=\"ok\"} 1";
    let before = scrape(&dev).await;
    assert!(before.contains(active) && before.contains(pending), "{before}");
    dev.kill9();
    let dev = Dev::start_in(dir.path());
    wait_until(std::time::Duration::from_secs(20), "the gauges rebuilt after the restart", async || {
        let after = scrape(&dev).await;
        if after.contains(active) && after.contains(pending) { Ok(()) } else { Err(after) }
    })
    .await;
    let (status, _) =
        dev.post(&format!("/runs/{run_id}/nodes/ok/confirm"), json!({"reason": "ok"}), &[]).await;
    assert_eq!(status, 200);
    dev.finished(&run_id).await;
    let done = scrape(&dev).await;
    assert!(done.contains("madeira_runs_active{flow=\"waits\"} 0"), "{done}");
    assert!(done.contains("madeira_manual_confirm_pending{flow=\"waits\",node=\"ok\"} 0"), "{done}");
    assert!(done.contains("madeira_runs_total{flow=\"waits\",status=\"SUCCESS\"} 1"), "{done}");
}

#[tokio::test]
async fn log_level_changes_at_run_time() {
    let (_dir, dev) = Dev::start();
    let url = format!("{}/admin/log-level", dev.base);
    let resp =
        dev.http.put(&url).json(&json!({"filter": "info,madeira_engine=debug"})).send().await.expect("put");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["filter"], "info,madeira_engine=debug");
    let current: Value = dev.http.get(&url).send().await.expect("get").json().await.expect("json");
    assert_eq!(current["filter"], "info,madeira_engine=debug");
    let bad = dev.http.put(&url).json(&json!({"filter": "info,=[bad"})).send().await.expect("put");
    assert_eq!(bad.status(), 400);
    let current: Value = dev.http.get(&url).send().await.expect("get").json().await.expect("json");
    assert_eq!(current["filter"], "info,madeira_engine=debug", "a refused filter keeps the old one");
}
