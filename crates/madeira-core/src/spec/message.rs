//! Message triggers (SPEC §6.1): `message: {source, queue|stream|…, key, params,
//! when, biz_date, max_in_flight, max_deliveries, on_paused}` — CEL compiled here with its
//! line; the source name and the fields its type needs are checked against the
//! server's `sources:` by `check_sources` when the flow is applied.

use crate::expr::MessageExpr;
use crate::model::{FlowDef, MessageTriggerDef, OnPaused, TriggerDef};

use super::raw::{RawMessageTrigger, Span};
use super::report::{At, Report, did_you_mean, line_of, one_of};
use super::{SpecError, SpecErrors};

/// Unacknowledged messages per trigger when `max_in_flight` is not given.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 64;
/// Deliveries of a refused message before it is dead-lettered.
pub const DEFAULT_MAX_DELIVERIES: u32 = 5;
/// The source types and the fields each needs (and allows).
pub const SOURCE_TYPES: &[&str] = &["rabbitmq", "nats", "redis_streams"];

pub(crate) const ON_PAUSED: &[&str] = &["queue", "drop"];

pub(crate) fn message_trigger(
    report: &mut Report,
    at: At<'_>,
    raw: &Span<RawMessageTrigger>,
) -> Option<MessageTriggerDef> {
    let at = at.at(raw);
    let m = &raw.value;
    let text =
        |v: &Option<Span<String>>| v.as_ref().map(|s| s.value.trim().to_string()).filter(|s| !s.is_empty());
    let Some(source) = &m.source else {
        report.push(
            at,
            "a `message` trigger needs `source`, the name of a `sources:` entry of the server config",
        );
        return None;
    };
    let mut ok = true;
    let mut expr =
        |report: &mut Report, field: &str, value: &Span<String>| match MessageExpr::compile(&value.value) {
            Ok(e) => Some(e),
            Err(e) => {
                report.push(at.at(value), format!("message `{field}` is not valid CEL: {e}"));
                ok = false;
                None
            }
        };
    let key = m.key.as_ref().and_then(|k| expr(report, "key", k));
    let when = m.when.as_ref().and_then(|w| expr(report, "when", w));
    let biz_date = m.biz_date.as_ref().and_then(|b| expr(report, "biz_date", b));
    let mut params = Vec::new();
    if let Some(map) = &m.params {
        for (name, value) in &map.value {
            if let Some(e) = expr(report, &format!("params.{name}"), value) {
                params.push((name.clone(), e));
            }
        }
    }
    let max_in_flight = match &m.max_in_flight {
        Some(v) => report.limit(at, "max_in_flight", v, 1),
        None => Some(DEFAULT_MAX_IN_FLIGHT),
    };
    let max_deliveries = match &m.max_deliveries {
        Some(v) => report.limit(at, "max_deliveries", v, 1),
        None => Some(DEFAULT_MAX_DELIVERIES),
    };
    let on_paused = match m.on_paused.as_ref().map(|p| (p, p.value.trim())) {
        None | Some((_, "queue")) => Some(OnPaused::Queue),
        Some((_, "drop")) => Some(OnPaused::Drop),
        Some((span, other)) => {
            let hint = did_you_mean(other, ON_PAUSED.iter().copied());
            report
                .push(at.at(span), format!("unknown `on_paused` `{other}`{hint}; use {}", one_of(ON_PAUSED)));
            None
        }
    };
    let name = source.value.trim();
    if name.is_empty() {
        report.push(at.at(source), "`source` is empty; name a `sources:` entry of the server config");
        return None;
    }
    let def = MessageTriggerDef {
        source: name.to_string(),
        line: line_of(source),
        queue: text(&m.queue),
        exchange: text(&m.exchange),
        binding_key: text(&m.binding_key),
        stream: text(&m.stream),
        consumer: text(&m.consumer),
        subject: text(&m.subject),
        group: text(&m.group),
        key,
        params,
        when,
        biz_date,
        max_in_flight: max_in_flight?,
        max_deliveries: max_deliveries?,
        on_paused: on_paused?,
    };
    ok.then_some(def)
}

