//! The evaluation budget: the parsed expression is rewritten so that every
//! comprehension step and every value-building call is charged to a per-evaluation
//! meter, and evaluation stops with a readable error once the meter is over its
//! limit. The `cel` crate has no cost limit of its own; this gives a deterministic
//! one (as cel-go's `CostLimit`), so a condition cannot stall the engine loop.
//!
//! The rewrite keeps the shapes the interpreter optimises (`@result + [x]` for
//! `map`/`filter`, `@result && p` for `all`/`exists`), so a bounded condition runs
//! as fast as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, operators};
use cel::common::value::CowVal;
use cel::{ExecutionError, FunctionContext};

/// What one evaluation may spend, in cost units.
/// About 5,000 comprehension steps, or 500 KB of computed values: a few
/// milliseconds of work in a release build.
pub const COST_LIMIT: u64 = 500_000;
/// The cost of one comprehension step (plus the size of what it produced).
pub const STEP_COST: u64 = 100;

/// The cost of each JSON value (object, array, scalar) bound for CEL: converting
/// it is the work.
pub const DATA_COST: u64 = 10;

/// Charges a comprehension step: `STEP_COST` + the size of its value.
const STEP_FN: &str = "@madeira_step";
/// Charges a value-building call: 1 + the size of its result.
const COST_FN: &str = "@madeira_cost";

/// Calls that build nothing worth charging (booleans, lookups, control flow).
const FREE_CALLS: &[&str] = &[
    operators::CONDITIONAL,
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::NOT_STRICTLY_FALSE,
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::LESS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::GREATER_EQUALS,
    operators::INDEX,
    operators::OPT_INDEX,
    operators::OPT_SELECT,
    operators::IN,
];

/// The per-evaluation meter shared with the charging functions.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    used: AtomicU64,
}

impl Meter {
    fn charge(&self, cost: u64) -> Result<(), ExecutionError> {
        let used = self.used.fetch_add(cost, Ordering::Relaxed).saturating_add(cost);
        if used > COST_LIMIT {
            return Err(ExecutionError::function_error("budget", "evaluation budget exceeded"));
        }
        Ok(())
    }

    /// Charges the conversion of `data`; false once over the limit.
    pub(crate) fn charge_data(&self, data: &serde_json::Value) -> bool {
        self.charge(json_values(data).saturating_mul(DATA_COST)).is_ok()
    }

    /// Whether the evaluation ran over the limit (whatever its result became).
    pub(crate) fn exceeded(&self) -> bool {
        self.used.load(Ordering::Relaxed) > COST_LIMIT
    }
}

/// Registers the charging functions, bound to `meter`, in `ctx`.
pub(crate) fn install(ctx: &mut cel::Context<'_, '_>, meter: &Arc<Meter>) {
    for (name, base) in [(STEP_FN, STEP_COST), (COST_FN, 1)] {
        let meter = meter.clone();
        let charge: ChargeFn = Box::new(move |ftx: &mut FunctionContext<'_, '_>| {
            let value = ftx.args.first().cloned().ok_or_else(ExecutionError::missing_argument_or_target)?;
            let size = value.as_sizer().map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0));
            meter.charge(base.saturating_add(size))?;
            Ok(value)
        });
        // Names starting with `@` cannot be written in CEL source, so this
        // cannot clash with a user's call; an error here is a programming bug.
        let added = ctx.add_function(name, charge);
        debug_assert!(added.is_ok(), "{name}: {added:?}");
    }
}

type ChargeFn = Box<
    dyn for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError> + Send + Sync,
>;

/// Rewrites `expr` so that evaluating it charges the meter.
pub(crate) fn instrument(expr: IdedExpr) -> IdedExpr {
    let mut ids = max_id(&expr) + 1;
    generic(expr, &mut ids)
}

fn wrap(expr: IdedExpr, function: &str, ids: &mut u64) -> IdedExpr {
    *ids += 1;
    IdedExpr {
        id: *ids,
        expr: Expr::Call(CallExpr { func_name: function.to_string(), target: None, args: vec![expr] }),
    }
}

