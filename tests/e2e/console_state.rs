//! What the web console keeps in the store, through the real binary: each
//! attempt's host (the replica for an in-process attempt, the sidecar it was
//! placed on) and each run's actor, filtered on in the API, the CLI and the
//! console; and sessions that outlive a restart, work on another replica sharing
//! the store, and end at sign-out.

use std::path::Path;

use madeira_store::testing::PgTestDb;
use serde_json::json;

use crate::cluster::{config, replica};
use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::{Dev, wait_until};

const JOBS: &str = "jobs:\n  hello:\n    command: [\"/bin/sh\", \"-c\", \"echo hi\"]\n";

#[tokio::test]
async fn attempts_name_their_host_and_runs_their_actor() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `madeira dev` is the replica `dev`.
    let dev = Dev::start_in(&dir.path().join("data"));
    let _sidecar = SidecarProc::start(dir.path(), "sc-east", &dev.grpc, JOBS);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow(
        "flow: hosts\nnodes:\n  local: {run: {builtin: noop}}\n  \
         remote: {needs: [local], run: {sidecar: {group: billing, job: hello}}}\n",
    )
    .await;
    dev.put_flow("flow: ticks\ntriggers:\n  - cron: \"* * * * * *\"\nnodes:\n  a: {run: {builtin: noop}}\n")
        .await;
    let run_id = dev.trigger("hosts", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["local"]["attempt_history"][0]["host"], "dev", "{run}");
    assert_eq!(run["nodes"]["remote"]["attempt_history"][0]["host"], "sc-east", "{run}");
    assert_eq!(run["actor"], "local", "dev's caller without auth");

    let page = dev.http.get(format!("{}/runs/{run_id}?node=remote", dev.base)).send().await.expect("page");
    let html = page.text().await.expect("body");
    assert!(html.contains("<td class=\"opt host\">sc-east</td>"), "nodes table names the sidecar: {html}");
    assert!(html.contains("<td class=\"opt host\">dev</td>"), "and the replica");
    let actor = html.find("id=\"run-actor\"").map(|i| &html[i..(i + 60).min(html.len())]).unwrap_or("");
    assert!(actor.contains(">local<"), "the header names the actor: {actor}");
    assert!(html.contains("title=\"Sidecar\">sc-east</td>"), "the panel's attempts name where they ran");

    // Cron runs are the scheduler's: the actor filter tells them apart.
    let list = wait_until(std::time::Duration::from_secs(20), "a cron run", async || {
        let (code, list) = dev.get("/runs?actor=scheduler").await;
        assert_eq!(code, 200, "{list}");
        if list["runs"].as_array().is_some_and(|r| !r.is_empty()) { Ok(list) } else { Err(list.to_string()) }
    })
    .await;
    let runs = list["runs"].as_array().cloned().unwrap_or_default();
    assert!(runs.iter().all(|r| r["flow"] == "ticks" && r["actor"] == "scheduler"), "{list}");
    let (_, mine) = dev.get("/runs?actor=local").await;
    let ids: Vec<&str> =
        mine["runs"].as_array().into_iter().flatten().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(ids, [run_id.as_str()], "{mine}");
    let out = dev.cli(&["runs", "--actor", "local"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(&run_id) && !text.contains("ticks"), "{text}");
    let search = dev.http.get(format!("{}/runs?actor=scheduler", dev.base)).send().await.expect("search");
    let html = search.text().await.expect("body");
    assert!(html.contains("name=\"actor\" value=\"scheduler\""), "the form keeps the filter");
    assert!(html.contains("ticks") && !html.contains(&run_id[..13]), "only the scheduler's runs are listed");
}

pub(crate) const FORM: &str = "application/x-www-form-urlencoded";

/// `k=v&…`, each value percent-encoded.
pub(crate) fn form_body(fields: &[(&str, &str)]) -> String {
    let enc = |v: &str| {
        v.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    fields.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect::<Vec<_>>().join("&")
}

/// A client that shows redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

/// `name=value` of the cookie `name` a response sets.
fn set_cookie(reply: &reqwest::Response, name: &str) -> String {
    reply
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie"))
        .to_string()
}

/// Signs in on `base` with the admin token of `cluster::config`: the session cookie.
async fn sign_in(base: &str) -> String {
    let http = browser();
    let form = http.get(format!("{base}/signin")).send().await.expect("signin page");
    let form_cookie = set_cookie(&form, "madeira_signin");
    let html = form.text().await.expect("body");
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("csrf");
    let reply = http
        .post(format!("{base}/signin"))
        .header(reqwest::header::COOKIE, form_cookie)
        .header(reqwest::header::CONTENT_TYPE, FORM)
        .body(form_body(&[("csrf", csrf), ("next", "/runs"), ("token", crate::cluster::ADMIN)]))
        .send()
        .await
        .expect("sign in");
    assert_eq!(reply.status(), 303);
    set_cookie(&reply, "madeira_session")
}

/// The status of `/runs` with `cookie`, and the page (200: signed in; 303: sent to sign-in).
async fn runs_page(base: &str, cookie: &str) -> (u16, String) {
    let reply = browser().get(format!("{base}/runs")).header(reqwest::header::COOKIE, cookie).send().await;
    let reply = reply.expect("runs page");
    (reply.status().as_u16(), reply.text().await.expect("body"))
}

async fn sign_out(base: &str, cookie: &str, page: &str) {
    let csrf = page.split("&quot;X-CSRF-Token&quot;:&quot;").nth(1).and_then(|r| r.split("&quot;").next());
    let reply = browser()
        .post(format!("{base}/signout"))
        .header(reqwest::header::COOKIE, cookie)
        .header(reqwest::header::CONTENT_TYPE, FORM)
        .body(form_body(&[("csrf", csrf.expect("csrf in the page"))]))
        .send()
        .await
        .expect("sign out");
    assert_eq!(reply.status(), 303);
}

fn sqlite_config(dir: &Path) -> std::path::PathBuf {
    config(dir, &format!("sqlite://{}", dir.join("m.db").display()), "")
}

#[tokio::test]
async fn a_console_session_outlives_a_restart_and_sign_out_ends_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = sqlite_config(dir.path());
    let mut server = replica(&config, "r1");
    let cookie = sign_in(&server.base).await;
    assert_eq!(runs_page(&server.base, &cookie).await.0, 200);
    let raw = cookie.trim_start_matches("madeira_session=").as_bytes();
    for file in ["m.db", "m.db-wal"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        assert!(!bytes.windows(raw.len()).any(|w| w == raw), "{file} holds the raw session id");
    }
    server.kill9();
    let server = replica(&config, "r1");
    let (code, page) = runs_page(&server.base, &cookie).await;
    assert_eq!(code, 200, "the session is still there after the restart: {page}");
    sign_out(&server.base, &cookie, &page).await;
    assert_eq!(runs_page(&server.base, &cookie).await.0, 303, "signed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_console_session_made_on_one_replica_works_on_another() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url, "");
    let a = replica(&config, "ra");
    let b = replica(&config, "rb");
    let cookie = sign_in(&a.base).await;
    let (code, page) = runs_page(&b.base, &cookie).await;
    assert_eq!(code, 200, "replica B knows A's session: {page}");
    sign_out(&b.base, &cookie, &page).await;
    assert_eq!(runs_page(&a.base, &cookie).await.0, 303, "signed out on B ends it on A");
    drop((a, b));
    drop(db);
}