/// Checks every message trigger of `def` against the configured sources:
/// `source_type(name)` answers a source's type (`rabbitmq`, `nats`,
/// `redis_streams`) or `None` when no such source is configured. Errors carry
/// the line of the trigger's `source:`.
pub fn check_sources(file: &str, def: &FlowDef, known: &[(String, String)]) -> Result<(), SpecErrors> {
    let mut errors = Vec::new();
    for trigger in &def.triggers {
        let TriggerDef::Message(m) = trigger else { continue };
        let mut push = |message: String| {
            errors.push(SpecError { file: file.to_string(), line: m.line, node: None, message })
        };
        let Some((_, kind)) = known.iter().find(|(name, _)| *name == m.source) else {
            let names: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
            let hint = did_you_mean(&m.source, names.iter().copied());
            let configured = if names.is_empty() {
                "the server config has no `sources:`".to_string()
            } else {
                format!("configured: {}", names.join(", "))
            };
            push(format!("unknown message source `{}`{hint}; {configured}", m.source));
            continue;
        };
        for problem in fields_problems(kind, m) {
            push(problem);
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

/// What a trigger on a source of type `kind` lacks or has too much of.
fn fields_problems(kind: &str, m: &MessageTriggerDef) -> Vec<String> {
    let given = |name: &'static str, v: &Option<String>| v.as_ref().map(|_| name);
    let all = [
        given("queue", &m.queue),
        given("exchange", &m.exchange),
        given("binding_key", &m.binding_key),
        given("stream", &m.stream),
        given("consumer", &m.consumer),
        given("subject", &m.subject),
        given("group", &m.group),
    ];
    let (needed, allowed): (&[&str], &[&str]) = match kind {
        "rabbitmq" => (&["queue"], &["queue", "exchange", "binding_key"]),
        "nats" => (&["stream", "consumer"], &["stream", "consumer", "subject"]),
        "redis_streams" => (&["stream", "group"], &["stream", "group"]),
        other => return vec![format!("source `{}` has unknown type `{other}`", m.source)],
    };
    let present: Vec<&str> = all.into_iter().flatten().collect();
    let mut out = Vec::new();
    for need in needed {
        if !present.contains(need) {
            out.push(format!("source `{}` is {kind}: the trigger needs `{need}`", m.source));
        }
    }
    for field in &present {
        if !allowed.contains(field) {
            out.push(format!(
                "source `{}` is {kind}: `{field}` does not apply (use {})",
                m.source,
                one_of(allowed)
            ));
        }
    }
    if kind == "rabbitmq" && m.exchange.is_some() != m.binding_key.is_some() {
        out.push(format!("source `{}`: `exchange` and `binding_key` go together", m.source));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_flow;

    const FLOW: &str = "flow: settle\ntriggers:\n  - message:\n      source: payments\n      queue: pay.succeeded\n      key: payload.payment_id\n      params: {date: payload.biz_date}\n      when: \"payload.amount > 0\"\nnodes:\n  a: {run: {builtin: noop}}\n";

    #[test]
    fn parses_a_message_trigger_with_defaults() {
        let flow = parse_flow("f.yaml", FLOW).expect("valid");
        let TriggerDef::Message(m) = &flow.triggers[0] else { panic!("message trigger") };
        assert_eq!(m.source, "payments");
        assert_eq!(m.queue.as_deref(), Some("pay.succeeded"));
        assert_eq!(m.line, Some(4));
        assert_eq!((m.max_in_flight, m.max_deliveries, m.on_paused), (64, 5, OnPaused::Queue));
        assert_eq!(m.params[0].0, "date");
        assert!(m.biz_date.is_none());
        let dated = FLOW.replace("      when:", "      biz_date: payload.biz_date\n      when:");
        let flow2 = parse_flow("f.yaml", &dated).expect("valid");
        let TriggerDef::Message(m2) = &flow2.triggers[0] else { panic!("message trigger") };
        assert_eq!(m2.biz_date.as_ref().map(|e| e.source()), Some("payload.biz_date"));
        let known = [("payments".to_string(), "rabbitmq".to_string())];
        assert!(check_sources("f.yaml", &flow, &known).is_ok());
    }

    #[test]
    fn bad_cel_and_unknown_sources_name_their_line() {
        let bad =
            FLOW.replace("payload.amount > 0", "payload.amount >").replace("payload.payment_id", "params.x");
        let errors = parse_flow("f.yaml", &bad).expect_err("invalid").to_string();
        assert!(errors.contains("f.yaml:6: message `key` is not valid CEL"), "{errors}");
        assert!(errors.contains("f.yaml:8: message `when` is not valid CEL"), "{errors}");
        let flow = parse_flow("f.yaml", FLOW).expect("valid");
        let known = [("payment".to_string(), "rabbitmq".to_string())];
        let e = check_sources("f.yaml", &flow, &known).expect_err("unknown").to_string();
        assert!(e.starts_with("f.yaml:4: unknown message source `payments`"), "{e}");
        assert!(e.contains("did you mean `payment`"), "{e}");
        let nats = [("payments".to_string(), "nats".to_string())];
        let e = check_sources("f.yaml", &flow, &nats).expect_err("fields").to_string();
        assert!(e.contains("needs `stream`") && e.contains("`queue` does not apply"), "{e}");
        let paused = FLOW.replace("queue: pay.succeeded", "queue: q\n      on_paused: dorp");
        let e = parse_flow("f.yaml", &paused).expect_err("on_paused").to_string();
        assert!(e.contains("unknown `on_paused` `dorp`"), "{e}");
    }
}
