//! A channel's rate limit as a sliding window: at most `count` posts in any span of
//! `per` (the robots count 20 per minute, failures included). Plain data over
//! milliseconds, so the injected clock drives it.

use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Window {
    count: usize,
    per_ms: i64,
    posts: VecDeque<i64>,
}

impl Window {
    pub fn new(count: u32, per_ms: i64) -> Self {
        Self { count: count.max(1) as usize, per_ms, posts: VecDeque::new() }
    }

    fn prune(&mut self, now: i64) {
        while self.posts.front().is_some_and(|t| *t + self.per_ms <= now) {
            self.posts.pop_front();
        }
    }

    /// Posts still allowed now.
    pub fn available(&mut self, now: i64) -> usize {
        self.prune(now);
        self.count.saturating_sub(self.posts.len())
    }

    /// When the next post is allowed (`now` if it is).
    pub fn free_at(&mut self, now: i64) -> i64 {
        self.free_for(now, 1)
    }

    /// When `n` posts in a row are allowed (`now` if they are).
    pub fn free_for(&mut self, now: i64, n: usize) -> i64 {
        self.prune(now);
        let n = n.clamp(1, self.count);
        if self.posts.len() + n <= self.count {
            return now;
        }
        self.posts.get(self.posts.len() + n - 1 - self.count).map_or(now, |t| t + self.per_ms)
    }

    pub fn record(&mut self, now: i64) {
        self.posts.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_count_per_window_then_frees_as_posts_age() {
        let mut w = Window::new(3, 1_000);
        for t in [0, 10, 20] {
            assert!(w.available(t) > 0);
            w.record(t);
        }
        assert_eq!(w.available(500), 0);
        assert_eq!(w.free_at(500), 1_000);
        assert_eq!(w.available(1_000), 1);
        assert_eq!(w.free_at(1_015), 1_015);
    }

    #[test]
    fn free_for_two_is_when_the_second_oldest_post_ages() {
        let mut w = Window::new(3, 1_000);
        for t in [0, 10, 20] {
            w.record(t);
        }
        assert_eq!((w.free_for(500, 1), w.free_for(500, 2)), (1_000, 1_010));
        let mut w = Window::new(3, 1_000);
        w.record(0);
        assert_eq!((w.free_for(5, 2), w.free_for(5, 3)), (5, 1_000));
    }
}
