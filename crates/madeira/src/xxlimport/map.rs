//! XXL-JOB jobs → Madeira flows, pure: one flow per root job (a job no other job
//! lists in `child_jobid`) with its descendants as downstream nodes (strong
//! edges); schedules from Quartz cron (`CRON`, or the older `job_cron`) or
//! `FIX_RATE` seconds; route, block, timeout and retry count carried over; alarm
//! e-mails kept as a note in the description. Each job that cannot be mapped
//! (GLUE, unknown strategy, unmappable schedule, a cycle) is listed with its
//! reason, never dropped. Flows are written in `observe: true` mode: the trigger
//! stays with XXL-JOB until the flow is promoted.

use std::collections::{BTreeMap, BTreeSet};

use madeira_core::{XxlBlock, XxlRoute};

/// A row of `xxl_job_group`.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: i64,
    pub app_name: String,
}

/// A row of `xxl_job_info` (both schema generations).
#[derive(Debug, Clone, Default)]
pub struct Job {
    pub id: i64,
    pub group: i64,
    pub desc: String,
    pub alarm_email: String,
    /// `CRON`, `FIX_RATE`, `NONE` (≥ 2.3); `None` on the older schema.
    pub schedule_type: Option<String>,
    /// The cron or the rate in seconds (≥ 2.3), or the older `job_cron`.
    pub schedule_conf: String,
    /// `DO_NOTHING` or `FIRE_ONCE_NOW` (≥ 2.3).
    pub misfire: Option<String>,
    pub route: String,
    pub handler: String,
    pub param: String,
    pub block: String,
    pub timeout_secs: i64,
    pub retry_count: i64,
    pub glue_type: String,
    pub child_jobid: String,
    pub trigger_status: i64,
}

/// A job not carried over, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub job: i64,
    pub desc: String,
    pub reason: String,
}

/// What an import produced.
#[derive(Debug, Default)]
pub struct Mapped {
    /// `(flow name, YAML)`.
    pub flows: Vec<(String, String)>,
    pub refused: Vec<Refused>,
    /// Things carried over differently, per job.
    pub notes: Vec<String>,
}

/// Quartz cron (6 or 7 fields, seconds first, `1` = Sunday) → Madeira's (6
/// fields, `0` = Sunday; `N/S` steps written `N-max/S`).
pub fn quartz_to_cron(expr: &str) -> Result<String, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let fields = match fields.len() {
        6 => fields,
        7 if fields[6] == "*" || fields[6] == "?" => fields[..6].to_vec(),
        7 => {
            return Err(format!(
                "cron `{expr}` limits the year (`{}`), which Madeira's cron has no field for",
                fields[6]
            ));
        }
        n => return Err(format!("cron `{expr}` has {n} fields; XXL-JOB's Quartz cron has 6 or 7")),
    };
    let max = ["59", "59", "23", "31", "12", "7"];
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let stepped: Vec<String> = f
            .split(',')
            .map(|part| match part.split_once('/') {
                Some((start, step)) if start.chars().all(|c| c.is_ascii_digit()) && !start.is_empty() => {
                    format!("{start}-{}/{step}", max[i])
                }
                _ => part.to_string(),
            })
            .collect();
        let mut field = stepped.join(",");
        if i == 5 {
            field = quartz_dow(&field)?;
        }
        out.push(field);
    }
    Ok(out.join(" "))
}

/// Quartz weekdays 1–7 (Sunday first) → 0–6; names and `?`, `L`, `#n` kept.
fn quartz_dow(field: &str) -> Result<String, String> {
    let shift = |n: &str| -> Result<String, String> {
        match n.parse::<u32>() {
            Ok(d @ 1..=7) => Ok((d - 1).to_string()),
            Ok(d) => Err(format!("weekday {d} is outside Quartz's 1-7")),
            Err(_) => Ok(n.to_string()),
        }
    };
    let mut parts = Vec::new();
    for part in field.split(',') {
        let (days, tail) = match part.find(['#', '/', 'L']) {
            Some(at) => part.split_at(at),
            None => (part, ""),
        };
        let days = match days.split_once('-') {
            Some((a, b)) => format!("{}-{}", shift(a)?, shift(b)?),
            None => shift(days)?,
        };
        parts.push(format!("{days}{tail}"));
    }
    Ok(parts.join(","))
}

