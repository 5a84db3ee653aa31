//! The flow source edits behind `madeira promote` and `madeira demote` (SPEC §11):
//! turning an observe flow's top-level `observe: true` off (the line becomes a
//! marker comment, so `demote` puts it back where it was) and, when the flow has
//! no cron trigger yet, adding the one its crontab line had. The edits are made
//! on the text so comments and layout survive; the caller parses the result and
//! checks it says what was meant.

/// The comment that replaces `observe: true` in a promoted flow.
pub const MARKER: &str =
    "# observe: true  (turned off by `madeira promote`; `madeira demote` turns it back on)";

/// Whether a top-level line sets `observe` to true.
fn observe_line(line: &str) -> Option<bool> {
    let rest = line.strip_prefix("observe:")?;
    let value = rest.split('#').next().unwrap_or("").trim();
    match value {
        "true" | "True" | "TRUE" | "yes" => Some(true),
        "false" | "False" | "FALSE" | "no" => Some(false),
        _ => None,
    }
}

/// `source` governed: `observe: true` replaced by `MARKER`, and `cron` (expression,
/// timezone) added as a trigger when given.
pub fn governed_source(source: &str, cron: Option<(&str, &str)>) -> Result<String, String> {
    let mut lines: Vec<String> = source.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| observe_line(l) == Some(true)).ok_or_else(|| {
        "the flow has no top-level `observe: true` line to turn off; edit it by hand (drop `observe`) and apply it"
            .to_string()
    })?;
    lines[at] = MARKER.to_string();
    if let Some((expr, timezone)) = cron {
        add_cron(&mut lines, expr, timezone)?;
    }
    Ok(lines.join("\n") + "\n")
}

fn add_cron(lines: &mut Vec<String>, expr: &str, timezone: &str) -> Result<(), String> {
    let expr = serde_json::to_string(expr).map_err(|e| e.to_string())?;
    let timezone = serde_json::to_string(timezone).map_err(|e| e.to_string())?;
    let Some(at) = lines.iter().position(|l| l.starts_with("triggers:")) else {
        lines.push("triggers:".into());
        lines.push(format!("  - cron: {expr}"));
        lines.push(format!("    timezone: {timezone}"));
        return Ok(());
    };
    let value = lines[at]["triggers:".len()..].split('#').next().unwrap_or("").trim().to_string();
    match value.as_str() {
        "" => {
            // The indent of the list's first item, if any.
            let indent = lines[at + 1..]
                .iter()
                .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .filter(|l| l.trim_start().starts_with('-'))
                .map_or(2, |l| l.len() - l.trim_start().len());
            let pad = " ".repeat(indent);
            lines.insert(at + 1, format!("{pad}  timezone: {timezone}"));
            lines.insert(at + 1, format!("{pad}- cron: {expr}"));
            Ok(())
        }
        "[]" => {
            lines[at] = "triggers:".into();
            lines.insert(at + 1, format!("  - cron: {expr}"));
            lines.insert(at + 2, format!("    timezone: {timezone}"));
            Ok(())
        }
        _ => {
            Err("the flow's `triggers:` is written inline; add the cron trigger by hand and apply it".into())
        }
    }
}

/// `source` observe-only again: `MARKER` (or `observe: false`) becomes
/// `observe: true`, else the line is added after `flow:`.
pub fn observed_source(source: &str) -> Result<String, String> {
    let mut lines: Vec<String> = source.lines().map(str::to_string).collect();
    if let Some(at) = lines.iter().position(|l| l == MARKER || observe_line(l) == Some(false)) {
        lines[at] = "observe: true".into();
    } else {
        let at = lines.iter().position(|l| l.starts_with("flow:")).ok_or_else(|| {
            "the flow has no top-level `flow:` line; add `observe: true` by hand and apply it".to_string()
        })?;
        lines.insert(at + 1, "observe: true".into());
    }
    Ok(lines.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBSERVED: &str = "# from /etc/crontab:3\nflow: backup\nobserve: true\ntriggers:\n  - cron: \"0 2 * * *\"\n    timezone: UTC\n    grace: 10m\nnodes:\n  backup:\n    run: {sidecar: {group: cron, job: backup}}\n";

    fn parse(source: &str) -> madeira_core::FlowDef {
        madeira_core::spec::parse_flow("f.yaml", source).unwrap_or_else(|e| panic!("{e}\n{source}"))
    }

    #[test]
    fn promote_then_demote_gives_the_source_back() {
        let governed = governed_source(OBSERVED, None).expect("promote");
        assert!(!parse(&governed).observe);
        assert!(governed.contains(MARKER));
        let observed = observed_source(&governed).expect("demote");
        assert_eq!(observed, OBSERVED);
        assert!(parse(&observed).observe);
    }

    #[test]
    fn a_flow_without_triggers_gets_the_crontab_schedule() {
        let bare = "flow: made-by-exec\nobserve: true\nnodes:\n  job:\n    run: {sidecar: {group: local, job: job}}\n";
        let def = parse(&governed_source(bare, Some(("*/5 * * * *", "Asia/Shanghai"))).expect("promote"));
        let [madeira_core::TriggerDef::Cron(cron)] = def.triggers.as_slice() else {
            panic!("{:?}", def.triggers)
        };
        assert_eq!(
            (cron.expr.as_str(), cron.timezone.as_str(), def.observe),
            ("*/5 * * * *", "Asia/Shanghai", false)
        );
        let listed = "flow: f\nobserve: true\ntriggers:\n- event: x\nnodes:\n  a: {run: {builtin: noop}}\n";
        let def = parse(&governed_source(listed, Some(("0 1 * * *", "UTC"))).expect("promote"));
        assert_eq!(def.triggers.len(), 2);
        let inline = "flow: f\nobserve: true\ntriggers: [{event: x}]\nnodes:\n  a: {run: {builtin: noop}}\n";
        assert!(governed_source(inline, Some(("0 1 * * *", "UTC"))).expect_err("inline").contains("inline"));
    }

    #[test]
    fn sources_that_cannot_be_edited_are_refused_with_the_fix() {
        let governed = "flow: f\nnodes:\n  a: {run: {builtin: noop}}\n";
        assert!(governed_source(governed, None).expect_err("no observe").contains("observe: true"));
        let observed = observed_source(governed).expect("demote adds the line");
        assert!(parse(&observed).observe);
    }
}
