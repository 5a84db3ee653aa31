//! `madeira estate --date D`: the estate map (`GET /estate`) printed as a tree,
//! each flow under its upstreams (a flow with several upstreams is printed under
//! each, its subtree once), with its state; for a failed flow the flows it
//! holds, for a held flow whom it waits for and the failed upstream that holds it
//! (`held by payments-pull.pull FAILED`); a flow late against its deadline
//! (`⚠ late: deadline … missed`) or at risk (held or failed, deadline still ahead).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The map as a tree, roots (flows waiting for nobody) first.
pub fn tree_text(body: &Value) -> String {
    let flows: Vec<&Value> = body["flows"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let by_name: BTreeMap<&str, &Value> =
        flows.iter().filter_map(|f| Some((f["flow"].as_str()?, *f))).collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for f in &flows {
        for up in f["after"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if let Some(name) = f["flow"].as_str() {
                children.entry(up).or_default().push(name);
            }
        }
    }
    let mut out = format!("estate for business date {}\n", body["date"].as_str().unwrap_or("?"));
    if flows.is_empty() {
        out.push_str("(no flows)\n");
    }
    let mut printed = BTreeSet::new();
    let roots = flows.iter().filter(|f| {
        f["after"]
            .as_array()
            .is_none_or(|a| a.iter().all(|u| u.as_str().is_none_or(|u| !by_name.contains_key(u))))
    });
    for root in roots {
        if let Some(name) = root["flow"].as_str() {
            walk(name, "", &by_name, &children, &mut printed, &mut out);
        }
    }
    out.trim_end().to_string()
}

fn walk<'a>(
    name: &'a str,
    indent: &str,
    by_name: &BTreeMap<&str, &Value>,
    children: &BTreeMap<&'a str, Vec<&'a str>>,
    printed: &mut BTreeSet<&'a str>,
    out: &mut String,
) {
    let Some(flow) = by_name.get(name) else { return };
    let state = flow["state"].as_str().unwrap_or("?");
    let mut line = format!("{indent}{name}  [{state}]");
    if let Some(w) = flow["waiting_for"].as_str() {
        line.push_str(&format!("  {w}"));
    }
    let holds: Vec<&str> = flow["holds"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if !holds.is_empty() {
        line.push_str(&format!("  holds {}", holds.join(", ")));
    }
    if let Some(root) = flow["root_cause"].as_object() {
        let node = root.get("node").and_then(Value::as_str).map(|n| format!(".{n}")).unwrap_or_default();
        line.push_str(&format!(
            "  held by {}{node} FAILED",
            root.get("flow").and_then(Value::as_str).unwrap_or("?")
        ));
    } else if flow["root_hidden"] == true {
        line.push_str("  held behind a failure outside your scope");
    }
    if let Some(deadline) = flow["deadline"].as_str() {
        if flow["late"] == true {
            line.push_str(&format!("  ⚠ late: deadline {deadline} missed"));
        } else if matches!(state, "held" | "failed") {
            line.push_str(&format!("  ⚠ at risk: deadline {deadline}"));
        }
    }
    if !printed.insert(name) {
        out.push_str(&format!("{line}  (see above)\n"));
        return;
    }
    out.push_str(&line);
    out.push('\n');
    for child in children.get(name).into_iter().flatten() {
        walk(child, &format!("{indent}  "), by_name, children, printed, out);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_held_flow_shows_whom_it_waits_for_and_the_root_cause() {
        let body = json!({"date": "2026-12-04", "flows": [
            {"flow": "a", "after": [], "state": "failed"},
            {"flow": "b", "after": ["a"], "state": "held", "waiting_for": "waiting for a 2026-12-04",
             "root_cause": {"flow": "a", "node": "pull"}},
            {"flow": "c", "after": ["b"], "state": "held", "waiting_for": "waiting for b 2026-12-04",
             "root_cause": {"flow": "a", "node": "pull"}},
        ]});
        let text = super::tree_text(&body);
        assert_eq!(
            text,
            "estate for business date 2026-12-04\na  [failed]\n  b  [held]  waiting for a 2026-12-04  held by a.pull FAILED\n    c  [held]  waiting for b 2026-12-04  held by a.pull FAILED"
        );
    }

    #[test]
    fn holds_and_late_or_at_risk_deadlines_are_printed() {
        let body = json!({"date": "2026-12-04", "flows": [
            {"flow": "a", "after": [], "state": "failed", "holds": ["b"]},
            {"flow": "b", "after": ["a"], "state": "held", "waiting_for": "waiting for a 2026-12-04",
             "root_cause": {"flow": "a", "node": "pull"}, "deadline": "2026-12-04T02:00:00Z", "late": true},
            {"flow": "c", "after": [], "state": "held", "waiting_for": "waiting for a flow outside your scope",
             "root_hidden": true, "deadline": "2026-12-04T03:00:00Z", "late": false},
            {"flow": "d", "after": [], "state": "none", "deadline": "2026-12-04T05:00:00Z", "late": false},
        ]});
        let text = super::tree_text(&body);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "a  [failed]  holds b");
        assert_eq!(
            lines[2],
            "  b  [held]  waiting for a 2026-12-04  held by a.pull FAILED  ⚠ late: deadline 2026-12-04T02:00:00Z missed"
        );
        assert_eq!(
            lines[3],
            "c  [held]  waiting for a flow outside your scope  held behind a failure outside your scope  ⚠ at risk: deadline 2026-12-04T03:00:00Z"
        );
        assert_eq!(lines[4], "d  [none]", "not late yet, not held: no mark");
    }
}
