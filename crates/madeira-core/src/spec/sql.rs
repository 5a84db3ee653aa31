//! The `sql` executor: a datasource name, exactly one of `statement` or `script`,
//! bind values as CEL, the outputs mode, and the grace a cancelled statement gets.
//! Every `:name` in the SQL must have a value (`params`, or `:run_id`, `:biz_date`,
//! `:idempotency_key`); the datasource itself is checked against the server
//! config by `check_datasources` (on apply, and `madeira validate --config`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::keyexpr::ValueExpr;
use crate::model::{ExecutorDef, FlowDef, NodeAction, SqlDef, SqlOutputs};
use crate::sqltext;

use super::raw::RawSql;
use super::report::{At, Report, did_you_mean, line_of, one_of};
use super::{SpecError, SpecErrors};

/// Bind names every SQL node has without declaring them.
pub(crate) const BUILTIN_BINDS: &[&str] = &["run_id", "idempotency_key", "biz_date"];
const OUTPUTS: &[&str] = &["first_row", "rows", "affected"];
/// Default and largest `max_rows` for `outputs: rows`.
const DEFAULT_MAX_ROWS: u32 = 100;
const MAX_ROWS: u32 = 10_000;
/// Default `grace`: how long a cancelled statement may linger before its session is killed.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Longest accepted statement or script, in bytes.
const MAX_SQL_BYTES: usize = 64 * 1024;

pub(crate) fn sql(report: &mut Report, at: At<'_>, raw: &RawSql) -> Option<SqlDef> {
    let datasource = match &raw.datasource {
        Some(d) if !d.value.trim().is_empty() => Some(d),
        Some(d) => {
            report.push(at.at(d), "`sql.datasource` is empty");
            None
        }
        None => {
            report.push(
                at,
                "`sql` needs `datasource`, a name from the server config's `datasources:`, e.g. \
                 `{sql: {datasource: finance, statement: \"select 1\"}}`",
            );
            None
        }
    };
    let statements = match (&raw.statement, &raw.script) {
        (Some(s), None) if s.value.len() > MAX_SQL_BYTES => {
            report.push(at.at(s), format!("`statement` is over {MAX_SQL_BYTES} bytes"));
            None
        }
        (None, Some(s)) if s.value.len() > MAX_SQL_BYTES => {
            report.push(at.at(s), format!("`script` is over {MAX_SQL_BYTES} bytes"));
            None
        }
        (Some(s), None) => match sqltext::split_script(&s.value).len() {
            0 => {
                report.push(at.at(s), "`statement` is empty");
                None
            }
            1 => Some((vec![s.value.trim().trim_end_matches(';').trim().to_string()], line_of(s))),
            n => {
                report.push(
                    at.at(s),
                    format!(
                        "`statement` holds {n} statements; use `script:` to run several in one transaction"
                    ),
                );
                None
            }
        },
        (None, Some(s)) => {
            let parts = sqltext::split_script(&s.value);
            if parts.is_empty() {
                report.push(at.at(s), "`script` has no statements");
                None
            } else {
                Some((parts, line_of(s)))
            }
        }
        (Some(s), Some(_)) => {
            report.push(at.at(s), "give either `statement` or `script` (several statements), not both");
            None
        }
        (None, None) => {
            report.push(at, "`sql` needs `statement` (one) or `script` (several, in one transaction)");
            None
        }
    };
    let mut params = BTreeMap::new();
    let mut params_ok = true;
    for (name, source) in raw.params.iter().flat_map(|p| p.0.iter()) {
        let valid_name = name.value.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            report.push(at.at(name), format!("bind name `{}` must be letters, digits and `_`", name.value));
            params_ok = false;
        } else if BUILTIN_BINDS.contains(&name.value.as_str()) {
            report.push(at.at(name), format!("`:{}` is given by Madeira; pick another name", name.value));
            params_ok = false;
        }
        match ValueExpr::compile(&source.value) {
            Ok(expr) => {
                params.insert(name.value.clone(), expr);
            }
            Err(e) => {
                report.push(at.at(source), format!("bad CEL in `params.{}`: {e}", name.value));
                params_ok = false;
            }
        }
    }
    if let Some((stmts, line)) = &statements {
        let at_sql = at.on(*line);
        let known: Vec<&str> =
            params.keys().map(String::as_str).chain(BUILTIN_BINDS.iter().copied()).collect();
        for p in stmts.iter().flat_map(|s| sqltext::placeholders(s)) {
            if !known.contains(&p.name.as_str()) && params_ok {
                let hint = did_you_mean(&p.name, known.iter().copied());
                report.push(
                    at_sql,
                    format!(
                        "`:{n}` has no value; add it to `params` (CEL), e.g. `params: {{{n}: \"params.{n}\"}}`{hint}",
                        n = p.name
                    ),
                );
            }
        }
    }
    let outputs = outputs(report, at, raw)?;
    let grace = match &raw.grace {
        Some(g) => super::node::positive_duration(report, at, "grace", g)?,
        None => DEFAULT_GRACE,
    };
    let datasource = datasource?;
    let (statements, _) = statements?;
    params_ok.then_some(SqlDef {
        datasource: datasource.value.trim().to_string(),
        datasource_line: line_of(datasource).or(at.line),
        statements,
        params,
        outputs,
        grace,
    })
}

fn outputs(report: &mut Report, at: At<'_>, raw: &RawSql) -> Option<SqlOutputs> {
    let max_rows = match &raw.max_rows {
        Some(n) => {
            let n = report.limit(at, "max_rows", n, 1)?;
            if n > MAX_ROWS {
                report.push(at, format!("`max_rows` is at most {MAX_ROWS}, got {n}"));
                return None;
            }
            Some(n)
        }
        None => None,
    };
    let mode = raw.outputs.as_ref().map_or("affected", |o| o.value.as_str());
    let outputs = match mode {
        "first_row" => SqlOutputs::FirstRow,
        "rows" => SqlOutputs::Rows(max_rows.unwrap_or(DEFAULT_MAX_ROWS)),
        "affected" => SqlOutputs::Affected,
        other => {
            let hint = did_you_mean(other, OUTPUTS.iter().copied());
            let at = raw.outputs.as_ref().map_or(at, |o| at.at(o));
            report.push(at, format!("unknown `outputs` `{other}`{hint}; use {}", one_of(OUTPUTS)));
            return None;
        }
    };
    if max_rows.is_some() && !matches!(outputs, SqlOutputs::Rows(_)) {
        report.push(at, "`max_rows` only applies to `outputs: rows`");
        return None;
    }
    Some(outputs)
}

/// Checks that every SQL node of `def` (its run, or a manual node's fallback)
/// names one of the server's datasources `known`. Errors carry the line of the
/// node's `datasource:`.
pub fn check_datasources(file: &str, def: &FlowDef, known: &[String]) -> Result<(), SpecErrors> {
    let have = if known.is_empty() { "none".to_string() } else { known.join(", ") };
    let errors: Vec<SpecError> = def
        .nodes
        .iter()
        .filter_map(|node| {
            let exec = match &node.action {
                NodeAction::Run(e) => Some(e),
                NodeAction::Manual(m) => m.fallback.as_ref(),
            };
            let Some(ExecutorDef::Sql(sql)) = exec else { return None };
            if known.contains(&sql.datasource) {
                return None;
            }
            Some(SpecError {
                file: file.to_string(),
                line: sql.datasource_line,
                node: Some(node.id.clone()),
                message: format!("unknown datasource `{}`; the server config has: {have}", sql.datasource),
            })
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}
