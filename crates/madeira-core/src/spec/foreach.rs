//! A node's `foreach:` and `max_parallel:`: CEL over `params`, `nodes` and
//! `biz_date` that gives a list, or a list written in the file (refused past
//! `MAX_ITEMS`); only on `run` nodes of the builtin, http and sidecar executors
//! (a sidecar node with one shard: its items are its shards).

use crate::foreach::{DEFAULT_MAX_PARALLEL, ForeachDef, ForeachItems, MAX_ITEMS};
use crate::keyexpr::ValueExpr;
use crate::model::{ExecutorDef, NodeAction};

use super::raw::{RawForeach, RawNode};
use super::report::{At, Report};

pub(crate) fn foreach(
    report: &mut Report,
    at: At<'_>,
    raw: &RawNode,
    action: &NodeAction,
) -> Option<ForeachDef> {
    let Some(each) = &raw.foreach else {
        if let Some(m) = &raw.max_parallel {
            report
                .push(at.at(m), "`max_parallel` only applies with `foreach`; remove it or add `foreach: …`");
        }
        return None;
    };
    let at = at.at(each);
    match action {
        NodeAction::Run(ExecutorDef::Builtin(_) | ExecutorDef::Http(_)) => {}
        NodeAction::Run(ExecutorDef::Sidecar(s)) if s.shards == 1 => {}
        NodeAction::Run(ExecutorDef::Sidecar(_)) => {
            report
                .push(at, "`foreach` cannot be combined with `shards`: each item is a shard; drop `shards`");
            return None;
        }
        NodeAction::Run(_) => {
            report.push(at, "`foreach` applies to `builtin`, `http` and `sidecar` nodes only");
            return None;
        }
        NodeAction::Manual(_) => {
            report.push(at, "`foreach` cannot be used on a manual node");
            return None;
        }
    }
    let max_parallel = match &raw.max_parallel {
        Some(m) => report.limit(at, "max_parallel", m, 1)?,
        None => DEFAULT_MAX_PARALLEL,
    };
    let items = match &each.value {
        RawForeach::List(items) if items.len() > MAX_ITEMS => {
            report.push(
                at,
                format!(
                    "`foreach` lists {} items, more than the bound of {MAX_ITEMS}; split the list",
                    items.len()
                ),
            );
            return None;
        }
        RawForeach::List(items) => ForeachItems::Literal(items.clone()),
        RawForeach::Expr(source) => {
            let expr = match ValueExpr::compile(source) {
                Ok(e) => e,
                Err(e) => {
                    report.push(at, format!("`foreach` is not valid CEL: {e}"));
                    return None;
                }
            };
            let vars = crate::expr::Condition::compile(source).map(|c| c.variables()).unwrap_or_default();
            let bad: Vec<&String> =
                vars.iter().filter(|v| !["params", "nodes", "biz_date"].contains(&v.as_str())).collect();
            if !bad.is_empty() {
                for var in bad {
                    report.push(
                        at,
                        format!("`foreach` reads `{var}`; it can read `params`, `nodes.<id>` and `biz_date`"),
                    );
                }
                return None;
            }
            ForeachItems::Expr(expr)
        }
    };
    Some(ForeachDef { items, max_parallel })
}