/// `FIX_RATE` seconds → a cron, when the rate divides a minute, an hour or a day.
pub fn fix_rate_to_cron(secs: &str) -> Result<String, String> {
    let n: u64 = secs.trim().parse().map_err(|_| format!("FIX_RATE `{secs}` is not a number of seconds"))?;
    match n {
        0 => Err("FIX_RATE 0".to_string()),
        n if n < 60 && 60 % n == 0 => Ok(format!("*/{n} * * * * *")),
        n if n % 60 == 0 && n < 3600 && 60 % (n / 60) == 0 => Ok(format!("0 */{} * * * *", n / 60)),
        n if n % 3600 == 0 && n < 86_400 && 24 % (n / 3600) == 0 => Ok(format!("0 0 */{} * * *", n / 3600)),
        86_400 => Ok("0 0 0 * * *".to_string()),
        n => Err(format!(
            "FIX_RATE {n}s does not divide a minute, an hour or a day evenly, so no cron fires at that rate; \
             pick a rate that does, or write the cron by hand"
        )),
    }
}

fn route_of(wire: &str) -> Option<XxlRoute> {
    XxlRoute::ALL.iter().find(|(_, _, w)| *w == wire).map(|(r, _, _)| *r)
}

fn block_of(wire: &str) -> Option<XxlBlock> {
    XxlBlock::ALL.iter().find(|(_, _, w)| *w == wire).map(|(b, _, _)| *b)
}

fn block_name(b: XxlBlock) -> &'static str {
    XxlBlock::ALL.iter().find(|(x, _, _)| *x == b).map_or("serial", |(_, n, _)| n)
}

/// Why a job cannot run as an `xxl` node, if it cannot.
fn unmappable(job: &Job, groups: &BTreeMap<i64, &Group>) -> Option<String> {
    if job.glue_type != "BEAN" {
        return Some(format!(
            "glue_type {}: GLUE jobs ship source code from the scheduler to the executor, which Madeira never does; \
             move the code into a @XxlJob handler",
            job.glue_type
        ));
    }
    if job.handler.trim().is_empty() {
        return Some("no executor_handler".to_string());
    }
    if !groups.contains_key(&job.group) {
        return Some(format!("job_group {} is not in xxl_job_group", job.group));
    }
    if route_of(&job.route).is_none() {
        return Some(format!("unknown executor_route_strategy `{}`", job.route));
    }
    if block_of(&job.block).is_none() {
        return Some(format!("unknown executor_block_strategy `{}`", job.block));
    }
    None
}

/// The job's schedule as a cron, `None` without one (`NONE`, or only a child).
fn schedule(job: &Job) -> Result<Option<String>, String> {
    match job.schedule_type.as_deref() {
        None | Some("CRON") if !job.schedule_conf.trim().is_empty() => {
            quartz_to_cron(&job.schedule_conf).map(Some)
        }
        Some("FIX_RATE") => fix_rate_to_cron(&job.schedule_conf).map(Some),
        Some("FIX_DELAY") => Err("FIX_DELAY (a delay after each end) has no cron equivalent".to_string()),
        None | Some("NONE") | Some("CRON") => Ok(None),
        Some(other) => Err(format!("unknown schedule_type `{other}`")),
    }
}

fn slug(text: &str) -> String {
    let s: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let parts: Vec<&str> = s.split('-').filter(|p| !p.is_empty()).collect();
    parts.join("-").chars().take(40).collect()
}

