//! Date and calendar functions for CEL expressions. Dates are strings
//! `YYYY-MM-DD` (an RFC 3339 timestamp is also read, as the date it is written
//! in, e.g. `params.scheduled_at`); results are `YYYY-MM-DD` strings, so they go
//! into params, SQL binds and templates as they are.
//!
//! `date.add_days(d, n)`, `date.format(d, "yyyyMMdd")`, `month_start(d)`,
//! `month_end(d)`, `cal.add(d, n, "cn-workdays")`, `cal.is_business_day(d, name)`,
//! `cal.last_business_day_of_month(d, name)`. Unknown `date.`/`cal.` functions
//! and near-misses of the global ones are refused when the expression is
//! compiled; calendar names given as literals are checked on apply
//! (`spec::check_calendars`). A calendar out of data is an evaluation error.

use std::sync::{Arc, LazyLock, RwLock};

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use cel::{ExecutionError, ResolveResult, Value};
use chrono::NaiveDate;
use madeira_calendar::{Calendar, Calendars};

use super::ExprError;

/// Namespaced functions (`date.x`, `cal.x`): name and how many arguments.
const NAMESPACED: &[(&str, usize)] = &[
    ("date.add_days", 2),
    ("date.format", 2),
    ("cal.add", 3),
    ("cal.is_business_day", 2),
    ("cal.last_business_day_of_month", 2),
];
/// Global functions.
const GLOBAL: &[(&str, usize)] = &[("month_start", 1), ("month_end", 1)];

/// For each calendar function, the index of its calendar-name argument.
const CALENDAR_ARG: &[(&str, usize)] =
    &[("cal.add", 2), ("cal.is_business_day", 1), ("cal.last_business_day_of_month", 1)];

/// The calendars expressions evaluate against: the server's, set once at start
/// (`set_calendars`), the built-in ones until then.
static CALENDARS: LazyLock<RwLock<Arc<Calendars>>> =
    LazyLock::new(|| RwLock::new(Arc::new(Calendars::builtin())));

/// Makes `calendars` the ones `cal.*` functions use (the engine calls it at start).
pub fn set_calendars(calendars: Arc<Calendars>) {
    match CALENDARS.write() {
        Ok(mut guard) => *guard = calendars,
        Err(poisoned) => *poisoned.into_inner() = calendars,
    }
}

fn calendars() -> Arc<Calendars> {
    match CALENDARS.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// What the date functions in an expression need checked.
#[derive(Debug, Default, Clone)]
pub(crate) struct DateUse {
    /// Any date or calendar function is called (install them for evaluation).
    pub used: bool,
    /// Calendar names given as string literals.
    pub calendars: Vec<String>,
}

/// Checks every date/calendar call of `expr`: known function, right number of
/// arguments; collects literal calendar names.
pub(crate) fn check(expr: &IdedExpr) -> Result<DateUse, ExprError> {
    let mut out = DateUse::default();
    walk(expr, &mut out)?;
    Ok(out)
}

fn walk(expr: &IdedExpr, out: &mut DateUse) -> Result<(), ExprError> {
    if let Expr::Call(call) = &expr.expr {
        let namespace = match call.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(ns)) if ns == "date" || ns == "cal" => Some(ns.as_str()),
            _ => None,
        };
        let name = match namespace {
            Some(ns) => Some(format!("{ns}.{}", call.func_name)),
            None if call.target.is_none() => Some(call.func_name.clone()),
            None => None,
        };
        if let Some(name) = name {
            check_call(&name, namespace.is_some(), call.args.len())?;
            let literal = CALENDAR_ARG.iter().find(|(f, _)| *f == name).and_then(|(_, i)| call.args.get(*i));
            if let Some(Expr::Literal(LiteralValue::String(s))) = literal.map(|a| &a.expr) {
                out.calendars.push(s.inner().to_string());
            }
            out.used |= namespace.is_some() || GLOBAL.iter().any(|(g, _)| *g == name);
        }
    }
    let mut result = Ok(());
    super::analysis::for_each_child(expr, &mut |child| {
        if result.is_ok() {
            result = walk(child, out);
        }
    });
    result
}

