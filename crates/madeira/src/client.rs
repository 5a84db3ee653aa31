//! A small HTTP client for the control plane's API: bearer token, JSON in and out,
//! `https://` with the system's roots or `--ca-file`, and the API's `{"error": …}`
//! turned into a readable message. A password in `--server` never appears in an
//! error: messages show the URL with it masked.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::cli::ServerArgs;

pub struct Client {
    base: String,
    /// `base` with any password masked, for messages.
    shown: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// A response with its status (for 200-vs-201 and exit codes).
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Client {
    pub fn new(args: &ServerArgs) -> Result<Self> {
        Self::build(args, reqwest::Client::builder().timeout(Duration::from_secs(30)))
    }

    /// A client for long-lived answers (`logs -f`): no limit on the whole answer,
    /// but one on silence (the server sends a keep-alive every 10 s).
    pub fn streaming(args: &ServerArgs) -> Result<Self> {
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(35));
        Self::build(args, builder)
    }

    fn build(args: &ServerArgs, mut builder: reqwest::ClientBuilder) -> Result<Self> {
        if let Some(path) = &args.ca_file {
            builder = builder.tls_certs_only(ca_certs(path)?);
        }
        let http = builder.build()?;
        let base = server_base(&args.server)?;
        Ok(Self { shown: redact(&base), base, token: args.token.clone(), http })
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
        headers: &[(&str, String)],
    ) -> Result<Reply> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        req = match body {
            Some(Body::Json(v)) => req.json(&v),
            Some(Body::Yaml(text)) => req.header("content-type", "application/yaml").body(text),
            None => req,
        };
        let shown = format!("{}/api/v1{path}", self.shown);
        let resp = req.send().await.map_err(|e| {
            let cause = cause(e);
            anyhow!(
                "{method} {shown}: {cause} (is the control plane running? set --server or MADEIRA_SERVER)"
            )
        })?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| anyhow!("{method} {shown}: reading the answer: {}", e.without_url()))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(Reply { status, body });
        }
        let message =
            body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| body.to_string());
        let mut full = format!("{} {}: {message}", status.as_u16(), status.canonical_reason().unwrap_or(""));
        if let Some(errors) = body["error"]["details"]["errors"].as_array() {
            for e in errors {
                full.push_str(&format!("\n  {}", e.as_str().unwrap_or("")));
            }
        }
        Err(anyhow!(full))
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        Ok(self.call(Method::GET, path, None, &[]).await?.body)
    }

    /// GET `path` and hand back the answer unread (its body is a stream); an error
    /// says whether the API refused (worth no retry) or the connection failed.
    pub async fn open(&self, path: &str, headers: &[(&str, String)]) -> Result<reqwest::Response, Opening> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = self.http.get(&url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let shown = format!("{}/api/v1{path}", self.shown);
        let link = |e| Opening::Link(anyhow!("GET {shown}: {}", cause(e)));
        let mut resp = req.send().await.map_err(link)?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(link)? {
            body.extend_from_slice(&chunk);
            if body.len() > 64 * 1024 {
                break;
            }
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let message = body["error"]["message"].as_str().map_or_else(|| body.to_string(), str::to_string);
        let error = anyhow!("{} {}: {message}", status.as_u16(), status.canonical_reason().unwrap_or(""));
        Err(if status.is_server_error() { Opening::Link(error) } else { Opening::Api(error) })
    }
}

/// The error and its sources on one line, without the URL (which may hold a password).
pub fn cause(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut cause = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        cause.push_str(&format!(": {s}"));
        source = s.source();
    }
    cause
}

/// The API's base URL from `--server`, without a trailing `/`. A query or a
/// fragment is refused (the API paths go after it, and a `?token=` there would
/// be sent and printed): the message shows the URL with its secrets masked.
fn server_base(server: &str) -> Result<String> {
    let base = server.trim_end_matches('/');
    if let Some(at) = base.find(['?', '#']) {
        let what = if base[at..].starts_with('?') { "query" } else { "fragment" };
        bail!(
            "--server/MADEIRA_SERVER `{}` has a {what}; give the control plane's address only \
             (e.g. http://127.0.0.1:7070) and the token with --token or MADEIRA_TOKEN",
            redact(server)
        );
    }
    Ok(base.to_string())
}