fn children(job: &Job) -> Vec<i64> {
    job.child_jobid.split(',').filter_map(|c| c.trim().parse().ok()).collect()
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

/// Maps every job of `groups` (all, or the one app) into flows.
pub fn map(groups: &[Group], jobs: &[Job], app: Option<&str>, timezone: &str) -> Mapped {
    let groups: BTreeMap<i64, &Group> =
        groups.iter().filter(|g| app.is_none_or(|a| g.app_name == a)).map(|g| (g.id, g)).collect();
    let jobs: BTreeMap<i64, &Job> =
        jobs.iter().filter(|j| groups.contains_key(&j.group) || app.is_none()).map(|j| (j.id, j)).collect();
    let mut out = Mapped::default();
    let mut bad: BTreeSet<i64> = BTreeSet::new();
    for job in jobs.values() {
        if let Some(reason) = unmappable(job, &groups) {
            out.refused.push(Refused { job: job.id, desc: job.desc.clone(), reason });
            bad.insert(job.id);
        }
    }
    let parents: BTreeSet<i64> = jobs.values().flat_map(|j| children(j)).collect();
    for root in jobs.values().filter(|j| !parents.contains(&j.id) && !bad.contains(&j.id)) {
        // The root and its descendants, parents before children.
        let mut order: Vec<i64> = vec![root.id];
        let mut edges: Vec<(i64, i64)> = Vec::new();
        let mut i = 0;
        let mut broken: Option<String> = None;
        while i < order.len() {
            let id = order[i];
            for child in jobs.get(&id).map(|j| children(j)).unwrap_or_default() {
                match jobs.get(&child) {
                    None => {
                        out.notes.push(format!("job {id}: child job {child} does not exist; edge dropped"))
                    }
                    Some(_) if bad.contains(&child) => {
                        broken = Some(format!("child job {child} cannot be mapped (listed below)"));
                    }
                    Some(_) => {
                        edges.push((id, child));
                        if !order.contains(&child) {
                            order.push(child);
                        }
                    }
                }
            }
            i += 1;
        }
        if broken.is_none() && has_loop(&order, &edges) {
            broken = Some(format!("the child_jobid chain from job {} loops", root.id));
        }
        let cron = match schedule(root) {
            Ok(cron) => cron,
            Err(why) => {
                out.refused.push(Refused { job: root.id, desc: root.desc.clone(), reason: why });
                continue;
            }
        };
        if let Some(why) = broken {
            out.refused.push(Refused { job: root.id, desc: root.desc.clone(), reason: why });
            continue;
        }
        let app = groups.get(&root.group).map_or("", |g| g.app_name.as_str());
        let name = format!("xxl-{}-{}", slug(app), root.id);
        let mut yaml = format!("flow: {name}\n");
        let mut desc = format!("Imported from XXL-JOB job {} ({})", root.id, root.desc);
        if !root.alarm_email.trim().is_empty() {
            desc.push_str(&format!("; alarm e-mails: {}", root.alarm_email.trim()));
            out.notes.push(format!(
                "job {}: alarm e-mails {} kept as a note; route alerts with `alerts:` in the server config",
                root.id,
                root.alarm_email.trim()
            ));
        }
        yaml.push_str(&format!("description: {}\n", quote(&desc)));
        yaml.push_str(&format!("labels: {{source: xxl-job, xxl_job_id: \"{}\"}}\n", root.id));
        yaml.push_str(
            "# observe: XXL-JOB still triggers this job; remove the line to promote (see docs/xxl-job.md)\n",
        );
        yaml.push_str("observe: true\n");
        if let Some(cron) = &cron {
            let misfire = match root.misfire.as_deref() {
                Some("FIRE_ONCE_NOW") => "run_once",
                _ => "skip",
            };
            yaml.push_str(&format!(
                "triggers:\n  - cron: {}\n    timezone: {timezone}\n    misfire: {misfire}\n",
                quote(cron)
            ));
        }
        if root.trigger_status == 0 {
            out.notes.push(format!(
                "job {}: stopped in XXL-JOB (trigger_status 0); pause flow {name} after applying it",
                root.id
            ));
        }
        yaml.push_str("nodes:\n");
        for id in &order {
            let Some(job) = jobs.get(id) else { continue };
            if *id != root.id && schedule(job).ok().flatten().is_some() && job.trigger_status == 1 {
                out.notes.push(format!(
                    "job {id}: has its own schedule in XXL-JOB besides running after job(s) {:?}; in {name} it runs after them only",
                    edges.iter().filter(|(_, c)| c == id).map(|(p, _)| *p).collect::<Vec<_>>()
                ));
            }
            yaml.push_str(&node_yaml(job, app, &edges));
        }
        out.flows.push((name, yaml));
    }
    for job in jobs.values().filter(|j| parents.contains(&j.id) && !bad.contains(&j.id)) {
        let owners = out.flows.iter().filter(|(_, y)| y.contains(&format!("\n  j{}:\n", job.id))).count();
        if owners == 0 {
            out.refused.push(Refused {
                job: job.id,
                desc: job.desc.clone(),
                reason: "only reachable through a child_jobid loop or an unmappable parent".to_string(),
            });
        }
    }
    out
}

/// True when `edges` over `nodes` hold a cycle (Kahn's sort leaves nodes over).
fn has_loop(nodes: &[i64], edges: &[(i64, i64)]) -> bool {
    let mut indegree: BTreeMap<i64, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    for (_, c) in edges {
        *indegree.entry(*c).or_default() += 1;
    }
    let mut ready: Vec<i64> = indegree.iter().filter(|(_, d)| **d == 0).map(|(n, _)| *n).collect();
    let mut seen = 0;
    while let Some(n) = ready.pop() {
        seen += 1;
        for (_, c) in edges.iter().filter(|(p, _)| *p == n) {
            if let Some(d) = indegree.get_mut(c) {
                *d -= 1;
                if *d == 0 {
                    ready.push(*c);
                }
            }
        }
    }
    seen < indegree.len()
}

fn node_yaml(job: &Job, app: &str, edges: &[(i64, i64)]) -> String {
    let mut y = format!("  j{}:\n", job.id);
    let parents: Vec<String> =
        edges.iter().filter(|(_, c)| *c == job.id).map(|(p, _)| format!("j{p}")).collect();
    if !parents.is_empty() {
        y.push_str(&format!("    needs: [{}]\n", parents.join(", ")));
    }
    if job.timeout_secs > 0 {
        y.push_str(&format!("    timeout: {}s\n", job.timeout_secs));
    }
    if job.retry_count > 0 {
        y.push_str(&format!("    retry: {{attempts: {}}}\n", job.retry_count + 1));
    }
    let route = route_of(&job.route).map_or("first", XxlRoute::name);
    let block = block_of(&job.block).map_or("serial", block_name);
    let mut run = format!("app: {app}, handler: {}, route: {route}, block: {block}", quote(&job.handler));
    if !job.param.is_empty() {
        run.push_str(&format!(", params: {}", quote(&job.param)));
    }
    if job.timeout_secs > 0 {
        run.push_str(&format!(", timeout: {}s", job.timeout_secs));
    }
    y.push_str(&format!("    run: {{xxl: {{{run}}}}}\n"));
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartz_crons_convert() {
        assert_eq!(quartz_to_cron("0 0/5 * * * ?").unwrap(), "0 0-59/5 * * * ?");
        assert_eq!(quartz_to_cron("0 15 10 ? * 6#3").unwrap(), "0 15 10 ? * 5#3", "Quartz 6 is Friday");
        assert_eq!(quartz_to_cron("0 0 2 ? * 2-6 *").unwrap(), "0 0 2 ? * 1-5");
        assert_eq!(quartz_to_cron("0 0 2 ? * MON-FRI").unwrap(), "0 0 2 ? * MON-FRI");
        assert!(quartz_to_cron("0 0 2 * * ? 2027").is_err());
        assert!(quartz_to_cron("0 2 * *").is_err());
    }

    #[test]
    fn fix_rates_convert_when_they_divide_a_period() {
        assert_eq!(fix_rate_to_cron("30").unwrap(), "*/30 * * * * *");
        assert_eq!(fix_rate_to_cron("300").unwrap(), "0 */5 * * * *");
        assert_eq!(fix_rate_to_cron("7200").unwrap(), "0 0 */2 * * *");
        assert!(fix_rate_to_cron("7").is_err());
        assert!(fix_rate_to_cron("abc").is_err());
    }
}
