//! Failed authentication per client address. An attempt is a request carrying
//! `Authorization` or an XXL-JOB executor's `XXL-JOB-ACCESS-TOKEN` (the admin
//! endpoints of `madeira-xxl`), or a console sign-in (`POST /signin`); one answered 401 costs
//! its address one of `BURST` tries, which come back at `BURST` per `WINDOW`
//! (a token bucket). An address without tries left gets 429 with `Retry-After`
//! for its attempts — the credentials are not even looked at — until one comes
//! back; requests without credentials and successful attempts pass untouched and
//! unslowed. IPv6 addresses count per /64 (one host usually holds the whole
//! prefix). Each failure is logged at WARN with the client address and path,
//! never the credentials. Behind a reverse proxy every client shares the proxy's
//! address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ApiError;

/// Failed attempts an address may make in a row.
pub const BURST: u32 = 10;
/// How long all `BURST` tries take to come back.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The header an XXL-JOB executor sends its app's token in (`madeira_xxl::protocol::TOKEN_HEADER`).
const XXL_TOKEN: &str = "xxl-job-access-token";
/// Addresses tracked at most; beyond, those whose tries have all come back go.
const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tries: f64,
    at: Instant,
}

/// The tries left per client address.
#[derive(Debug, Default)]
pub(crate) struct AuthFailures {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl AuthFailures {
    fn refill(bucket: Bucket, now: Instant) -> f64 {
        let per_sec = f64::from(BURST) / WINDOW.as_secs_f64();
        (bucket.tries + now.saturating_duration_since(bucket.at).as_secs_f64() * per_sec)
            .min(f64::from(BURST))
    }

    /// How long `client` must wait for a try, when it has none left.
    pub(crate) fn blocked(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let tries = Self::refill(*buckets.get(&key(client))?, now);
        (tries < 1.0).then(|| WINDOW.mul_f64((1.0 - tries) / f64::from(BURST)))
    }

    /// Takes one try from `client`; true when it was its last.
    pub(crate) fn fail(&self, client: IpAddr, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_TRACKED {
            buckets.retain(|_, b| Self::refill(*b, now) < f64::from(BURST));
        }
        let full = Bucket { tries: f64::from(BURST), at: now };
        let bucket = buckets.entry(key(client)).or_insert(full);
        let tries = (Self::refill(*bucket, now) - 1.0).max(0.0);
        *bucket = Bucket { tries, at: now };
        tries < 1.0
    }
}

/// The address an IPv4 client counts under; an IPv6 one's /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// Middleware: see the module doc.
pub(crate) async fn limit(
    State(failures): State<Arc<AuthFailures>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(client) = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()) else {
        return next.run(request).await;
    };
    let attempt = request.headers().contains_key(header::AUTHORIZATION)
        || request.headers().contains_key(XXL_TOKEN)
        || (request.method() == Method::POST && request.uri().path() == "/signin");
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    if attempt && let Some(wait) = failures.blocked(client, Instant::now()) {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        tracing::debug!(client = %client, %method, %path, retry_after = secs, "authentication attempt refused: too many failures");
        return ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_auth_failures",
            format!("too many failed authentication attempts from {client}; retry in {secs}s"),
        )
        .with_details(json!({"retry_after_seconds": secs}))
        .into_response();
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        if attempt {
            let last = failures.fail(client, Instant::now());
            tracing::warn!(client = %client, %method, %path, "authentication refused: unknown credentials");
            if last {
                tracing::warn!(
                    client = %client,
                    burst = BURST,
                    window = ?WINDOW,
                    "too many failed authentication attempts: this address's attempts get 429 for a while"
                );
            }
        } else {
            tracing::debug!(client = %client, %method, %path, "authentication refused: no credentials");
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_failures_blocks_one_address_until_a_try_comes_back() {
        let failures = AuthFailures::default();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().expect("ip"), "192.0.2.2".parse().expect("ip"));
        let t0 = Instant::now();
        for i in 1..BURST {
            assert!(!failures.fail(a, t0), "failure {i} is not the last");
            assert_eq!(failures.blocked(a, t0), None);
        }
        assert!(failures.fail(a, t0), "the BURST-th failure is the last");
        let wait = failures.blocked(a, t0).expect("blocked");
        assert!(wait > Duration::ZERO && wait <= WINDOW / BURST, "{wait:?}");
        assert_eq!(failures.blocked(b, t0), None, "per address");
        assert_eq!(failures.blocked(a, t0 + wait + Duration::from_millis(1)), None, "a try came back");
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let one: IpAddr = "2001:db8::1".parse().expect("ip");
        let other: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        assert_eq!(key(one), key(other));
        assert_ne!(key(one), key("2001:db8:0:1::1".parse().expect("ip")));
        assert_eq!(key("::ffff:192.0.2.1".parse().expect("ip")), "192.0.2.1".parse::<IpAddr>().expect("ip"));
    }
}
