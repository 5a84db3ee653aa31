//! The console in process over a real SQLite store and engine, with three tokens:
//! the role × action matrix (viewer refused, operator and admin let through, no
//! CSRF refused for everyone), actions audited with the token's name, sessions
//! and their cookie, the SSE stream resuming after `Last-Event-ID`, and a token
//! scoped to a team seeing only that team's flows and runs.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use madeira_server::{Role, TokenEntry};
use tower::ServiceExt;

mod support;
use support::{App, between, send, signin_form, trigger};

const FLOW: &str = "flow: pay\nnodes:\n  compute: {run: {builtin: noop, outputs: {total: 5}}}\n  approve:\n    needs: [compute]\n    manual: {prompt: \"Pay {{ nodes.compute.outputs.total }}?\"}\n  pay: {needs: [approve], run: {builtin: noop}}\n";

fn token(name: &str, role: Role) -> TokenEntry {
    TokenEntry { name: name.into(), role, token: format!("{name}-secret-token"), scope: None }
}

async fn app(auth: bool) -> App {
    let tokens = auth.then(|| {
        let mut fina = token("fina", Role::Operator);
        fina.scope = Some([("team".to_string(), "finance".to_string())].into());
        vec![token("vera", Role::Viewer), token("otto", Role::Operator), token("ada", Role::Admin), fina]
    });
    support::app("pay.yaml", FLOW, tokens).await
}

fn get(uri: &str, cookie: Option<&str>) -> Request<Body> {
    let mut b = Request::builder().uri(uri);
    if let Some(c) = cookie {
        b = b.header(header::COOKIE, c);
    }
    b.body(Body::empty()).expect("request")
}

fn post(uri: &str, cookie: Option<&str>, form: &str) -> Request<Body> {
    let mut b = Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("HX-Request", "true");
    if let Some(c) = cookie {
        b = b.header(header::COOKIE, c);
    }
    b.body(Body::from(form.to_string())).expect("request")
}

/// Signs in with `name`'s token: the session cookie and the page's CSRF token.
async fn sign_in(app: &App, name: &str) -> (String, String) {
    let (form_cookie, signin_csrf) = signin_form(app).await;
    let form = format!("csrf={signin_csrf}&next=%2Fapprovals&token={name}-secret-token");
    let reply = send(app, post("/signin", Some(&form_cookie), &form)).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert_eq!(reply.headers[header::LOCATION], "/approvals");
    let set = reply.headers[header::SET_COOKIE].to_str().expect("ascii").to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Max-Age="), "{set}");
    let cookie = set.split(';').next().expect("cookie").to_string();
    let page = send(app, get("/approvals", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(name), "the page names who is signed in");
    assert!(!page.body.contains(&format!("{name}-secret-token")), "the token is never in a page");
    (cookie, between(&page.body, "&quot;X-CSRF-Token&quot;:&quot;", "&quot;"))
}

async fn start_waiting_run(app: &App) -> String {
    let mut events = app.engine.subscribe();
    let run = trigger(app, "pay").await;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = events.recv().await.expect("event");
            if e.run_id == run && e.to == "MANUAL_CONFIRM" {
                return;
            }
        }
    })
    .await
    .expect("the run waits for confirmation");
    run
}

/// Every POST the console offers, for one waiting run.
fn actions(run: &str) -> Vec<(String, String)> {
    vec![
        (format!("/runs/{run}/nodes/approve/confirm"), "reason=ok"),
        (format!("/runs/{run}/nodes/approve/reject"), "reason=no"),
        (format!("/runs/{run}/nodes/compute/rerun"), "reason=again"),
        (format!("/runs/{run}/nodes/compute/rerun"), "reason=again&downstream=true"),
        (format!("/runs/{run}/nodes/compute/mark-success"), "reason=push"),
        (format!("/runs/{run}/nodes/approve/skip"), "reason=skip"),
        (format!("/runs/{run}/cancel"), "reason=stop"),
        ("/flows/pay/run".to_string(), "params=%7B%7D"),
        ("/flows/pay/pause".to_string(), "reason=hold"),
        ("/flows/pay/resume".to_string(), "reason=go"),
        ("/approvals/bulk".to_string(), "reason=ok"),
    ]
    .into_iter()
    .map(|(uri, form)| (uri, form.to_string()))
    .chain([
        ("/runs/bulk".to_string(), format!("reason=stop&action=cancel&sel={run}")),
        ("/runs/bulk".to_string(), format!("reason=again&action=rerun-failed&sel={run}")),
    ])
    .collect()
}