fn check_call(name: &str, namespaced: bool, args: usize) -> Result<(), ExprError> {
    let known = NAMESPACED.iter().chain(GLOBAL).find(|(f, _)| *f == name);
    match known {
        Some((_, want)) if *want != args => Err(ExprError(format!(
            "`{name}` takes {want} argument{}, got {args}",
            if *want == 1 { "" } else { "s" }
        ))),
        Some(_) => Ok(()),
        None => {
            let all = NAMESPACED.iter().chain(GLOBAL).map(|(f, _)| *f);
            let close = crate::spec::closest_name(name, all.clone());
            match (namespaced, close) {
                (true, close) => Err(ExprError(format!(
                    "unknown function `{name}`{}; the date functions are {}",
                    close.map(|c| format!("; did you mean `{c}`?")).unwrap_or_default(),
                    all.collect::<Vec<_>>().join(", ")
                ))),
                (false, Some(c)) => Err(ExprError(format!("unknown function `{name}`; did you mean `{c}`?"))),
                (false, None) => Ok(()),
            }
        }
    }
}

/// Reads `YYYY-MM-DD` or an RFC 3339 timestamp's date.
fn date(function: &str, text: &str) -> Result<NaiveDate, ExecutionError> {
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.date_naive());
    }
    Err(ExecutionError::function_error(function, format!("`{text}` is not a date: give YYYY-MM-DD")))
}

fn text(d: NaiveDate) -> Value {
    Value::String(Arc::new(d.format("%Y-%m-%d").to_string()))
}

fn calendar(function: &str, all: &Calendars, name: &str) -> Result<Calendar, ExecutionError> {
    all.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = all.names().collect();
        ExecutionError::function_error(
            function,
            format!("unknown calendar `{name}`; known: {}", known.join(", ")),
        )
    })
}

fn days(function: &str, n: i64) -> Result<i32, ExecutionError> {
    i32::try_from(n).ok().filter(|n| n.abs() <= 36_600).ok_or_else(|| {
        ExecutionError::function_error(function, format!("{n} days is out of range (at most 36600)"))
    })
}

/// `date.format` patterns: `yyyy`, `yy`, `MM`, `M`, `dd`, `d`; other letters are refused.
fn format(function: &str, d: NaiveDate, pattern: &str) -> Result<String, ExecutionError> {
    use chrono::Datelike;
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        let run = rest.chars().take_while(|x| *x == c).count();
        let piece: String = match (c, run) {
            ('y', 4) => format!("{:04}", d.year()),
            ('y', 2) => format!("{:02}", d.year().rem_euclid(100)),
            ('M', 2) => format!("{:02}", d.month()),
            ('M', 1) => d.month().to_string(),
            ('d', 2) => format!("{:02}", d.day()),
            ('d', 1) => d.day().to_string(),
            (c, _) if c.is_ascii_alphabetic() => {
                return Err(ExecutionError::function_error(
                    function,
                    format!("pattern `{pattern}`: use yyyy, yy, MM, M, dd and d (e.g. yyyyMMdd)"),
                ));
            }
            (c, n) => c.to_string().repeat(n),
        };
        out.push_str(&piece);
        rest = &rest[c.len_utf8() * run..];
    }
    Ok(out)
}

fn err(function: &str, e: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, e)
}

