//! What a parsed expression reads and how deep it is: free variables (a
//! comprehension's own variables, `exists(i, …)`, are bound, not read), the
//! `nodes.X` it selects, and its nesting depth, checked against the limits.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

/// What validation needs to know about an expression.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outline {
    /// Variables read from outside the expression, in first-use order.
    pub free: Vec<String>,
    /// Node names selected as `nodes.X` or `nodes['X']`, in first-use order.
    pub nodes: Vec<String>,
    /// Fields selected as `params.X` or `params['X']`, in first-use order.
    pub params_fields: Vec<String>,
    /// `params` is also used otherwise (`size(params)`, `params[k]`): every field
    /// may be read.
    pub params_whole: bool,
    /// Levels of nesting of the deepest sub-expression (1 for a literal).
    pub depth: usize,
}

/// Walks `expr` once.
pub(crate) fn outline(expr: &IdedExpr) -> Outline {
    let mut out = Outline::default();
    let mut scope = Vec::new();
    walk(expr, &mut scope, 1, &mut out);
    out
}

fn walk(expr: &IdedExpr, scope: &mut Vec<String>, depth: usize, out: &mut Outline) {
    out.depth = out.depth.max(depth);
    match &expr.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !scope.contains(name) {
                push_unique(&mut out.free, name);
                out.params_whole |= name == "params";
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, scope, depth + 1, out);
            walk(&c.accu_init, scope, depth + 1, out);
            let before = scope.len();
            scope.push(c.iter_var.clone());
            scope.extend(c.iter_var2.iter().cloned());
            scope.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                walk(part, scope, depth + 1, out);
            }
            scope.truncate(before);
        }
        _ => {
            if let Some(field) = selected(expr, scope, "params") {
                // Only this field of `params` is read here: no need to walk to the ident.
                push_unique(&mut out.free, "params");
                push_unique(&mut out.params_fields, &field);
                return;
            }
            if let Some(node) = selected(expr, scope, "nodes") {
                push_unique(&mut out.nodes, &node);
            }
            // `date.f(…)` / `cal.f(…)` name a function (`expr::dates`), not a variable.
            if let Expr::Call(call) = &expr.expr
                && matches!(call.target.as_deref().map(|t| &t.expr), Some(Expr::Ident(ns)) if ns == "date" || ns == "cal")
            {
                for arg in &call.args {
                    walk(arg, scope, depth + 1, out);
                }
                return;
            }
            for_each_child(expr, &mut |child| walk(child, scope, depth + 1, out));
        }
    }
}

/// `X` of `var.X`, `has(var.X)` or `var['X']`, with `var` not rebound.
fn selected(expr: &IdedExpr, scope: &[String], var: &str) -> Option<String> {
    let is_nodes = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == var && !scope.contains(n));
    match &expr.expr {
        Expr::Select(select) if is_nodes(&select.operand) => Some(select.field.clone()),
        Expr::Call(call) if call.func_name == operators::INDEX && call.target.is_none() => {
            match call.args.as_slice() {
                [operand, key] if is_nodes(operand) => match &key.expr {
                    Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
    }
}

/// Calls `f` on each direct sub-expression of `expr`.
pub(crate) fn for_each_child(expr: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                f(target);
            }
            call.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for part in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                f(part);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(&mut *f),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(e) = &entry.expr {
                    f(&e.key);
                    f(&e.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    f(&field.value);
                }
            }
        }
        Expr::Select(select) => f(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn push_unique(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|n| n == name) {
        list.push(name.to_string());
    }
}

/// The deepest bracket nesting in `source` (`(`, `[`, `{`), string literals
/// skipped: checked before parsing, so the parser never recurses that deep.
pub(crate) fn bracket_depth(source: &str) -> usize {
    let bytes = source.as_bytes();
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'\'' => {
                i = skip_string(bytes, i);
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

fn skip_string(bytes: &[u8], open: usize) -> usize {
    let quote = bytes[open];
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}
