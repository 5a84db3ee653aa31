//! CEL conditions (`when:` and routing rules): compiled once at validation, evaluated
//! over `params` and `nodes.X.{status,outputs}`; `cel` does the parsing and evaluation.
//!
//! Bounded work per input: the source is limited in size and nesting before it is
//! parsed, and every evaluation runs within a cost budget (`budget`), so a
//! condition over a large list is a readable error, not a stalled engine loop.

mod analysis;
mod budget;
mod dates;
mod json;
mod message;
mod payload;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use cel::common::ast::IdedExpr;
use serde_json::Value as Json;

pub use budget::{COST_LIMIT, DATA_COST, STEP_COST};
pub use dates::set_calendars;
pub use payload::{MESSAGE_VARIABLES, MessageExpr};

/// Longest accepted expression source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// Deepest accepted nesting: brackets in the source, or levels of the parsed tree.
pub const MAX_DEPTH: usize = 32;

/// A CEL expression that failed to parse or to evaluate to a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExprError(pub String);

/// A parsed, checked and instrumented expression, shared by conditions and keys.
#[derive(Clone)]
pub(crate) struct Program {
    source: String,
    expr: Arc<IdedExpr>,
    outline: Arc<analysis::Outline>,
    dates: Arc<dates::DateUse>,
}

impl Program {
    /// Parses `source` within the size and nesting limits; errors say where.
    pub(crate) fn compile(source: &str) -> Result<Self, ExprError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(ExprError(format!(
                "the expression is {} bytes long; the limit is {MAX_SOURCE_BYTES}: move data into params",
                source.len()
            )));
        }
        let brackets = analysis::bracket_depth(source);
        if brackets > MAX_DEPTH {
            return Err(too_deep(brackets));
        }
        let program =
            cel::Program::compile(source).map_err(|e| ExprError(message::parse_errors(source, &e)))?;
        let outline = analysis::outline(program.expression());
        if outline.depth > MAX_DEPTH {
            return Err(too_deep(outline.depth));
        }
        let dates = Arc::new(dates::check(program.expression())?);
        let expr = budget::instrument(program.expression().clone());
        Ok(Self { source: source.to_string(), expr: Arc::new(expr), outline: Arc::new(outline), dates })
    }

    /// Evaluates with `params` and `nodes` bound, within the budget. Only the
    /// fields of `params` the expression selects are converted for CEL, so a
    /// condition reading `params.tenant` costs the same beside a 1 MB payload.
    pub(crate) fn eval(&self, params: &Json, nodes: &Json) -> Result<cel::Value, ExprError> {
        self.eval_dated(params, nodes, None)
    }

    /// `eval` with the run's business date bound as `biz_date` (a `YYYY-MM-DD`
    /// string; null for a run without one).
    pub(crate) fn eval_dated(
        &self,
        params: &Json,
        nodes: &Json,
        biz_date: Option<&str>,
    ) -> Result<cel::Value, ExprError> {
        let pruned = match params {
            Json::Object(all) if !self.outline.params_whole => {
                let fields = &self.outline.params_fields;
                Some(Json::Object(
                    all.iter()
                        .filter(|(k, _)| fields.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ))
            }
            _ => None,
        };
        let params = pruned.as_ref().unwrap_or(params);
        let meter = Arc::new(budget::Meter::default());
        // Converting the data for CEL is work too: charged first, and not done over budget.
        let result = if meter.charge_data(params) && meter.charge_data(nodes) {
            let mut ctx = cel::Context::with_env(stdlib());
            ctx.add_variable_from_value("params", json::to_cel(params));
            ctx.add_variable_from_value("nodes", json::to_cel(nodes));
            let date = biz_date.map_or(cel::Value::Null, |d| cel::Value::String(Arc::new(d.to_string())));
            ctx.add_variable_from_value("biz_date", date);
            budget::install(&mut ctx, &meter);
            if self.dates.used {
                dates::install(&mut ctx);
            }
            cel::Value::resolve(&self.expr, &ctx)
        } else {
            Ok(cel::Value::Null)
        };
        if meter.exceeded() {
            return Err(ExprError(format!(
                "`{}` is over the evaluation budget (about {} comprehension steps, {} KB of computed \
                 values, or {} JSON values read); read and iterate over less data or simplify the expression",
                self.source,
                COST_LIMIT / STEP_COST,
                COST_LIMIT / 1000,
                COST_LIMIT / DATA_COST
            )));
        }
        result.map_err(|e| ExprError(format!("`{}`: {e}", self.source)))
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates with each `(name, value)` bound, within the budget (message
    /// triggers bind `payload`, `headers` and `message`, not `params`/`nodes`).
    pub(crate) fn eval_vars(&self, vars: &[(&str, &Json)]) -> Result<cel::Value, ExprError> {
        let meter = Arc::new(budget::Meter::default());
        let result = if vars.iter().all(|(_, v)| meter.charge_data(v)) {
            let mut ctx = cel::Context::with_env(stdlib());
            for (name, value) in vars {
                ctx.add_variable_from_value(*name, json::to_cel(value));
            }
            budget::install(&mut ctx, &meter);
            if self.dates.used {
                dates::install(&mut ctx);
            }
            cel::Value::resolve(&self.expr, &ctx)
        } else {
            Ok(cel::Value::Null)
        };
        if meter.exceeded() {
            return Err(ExprError(format!(
                "`{}` is over the evaluation budget (about {} comprehension steps or {} JSON values read)",
                self.source,
                COST_LIMIT / STEP_COST,
                COST_LIMIT / DATA_COST
            )));
        }
        result.map_err(|e| ExprError(format!("`{}`: {e}", self.source)))
    }

    /// Calendar names the expression gives as literals (`cal.add(d, 1, "cn-workdays")`).
    pub(crate) fn calendar_names(&self) -> &[String] {
        &self.dates.calendars
    }

    /// Top-level variables the expression reads.
    pub(crate) fn free_variables(&self) -> &[String] {
        &self.outline.free
    }
}

fn too_deep(depth: usize) -> ExprError {
    ExprError(format!("the expression nests {depth} levels deep; the limit is {MAX_DEPTH}: split it up"))
}

/// Escapes control characters so one error stays on one line.
fn sanitize(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() }).collect()
}