/// Registers the date and calendar functions in `ctx`.
pub(crate) fn install(ctx: &mut cel::Context<'_, '_>) {
    let all = calendars();
    let results = [
        ctx.add_function("date.add_days", |d: Arc<String>, n: i64| -> ResolveResult {
            let f = "date.add_days";
            let day = date(f, &d)?;
            let moved = day.checked_add_signed(chrono::Duration::days(i64::from(days(f, n)?)));
            moved.map(text).ok_or_else(|| err(f, "out of the date range"))
        }),
        ctx.add_function("date.format", |d: Arc<String>, p: Arc<String>| -> ResolveResult {
            let f = "date.format";
            Ok(Value::String(Arc::new(format(f, date(f, &d)?, &p)?)))
        }),
        ctx.add_function("month_start", |d: Arc<String>| -> ResolveResult {
            Ok(text(madeira_calendar::month_start(date("month_start", &d)?)))
        }),
        ctx.add_function("month_end", |d: Arc<String>| -> ResolveResult {
            Ok(text(madeira_calendar::month_end(date("month_end", &d)?)))
        }),
    ];
    let a = all.clone();
    let add =
        ctx.add_function("cal.add", move |d: Arc<String>, n: i64, name: Arc<String>| -> ResolveResult {
            let f = "cal.add";
            let cal = calendar(f, &a, &name)?;
            cal.add_business_days(date(f, &d)?, days(f, n)?).map(text).map_err(|e| err(f, e))
        });
    let a = all.clone();
    let is =
        ctx.add_function("cal.is_business_day", move |d: Arc<String>, name: Arc<String>| -> ResolveResult {
            let f = "cal.is_business_day";
            let cal = calendar(f, &a, &name)?;
            cal.is_business_day(date(f, &d)?).map(Value::Bool).map_err(|e| err(f, e))
        });
    let last = ctx.add_function(
        "cal.last_business_day_of_month",
        move |d: Arc<String>, name: Arc<String>| -> ResolveResult {
            let f = "cal.last_business_day_of_month";
            let cal = calendar(f, &all, &name)?;
            cal.last_business_day_of_month(date(f, &d)?).map(text).map_err(|e| err(f, e))
        },
    );
    // The names are ours and fixed: a conflict with the CEL library is a bug caught by the tests.
    for added in results.into_iter().chain([add, is, last]) {
        debug_assert!(added.is_ok(), "{added:?}");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::expr::Condition;

    fn holds(source: &str) -> bool {
        let condition = Condition::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        condition
            .eval(&json!({"d": "2026-02-13", "at": "2026-02-14T01:05:00+08:00"}), &json!({}))
            .expect(source)
    }

    #[test]
    fn date_arithmetic_and_formatting() {
        assert!(holds(r#"date.add_days(params.d, -13) == "2026-01-31""#));
        assert!(holds(r#"date.add_days(params.at, 1) == "2026-02-15""#));
        assert!(holds(r#"month_start(params.d) == "2026-02-01" && month_end(params.d) == "2026-02-28""#));
        assert!(holds(r#"date.format(params.d, "yyyyMMdd") == "20260213""#));
        assert!(holds(r#"date.format(params.d, "yy/M/d") == "26/2/13""#));
    }

    #[test]
    fn calendar_functions_on_cn_workdays() {
        assert!(holds(r#"cal.add(params.d, 1, "cn-workdays") == "2026-02-14""#));
        assert!(holds(r#"cal.add(params.d, 2, "cn-workdays") == "2026-02-24""#));
        assert!(holds(r#"cal.add("2026-02-24", -1, "cn-workdays") == "2026-02-14""#));
        assert!(holds(r#"cal.is_business_day("2026-02-14", "cn-workdays")"#));
        assert!(holds(r#"!cal.is_business_day("2026-02-23", "cn-workdays")"#));
        assert!(holds(r#"cal.last_business_day_of_month(params.d, "cn-workdays") == "2026-02-28""#));
    }

    #[test]
    fn out_of_data_and_bad_input_are_errors_not_guesses() {
        let eval = |s: &str| Condition::compile(s).expect(s).eval(&json!({}), &json!({}));
        let err = eval(r#"cal.is_business_day("2027-01-04", "cn-workdays")"#).expect_err("out of data");
        assert!(err.0.contains("has no data for 2027-01-04"), "{err}");
        let err = eval(r#"date.add_days("13/02/2026", 1) == """#).expect_err("bad date");
        assert!(err.0.contains("is not a date"), "{err}");
        let err = eval(r#"date.format("2026-02-13", "YYYY") == """#).expect_err("bad pattern");
        assert!(err.0.contains("yyyyMMdd"), "{err}");
        let err = eval(r#"cal.add("2026-02-13", 1, "nope") == """#).expect_err("unknown calendar");
        assert!(err.0.contains("unknown calendar `nope`"), "{err}");
    }

    #[test]
    fn unknown_functions_and_arities_are_refused_at_compile() {
        let err = |s: &str| Condition::compile(s).err().map(|e| e.0).unwrap_or_default();
        assert!(err(r#"cal.addd("2026-02-13", 1, "cn-workdays") == """#).contains("did you mean `cal.add`"));
        assert!(err(r#"date.plus("2026-02-13", 1) == """#).contains("unknown function `date.plus`"));
        assert!(err(r#"month_star("2026-02-13") == """#).contains("did you mean `month_start`"));
        assert!(err(r#"cal.add("2026-02-13", 1) == """#).contains("takes 3 arguments"));
        let used = Condition::compile(r#"cal.is_business_day(params.d, "sse")"#).expect("compiles");
        assert_eq!(used.calendar_names(), ["sse"]);
        assert!(Condition::compile("size(params.x) > 0 && params.y.startsWith('a')").is_ok());
    }
}
