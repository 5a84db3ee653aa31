//! The decision table of `handle`, with a recording acker and scripted runs.

use std::sync::{Arc, Mutex};

use super::*;
use crate::source::{Acker, SourceError};

fn trigger(extra: &str) -> Arc<MessageTriggerDef> {
    let yaml = format!(
        "flow: f\ntriggers:\n  - message: {{source: pay, queue: q{extra}}}\nnodes:\n  a: {{run: {{builtin: noop}}}}\n"
    );
    let flow = madeira_core::spec::parse_flow("f.yaml", &yaml).expect("valid flow");
    match &flow.triggers[0] {
        madeira_core::TriggerDef::Message(m) => Arc::new((**m).clone()),
        other => panic!("not a message trigger: {other:?}"),
    }
}

#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, s: String) {
        self.0.lock().expect("lock").push(s);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().expect("lock").clone()
    }
}

struct Recorder(Log);

#[async_trait]
impl Acker for Recorder {
    async fn ack(&self) -> Result<(), SourceError> {
        self.0.push("ack".into());
        Ok(())
    }
    async fn retry(&self, delay: Duration, reason: &str, counted: bool) -> Result<(), SourceError> {
        self.0.push(format!("retry {}ms counted={counted} {reason}", delay.as_millis()));
        Ok(())
    }
    async fn dead_letter(&self, reason: &str) -> Result<(), SourceError> {
        self.0.push(format!("dead {reason}"));
        Ok(())
    }
}

struct Scripted {
    answer: Result<Made, Refusal>,
    seen: Log,
}

#[async_trait]
impl Runs for Scripted {
    async fn make(&self, request: RunRequest) -> Result<Made, Refusal> {
        let dated = request.biz_date.map(|d| format!(" @{d}")).unwrap_or_default();
        self.seen.push(format!("{} {}{dated}", request.idempotency_key, request.params));
        self.answer.clone()
    }
}

struct NoteWarnings(Log);

impl Warnings for NoteWarnings {
    fn poison(&self, source: &str, flow: &str, reason: &str) {
        self.0.push(format!("{source}/{flow}: {reason}"));
    }
}

fn delivery(body: &str, deliveries: u32, acks: &Log) -> Delivery {
    Delivery {
        id: "m-1".into(),
        body: body.as_bytes().to_vec(),
        headers: BTreeMap::new(),
        subject: None,
        deliveries,
        acker: Box::new(Recorder(acks.clone())),
    }
}

struct Case {
    handler: Handler,
    runs: Log,
    warnings: Log,
}

fn case(def: Arc<MessageTriggerDef>, answer: Result<Made, Refusal>) -> Case {
    let (runs, warnings) = (Log::default(), Log::default());
    let handler = Handler {
        source: "pay".into(),
        consumer_id: "f#0".into(),
        flow: "f".into(),
        def,
        runs: Arc::new(Scripted { answer, seen: runs.clone() }),
        warnings: Arc::new(NoteWarnings(warnings.clone())),
        statuses: Statuses::default(),
        drop_all: false,
    };
    Case { handler, runs, warnings }
}

