//! What the API shares with the other replicas through Redis: trigger rate limits
//! (one budget per flow for the whole cluster, a GCRA kept in one Redis key and
//! updated by a Lua script, so two replicas cannot both take the last slot) and an
//! event dedup cache (a redelivered event is answered from Redis without touching
//! the store). Redis only accelerates or tightens: the runs table's unique key is
//! the dedup record, and while Redis is unreachable (or not configured) each
//! replica limits on its own and every event goes to the store. A failed call
//! marks Redis down for `RETRY_AFTER`, so an outage costs no request more than one
//! short timeout; the connection is re-made after it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use madeira_core::model::RateLimitDef;
use redis::aio::MultiplexedConnection;
use tracing::{info, warn};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// How long a seen event id is answered from the cache.
const EVENT_TTL_SECS: u64 = 3600;

/// GCRA: KEYS[1] holds the theoretical arrival time (µs, Redis clock); ARGV[1] is
/// the emission interval (µs), ARGV[2] the burst. Returns 0 when a slot was taken,
/// otherwise the µs to wait.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if now < tat - tolerance then return math.ceil(tat - tolerance - now) end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
";

/// Redis state of the API; `SharedState::default()` has none.
#[derive(Default)]
pub struct SharedState {
    redis: Option<Redis>,
}

struct Redis {
    client: redis::Client,
    script: redis::Script,
    link: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    down_until: Mutex<Option<Instant>>,
}

impl SharedState {
    /// Uses Redis at `url`; an unusable URL is logged and leaves Redis out.
    pub fn new(url: Option<&str>) -> Self {
        let redis = url.and_then(|url| match redis::Client::open(url) {
            Ok(client) => Some(Redis {
                client,
                script: redis::Script::new(GCRA),
                link: tokio::sync::Mutex::new(None),
                down_until: Mutex::new(None),
            }),
            Err(e) => {
                warn!(error = %e, "redis url rejected; rate limits per replica, no event cache");
                None
            }
        });
        Self { redis }
    }

    /// Takes one trigger of `flow` from the cluster's budget: `Some(Ok)` taken,
    /// `Some(Err(wait))` refused; `None` when Redis cannot say (limit locally).
    pub async fn take(&self, flow: &str, limit: RateLimitDef) -> Option<Result<(), Duration>> {
        let redis = self.redis.as_ref()?;
        let count = limit.count.max(1);
        let interval_us = (limit.per.as_micros() / u128::from(count)).max(1);
        let mut conn = redis.conn().await?;
        let mut call = redis.script.key(format!("madeira:rate:{flow}"));
        call.arg(u64::try_from(interval_us).unwrap_or(u64::MAX)).arg(count);
        let wait_us: u64 =
            redis.settle(tokio::time::timeout(CALL_TIMEOUT, call.invoke_async(&mut conn)).await).await?;
        Some(if wait_us == 0 { Ok(()) } else { Err(Duration::from_micros(wait_us)) })
    }

    /// The runs an event already made, by flow, if Redis remembers the event.
    pub async fn seen_event(&self, kind: &str, id: &str) -> Option<BTreeMap<String, String>> {
        let redis = self.redis.as_ref()?;
        let mut conn = redis.conn().await?;
        let cmd = redis::cmd("GET").arg(event_key(kind, id)).clone();
        let text: Option<String> =
            redis.settle(tokio::time::timeout(CALL_TIMEOUT, cmd.query_async(&mut conn)).await).await?;
        serde_json::from_str(&text?).ok()
    }

    /// Remembers the runs an event made (best effort).
    pub async fn remember_event(&self, kind: &str, id: &str, runs: &BTreeMap<String, String>) {
        let Some(redis) = self.redis.as_ref() else { return };
        let Some(mut conn) = redis.conn().await else { return };
        let Ok(text) = serde_json::to_string(runs) else { return };
        let cmd = redis::cmd("SET").arg(event_key(kind, id)).arg(text).arg("EX").arg(EVENT_TTL_SECS).clone();
        let _: Option<()> =
            redis.settle(tokio::time::timeout(CALL_TIMEOUT, cmd.query_async(&mut conn)).await).await;
    }
}

fn event_key(kind: &str, id: &str) -> String {
    format!("madeira:event:{}:{kind}:{id}", kind.len())
}

