//! Per-node permits (`throttle.max_permits`) across all runs of this engine, and the
//! FIFO of ready attempts waiting for one.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// A ready node waiting for a permit.
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    pub run_id: String,
    pub node: usize,
    pub ready_at: Instant,
}

#[derive(Default)]
pub(crate) struct Throttle {
    in_use: HashMap<(String, usize), u32>,
    waiting: HashMap<(String, usize), VecDeque<Waiter>>,
}

impl Throttle {
    /// Takes a permit for `(flow, node)` if one of `max` is free.
    pub fn try_acquire(&mut self, flow: &str, node: usize, max: u32) -> bool {
        let used = self.in_use.entry((flow.to_string(), node)).or_default();
        if *used < max {
            *used += 1;
            true
        } else {
            false
        }
    }

    pub fn enqueue(&mut self, flow: &str, waiter: Waiter) {
        self.waiting.entry((flow.to_string(), waiter.node)).or_default().push_back(waiter);
    }

    /// Gives a permit back and returns the next waiter, which now holds it.
    pub fn release(&mut self, flow: &str, node: usize) -> Option<Waiter> {
        let key = (flow.to_string(), node);
        if let Some(next) = self.waiting.get_mut(&key).and_then(VecDeque::pop_front) {
            return Some(next);
        }
        if let Some(used) = self.in_use.get_mut(&key) {
            *used = used.saturating_sub(1);
        }
        None
    }

    /// The oldest waiter of `(flow, node)`.
    pub fn peek(&self, flow: &str, node: usize) -> Option<&Waiter> {
        self.waiting.get(&(flow.to_string(), node)).and_then(VecDeque::front)
    }

    pub fn pop(&mut self, flow: &str, node: usize) -> Option<Waiter> {
        self.waiting.get_mut(&(flow.to_string(), node)).and_then(VecDeque::pop_front)
    }

    /// Counts a permit taken elsewhere (the store, for global permits).
    pub fn held(&mut self, flow: &str, node: usize) {
        *self.in_use.entry((flow.to_string(), node)).or_default() += 1;
    }

    /// Counts a permit given back elsewhere.
    pub fn dropped(&mut self, flow: &str, node: usize) {
        if let Some(used) = self.in_use.get_mut(&(flow.to_string(), node)) {
            *used = used.saturating_sub(1);
        }
    }

    /// `(flow, node)` pairs with waiters.
    pub fn waiting_keys(&self) -> Vec<(String, usize)> {
        self.waiting.iter().filter(|(_, q)| !q.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    pub fn in_use(&self, flow: &str, node: usize) -> u32 {
        self.in_use.get(&(flow.to_string(), node)).copied().unwrap_or(0)
    }

    pub fn depth(&self, flow: &str, node: usize) -> usize {
        self.waiting.get(&(flow.to_string(), node)).map_or(0, VecDeque::len)
    }
}
