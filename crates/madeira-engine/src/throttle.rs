//! Per-node permits (`throttle.max_permits`) across all runs of this engine, and the
//! FIFO of ready attempts waiting for one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

/// A ready node waiting for a permit.
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    pub run_id: String,
    pub node: usize,
    pub ready_at: Instant,
}

/// Permits are held by named runs, so only a holder can give one back: a node that
/// leaves RUNNING without holding one (e.g. recovered after a restart, when this
/// process never granted it) frees nothing.
#[derive(Default)]
pub(crate) struct Throttle {
    holders: HashMap<(String, usize), HashSet<String>>,
    waiting: HashMap<(String, usize), VecDeque<Waiter>>,
}

impl Throttle {
    /// Gives `run_id` a permit for `(flow, node)` if one of `max` is free.
    pub fn try_acquire(&mut self, flow: &str, node: usize, run_id: &str, max: u32) -> bool {
        let holders = self.holders.entry((flow.to_string(), node)).or_default();
        if holders.contains(run_id) {
            return true;
        }
        if holders.len() < max as usize {
            holders.insert(run_id.to_string());
            true
        } else {
            false
        }
    }

    pub fn enqueue(&mut self, flow: &str, waiter: Waiter) {
        self.waiting.entry((flow.to_string(), waiter.node)).or_default().push_back(waiter);
    }

    /// `run_id` gives its permit back; the next waiter, if any, now holds it.
    /// Returns `None` when `run_id` held no permit or nobody waits.
    pub fn release(&mut self, flow: &str, node: usize, run_id: &str) -> Option<Waiter> {
        let key = (flow.to_string(), node);
        let holders = self.holders.entry(key.clone()).or_default();
        if !holders.remove(run_id) {
            return None;
        }
        let next = self.waiting.get_mut(&key).and_then(VecDeque::pop_front)?;
        self.holders.entry(key).or_default().insert(next.run_id.clone());
        Some(next)
    }

    /// The oldest waiter of `(flow, node)`.
    pub fn peek(&self, flow: &str, node: usize) -> Option<&Waiter> {
        self.waiting.get(&(flow.to_string(), node)).and_then(VecDeque::front)
    }

    pub fn pop(&mut self, flow: &str, node: usize) -> Option<Waiter> {
        self.waiting.get_mut(&(flow.to_string(), node)).and_then(VecDeque::pop_front)
    }

    /// Records `run_id` holding a permit taken elsewhere (the store, for global
    /// permits), so the API shows it in use.
    pub fn held(&mut self, flow: &str, node: usize, run_id: &str) {
        self.holders.entry((flow.to_string(), node)).or_default().insert(run_id.to_string());
    }

    /// `run_id` gave back a permit taken elsewhere (nothing when it held none here).
    pub fn dropped(&mut self, flow: &str, node: usize, run_id: &str) {
        if let Some(holders) = self.holders.get_mut(&(flow.to_string(), node)) {
            holders.remove(run_id);
        }
    }

    /// `(flow, node)` pairs with waiters.
    pub fn waiting_keys(&self) -> Vec<(String, usize)> {
        self.waiting.iter().filter(|(_, q)| !q.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    pub fn in_use(&self, flow: &str, node: usize) -> u32 {
        self.holders.get(&(flow.to_string(), node)).map_or(0, |h| h.len() as u32)
    }

    pub fn depth(&self, flow: &str, node: usize) -> usize {
        self.waiting.get(&(flow.to_string(), node)).map_or(0, VecDeque::len)
    }

    /// Run ids waiting for `(flow, node)`, in order.
    pub fn waiting_runs(&self, flow: &str, node: usize) -> Vec<String> {
        self.waiting
            .get(&(flow.to_string(), node))
            .map(|q| q.iter().map(|w| w.run_id.clone()).collect())
            .unwrap_or_default()
    }
}

/// What the API shows of a throttled node: permits in use and the waiting runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThrottleState {
    pub in_use: u32,
    pub waiting: Vec<String>,
}

/// The latest `ThrottleState` per `(flow, node name)`, published after each commit.
#[derive(Clone, Default)]
pub struct ThrottleView {
    inner: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, String), ThrottleState>>>,
}

impl ThrottleView {
    pub fn get(&self, flow: &str, node: &str) -> ThrottleState {
        let map = match self.inner.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.get(&(flow.to_string(), node.to_string())).cloned().unwrap_or_default()
    }

    pub(crate) fn set(&self, flow: &str, node: &str, state: ThrottleState) {
        let mut map = match self.inner.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.insert((flow.to_string(), node.to_string()), state);
    }
}