/// Instruments the children of `expr`, and charges it if it is a call that builds a value.
fn generic(expr: IdedExpr, ids: &mut u64) -> IdedExpr {
    let IdedExpr { id, expr } = expr;
    let rebuilt = match expr {
        Expr::Call(call) => {
            let charged = !FREE_CALLS.contains(&call.func_name.as_str());
            let call = CallExpr {
                func_name: call.func_name,
                target: call.target.map(|t| Box::new(generic(*t, ids))),
                args: call.args.into_iter().map(|a| generic(a, ids)).collect(),
            };
            let node = IdedExpr { id, expr: Expr::Call(call) };
            return if charged { wrap(node, COST_FN, ids) } else { node };
        }
        Expr::Comprehension(c) => Expr::Comprehension(Box::new(comprehension(*c, ids))),
        Expr::List(mut list) => {
            list.elements = list.elements.into_iter().map(|e| generic(e, ids)).collect();
            Expr::List(list)
        }
        Expr::Map(mut map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(e) = &mut entry.expr {
                    e.key = generic(std::mem::take(&mut e.key), ids);
                    e.value = generic(std::mem::take(&mut e.value), ids);
                }
            }
            Expr::Map(map)
        }
        Expr::Struct(mut s) => {
            for entry in &mut s.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    f.value = generic(std::mem::take(&mut f.value), ids);
                }
            }
            Expr::Struct(s)
        }
        Expr::Select(mut select) => {
            select.operand = Box::new(generic(*select.operand, ids));
            Expr::Select(select)
        }
        other @ (Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified) => other,
    };
    IdedExpr { id, expr: rebuilt }
}

/// A comprehension charges a step per iteration: through its loop condition when
/// that is computed (`all`, `exists`), else inside its step (`map`, `filter`,
/// `exists_one`), keeping the step's shape.
fn comprehension(c: ComprehensionExpr, ids: &mut u64) -> ComprehensionExpr {
    let literal_cond = matches!(c.loop_cond.expr, Expr::Literal(_));
    let loop_cond = if literal_cond { c.loop_cond } else { wrap(generic(c.loop_cond, ids), STEP_FN, ids) };
    let loop_step =
        if literal_cond { step(c.loop_step, &c.accu_var, ids) } else { generic(c.loop_step, ids) };
    ComprehensionExpr {
        iter_range: generic(c.iter_range, ids),
        accu_init: generic(c.accu_init, ids),
        loop_cond,
        loop_step,
        result: generic(c.result, ids),
        ..c
    }
}

/// A loop step charged once per iteration, its `cond ? @result + [x] : @result`
/// or `@result + [x]` shape kept.
fn step(expr: IdedExpr, accu: &str, ids: &mut u64) -> IdedExpr {
    let IdedExpr { id, expr } = expr;
    match expr {
        Expr::Call(CallExpr { func_name, target: None, args }) if func_name == operators::CONDITIONAL => {
            let args = match <[IdedExpr; 3]>::try_from(args) {
                Ok([guard, then, otherwise]) => vec![
                    wrap(generic(guard, ids), STEP_FN, ids),
                    appended(then, accu, ids),
                    appended(otherwise, accu, ids),
                ],
                // Not a macro's shape: charge the whole step.
                Err(args) => {
                    let call = CallExpr { func_name, target: None, args };
                    return wrap(generic(IdedExpr { id, expr: Expr::Call(call) }, ids), STEP_FN, ids);
                }
            };
            IdedExpr { id, expr: Expr::Call(CallExpr { func_name, target: None, args }) }
        }
        other => {
            let node = IdedExpr { id, expr: other };
            if is_append(&node, accu) {
                appended(node, accu, ids)
            } else {
                wrap(generic(node, ids), STEP_FN, ids)
            }
        }
    }
}

/// `@result + [x, …]`: each appended element is charged as a step; anything
/// else is instrumented as usual (a bare `@result` costs nothing).
fn appended(expr: IdedExpr, accu: &str, ids: &mut u64) -> IdedExpr {
    if !is_append(&expr, accu) {
        return generic(expr, ids);
    }
    let IdedExpr { id, mut expr } = expr;
    if let Expr::Call(call) = &mut expr
        && let Some(Expr::List(list)) = call.args.get_mut(1).map(|a| &mut a.expr)
    {
        let elements = std::mem::take(&mut list.elements);
        list.elements = elements.into_iter().map(|e| wrap(generic(e, ids), STEP_FN, ids)).collect();
    }
    IdedExpr { id, expr }
}

fn is_append(expr: &IdedExpr, accu: &str) -> bool {
    matches!(&expr.expr, Expr::Call(call)
        if call.func_name == operators::ADD
            && call.target.is_none()
            && matches!(call.args.as_slice(),
                [lhs, rhs] if matches!(&lhs.expr, Expr::Ident(n) if n == accu) && matches!(rhs.expr, Expr::List(_))))
}

fn max_id(expr: &IdedExpr) -> u64 {
    let mut max = expr.id;
    super::analysis::for_each_child(expr, &mut |child| max = max.max(max_id(child)));
    max
}

/// How many JSON values `data` holds, itself included.
fn json_values(data: &serde_json::Value) -> u64 {
    match data {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_values).sum::<u64>(),
        serde_json::Value::Object(map) => 1 + map.values().map(json_values).sum::<u64>(),
        _ => 1,
    }
}
