//! Time and chance as the engine reads them: wall-clock milliseconds since the Unix
//! epoch (the unit of every stored time), the monotonic instant a node became
//! ready, and the uniform draw that spreads retry jitter. The step reads them only
//! through a [`Clock`], so its decisions are a function of its inputs and tests fix
//! them ([`SystemClock`] is the real one).

use std::time::Instant;

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// What the engine's step reads of the outside world.
pub(crate) trait Clock: Send + Sync {
    /// Wall time, milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Monotonic time (a node's `ready_at`, for dispatch latency and FIFO order).
    fn instant(&self) -> Instant;
    /// A uniform draw in `[0, 1)` for a retry's jitter.
    fn jitter_unit(&self) -> f64;
}

/// The machine's clocks and the thread's random generator.
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }

    fn jitter_unit(&self) -> f64 {
        rand::random::<f64>()
    }
}
