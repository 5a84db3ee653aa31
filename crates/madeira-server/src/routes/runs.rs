//! Runs: trigger (with `Idempotency-Key`), list with a cursor, show, cancel, node
//! actions, logs and the transition log.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use madeira_engine::{ActionRequest, NodeActionKind, TriggerRequest};
use madeira_store::RunQuery;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{follow, json_body, sidecars};
use crate::{ApiError, AppState, Role, views};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggerBody {
    #[serde(default)]
    params: serde_json::Map<String, Value>,
    #[serde(default)]
    version: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    downstream: bool,
}

pub async fn trigger(
    State(state): State<AppState>,
    Path(flow): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let actor = state.auth.authorize(&headers, Role::Operator)?;
    let body: TriggerBody = json_body(&body)?;
    let def = state.engine.flow(&flow, None).await?;
    state.check_rate(&flow, def.rate_limit).await?;
    let key = match headers.get("idempotency-key") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?
                .to_string(),
        ),
        None => None,
    };
    let outcome = state
        .engine
        .trigger(TriggerRequest {
            flow,
            params: Value::Object(body.params),
            idempotency_key: key,
            trigger: "manual".into(),
            actor,
            version: body.version,
        })
        .await?;
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(json!({"run_id": outcome.run_id, "flow": outcome.flow, "version": outcome.version}))))
}

pub(crate) fn parse_limit(raw: Option<&String>) -> Result<u32, ApiError> {
    match raw {
        None => Ok(50),
        Some(s) => match s.parse::<u32>() {
            Ok(n @ 1..=1000) => Ok(n),
            _ => Err(ApiError::bad_request(format!("limit `{s}`: give a number from 1 to 1000"))),
        },
    }
}

pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let limit = parse_limit(q.get("limit"))?;
    if let Some(status) = q.get("status")
        && status.parse::<madeira_core::RunState>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "status `{status}`: use QUEUED, RUNNING, SUCCESS, FAILED or CANCELLED"
        )));
    }
    let query = RunQuery {
        flow: q.get("flow").cloned(),
        state: q.get("status").cloned(),
        before: q.get("cursor").cloned(),
        limit: limit + 1,
    };
    let mut rows = state.engine.store().list_runs(&query).await?;
    let next = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|r| Value::from(r.id.clone()))
    } else {
        None
    };
    let runs: Vec<Value> = rows.iter().map(views::run_summary).collect();
    Ok(Json(json!({"runs": runs, "next": next})))
}

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let stored = state
        .engine
        .store()
        .load_run(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    let def = state.engine.flow(&stored.run.flow, Some(stored.run.version)).await?;
    let mut view = views::run_detail(&stored, &def);
    for node in def.nodes.iter().filter(|n| n.throttle.is_some()) {
        let (Some(throttle), Some(entry)) = (node.throttle, view["nodes"].get_mut(&node.id)) else {
            continue;
        };
        let live = state.engine.throttle_state(&def.name, &node.id);
        let position = live.waiting.iter().position(|r| *r == id).map(|p| p + 1);
        entry["throttle"] = json!({
            "max_permits": throttle.max_permits,
            "queue_size": throttle.queue_size,
            "permits_in_use": live.in_use,
            "queue_depth": live.waiting.len(),
            "queue_position": position,
        });
    }
    sidecars::show_waiting(&mut view, &id, state.engine.waiting());
    Ok(Json(view))
}

pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let actor = state.auth.authorize(&headers, Role::Operator)?;
    let body: ActionBody = json_body(&body)?;
    state
        .engine
        .act(ActionRequest { run_id: id.clone(), node: None, kind: None, actor, reason: body.reason })
        .await?;
    Ok(Json(json!({"run_id": id, "action": "cancel"})))
}

pub async fn node_action(
    State(state): State<AppState>,
    Path((id, node, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let actor = state.auth.authorize(&headers, Role::Operator)?;
    let body: ActionBody = json_body(&body)?;
    let kind = match action.as_str() {
        "confirm" => NodeActionKind::Confirm,
        "reject" => NodeActionKind::Reject,
        "rerun" => NodeActionKind::Rerun { downstream: body.downstream },
        "mark-success" => NodeActionKind::MarkSuccess,
        "skip" => NodeActionKind::Skip,
        other => {
            return Err(ApiError::not_found(format!(
                "unknown node action `{other}`: use confirm, reject, rerun, mark-success or skip"
            )));
        }
    };
    state
        .engine
        .act(ActionRequest {
            run_id: id.clone(),
            node: Some(node.clone()),
            kind: Some(kind),
            actor,
            reason: body.reason,
        })
        .await?;
    Ok(Json(json!({"run_id": id, "node": node, "action": action})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Stream the output as Server-Sent Events until the attempt ends.
    #[serde(default)]
    follow: bool,
    /// Byte offset to stream from (`Last-Event-ID` wins when both are given).
    #[serde(default)]
    offset: Option<u64>,
    /// The attempt to follow (default: the latest with live output).
    #[serde(default)]
    attempt: Option<u32>,
}

/// A node's logs: the stored tail of each ended attempt, plus the live output of
/// one still running (`"live": true`); with `follow=true`, an SSE stream
/// (`follow.rs`).
pub async fn logs(
    State(state): State<AppState>,
    Path((id, node)): Path<(String, String)>,
    Query(query): Query<LogsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    if query.follow {
        let offset = follow::resume_offset(&headers, query.offset)?;
        let req = follow::FollowRequest { run_id: id, node, attempt: query.attempt, offset };
        return follow::follow_node(&state.engine, req, state.shutdown.clone()).await;
    }
    let store = state.engine.store();
    let stored =
        store.load_run(&id).await?.ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    if !stored.nodes.iter().any(|n| n.node == node) {
        return Err(ApiError::not_found(format!("run {id}: node {node} not found")));
    }
    let mut logs: Vec<Value> = store
        .logs(&id, &node)
        .await?
        .into_iter()
        .filter(|l| query.attempt.is_none_or(|a| a == l.attempt))
        .map(|l| json!({"attempt": l.attempt, "content": l.content}))
        .collect();
    let live_attempt = query.attempt.or_else(|| state.engine.live_logs().latest_attempt(&id, &node));
    if let Some(attempt) = live_attempt
        && !logs.iter().any(|l| l["attempt"] == attempt)
        && let Some(slice) = state.engine.attempt_log(&id, &node, Some(attempt), 0)
    {
        let content = String::from_utf8_lossy(&slice.data);
        logs.push(json!({"attempt": attempt, "content": content, "live": !slice.finished}));
    }
    Ok(Json(json!({"run_id": id, "node": node, "logs": logs})).into_response())
}

pub async fn transitions(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let records = state.engine.store().transitions(&id).await?;
    if records.is_empty() {
        return Err(ApiError::not_found(format!("run {id} not found")));
    }
    let out: Vec<Value> = records
        .into_iter()
        .map(|t| {
            json!({"node": t.node, "from": t.from, "to": t.to, "cause": t.cause, "actor": t.actor,
                   "attempt": t.attempt, "reason": t.reason, "at": views::time(Some(t.at))})
        })
        .collect();
    Ok(Json(json!({"run_id": id, "transitions": out})))
}
