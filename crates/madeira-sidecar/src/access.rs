//! Who may use the exec socket and what they may report (SPEC §11, "Observe").
//! The socket is mode 0660 (owner and `exec_group`); each connection's peer is
//! checked by its credentials (SO_PEERCRED): root, the sidecar's own user, the
//! users of `exec_users` and members of `exec_group` (primary or supplementary
//! group) may report. A report may only name a flow the `observe:` list allows
//! (names, or prefixes ending in `*`; default: the flows named after the declared
//! jobs), and at most `observe_max_flows` distinct flows per sidecar process.
//! Both go to the control plane in the hello, which enforces them too; a flow
//! it refused a report for is refused here from then on, with its reason (so
//! `madeira exec` prints it).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Default cap on distinct observe flows one sidecar reports to.
pub const DEFAULT_MAX_OBSERVE_FLOWS: usize = 100;

/// A flow `madeira exec` may report to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObserveRule {
    Exact(String),
    /// `prefix*`; `*` alone allows every flow.
    Prefix(String),
}

impl ObserveRule {
    pub fn parse(text: &str) -> Self {
        match text.strip_suffix('*') {
            Some(prefix) => ObserveRule::Prefix(prefix.to_string()),
            None => ObserveRule::Exact(text.to_string()),
        }
    }

    /// As written in `observe:` (and sent in the hello).
    pub fn text(&self) -> String {
        match self {
            ObserveRule::Exact(name) => name.clone(),
            ObserveRule::Prefix(prefix) => format!("{prefix}*"),
        }
    }

    fn matches(&self, flow: &str) -> bool {
        match self {
            ObserveRule::Exact(name) => name == flow,
            ObserveRule::Prefix(prefix) => flow.starts_with(prefix.as_str()),
        }
    }
}

/// The exec socket's policy, resolved to numbers.
#[derive(Debug, Clone)]
pub struct ExecPolicy {
    /// Users allowed besides root and the sidecar's own.
    pub uids: Vec<u32>,
    /// Groups whose members are allowed (`exec_group`).
    pub gids: Vec<u32>,
    /// Group given to the socket file (`exec_group`); `None`: the sidecar's.
    pub socket_gid: Option<u32>,
    pub observe: Vec<ObserveRule>,
    pub max_flows: usize,
}

impl ExecPolicy {
    /// Root and the sidecar's own user, reporting to `observe`.
    pub fn owner_only(observe: Vec<ObserveRule>) -> Self {
        Self {
            uids: Vec::new(),
            gids: Vec::new(),
            socket_gid: None,
            observe,
            max_flows: DEFAULT_MAX_OBSERVE_FLOWS,
        }
    }
}

/// The policy plus the flows reported to so far.
pub(crate) struct ExecAccess {
    policy: ExecPolicy,
    own_uid: u32,
    flows: Mutex<HashSet<String>>,
    /// Exec report id → its flow, to name the flow of a refusal.
    sent: Mutex<HashMap<String, String>>,
    /// Flows the control plane refused reports to, with its reason.
    refused: Mutex<HashMap<String, String>>,
}

/// Report ids remembered for naming a refusal's flow.
const SENT_MAX: usize = 10_000;

impl ExecAccess {
    pub fn new(policy: ExecPolicy) -> Self {
        // SAFETY: geteuid(2) has no preconditions and touches no memory.
        let own_uid = unsafe { libc::geteuid() };
        Self {
            policy,
            own_uid,
            flows: Mutex::new(HashSet::new()),
            sent: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
        }
    }

    /// The `observe:` list and `observe_max_flows`, for the hello.
    pub fn declared(&self) -> (Vec<String>, u32) {
        let rules = self.policy.observe.iter().map(ObserveRule::text).collect();
        (rules, u32::try_from(self.policy.max_flows).unwrap_or(u32::MAX))
    }

    /// A report to `flow` went out under `report_id`.
    pub fn sent(&self, report_id: &str, flow: &str) {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        if sent.len() >= SENT_MAX {
            sent.clear();
        }
        sent.insert(report_id.to_string(), flow.to_string());
    }

    /// The control plane refused report `report_id`: its flow is refused here too.
    pub fn refused_by_control_plane(&self, report_id: &str, reason: &str) {
        let flow = self.sent.lock().unwrap_or_else(|p| p.into_inner()).remove(report_id);
        tracing::warn!(report = %report_id, flow = ?flow, "the control plane refused an exec report: {reason}");
        if let Some(flow) = flow {
            self.refused.lock().unwrap_or_else(|p| p.into_inner()).insert(flow, reason.to_string());
        }
    }

    pub fn socket_gid(&self) -> Option<u32> {
        self.policy.socket_gid
    }

    /// Whether the peer (uid, primary gid, pid) may report here.
    pub fn peer_allowed(&self, uid: u32, gid: u32, pid: Option<i32>) -> Result<(), String> {
        if uid == 0 || uid == self.own_uid || self.policy.uids.contains(&uid) {
            return Ok(());
        }
        if !self.policy.gids.is_empty() {
            let mut groups = vec![gid];
            groups.extend(pid.map(supplementary_groups).unwrap_or_default());
            if groups.iter().any(|g| self.policy.gids.contains(g)) {
                return Ok(());
            }
        }
        Err(format!(
            "uid {uid} (gid {gid}) may not report to this sidecar; list the user in `exec_users` or add it \
             to `exec_group` in the sidecar's config"
        ))
    }

