//! `run: {xxl: {app, handler, params, route, block, timeout, grace}}`: a handler of
//! an XXL-JOB executor (SPEC §14). Routes and block strategies are XXL-JOB's, by
//! lower-case names; only `BEAN` handlers run (GLUE sources are refused: the
//! control plane never ships code to hosts).

use crate::model::{XxlBlock, XxlDef, XxlRoute};

use super::raw::{RawXxl, Span};
use super::report::{At, Report, did_you_mean, one_of};

pub(crate) fn xxl(report: &mut Report, at: At<'_>, raw: &RawXxl) -> Option<XxlDef> {
    let mut text = |field: &str, value: &Option<Span<String>>| match value {
        Some(v) if !v.value.trim().is_empty() => Some(v.value.trim().to_string()),
        Some(v) => {
            report.push(at.at(v), format!("`xxl.{field}` is empty"));
            None
        }
        None => {
            report.push(
                at,
                format!(
                    "`xxl` needs `{field}`, e.g. `{{xxl: {{app: order-service, handler: settleHandler}}}}`"
                ),
            );
            None
        }
    };
    let app = text("app", &raw.app);
    let handler = text("handler", &raw.handler);
    if let Some(glue) = raw.glue_type.as_ref().filter(|g| !g.value.eq_ignore_ascii_case("BEAN")) {
        report.push(
            at.at(glue),
            format!(
                "`glue_type: {}` is refused: GLUE jobs ship source code from the scheduler to hosts, which \
                 Madeira never does; move the code into a `@XxlJob` (BEAN) handler of the executor",
                glue.value
            ),
        );
        return None;
    }
    let route = match &raw.route {
        None => Some(XxlRoute::First),
        Some(r) => {
            let found = XxlRoute::ALL.iter().find(|(_, name, wire)| r.value == *name || r.value == *wire);
            match found {
                Some((route, _, _)) => Some(*route),
                None => {
                    let names: Vec<&str> = XxlRoute::ALL.iter().map(|(_, n, _)| *n).collect();
                    let hint = did_you_mean(&r.value, names.iter().copied());
                    report.push(
                        at.at(r),
                        format!("unknown xxl route `{}`{hint}; use {}", r.value, one_of(&names)),
                    );
                    None
                }
            }
        }
    };
    let block = match &raw.block {
        None => Some(XxlBlock::Serial),
        Some(b) => {
            let found = XxlBlock::ALL.iter().find(|(_, name, wire)| b.value == *name || b.value == *wire);
            match found {
                Some((block, _, _)) => Some(*block),
                None => {
                    let names: Vec<&str> = XxlBlock::ALL.iter().map(|(_, n, _)| *n).collect();
                    let hint = did_you_mean(&b.value, names.iter().copied());
                    report.push(
                        at.at(b),
                        format!("unknown xxl block `{}`{hint}; use {}", b.value, one_of(&names)),
                    );
                    None
                }
            }
        }
    };
    let timeout = match &raw.timeout {
        Some(t) => Some(Some(super::node::positive_duration(report, at, "timeout", t)?)),
        None => Some(None),
    };
    let grace = match &raw.grace {
        Some(g) => super::node::positive_duration(report, at, "grace", g),
        None => Some(XxlDef::DEFAULT_GRACE),
    };
    Some(XxlDef {
        app: app?,
        handler: handler?,
        params: raw.params.clone().unwrap_or_default(),
        route: route?,
        block: block?,
        timeout: timeout?,
        grace: grace?,
    })
}