#[tokio::test]
async fn role_by_action_matrix() {
    let app = app(true).await;
    for (name, role) in [("vera", Role::Viewer), ("otto", Role::Operator), ("ada", Role::Admin)] {
        let (cookie, csrf) = sign_in(&app, name).await;
        for (uri, form) in actions(&start_waiting_run(&app).await) {
            let without = send(&app, post(&uri, Some(&cookie), &form)).await;
            assert_eq!(without.status, StatusCode::FORBIDDEN, "{name} {uri} without CSRF: {}", without.body);
            let wrong =
                send(&app, post(&uri, Some(&cookie), &format!("{form}&csrf={}", "0".repeat(64)))).await;
            assert_eq!(wrong.status, StatusCode::FORBIDDEN, "{name} {uri} with a wrong CSRF token");
            let reply = send(&app, post(&uri, Some(&cookie), &format!("{form}&csrf={csrf}"))).await;
            if role == Role::Viewer {
                assert_eq!(reply.status, StatusCode::FORBIDDEN, "viewer {uri}: {}", reply.body);
                assert!(reply.body.contains("Viewer"), "says why: {}", reply.body);
            } else {
                // Allowed: done, or refused by the state machine (409) / bad input (400), never 401/403.
                assert!(
                    !matches!(reply.status, StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED),
                    "{name} {uri}: {} {}",
                    reply.status,
                    reply.body
                );
            }
        }
    }
}

#[tokio::test]
async fn actions_are_audited_with_the_token_name_and_need_a_reason() {
    let app = app(true).await;
    let (cookie, csrf) = sign_in(&app, "otto").await;
    let run = start_waiting_run(&app).await;
    let blank = send(
        &app,
        post(&format!("/runs/{run}/nodes/approve/confirm"), Some(&cookie), &format!("csrf={csrf}&reason=+")),
    )
    .await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST);
    let done = send(
        &app,
        post(
            &format!("/runs/{run}/nodes/approve/confirm"),
            Some(&cookie),
            &format!("csrf={csrf}&reason=totals+match"),
        ),
    )
    .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(done.headers["HX-Trigger"], "madeira-refresh");
    let audit = app
        .store
        .audit(&madeira_store::AuditQuery { run_id: Some(run.clone()), limit: 10, ..Default::default() })
        .await
        .expect("audit");
    let confirm = audit.iter().find(|a| a.action == "confirm").expect("confirm audited");
    assert_eq!((confirm.actor.as_str(), confirm.reason.as_deref()), ("otto", Some("totals match")));
    // The same action again is refused by the state machine, with the API's status.
    let again = send(
        &app,
        post(
            &format!("/runs/{run}/nodes/approve/confirm"),
            Some(&cookie),
            &format!("csrf={csrf}&reason=again"),
        ),
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
}

#[tokio::test]
async fn pages_need_a_session_and_sign_out_ends_it() {
    let app = app(true).await;
    let page = send(&app, get("/runs", None)).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.headers[header::LOCATION], "/signin?next=/runs");
    let forged = send(&app, get("/runs", Some("madeira_session=0123"))).await;
    assert_eq!(forged.status, StatusCode::SEE_OTHER, "an unknown session id is no session");
    let bad = send(&app, post("/signin", None, "csrf=x&token=otto-secret-token")).await;
    assert_eq!(bad.status, StatusCode::FORBIDDEN, "the sign-in form has its CSRF token too");
    let (form_cookie, csrf) = signin_form(&app).await;
    let (other_cookie, _) = signin_form(&app).await;
    let form = format!("csrf={csrf}&token=otto-secret-token");
    let crossed = send(&app, post("/signin", Some(&other_cookie), &form)).await;
    assert_eq!(crossed.status, StatusCode::FORBIDDEN, "the field must match this browser's cookie");
    let no_cookie = send(&app, post("/signin", None, &form)).await;
    assert_eq!(no_cookie.status, StatusCode::FORBIDDEN, "a form field alone is not enough");
    assert_eq!(send(&app, post("/signin", Some(&form_cookie), &form)).await.status, StatusCode::SEE_OTHER);
    let (cookie, csrf) = sign_in(&app, "otto").await;
    assert_eq!(send(&app, get("/runs", Some(&cookie))).await.status, StatusCode::OK);
    let out = send(&app, post("/signout", Some(&cookie), &format!("csrf={csrf}"))).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(send(&app, get("/runs", Some(&cookie))).await.status, StatusCode::SEE_OTHER, "signed out");
    let api = send(&app, get("/api/v1/runs", Some(&cookie))).await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED, "a console session is not an API credential");
}