impl Redis {
    /// A connection, or `None` while Redis is marked down.
    async fn conn(&self) -> Option<MultiplexedConnection> {
        if self.is_down() {
            return None;
        }
        let mut link = self.link.lock().await;
        // Requests that queued behind a failed connect must not each try again.
        if self.is_down() {
            return None;
        }
        if let Some(conn) = link.as_ref() {
            return Some(conn.clone());
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_multiplexed_async_connection()).await {
            Ok(Ok(conn)) => {
                let was_down = self.down_until.lock().ok().and_then(|mut d| d.take()).is_some();
                if was_down {
                    info!("redis reachable again: rate limits shared, event cache on");
                }
                *link = Some(conn.clone());
                Some(conn)
            }
            Ok(Err(e)) => {
                self.note_down(&e.to_string());
                None
            }
            Err(_) => {
                self.note_down("connect timed out");
                None
            }
        }
    }

    fn is_down(&self) -> bool {
        self.down_until.lock().ok().and_then(|d| *d).is_some_and(|until| Instant::now() < until)
    }

    /// The value of a call, or `None` after marking Redis down on its failure.
    async fn settle<T>(
        &self,
        outcome: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        let error = match outcome {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "call timed out".to_string(),
        };
        self.mark_down(&error).await;
        None
    }

    /// Marks Redis down for `RETRY_AFTER` (warning once per outage).
    fn note_down(&self, error: &str) {
        let first = self
            .down_until
            .lock()
            .ok()
            .is_some_and(|mut d| d.replace(Instant::now() + RETRY_AFTER).is_none());
        if first {
            warn!(error, "redis unreachable: rate limits per replica, events deduplicated by the store only");
        }
    }

    async fn mark_down(&self, error: &str) {
        self.note_down(error);
        *self.link.lock().await = None;
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use madeira_store::testing::{redis_url, services_required};

    use super::*;

    /// Redis at `MADEIRA_TEST_REDIS_URL`, or `None` (skip) when absent and not on CI.
    fn redis() -> Option<String> {
        let url = redis_url();
        let addr = url.trim_start_matches("redis://").split('/').next().unwrap_or("").to_string();
        if TcpStream::connect(&addr).is_ok() {
            return Some(url);
        }
        assert!(!services_required(), "CI=true and Redis is not reachable at {url}");
        eprintln!("skipping: no Redis at {url}");
        None
    }

    fn unique(name: &str) -> String {
        format!("{name}-{}", uuid::Uuid::now_v7().simple())
    }

    #[tokio::test]
    async fn two_replicas_share_one_budget_per_flow() {
        let Some(url) = redis() else { return };
        let (a, b) = (SharedState::new(Some(&url)), SharedState::new(Some(&url)));
        let flow = unique("budget");
        let limit = RateLimitDef { count: 3, per: Duration::from_secs(60) };
        assert_eq!(a.take(&flow, limit).await, Some(Ok(())));
        assert_eq!(b.take(&flow, limit).await, Some(Ok(())));
        assert_eq!(a.take(&flow, limit).await, Some(Ok(())));
        for replica in [&a, &b] {
            match replica.take(&flow, limit).await {
                Some(Err(wait)) => assert!(
                    wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
                    "one slot frees every 20 s: {wait:?}"
                ),
                other => panic!("the fourth trigger in a minute must be refused, got {other:?}"),
            }
        }
        let other = unique("other");
        assert_eq!(b.take(&other, limit).await, Some(Ok(())), "budgets are per flow");
    }

    #[tokio::test]
    async fn a_seen_event_is_remembered_with_its_runs() {
        let Some(url) = redis() else { return };
        let shared = SharedState::new(Some(&url));
        let kind = unique("order.paid");
        assert_eq!(shared.seen_event(&kind, "42").await, None);
        let runs = BTreeMap::from([("settle".to_string(), "run-1".to_string())]);
        shared.remember_event(&kind, "42", &runs).await;
        assert_eq!(shared.seen_event(&kind, "42").await, Some(runs));
        assert_eq!(shared.seen_event(&kind, "43").await, None);
    }

    #[tokio::test]
    async fn without_redis_nothing_is_decided_there_and_calls_stay_short() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
        let url = format!("redis://127.0.0.1:{}", port.expect("free port"));
        let shared = SharedState::new(Some(&url));
        let limit = RateLimitDef { count: 1, per: Duration::from_secs(60) };
        let started = Instant::now();
        assert_eq!(shared.take("f", limit).await, None, "unreachable: the caller limits locally");
        assert_eq!(shared.seen_event("e", "1").await, None);
        assert_eq!(shared.take("f", limit).await, None);
        assert!(started.elapsed() < CONNECT_TIMEOUT * 3, "marked down after the first failure");
        assert_eq!(SharedState::default().take("f", limit).await, None, "not configured");
    }
}