/// `url` with its secrets masked: the password of its user info
/// (`http://u:***@host`; a user info without a password may be a token, so it
/// is masked whole), the values of query parameters named like a secret
/// (`?token=***`, `password`, `secret`, `key`, `auth`, `sig`), and a fragment.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let start = scheme_end + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let authority = match authority.rfind('@') {
        Some(at) => {
            let masked = match authority[..at].split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{masked}{}", &authority[at..])
        }
        None => authority.to_string(),
    };
    let tail = &rest[authority_end..];
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((before, _)) => (before, "#***"),
        None => (tail, ""),
    };
    let tail = match before_fragment.split_once('?') {
        Some((path, query)) => format!("{path}?{}", redact_query(query)),
        None => before_fragment.to_string(),
    };
    format!("{}{authority}{tail}{fragment}", &url[..start])
}

/// `a=1&token=***`: the values of parameters named like a secret masked.
fn redact_query(query: &str) -> String {
    const SECRET: [&str; 6] = ["token", "pass", "secret", "key", "auth", "sig"];
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if SECRET.iter().any(|s| name.to_ascii_lowercase().contains(s)) => {
                format!("{name}=***")
            }
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The certificates of `--ca-file`: the only roots trusted then.
fn ca_certs(path: &Path) -> Result<Vec<reqwest::Certificate>> {
    let pem = crate::files::read_bytes(path, crate::files::Confine::Anywhere)
        .context("--ca-file/MADEIRA_CA_FILE")?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .with_context(|| format!("--ca-file/MADEIRA_CA_FILE: {} is not PEM", path.display()))?;
    if certs.is_empty() {
        bail!("--ca-file/MADEIRA_CA_FILE: {} holds no certificate", path.display());
    }
    Ok(certs)
}

/// Why `Client::open` gave no stream.
pub enum Opening {
    /// The API answered with a client error (unknown run, no permission).
    Api(anyhow::Error),
    /// The connection failed or the server had a problem: worth another try.
    Link(anyhow::Error),
}

pub enum Body {
    Json(Value),
    Yaml(String),
}

#[cfg(test)]
mod tests {
    use super::{redact, server_base};

    #[test]
    fn a_server_url_with_a_query_or_fragment_is_refused_without_its_secrets() {
        assert_eq!(server_base("http://madeira:7070/").expect("plain"), "http://madeira:7070");
        for url in
            ["http://127.0.0.1:1/?token=Secret", "http://u:Secret@h/#Secret", "http://h?key=Secret&a=1"]
        {
            let err = server_base(url).expect_err("refused").to_string();
            assert!(!err.contains("Secret"), "{err}");
            assert!(err.contains("--token"), "{err}");
        }
    }

    #[test]
    fn passwords_in_server_urls_are_masked() {
        assert_eq!(redact("http://h:1/?token=Secret&a=1"), "http://h:1/?token=***&a=1");
        assert_eq!(
            redact("postgres://h/db?sslmode=require&password=pw"),
            "postgres://h/db?sslmode=require&password=***"
        );
        assert_eq!(redact("http://u:pw@h/p#frag"), "http://u:***@h/p#***");
        assert_eq!(redact("http://h?Access_Token=x"), "http://h?Access_Token=***");
        assert_eq!(redact("https://sre:s3cret@madeira:7070/x"), "https://sre:***@madeira:7070/x");
        assert_eq!(redact("http://tok3n@madeira"), "http://***@madeira");
        assert_eq!(redact("http://madeira:7070/a@b"), "http://madeira:7070/a@b");
        assert_eq!(redact("http://u:p:q@h?x=1"), "http://u:***@h?x=1");
        assert_eq!(redact("not a url"), "not a url");
    }
}