#[tokio::test]
async fn dev_mode_needs_no_sign_in_but_still_checks_csrf() {
    let app = app(false).await;
    let page = send(&app, get("/approvals", None)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("dev mode"));
    let run = start_waiting_run(&app).await;
    let forged =
        send(&app, post(&format!("/runs/{run}/nodes/approve/confirm"), None, "reason=cross-site")).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let csrf =
        between(&send(&app, get("/approvals", None)).await.body, "&quot;X-CSRF-Token&quot;:&quot;", "&quot;");
    let ok = send(
        &app,
        post(&format!("/runs/{run}/nodes/approve/confirm"), None, &format!("reason=ok&csrf={csrf}")),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
}

#[tokio::test]
async fn assets_are_immutable_and_pages_carry_a_strict_csp() {
    let app = app(false).await;
    let page = send(&app, get("/", None)).await;
    let csp = page.headers[header::CONTENT_SECURITY_POLICY].to_str().expect("csp");
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    let src = between(&page.body, "<script src=\"", "\"");
    assert!(page.body.contains("integrity=\"sha384-"), "htmx is loaded with SRI");
    let asset = send(&app, get(&src, None)).await;
    assert_eq!(asset.status, StatusCode::OK);
    assert_eq!(asset.headers[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
    assert_eq!(send(&app, get("/assets/htmx.min.js", None)).await.status, StatusCode::NOT_FOUND);
}

/// Reads SSE events (`id:` and `event:` lines) from a live stream.
async fn read_events(body: Body, n: usize) -> Vec<(u64, String)> {
    let mut stream = body.into_data_stream();
    let mut text = String::new();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while out.len() < n {
            let chunk = stream.next().await.expect("stream open").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                let id = block.lines().find_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")));
                if let Some(id) = id {
                    out.push((id.trim().parse().expect("numeric id"), block));
                }
            }
        }
    })
    .await
    .expect("events in time");
    out
}

