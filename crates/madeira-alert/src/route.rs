//! Routing (SPEC §7): routes are tried in order; a route matches when every
//! `match` entry equals the alert's flow label of that name (`flow`, `node` and
//! `alertname` match the alert's own fields when the flow has no such label) and
//! its `severity` list, if any, holds the alert's severity. The first match wins
//! unless it says `continue: true`. Without any route, every channel gets every
//! alert. Mentions: the channel's own plus the matching routes'.

use crate::config::{ChannelSpec, Route};
use crate::model::Alert;
use crate::render::Mentions;

#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<Route>,
    channels: Vec<(String, Vec<String>)>,
}

impl Router {
    pub fn new(routes: Vec<Route>, channels: &[ChannelSpec]) -> Self {
        Self { routes, channels: channels.iter().map(|c| (c.name.clone(), c.mentions.clone())).collect() }
    }

    /// The channels `alert` goes to, each with who to mention.
    pub fn route(&self, alert: &Alert) -> Vec<(String, Mentions)> {
        let mut picked: Vec<(String, Vec<String>)> = Vec::new();
        if self.routes.is_empty() {
            picked = self.channels.iter().map(|(name, _)| (name.clone(), Vec::new())).collect();
        }
        for route in &self.routes {
            if !matches(route, alert) {
                continue;
            }
            for channel in &route.channels {
                match picked.iter_mut().find(|(name, _)| name == channel) {
                    Some((_, mentions)) => mentions.extend(route.mentions.iter().cloned()),
                    None => picked.push((channel.clone(), route.mentions.clone())),
                }
            }
            if !route.continue_matching {
                break;
            }
        }
        picked
            .into_iter()
            .map(|(name, mut mentions)| {
                if let Some((_, own)) = self.channels.iter().find(|(n, _)| *n == name) {
                    mentions.splice(0..0, own.iter().cloned());
                }
                (name, Mentions::parse(&mentions))
            })
            .collect()
    }
}

fn matches(route: &Route, alert: &Alert) -> bool {
    if let Some(severities) = &route.severities
        && !severities.contains(&alert.severity)
    {
        return false;
    }
    route.matchers.iter().all(|(key, want)| {
        let have = alert.labels.get(key).map(String::as_str).or(match key.as_str() {
            "flow" => alert.flow.as_deref(),
            "node" => alert.node.as_deref(),
            "alertname" => Some(alert.alertname.as_str()),
            _ => None,
        });
        have == Some(want.as_str())
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{AlertStatus, Severity};

    fn alert(team: &str, severity: Severity) -> Alert {
        Alert {
            id: "a".into(),
            key: "k".into(),
            alertname: "MadeiraRunFailed".into(),
            severity,
            status: AlertStatus::Pending,
            flow: Some("settle".into()),
            node: Some("pull".into()),
            labels: BTreeMap::from([("team".to_string(), team.to_string())]),
            summary: String::new(),
            description: None,
            causes: vec![],
            runs: vec![],
            count: 1,
            fixed: 0,
            created_at: 0,
            notify_at: 0,
            updated_at: 0,
            resolved_at: None,
            fallback_note: None,
            resolution: None,
            recovered_by: None,
            resolved_by_run: None,
            moved: None,
            announced_at: None,
            announced_count: None,
            acknowledged: None,
            silenced: None,
            added: 0,
            holds: Vec::new(),
            holds_changes: 0,
            announced_holds: None,
            holds_added: 0,
        }
    }

    fn route(matchers: &[(&str, &str)], severity: Option<Severity>, channels: &[&str], cont: bool) -> Route {
        Route {
            matchers: matchers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            severities: severity.map(|s| vec![s]),
            channels: channels.iter().map(|c| c.to_string()).collect(),
            mentions: vec!["13800000000".into()],
            continue_matching: cont,
        }
    }

    #[test]
    fn first_match_wins_unless_continue() {
        let routes = vec![
            route(&[("team", "fin")], None, &["fin"], false),
            route(&[], Some(Severity::Critical), &["pager"], true),
            route(&[("flow", "settle")], None, &["ops"], false),
        ];
        let router = Router::new(routes, &[]);
        let names = |a: &Alert| router.route(a).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(&alert("fin", Severity::Critical)), ["fin"]);
        assert_eq!(names(&alert("ops", Severity::Critical)), ["pager", "ops"]);
        assert_eq!(names(&alert("ops", Severity::Warning)), ["ops"]);
        assert_eq!(router.route(&alert("fin", Severity::Warning))[0].1.mobiles, ["13800000000"]);
    }
}