    /// Whether a report may name `flow` (already normalized); counts it toward the cap.
    pub fn report_allowed(&self, flow: &str) -> Result<(), String> {
        if let Some(reason) = self.refused.lock().unwrap_or_else(|p| p.into_inner()).get(flow) {
            return Err(format!("the control plane refused reports to `{flow}`: {reason}"));
        }
        if !self.policy.observe.iter().any(|r| r.matches(flow)) {
            return Err(format!(
                "flow `{flow}` is not in this sidecar's `observe:` list; add it (or a prefix ending in `*`) \
                 to report its runs"
            ));
        }
        let mut flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        if !flows.contains(flow) && flows.len() >= self.policy.max_flows {
            return Err(format!(
                "this sidecar already reports to {} observe flows (`observe_max_flows`); `{flow}` refused",
                flows.len()
            ));
        }
        flows.insert(flow.to_string());
        Ok(())
    }
}

/// The supplementary groups of process `pid` (`Groups:` of /proc/PID/status).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect::<Vec<u32>>())
        })
        .unwrap_or_default()
}

/// The flow name the control plane records a report under (`[a-z0-9-]`, at most
/// 63 characters: the same rule as its `flow_name_for`), so the name checked here
/// is the name used there.
pub fn flow_name(raw: &str) -> String {
    let name: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let name = name.trim_matches('-').to_string();
    let name = if name.is_empty() { "exec".to_string() } else { name };
    name.chars().take(63).collect()
}

/// A user name or number from /etc/passwd, as a uid.
pub fn resolve_user(name: &str) -> Result<u32, String> {
    resolve(name, "/etc/passwd", "user")
}

/// A group name or number from /etc/group, as a gid.
pub fn resolve_group(name: &str) -> Result<u32, String> {
    resolve(name, "/etc/group", "group")
}

fn resolve(name: &str, file: &str, what: &str) -> Result<u32, String> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 3 && f[0] == name)
        .and_then(|f| f[2].parse().ok())
        .ok_or_else(|| format!("{what} `{name}` is not in {file}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_the_control_plane_refused_is_refused_here_with_its_reason() {
        let access = access(Vec::new(), Vec::new(), &["cron-*"], 10);
        assert_eq!(access.declared(), (vec!["cron-*".to_string()], 10));
        assert!(access.report_allowed("cron-a").is_ok());
        access.sent("e1-start", "cron-a");
        access.refused_by_control_plane("e1-start", "group `g` already reports to 3 observe flows");
        let err = access.report_allowed("cron-a").expect_err("refused from now on");
        assert!(err.contains("the control plane refused") && err.contains("already reports to 3"), "{err}");
        assert!(access.report_allowed("cron-b").is_ok(), "other flows are still judged on their own");
    }

    fn access(uids: Vec<u32>, gids: Vec<u32>, observe: &[&str], max_flows: usize) -> ExecAccess {
        let observe = observe.iter().map(|r| ObserveRule::parse(r)).collect();
        ExecAccess::new(ExecPolicy { uids, gids, socket_gid: None, observe, max_flows })
    }

    #[test]
    fn root_the_owner_listed_users_and_group_members_may_report() {
        let a = access(vec![1001], vec![4242], &["*"], 10);
        assert!(a.peer_allowed(0, 0, None).is_ok());
        assert!(a.peer_allowed(a.own_uid, 0, None).is_ok());
        assert!(a.peer_allowed(1001, 1001, None).is_ok());
        assert!(a.peer_allowed(1002, 4242, None).is_ok(), "primary group in exec_group");
        let err = a.peer_allowed(65534, 65534, None).expect_err("nobody is refused");
        assert!(err.contains("uid 65534") && err.contains("exec_users"), "{err}");
    }

    #[test]
    fn reports_name_only_allowed_flows_up_to_the_cap() {
        let a = access(Vec::new(), Vec::new(), &["nightly", "report-*"], 2);
        assert!(a.report_allowed("nightly").is_ok());
        let err = a.report_allowed("daily-settlement").expect_err("not listed");
        assert!(err.contains("observe:"), "{err}");
        assert!(a.report_allowed("report-a").is_ok());
        assert!(a.report_allowed("report-a").is_ok(), "a flow already counted is not counted again");
        let err = a.report_allowed("report-b").expect_err("over the cap");
        assert!(err.contains("observe_max_flows"), "{err}");
    }

    #[test]
    fn flow_names_are_normalized_like_the_control_plane() {
        assert_eq!(flow_name("Nightly_Report"), "nightly-report");
        assert_eq!(flow_name("../x"), "x");
        assert_eq!(flow_name("--"), "exec");
    }

    #[test]
    fn users_and_groups_resolve_by_name_or_number() {
        assert_eq!(resolve_user("root"), Ok(0));
        assert_eq!(resolve_user("1234"), Ok(1234));
        assert_eq!(resolve_group("root"), Ok(0));
        assert!(resolve_group("no-such-group-here").is_err());
    }
}