/// A compiled CEL boolean expression, with its source kept for display.
#[derive(Clone)]
pub struct Condition {
    program: Program,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Condition({:?})", self.program.source)
    }
}

impl Condition {
    /// Parses `source`; errors name the column and what is wrong there.
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        Program::compile(source).map(|program| Self { program })
    }

    pub fn source(&self) -> &str {
        self.program.source()
    }

    /// Top-level variables the expression reads (`params`, `nodes`, ...); a
    /// comprehension's own variables are not among them.
    pub fn variables(&self) -> Vec<String> {
        self.program.outline.free.clone()
    }

    /// Calendar names the expression gives as string literals to `cal.*` functions.
    pub fn calendar_names(&self) -> &[String] {
        self.program.calendar_names()
    }

    /// Node names the expression selects as `nodes.NAME` or `nodes['NAME']`.
    pub fn referenced_nodes(&self) -> Vec<String> {
        self.program.outline.nodes.clone()
    }

    /// Evaluates to a boolean with `params` and `nodes` bound, within the budget.
    pub fn eval(&self, params: &Json, nodes: &Json) -> Result<bool, ExprError> {
        self.eval_dated(params, nodes, None)
    }

    /// `eval` with the run's business date bound as `biz_date`.
    pub fn eval_dated(&self, params: &Json, nodes: &Json, biz_date: Option<&str>) -> Result<bool, ExprError> {
        match self.program.eval_dated(params, nodes, biz_date)? {
            cel::Value::Bool(b) => Ok(b),
            other => {
                let got: String = format!("{other:?}").chars().take(120).collect();
                Err(ExprError(format!("`{}` must evaluate to a boolean, got {got}", self.program.source)))
            }
        }
    }
}

/// CEL's standard library (its function declarations and macros), built once:
/// `cel::Context::default` builds it anew for every context, which took about
/// 70% of a condition's evaluation in the settlement benchmark's profile.
fn stdlib() -> Arc<cel::Env> {
    static STDLIB: std::sync::LazyLock<Arc<cel::Env>> =
        std::sync::LazyLock::new(|| Arc::new(cel::Env::stdlib()));
    STDLIB.clone()
}
