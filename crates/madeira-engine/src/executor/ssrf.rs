//! Which addresses the `http` executor may call, and how much it reads back.
//! Cloud metadata endpoints and link-local addresses are refused unless
//! explicitly allowed (HTTP-task SSRF is a known CVE class in XXL-JOB), and so are
//! loopback ones unless the process is `dev` or the host is listed in
//! `allow_hosts`; an allowlist, when given, limits targets further.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Default cap on a response body: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1024 * 1024;

/// The server config's `http_executor:` section.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPolicy {
    /// Host names or IP addresses (exact), or `*.suffix`; empty = any host. A host
    /// listed exactly may be loopback or link-local.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Allow link-local and cloud-metadata addresses (off by default).
    #[serde(default)]
    pub allow_link_local: bool,
    /// Largest response body read (default 1 MiB); a longer one fails the attempt.
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// Allow loopback targets without listing them: set by `madeira dev`, which
    /// serves on loopback only; never from a config file.
    #[serde(skip)]
    pub allow_loopback: bool,
}

impl HttpPolicy {
    /// Whether the host name itself is allowed.
    pub fn host_allowed(&self, host: &str) -> bool {
        self.allow_hosts.is_empty() || self.matches(host)
    }

    /// Whether `host` matches an `allow_hosts` entry.
    fn matches(&self, host: &str) -> bool {
        let host = bare(host);
        self.allow_hosts.iter().any(|pattern| {
            let pattern = bare(pattern);
            match pattern.strip_prefix("*.") {
                Some(suffix) => host.ends_with(&format!(".{suffix}")),
                None => pattern == host,
            }
        })
    }

    /// Whether `host` is listed exactly (no wildcard) in `allow_hosts`.
    fn listed_exactly(&self, host: &str) -> bool {
        let host = bare(host);
        self.allow_hosts.iter().any(|pattern| bare(pattern) == host)
    }

    /// The cap on a response body.
    pub fn max_response_bytes(&self) -> u64 {
        self.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES)
    }

    /// Why `host`, resolved to `ip`, may not be called, if it may not.
    pub fn refuse_addr(&self, host: &str, ip: IpAddr) -> Option<String> {
        if self.listed_exactly(host) {
            return None;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        if !self.allow_link_local && is_link_local(ip) {
            return Some(format!(
                "link-local and cloud-metadata addresses are refused; list `{}` in \
                 http_executor.allow_hosts of the server config if this is really wanted",
                bare(host)
            ));
        }
        if !self.allow_loopback && (ip.is_loopback() || ip.is_unspecified()) {
            return Some(format!(
                "loopback addresses are refused in `serve`; list `{}` in http_executor.allow_hosts \
                 of the server config if this is really wanted",
                bare(host)
            ));
        }
        None
    }
}

fn bare(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local() || is_metadata_v4(v4),
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

fn is_metadata_v4(ip: Ipv4Addr) -> bool {
    // 169.254.169.254 is link-local already; Alibaba Cloud uses 100.100.100.200.
    ip == Ipv4Addr::new(100, 100, 100, 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(p: &HttpPolicy, host: &str, ip: &str) -> bool {
        p.refuse_addr(host, ip.parse().expect("ip")).is_some()
    }

    #[test]
    fn metadata_and_link_local_are_refused_by_default() {
        let p = HttpPolicy::default();
        for ip in ["169.254.169.254", "100.100.100.200", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254"]
        {
            assert!(refused(&p, "h", ip), "{ip} should be refused");
        }
        assert!(!refused(&p, "h", "10.0.0.1"));
        let open = HttpPolicy { allow_link_local: true, ..HttpPolicy::default() };
        assert!(!refused(&open, "h", "169.254.169.254"));
    }

    #[test]
    fn loopback_is_refused_unless_dev_or_listed() {
        let serve = HttpPolicy::default();
        for ip in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::"] {
            assert!(refused(&serve, "localhost", ip), "{ip} should be refused");
        }
        let why = serve.refuse_addr("localhost", "127.0.0.1".parse().expect("ip")).expect("refused");
        assert!(why.contains("list `localhost` in http_executor.allow_hosts"), "{why}");
        let dev = HttpPolicy { allow_loopback: true, ..HttpPolicy::default() };
        assert!(!refused(&dev, "localhost", "127.0.0.1"));
        assert!(refused(&dev, "h", "169.254.169.254"), "dev still refuses metadata");
        let listed =
            HttpPolicy { allow_hosts: vec!["127.0.0.1".into(), "*.corp".into()], ..Default::default() };
        assert!(!refused(&listed, "127.0.0.1", "127.0.0.1"));
        // A wildcard entry does not open loopback: `evil.corp` may resolve to 127.0.0.1.
        assert!(refused(&listed, "evil.corp", "127.0.0.1"));
    }

    #[test]
    fn allowlist_matches_exact_and_suffix() {
        let p =
            HttpPolicy { allow_hosts: vec!["recon.internal".into(), "*.corp".into()], ..Default::default() };
        assert!(p.host_allowed("recon.internal"));
        assert!(p.host_allowed("a.b.corp"));
        assert!(!p.host_allowed("corp"));
        assert!(!p.host_allowed("evil.example"));
    }

    #[test]
    fn response_cap_defaults_to_one_mebibyte() {
        assert_eq!(HttpPolicy::default().max_response_bytes(), 1024 * 1024);
        let p: HttpPolicy = serde_saphyr::from_str("max_response_bytes: 2048").expect("parses");
        assert_eq!(p.max_response_bytes(), 2048);
        assert!(serde_saphyr::from_str::<HttpPolicy>("allow_loopback: true").is_err(), "not settable");
    }
}
