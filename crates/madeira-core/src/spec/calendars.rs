//! Calendar names a flow uses, checked on apply against the server's calendars
//! (the flow file alone cannot know them): each cron trigger's `calendar:` and
//! the calendar names CEL expressions give as literals (`cal.add(d, 1,
//! "cn-workdays")` in `when`, routing rules, message `key`/`when`). An unknown
//! name is a `FILE:LINE` error with a suggestion.

use madeira_calendar::Calendars;

use crate::model::{FlowDef, TriggerDef};

use super::report::did_you_mean;
use super::{SpecError, SpecErrors};

/// Every calendar name `def` uses that `calendars` does not know, as errors.
pub fn check_calendars(file: &str, def: &FlowDef, calendars: &Calendars) -> Result<(), SpecErrors> {
    let known: Vec<&str> = calendars.names().collect();
    let mut errors = Vec::new();
    let mut unknown = |name: &str, line: Option<usize>, node: Option<&str>, place: &str| {
        if calendars.get(name).is_some() {
            return;
        }
        errors.push(SpecError {
            file: file.to_string(),
            line,
            node: node.map(str::to_string),
            message: format!(
                "{place}unknown calendar `{name}`{}; the server has: {}",
                did_you_mean(name, known.iter().copied()),
                known.join(", ")
            ),
        });
    };
    for trigger in &def.triggers {
        match trigger {
            TriggerDef::Cron(c) => {
                if let Some(cal) = &c.calendar {
                    unknown(&cal.name, cal.line, None, "");
                }
            }
            TriggerDef::Message(m) => {
                for expr in m.key.iter().chain(&m.when) {
                    for name in expr.calendar_names() {
                        unknown(name, m.line, None, "message trigger: ");
                    }
                }
            }
            TriggerDef::Event { .. } | TriggerDef::FlowSucceeded { .. } => {}
        }
    }
    for after in &def.after {
        if let Some(name) = after.calendar.as_deref() {
            unknown(name, after.line, None, "after: ");
        }
    }
    if let Some(name) = def.business.rule.calendar.as_deref() {
        unknown(name, def.business.calendar_lines.0, None, "biz_date: ");
    }
    if let Some(name) = def.business.deadline.as_ref().and_then(|d| d.calendar.as_deref()) {
        unknown(name, def.business.calendar_lines.1, None, "deadline: ");
    }
    for node in &def.nodes {
        for name in node.when.iter().flat_map(|w| w.calendar_names()) {
            unknown(name, None, Some(&node.id), "`when`: ");
        }
    }
    for rule in def.routing.iter().flat_map(|r| &r.rules) {
        for name in rule.when.calendar_names() {
            unknown(name, None, None, "routing rule: ");
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

#[cfg(test)]
mod tests {
    use madeira_calendar::Calendars;

    use super::check_calendars;
    use crate::spec::parse_flow;

    #[test]
    fn unknown_calendars_in_triggers_and_expressions_name_their_place() {
        let source = "flow: f\ntriggers:\n  - cron: \"5 1 * * *\"\n    calendar: cn-workday\nnodes:\n  a: {run: {builtin: noop}}\n  b:\n    needs: [a]\n    when: 'cal.is_business_day(\"2026-02-14\", \"sse\")'\n    run: {builtin: noop}\n";
        let def = parse_flow("f.yaml", source).expect("parses");
        let errors = check_calendars("f.yaml", &def, &Calendars::builtin()).expect_err("unknown").to_string();
        assert!(
            errors.contains("f.yaml:4: unknown calendar `cn-workday`; did you mean `cn-workdays`?"),
            "{errors}"
        );
        assert!(errors.contains("node b: `when`: unknown calendar `sse`"), "{errors}");
        let sse =
            madeira_calendar::parse_definitions("name: sse\nbase: cn-workdays\nexclude_weekends: true\n")
                .expect("definition");
        let with_sse = Calendars::builtin().extend(sse).expect("resolves");
        let errors = check_calendars("f.yaml", &def, &with_sse).expect_err("still cn-workday").to_string();
        assert!(!errors.contains("`sse`"), "{errors}");
    }

    #[test]
    fn unknown_calendars_of_biz_date_and_deadline_name_their_line() {
        let source = "flow: f\ntimezone: UTC\nbiz_date:\n  offset: -1\n  calendar: cn-workday\n\
                      deadline: {by: \"06:00\", calendar: plant}\nnodes:\n  a: {run: {builtin: noop}}\n";
        let def = parse_flow("f.yaml", source).expect("parses");
        let errors = check_calendars("f.yaml", &def, &Calendars::builtin()).expect_err("unknown").to_string();
        assert!(errors.contains("f.yaml:5: biz_date: unknown calendar `cn-workday`"), "{errors}");
        assert!(errors.contains("f.yaml:6: deadline: unknown calendar `plant`"), "{errors}");
    }
}
