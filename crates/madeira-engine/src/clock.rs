//! Wall-clock time as milliseconds since the Unix epoch, the unit of every stored time.

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
