//! Flow lifecycle from the CLI and the API (issue 19 item 10): `apply -f DIR`
//! validates every file before applying any; runs filter by creation time
//! (`since`/`until`, an id range over UUIDv7 run ids).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Dev;

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test]
async fn apply_a_directory_is_all_or_nothing_and_names_file_and_line() {
    let (dir, dev) = Dev::start();
    let flows = dir.path().join("flows");
    std::fs::create_dir_all(&flows).expect("mkdir");
    std::fs::write(flows.join("a.yaml"), "flow: dir-a\nnodes:\n  x: {run: {builtin: noop}}\n").expect("a");
    std::fs::write(flows.join("b.yml"), "flow: dir-b\nnodes:\n  x: {run: {builtin: noop}}\n").expect("b");
    std::fs::write(flows.join("README.txt"), "not a flow").expect("readme");
    std::fs::write(
        flows.join("c.yaml"),
        "flow: dir-c\nnodes:\n  x: {run: {builtin: noop}}\n  y: {needs: [nope], run: {builtin: noop}}\n",
    )
    .expect("c");
    let out = dev.cli(&["apply", "-f", flows.to_str().expect("path")]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("nothing applied"), "{said}");
    assert!(said.contains(&format!("{}:4: node y:", flows.join("c.yaml").display())), "{said}");
    let (_, listed) = dev.get("/flows").await;
    assert_eq!(listed["flows"], json!([]), "a valid file was applied despite an invalid one: {listed}");

    std::fs::remove_file(flows.join("c.yaml")).expect("rm");
    let out = dev.cli(&["apply", "-f", flows.to_str().expect("path"), "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let applied: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> =
        applied["applied"].as_array().expect("applied").iter().filter_map(|r| r["flow"].as_str()).collect();
    assert_eq!(names, ["dir-a", "dir-b"]);

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let out = dev.cli(&["apply", "-f", empty.to_str().expect("path")]);
    assert!(!out.status.success() && text(&out).contains("no *.yaml or *.yml flow files"), "{}", text(&out));
}

/// The creation millisecond a UUIDv7 run id carries.
fn id_ms(id: &str) -> i64 {
    let hex: String = id.chars().filter(|c| *c != '-').take(12).collect();
    i64::from_str_radix(&hex, 16).expect("v7 id")
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[tokio::test]
async fn runs_filter_by_since_and_until_in_api_and_cli() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: timed\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let early = dev.trigger("timed", json!({})).await;
    let cut = id_ms(&early) + 1;
    let deadline = Instant::now() + Duration::from_secs(5);
    while chrono::Utc::now().timestamp_millis() <= cut + 1 {
        assert!(Instant::now() < deadline, "the clock did not move");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let late = dev.trigger("timed", json!({})).await;
    assert!(id_ms(&late) >= cut);
    let ids = |v: &Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .filter_map(|r| r["run_id"].as_str().map(str::to_string))
            .collect()
    };
    let cut = rfc3339(cut).replace('+', "%2B");
    let (_, all) = dev.get("/runs?flow=timed").await;
    assert_eq!(ids(&all), [late.clone(), early.clone()]);
    let (_, since) = dev.get(&format!("/runs?flow=timed&since={cut}")).await;
    assert_eq!(ids(&since), std::slice::from_ref(&late));
    let (_, until) = dev.get(&format!("/runs?flow=timed&until={cut}")).await;
    assert_eq!(ids(&until), std::slice::from_ref(&early));
    let (_, page) = dev.get(&format!("/runs?flow=timed&since={}&limit=1", rfc3339(id_ms(&early)))).await;
    assert_eq!((ids(&page), page["next"].as_str()), (vec![late.clone()], Some(late.as_str())));
    let (status, bad) = dev.get("/runs?since=yesterday").await;
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"].as_str().unwrap_or_default().starts_with("since `yesterday`: give RFC 3339"),
        "{bad}"
    );
    let (status, _) = dev.get(&format!("/runs?since={cut}&until={cut}")).await;
    assert_eq!(status, 400, "an empty range is refused");

    let out =
        dev.cli(&["runs", "--flow", "timed", "--since", &rfc3339(id_ms(&early) + 1), "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(ids(&listed), [late]);
    let out = dev.cli(&["runs", "--flow", "timed", "--until", &rfc3339(id_ms(&early) + 1)]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains(&early) && printed.lines().count() == 2, "{printed}");
}