#[tokio::test]
async fn a_run_is_acked_after_it_is_made_with_the_mapped_key_and_params() {
    let def = trigger(", key: payload.id, params: {day: payload.d}");
    let c = case(def, Ok(Made::Created("r1".into())));
    let acks = Log::default();
    let outcome = c.handler.handle(delivery(r#"{"id": "p-7", "d": "2026-12-01"}"#, 1, &acks)).await;
    assert_eq!(outcome, Outcome::Run);
    assert_eq!(c.runs.all(), vec![r#"message:pay:p-7 {"day":"2026-12-01"}"#.to_string()]);
    assert_eq!(acks.all(), vec!["ack"]);
}

#[tokio::test]
async fn the_business_date_is_read_from_the_message_and_a_bad_one_is_poison() {
    let def = trigger(", key: payload.id, biz_date: payload.d");
    let c = case(def.clone(), Ok(Made::Created("r1".into())));
    let acks = Log::default();
    let outcome = c.handler.handle(delivery(r#"{"id": "p-7", "d": "2026-12-01"}"#, 1, &acks)).await;
    assert_eq!(outcome, Outcome::Run);
    let made = c.runs.all();
    assert!(
        made.len() == 1 && made[0].starts_with("message:pay:p-7 {") && made[0].ends_with("} @2026-12-01"),
        "{made:?}"
    );
    let c = case(def, Ok(Made::Created("r2".into())));
    let outcome = c.handler.handle(delivery(r#"{"id": "p-8", "d": "12/01/2026"}"#, 1, &acks)).await;
    assert_eq!(outcome, Outcome::DeadLetter);
    assert!(c.runs.all().is_empty(), "no run for a bad date");
}

#[tokio::test]
async fn a_duplicate_is_acked_and_the_default_key_is_the_broker_id() {
    let c = case(trigger(""), Ok(Made::Existing("r1".into())));
    let acks = Log::default();
    assert_eq!(c.handler.handle(delivery(r#"{"a": 1}"#, 2, &acks)).await, Outcome::Duplicate);
    assert_eq!(c.runs.all(), vec![r#"message:pay:m-1 {"a":1}"#.to_string()]);
    assert_eq!(acks.all(), vec!["ack"]);
}

#[tokio::test]
async fn poison_goes_to_the_dead_letter_at_once_with_a_warning() {
    let c = case(trigger(", key: payload.id"), Ok(Made::Created("r".into())));
    let acks = Log::default();
    assert_eq!(c.handler.handle(delivery("not json", 1, &acks)).await, Outcome::DeadLetter);
    assert_eq!(c.handler.handle(delivery(r#"{"no_id": 1}"#, 1, &acks)).await, Outcome::DeadLetter);
    let all = acks.all();
    assert!(all[0].starts_with("dead the body is not JSON"), "{all:?}");
    assert!(all[1].starts_with("dead key:"), "{all:?}");
    assert!(c.runs.all().is_empty(), "no run for poison");
    assert_eq!(c.warnings.all().len(), 2);
    assert!(c.warnings.all()[0].starts_with("pay/f: "));
}

#[tokio::test]
async fn when_false_is_filtered_and_acked() {
    let c = case(trigger(", when: \"payload.amount > 0\""), Ok(Made::Created("r".into())));
    let acks = Log::default();
    assert_eq!(c.handler.handle(delivery(r#"{"amount": 0}"#, 1, &acks)).await, Outcome::Filtered);
    assert_eq!(acks.all(), vec!["ack"]);
    assert!(c.runs.all().is_empty());
}

#[tokio::test]
async fn a_refusal_is_redelivered_then_dead_lettered_on_max_deliveries() {
    let def = trigger(", max_deliveries: 3");
    let c = case(def, Err(Refusal::QueueFull("node a is full".into())));
    let acks = Log::default();
    assert_eq!(c.handler.handle(delivery("{}", 1, &acks)).await, Outcome::Refused);
    assert_eq!(c.handler.handle(delivery("{}", 2, &acks)).await, Outcome::Refused);
    assert_eq!(c.handler.handle(delivery("{}", 3, &acks)).await, Outcome::DeadLetter);
    let all = acks.all();
    assert_eq!(all[0], "retry 1000ms counted=true queue_full: node a is full");
    assert_eq!(all[1], "retry 2000ms counted=true queue_full: node a is full");
    assert!(
        all[2].starts_with("dead queue_full: node a is full (delivery 3 of max_deliveries 3)"),
        "{all:?}"
    );
}

#[tokio::test]
async fn an_unavailable_store_releases_without_counting() {
    let c = case(trigger(""), Err(Refusal::Unavailable("store down".into())));
    let acks = Log::default();
    assert_eq!(c.handler.handle(delivery("{}", 9, &acks)).await, Outcome::Released);
    assert_eq!(acks.all(), vec!["retry 1000ms counted=false store down"]);
}

#[test]
fn rate_limit_delay_follows_the_limiter() {
    assert_eq!(
        refusal_delay(&Refusal::RateLimited(Duration::from_millis(300)), 1),
        Duration::from_millis(300)
    );
    assert_eq!(refusal_delay(&Refusal::OverlapSkipped(String::new()), 10), Duration::from_secs(30));
}
