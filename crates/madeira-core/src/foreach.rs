//! `foreach`: a node run once per item of a list — from an upstream's outputs
//! (CEL, e.g. `nodes.list_merchants.outputs.ids`) or written in the flow — each
//! item one shard of the node's attempt (key `…:s<index>`, the item bound as
//! `item`), at most `max_parallel` at once, results collected in item order
//! (`outputs.items`). Pure: the item list and its bound, and the fan-out plan
//! (`Fanout`: which item starts next, never more than `max_parallel` running,
//! each item once) that the engine follows.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json};

use crate::keyexpr::ValueExpr;

/// At most this many items per node attempt.
pub const MAX_ITEMS: usize = 10_000;
/// `max_parallel` when not given.
pub const DEFAULT_MAX_PARALLEL: u32 = 4;

/// `foreach:` and `max_parallel:` of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct ForeachDef {
    pub items: ForeachItems,
    /// Items running at once.
    pub max_parallel: u32,
}

/// Where the items come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ForeachItems {
    /// CEL over `params`, `nodes` and `biz_date` that must give a list.
    Expr(ValueExpr),
    /// A list written in the flow file.
    Literal(Vec<Json>),
}

/// Why a node's items could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForeachError {
    #[error("foreach `{expr}`: {error}")]
    Eval { expr: String, error: String },
    #[error("foreach `{expr}` gave {found}, not a list; make it a list (e.g. an upstream's `outputs.ids`)")]
    NotAList { expr: String, found: String },
    #[error(
        "foreach over {count} items, more than the bound of {bound}; split the list upstream (e.g. pages of ids) \
         or run the items in a sub-flow per page"
    )]
    TooMany { count: usize, bound: usize },
}

impl ForeachDef {
    /// The items for one attempt, checked against `MAX_ITEMS`.
    pub fn items(
        &self,
        params: &Json,
        nodes: &Json,
        biz_date: Option<&str>,
    ) -> Result<Vec<Json>, ForeachError> {
        let items = match &self.items {
            ForeachItems::Literal(items) => items.clone(),
            ForeachItems::Expr(e) => {
                let expr = e.source().to_string();
                match e.eval_dated(params, nodes, biz_date) {
                    Ok(Json::Array(items)) => items,
                    Ok(other) => return Err(ForeachError::NotAList { expr, found: kind(&other) }),
                    Err(err) => return Err(ForeachError::Eval { expr, error: err.to_string() }),
                }
            }
        };
        check_count(items.len())?;
        Ok(items)
    }
}

/// `Err(TooMany)` past the bound.
pub fn check_count(count: usize) -> Result<(), ForeachError> {
    match count > MAX_ITEMS {
        true => Err(ForeachError::TooMany { count, bound: MAX_ITEMS }),
        false => Ok(()),
    }
}

fn kind(v: &Json) -> String {
    match v {
        Json::Null => "null".into(),
        Json::Bool(b) => format!("a boolean ({b})"),
        Json::Number(n) => format!("a number ({n})"),
        Json::String(_) => "a string".into(),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "a map".into(),
    }
}

/// The idempotency key of item `index` of an attempt whose node key is `key`
/// (the shard key of SPEC §4).
pub fn item_key(key: &str, index: usize) -> String {
    format!("{key}:s{index}")
}

/// The fan-out of one attempt over `total` items: items start in index order,
/// at most `max_parallel` at once; items that already succeeded (kept from an
/// earlier attempt) are not started again.
#[derive(Debug, Clone)]
pub struct Fanout {
    max_parallel: usize,
    todo: std::collections::VecDeque<usize>,
    running: BTreeSet<usize>,
    outputs: BTreeMap<usize, Map<String, Json>>,
    failed: BTreeMap<usize, (String, bool)>,
    total: usize,
}

impl Fanout {
    /// `done`: outputs of items that succeeded earlier (by index).
    pub fn new(total: usize, max_parallel: u32, done: BTreeMap<usize, Map<String, Json>>) -> Self {
        let done: BTreeMap<usize, Map<String, Json>> = done.into_iter().filter(|(i, _)| *i < total).collect();
        Self {
            max_parallel: usize::try_from(max_parallel.max(1)).unwrap_or(usize::MAX),
            todo: (0..total).filter(|i| !done.contains_key(i)).collect(),
            running: BTreeSet::new(),
            outputs: done,
            failed: BTreeMap::new(),
            total,
        }
    }

    /// The next item to start, if one may start now.
    pub fn start_next(&mut self) -> Option<usize> {
        if self.running.len() >= self.max_parallel {
            return None;
        }
        let i = self.todo.pop_front()?;
        self.running.insert(i);
        Some(i)
    }

    /// Item `index` succeeded with `outputs`.
    pub fn succeeded(&mut self, index: usize, outputs: Map<String, Json>) {
        if self.running.remove(&index) {
            self.outputs.insert(index, outputs);
        }
    }

    /// Item `index` failed.
    pub fn failed(&mut self, index: usize, error: String, retryable: bool) {
        if self.running.remove(&index) {
            self.failed.insert(index, (error, retryable));
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Every item started has ended and none is left to start.
    pub fn is_done(&self) -> bool {
        self.running.is_empty() && self.todo.is_empty()
    }

    /// The node's result once `is_done`: `{"items": [outputs of item 0, 1, …]}`, or
    /// the failures (`k of N items failed: item i: error; …`, retryable when
    /// every failure is).
    pub fn result(&self) -> Result<Map<String, Json>, (String, bool)> {
        if self.failed.is_empty() {
            let items: Vec<Json> = (0..self.total)
                .map(|i| Json::Object(self.outputs.get(&i).cloned().unwrap_or_default()))
                .collect();
            return Ok(Map::from_iter([("items".to_string(), Json::Array(items))]));
        }
        let parts: Vec<String> = self.failed.iter().map(|(i, (e, _))| format!("item {i}: {e}")).collect();
        let retryable = self.failed.values().all(|(_, r)| *r);
        Err((
            format!("{} of {} items failed: {}", self.failed.len(), self.total, parts.join("; ")),
            retryable,
        ))
    }
}

#[cfg(test)]
mod tests;
