//! The `http` executor: 2xx is success (a JSON object body becomes the outputs),
//! 5xx, timeouts and connection errors are retryable, 4xx is not. The target is
//! resolved and checked against the `HttpPolicy` first (a refusal fails the node
//! at once, with the reason). Every attempt then goes through one shared client
//! (its connection pool and the TLS roots loaded once: building a client loads
//! the system's CA certificates, several milliseconds of CPU), whose resolver
//! checks again every address a name resolves to before it connects, so DNS
//! cannot swap in a refused address after the check. The body is streamed
//! and read up to `http_executor.max_response_bytes`: a longer one fails the
//! attempt, so one response cannot swell the control plane's memory.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use madeira_core::ExecutorDef;
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;

use super::{AttemptResult, Executor, HttpPolicy, Job, tail};

pub struct HttpExecutor {
    policy: HttpPolicy,
    /// Built on the first http attempt (a control plane without http nodes never loads the roots).
    client: OnceLock<Result<reqwest::Client, String>>,
}

/// The shared client's DNS: a name's addresses are all checked against the
/// policy, and a refused one fails the connection.
struct CheckedResolver {
    policy: HttpPolicy,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(why) = addrs.iter().find_map(|a| policy.refuse_addr(&host, a.ip())) {
                return Err(format!("`{host}` resolves to a refused address: {why}").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

impl HttpExecutor {
    pub fn new(policy: HttpPolicy) -> Self {
        Self { policy, client: OnceLock::new() }
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .dns_resolver(Arc::new(CheckedResolver { policy: self.policy.clone() }))
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| format!("http client: {}", chain(&e)))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Resolves `url`'s host and checks it and every address it has, or says why not.
    async fn check_target(&self, url: &reqwest::Url) -> Result<(), String> {
        let host = url.host_str().ok_or_else(|| format!("url `{url}` has no host"))?.to_string();
        if !self.policy.host_allowed(&host) {
            return Err(format!(
                "host `{host}` is not in http_executor.allow_hosts of the server config; add it there"
            ));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("cannot resolve `{host}`: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("`{host}` resolves to no address"));
        }
        for addr in &addrs {
            if let Some(why) = self.policy.refuse_addr(&host, addr.ip()) {
                return Err(format!("`{host}` resolves to {}: {why}", addr.ip()));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Executor for HttpExecutor {
    async fn execute(&self, job: Job, cancel: CancellationToken) -> AttemptResult {
        let ExecutorDef::Http(def) = &job.executor else {
            return AttemptResult::failure("http executor given a non-http node", false);
        };
        let url = match reqwest::Url::parse(&def.url) {
            Ok(url) => url,
            Err(e) => return AttemptResult::failure(format!("bad url `{}`: {e}", def.url), false),
        };
        if let Err(e) = self.check_target(&url).await {
            return AttemptResult::failure(e, false);
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(e) => return AttemptResult::failure(e, true),
        };
        let method = reqwest::Method::from_bytes(def.method.to_ascii_uppercase().as_bytes())
            .unwrap_or(reqwest::Method::GET);
        let mut request = client
            .request(method.clone(), url.clone())
            .timeout(job.timeout)
            .header("Idempotency-Key", &job.idempotency_key)
            .header("X-Madeira-Run-Id", &job.run_id)
            .header("X-Madeira-Node", &job.node)
            .header("X-Madeira-Attempt", job.attempt.to_string());
        if let Some(traceparent) = &job.traceparent {
            request = request.header("traceparent", traceparent);
        }
        for (name, value) in &def.headers {
            request = request.header(name, value);
        }
        if let Some(body) = &def.body {
            request = request.json(body);
        } else if method != reqwest::Method::GET {
            request = request.json(&job.input);
        }
        let started = Instant::now();
        let response = tokio::select! {
            r = request.send() => r,
            _ = cancel.cancelled() => return AttemptResult::failure("aborted", false),
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => return AttemptResult::failure(format!("{method} {url}: {}", chain(&e)), true),
        };
        let status = response.status();
        let limit = self.policy.max_response_bytes();
        let body = tokio::select! {
            body = read_capped(response, limit) => body,
            _ = cancel.cancelled() => return AttemptResult::failure("aborted", false),
        };
        let body = match body {
            Ok(body) => body,
            Err(BodyError::TooLarge) if status.is_success() => {
                return AttemptResult::failure(
                    format!(
                        "{method} {url} answered {status} with a body over http_executor.max_response_bytes \
                         ({limit} bytes); return less data or raise the limit in the server config"
                    ),
                    false,
                );
            }
            Err(BodyError::TooLarge) => format!("(body over {limit} bytes, not read)"),
            Err(BodyError::Read(e)) => {
                return AttemptResult::failure(format!("{method} {url}: reading the body: {e}"), true);
            }
        };
        let log = format!(
            "{method} {url} -> {} in {} ms\n{}\n",
            status.as_u16(),
            started.elapsed().as_millis(),
            tail(&body, 4096)
        );
        if status.is_success() {
            let outputs = match serde_json::from_str::<Json>(&body) {
                Ok(Json::Object(map)) => map,
                _ => serde_json::Map::new(),
            };
            AttemptResult::Success { outputs, log }
        } else {
            let retryable = status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408;
            AttemptResult::Failure { error: format!("{method} {url} answered {status}"), retryable, log }
        }
    }
}

enum BodyError {
    TooLarge,
    Read(String),
}

/// Reads the body chunk by chunk, giving up as soon as it passes `limit` bytes
/// (or announces more in `Content-Length`) without holding more than that.
async fn read_capped(mut response: reqwest::Response, limit: u64) -> Result<String, BodyError> {
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| BodyError::Read(chain(&e)))? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// An error with its sources, `a: b: c` (the transport's own text hides the cause).
fn chain(e: &dyn std::error::Error) -> String {
    madeira_core::text::error_chain(e)
}

#[cfg(test)]
mod tests;
