//! A real Prometheus (Debian package `prometheus`) scrapes a running `madeira dev`
//! and answers a query about it through its HTTP API. Required under `CI=true`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::observability::{scrape_after_a_run, tool};
use crate::support::{Dev, wait_until};

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port that was free a moment ago (Prometheus binds its own listener).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test]
async fn prometheus_scrapes_madeira_and_reads_a_metric_back() {
    let Some(bin) = tool("prometheus") else { return };
    let (dir, dev) = Dev::start();
    scrape_after_a_run(&dev).await;
    let target = dev.base.trim_start_matches("http://").to_string();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{}']\n\
             scrape_configs:\n  - job_name: madeira\n    static_configs: [{{targets: ['{target}']}}]\n",
            crate::observability::repo_file("alerts/madeira.rules.yml").display()
        ),
    )
    .expect("write config");
    let http = reqwest::Client::new();
    let mut attempt = 0;
    // Another process may take the port between our probe and Prometheus' bind: retry.
    let (port, _prometheus) = loop {
        attempt += 1;
        let port = free_port();
        let mut child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join(format!("tsdb{attempt}")).display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn prometheus");
        let ready = wait_until(Duration::from_secs(30), "prometheus to be ready", async || {
            if let Ok(Some(_)) = child.try_wait() {
                return Some(false);
            }
            let answer = http.get(format!("http://127.0.0.1:{port}/-/ready")).send().await;
            answer.is_ok_and(|r| r.status().is_success()).then_some(true)
        })
        .await;
        if ready {
            break (port, Prometheus(child));
        }
        let _ = child.wait();
        assert!(attempt < 3, "prometheus exited three times at start");
    };
    let query = "madeira_runs_total{flow=\"obs\",status=\"SUCCESS\"}";
    let what = format!("Prometheus to have {query}");
    let resp = wait_until(Duration::from_secs(60), &what, async || {
        let resp: Value = http
            .post(format!("http://127.0.0.1:{port}/api/v1/query"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "query={}",
                query
                    .replace('{', "%7B")
                    .replace('}', "%7D")
                    .replace('"', "%22")
                    .replace('=', "%3D")
                    .replace(',', "%2C")
            ))
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("json");
        let has = resp["data"]["result"].as_array().is_some_and(|r| !r.is_empty());
        if has { Ok(resp) } else { Err(resp.to_string()) }
    })
    .await;
    let first = &resp["data"]["result"][0];
    assert_eq!(first["metric"]["job"], "madeira", "{resp}");
    assert_eq!(first["value"][1], "1", "{resp}");
    // The rules loaded and evaluate over the real series.
    let rules: Value = http
        .get(format!("http://127.0.0.1:{port}/api/v1/rules"))
        .send()
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    let groups = rules["data"]["groups"].as_array().expect("groups");
    assert!(groups.len() >= 2, "{rules}");
    for group in groups {
        for rule in group["rules"].as_array().into_iter().flatten() {
            assert_ne!(rule["health"], "err", "rule {} failed: {}", rule["name"], rule["lastError"]);
        }
    }
}