#[tokio::test]
async fn sse_resumes_after_last_event_id() {
    let app = app(false).await;
    let live = app.router.clone().oneshot(get("/events", None)).await.expect("infallible");
    assert_eq!(live.headers()[header::CONTENT_TYPE], "text/event-stream");
    let run = start_waiting_run(&app).await;
    // compute INIT→RUNNING→SUCCESS, approve INIT→MANUAL_CONFIRM (and the run's own).
    let first = read_events(live.into_body(), 3).await;
    assert!(first.windows(2).all(|w| w[1].0 > w[0].0), "ids increase: {first:?}");
    assert!(first.iter().all(|(_, b)| b.contains(&run)));
    let resume = Request::builder()
        .uri("/events")
        .header("last-event-id", first[0].0.to_string())
        .body(Body::empty())
        .expect("request");
    let again = app.router.clone().oneshot(resume).await.expect("infallible");
    let replayed = read_events(again.into_body(), 2).await;
    assert_eq!(replayed[0].0, first[1].0, "the stream resumes right after the last id seen");
    assert_eq!(replayed[1].0, first[2].0);
    let bad = send(
        &app,
        Request::builder().uri("/events").header("last-event-id", "x").body(Body::empty()).expect("request"),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_large_flow_opens_on_a_focused_view_with_every_node_listed() {
    let app = app(false).await;
    let mut yaml = String::from("flow: wide\nnodes:\n");
    for v in 0..400 {
        match v {
            0 => yaml.push_str("  n0: {run: {builtin: noop}}\n"),
            _ => yaml.push_str(&format!("  n{v}: {{needs: [n{}], run: {{builtin: noop}}}}\n", (v - 1) / 3)),
        }
    }
    app.engine.apply_flow("wide.yaml", &yaml).await.expect("flow");
    let run = trigger(&app, "wide").await;
    let page = send(&app, get(&format!("/runs/{run}"), None)).await;
    assert_eq!(page.status, StatusCode::OK);
    // Boxes of the graph drawn across (`id="n-…"`); a small view also has its
    // phone copy drawn down (`id="v-n-…"`), one box per node too.
    let drawn = page.body.matches(" id=\"n-").count();
    assert_eq!(page.body.matches(" id=\"v-n-").count(), drawn, "the phone's copy draws the same nodes");
    assert!(drawn > 1 && drawn < 50, "a focused view draws the neighbourhood only: {drawn}");
    assert!(page.body.contains("focus-note"));
    assert_eq!(page.body.matches("<tr id=\"r-n").count(), 200, "a large run's table shows 200 rows at once");
    let found = send(&app, get(&format!("/runs/{run}?q=n39"), None)).await;
    // n39, n390 … n399: the search finds nodes the first rows left out.
    assert_eq!(found.body.matches("<tr id=\"r-n39").count(), 11, "the node search");
    assert!(found.body.contains("id=\"r-n399\""));
    let timing = page.headers["server-timing"].to_str().expect("ascii").to_string();
    assert!(timing.starts_with("app;dur="), "{timing}");
    let all = send(&app, get(&format!("/runs/{run}?focus=all"), None)).await;
    assert_eq!(all.body.matches(" id=\"n-").count(), 400);
    assert_eq!(all.body.matches(" id=\"v-n-").count(), 0, "no phone copy of 400 nodes: that one scrolls");
    let focused = send(&app, get(&format!("/runs/{run}?focus=n13&depth=1"), None)).await;
    // n13: its upstream n4 and its downstream n40, n41, n42.
    assert_eq!(focused.body.matches(" id=\"n-").count(), 5, "n13 ± 1 level");
    let flow = send(&app, get("/flows/wide?focus=all", None)).await;
    assert!(flow.headers["server-timing"].to_str().expect("ascii").contains("app;dur="));
}

#[tokio::test]
async fn a_scoped_token_sees_only_its_team_and_another_teams_run_is_not_found() {
    let app = app(true).await;
    let ledger = "flow: ledger\nlabels: {team: finance}\nnodes:\n  check: {manual: {prompt: ok?}}\n";
    app.engine.apply_flow("ledger.yaml", ledger).await.expect("ledger flow");
    let theirs = start_waiting_run(&app).await;
    let (cookie, csrf) = sign_in(&app, "fina").await;

    let flows = send(&app, get("/flows", Some(&cookie))).await;
    assert_eq!(flows.status, StatusCode::OK);
    assert!(flows.body.contains("/flows/ledger"), "its own flow is listed: {}", flows.body);
    assert!(!flows.body.contains("/flows/pay"), "another team's flow is absent");
    for page in ["/runs", "/approvals", "/", "/audit"] {
        let reply = send(&app, get(page, Some(&cookie))).await;
        assert_eq!(reply.status, StatusCode::OK, "{page}");
        assert!(!reply.body.contains(&theirs), "{page} lists another team's run");
    }
    for page in [format!("/runs/{theirs}"), "/flows/pay".to_string()] {
        let reply = send(&app, get(&page, Some(&cookie))).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{page}: {}", reply.body);
    }
    let confirm = format!("/runs/{theirs}/nodes/approve/confirm");
    let reply = send(&app, post(&confirm, Some(&cookie), &format!("reason=ok&csrf={csrf}"))).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.body);
    let run = app.store.load_run(&theirs).await.expect("load").expect("run");
    let approve = run.nodes.iter().find(|n| n.node == "approve").expect("approve node");
    assert_eq!(approve.state.as_str(), "MANUAL_CONFIRM", "the refused confirm did nothing");

    let (admin, _) = sign_in(&app, "ada").await;
    let runs = send(&app, get("/runs", Some(&admin))).await;
    assert!(runs.body.contains(&theirs), "admin stays global");
}

/// The body of a reply that should be finite: `None` when it is still streaming
/// after 3 s (an open live stream).
async fn finite(app: &App, request: Request<Body>) -> (StatusCode, Option<String>) {
    let response = app.router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let read = axum::body::to_bytes(response.into_body(), 4 << 20);
    match tokio::time::timeout(Duration::from_secs(3), read).await {
        Ok(bytes) => (status, Some(String::from_utf8_lossy(&bytes.expect("body")).into_owned())),
        Err(_) => (status, None),
    }
}

#[tokio::test]
async fn every_console_route_applies_the_tokens_scope() {
    use madeira_console::Access;
    let app = app(true).await;
    let ledger = "flow: ledger\nlabels: {team: finance}\nnodes:\n  check: {manual: {prompt: ok?}}\n";
    app.engine.apply_flow("ledger.yaml", ledger).await.expect("ledger flow");
    // `pay` has no team label: another team's, to a token scoped to finance.
    let theirs = start_waiting_run(&app).await;
    let (cookie, csrf) = sign_in(&app, "fina").await;

    let routes = madeira_console::routes();
    let public: Vec<&str> = routes.iter().filter(|(_, a)| *a == Access::Public).map(|(p, _)| *p).collect();
    assert_eq!(
        public,
        ["/signin", "/signout", "/lang", "/assets/{name}", "/favicon.ico"],
        "a route that shows flows or runs must be Scoped (and pass this probe)"
    );
    let mut probed = 0;
    for (path, _) in routes.iter().filter(|(_, a)| *a == Access::Scoped) {
        let mut uri = path
            .replace("{id}", &theirs)
            .replace("{name}", "pay")
            .replace("{node}", "approve")
            .replace("{action}", "confirm");
        if *path == "/events" {
            uri.push_str(&format!("?run={theirs}"));
        }
        let uris = match path.ends_with("/log") {
            true => vec![uri.clone(), format!("{uri}?download=1")],
            false => vec![uri.clone()],
        };
        for uri in uris {
            let form = format!(
                "csrf={csrf}&reason=probe&runs={theirs}&action=cancel&back=%2F&items={theirs}%2Fapprove"
            );
            for request in [get(&uri, Some(&cookie)), post(&uri, Some(&cookie), &form)] {
                let method = request.method().clone();
                let (status, body) = finite(&app, request).await;
                if status == StatusCode::METHOD_NOT_ALLOWED {
                    continue;
                }
                probed += 1;
                let Some(body) = body else {
                    panic!("{method} {uri} streams to another team ({status})");
                };
                if method == "POST" {
                    // A POST may name the run it refused; what it did is checked below.
                    continue;
                }
                if path.contains('{') || uri.contains('?') {
                    assert_eq!(
                        status,
                        StatusCode::NOT_FOUND,
                        "GET {uri} names another team's run or flow: {body}"
                    );
                    continue;
                }
                assert!(status.is_success(), "{method} {uri}: {status} {body}");
                assert!(!body.contains(&theirs), "{method} {uri} shows another team's run: {body}");
                assert!(
                    !body.contains(">pay<") && !body.contains("/flows/pay"),
                    "{method} {uri} names flow pay"
                );
            }
        }
    }
    assert!(probed >= 23, "every scoped route was probed: {probed}");
    let run = app.store.load_run(&theirs).await.expect("load").expect("run");
    assert_eq!(run.run.state.as_str(), "RUNNING", "nothing another team's token posted took effect");
    let approve = run.nodes.iter().find(|n| n.node == "approve").expect("approve node");
    assert_eq!(approve.state.as_str(), "MANUAL_CONFIRM");
    let flow = app.store.get_flow("pay").await.expect("flow").expect("pay");
    assert!(!flow.paused, "another team's flow was not paused");

    // The unfiltered stream carries the team's own flows only.
    let live = app.router.clone().oneshot(get("/events", Some(&cookie))).await.expect("infallible");
    assert_eq!(live.status(), StatusCode::OK);
    let other = start_waiting_run(&app).await;
    let mine = trigger(&app, "ledger").await;
    // The ledger run's start and its node waiting for confirmation.
    let events = read_events(live.into_body(), 2).await;
    assert!(events.iter().all(|(_, b)| b.contains(&mine) && !b.contains(&other)), "{events:?}");
}
