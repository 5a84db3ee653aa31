//! Which addresses the `http` executor may call. Cloud metadata endpoints and
//! link-local addresses are refused unless explicitly allowed (HTTP-task SSRF is a
//! known CVE class in XXL-JOB); an allowlist, when given, limits targets further.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The server config's `http:` section for the http executor.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPolicy {
    /// Host names or IP addresses (exact), or `*.suffix`; empty = any host.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Allow link-local and cloud-metadata addresses (off by default).
    #[serde(default)]
    pub allow_link_local: bool,
}

impl HttpPolicy {
    /// Whether the host name itself is allowed.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        self.allow_hosts.is_empty()
            || self.allow_hosts.iter().any(|pattern| {
                let pattern = pattern.to_ascii_lowercase();
                match pattern.strip_prefix("*.") {
                    Some(suffix) => host.ends_with(&format!(".{suffix}")),
                    None => pattern == host,
                }
            })
    }

    /// Why the resolved address may not be called, if it may not.
    pub fn refuse_addr(&self, ip: IpAddr) -> Option<&'static str> {
        if self.allow_link_local {
            return None;
        }
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local() || is_metadata_v4(v4),
            IpAddr::V6(v6) => {
                is_link_local_v6(v6)
                    || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
                    || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_link_local() || is_metadata_v4(v4))
            }
        };
        link_local.then_some(
            "link-local and cloud-metadata addresses are refused; set http.allow_link_local in the \
             server config if this is really wanted",
        )
    }
}

fn is_metadata_v4(ip: Ipv4Addr) -> bool {
    // 169.254.169.254 is link-local already; Alibaba Cloud uses 100.100.100.200.
    ip == Ipv4Addr::new(100, 100, 100, 200)
}

fn is_link_local_v6(ip: Ipv6Addr) -> bool {
    (ip.segments()[0] & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_and_link_local_are_refused_by_default() {
        let p = HttpPolicy::default();
        for ip in ["169.254.169.254", "100.100.100.200", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254"]
        {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(p.refuse_addr(ip).is_some(), "{ip} should be refused");
        }
        assert!(p.refuse_addr("10.0.0.1".parse().expect("ip")).is_none());
        let open = HttpPolicy { allow_link_local: true, ..HttpPolicy::default() };
        assert!(open.refuse_addr("169.254.169.254".parse().expect("ip")).is_none());
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
}
