//! `GET /estate?date=YYYY-MM-DD`: the estate map for one business date — every
//! flow, its upstream flows, the state of its newest run for that date, whom a
//! held flow waits for and the failed upstream (flow and node) at the root.
//! A token scoped to some flows sees only those flows and the edges between them:
//! another team's upstream is not named (`waiting for a flow outside your
//! scope`, `root_hidden: true` instead of its `root_cause`).

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use std::collections::HashSet;

use madeira_engine::estate_map::MapFlow;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EstateQuery {
    /// The business date, `YYYY-MM-DD` (default: today, UTC).
    date: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/estate",
    operation_id = "estate_map",
    tag = "estate",
    params(EstateQuery),
    responses(
        (status = 200, description = "every flow with its upstreams and its state for the date", body = crate::schema::EstateView),
        (status = 400, description = "bad date", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn map(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<EstateQuery>,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let date = match q.date {
        Some(d) => {
            madeira_core::bizdate::parse_date(&d).map_err(|e| ApiError::bad_request(format!("date: {e}")))?
        }
        None => chrono::Utc::now().date_naive(),
    };
    let date = madeira_core::bizdate::format_date(date);
    let flows = state.engine.estate_map(&date).await?;
    let flows = match state.visible_flows(&caller).await? {
        Some(visible) => scoped(flows, &visible),
        None => flows.iter().map(|f| json!(f)).collect(),
    };
    Ok(Json(json!({"date": date, "flows": flows})))
}

/// The flow a held run's reason names (`waiting for fx-rates.publish 2026-12-03` → `fx-rates`).
fn upstream_flow(reason: &str) -> &str {
    let what = reason.strip_prefix("waiting for ").unwrap_or(reason);
    let what = what.rsplit_once(' ').map_or(what, |(name, _)| name);
    what.split('.').next().unwrap_or(what)
}

/// The map as a scoped caller sees it: its flows only, edges between them only.
fn scoped(map: Vec<MapFlow>, visible: &HashSet<String>) -> Vec<Value> {
    let sees = |flow: &str| visible.contains(flow);
    let mut out = Vec::new();
    for mut f in map.into_iter().filter(|f| sees(&f.flow)) {
        f.after.retain(|u| sees(u));
        f.holds.retain(|h| sees(h));
        if f.waiting_for.as_deref().is_some_and(|w| !sees(upstream_flow(w))) {
            f.waiting_for = Some("waiting for a flow outside your scope".into());
        }
        let hidden = f.root_cause.as_ref().is_some_and(|r| !sees(&r.flow));
        if hidden {
            f.root_cause = None;
        }
        let mut v = json!(f);
        if hidden {
            v["root_hidden"] = json!(true);
        }
        out.push(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use madeira_engine::estate_map::RootCause;

    fn flow(name: &str, after: &[&str], state: &'static str) -> MapFlow {
        MapFlow {
            flow: name.into(),
            after: after.iter().map(|a| a.to_string()).collect(),
            state,
            run_id: None,
            waiting_for: None,
            root_cause: None,
            holds: Vec::new(),
            deadline: None,
            late: false,
        }
    }

    #[test]
    fn a_scoped_caller_sees_its_flows_and_the_edges_between_them_only() {
        let pull = MapFlow { holds: vec!["clean".into(), "settle".into()], ..flow("pull", &[], "failed") };
        let root = Some(RootCause { flow: "pull".into(), node: Some("fetch".into()) });
        let clean = MapFlow {
            waiting_for: Some("waiting for pull.fetch 2026-12-04".into()),
            root_cause: root.clone(),
            ..flow("clean", &["pull"], "held")
        };
        let settle = MapFlow {
            waiting_for: Some("waiting for clean 2026-12-04".into()),
            root_cause: root,
            ..flow("settle", &["clean", "pull"], "held")
        };
        let visible: HashSet<String> = ["clean".to_string(), "settle".to_string()].into();
        let seen = scoped(vec![pull, clean, settle], &visible);
        let names: Vec<&str> = seen.iter().filter_map(|f| f["flow"].as_str()).collect();
        assert_eq!(names, ["clean", "settle"]);
        assert_eq!(seen[0]["after"], json!([]));
        assert_eq!(seen[0]["waiting_for"], "waiting for a flow outside your scope");
        assert_eq!((seen[0].get("root_cause"), &seen[0]["root_hidden"]), (None, &json!(true)));
        assert_eq!(seen[1]["after"], json!(["clean"]));
        assert_eq!(seen[1]["waiting_for"], "waiting for clean 2026-12-04");
        assert_eq!(upstream_flow("waiting for fx-rates.publish 2026-12-03"), "fx-rates");
    }
}
