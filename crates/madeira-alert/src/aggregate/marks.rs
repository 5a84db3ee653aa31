//! Operators' marks on an open alert (issue #33 item 8): an acknowledgement ("I
//! am on it") stops its reminders while updates still tell what grew; a silence
//! holds every update and reminder until its end (then the alert is announced
//! as it stands, if it grew). Neither hides the alert nor its resolution. A
//! mark on an alert that is not open is refused, never stored.

use crate::AlertError;
use crate::model::{AlertStatus, Mark};

use super::{Aggregator, Changes};

/// What an operator asked of an alert.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    Acknowledge,
    /// Until `Mark::until`; one in the past lifts a silence.
    Silence,
}

impl Aggregator {
    /// Puts `mark` on the open alert `id`.
    pub fn mark(
        &mut self,
        id: &str,
        kind: MarkKind,
        mark: Mark,
        out: &mut Changes,
    ) -> Result<(), AlertError> {
        let alert = self.alerts.get_mut(id).ok_or_else(|| AlertError::NotOpen(id.to_string()))?;
        if alert.status == AlertStatus::Resolved {
            return Err(AlertError::NotOpen(id.to_string()));
        }
        alert.updated_at = mark.at;
        match kind {
            MarkKind::Acknowledge => alert.acknowledged = Some(mark),
            MarkKind::Silence if mark.until.is_some_and(|u| u > mark.at) => alert.silenced = Some(mark),
            MarkKind::Silence => alert.silenced = None,
        }
        out.touched.push(id.to_string());
        self.reschedule(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Intervals;
    use crate::model::{Cause, Failure};

    const MIN: i64 = 60_000;

    fn agg() -> Aggregator {
        Aggregator::with_intervals(Intervals {
            group_wait_ms: MIN,
            group_interval_ms: 5 * MIN,
            repeat_interval_ms: 240 * MIN,
        })
    }

    fn failure(run: &str) -> Failure {
        Failure {
            run_id: run.into(),
            flow: "settle".into(),
            labels: Default::default(),
            causes: vec![Cause {
                node: "pay".into(),
                error: Some("exit code 2".into()),
                attempts: 1,
                skipped: vec![],
            }],
        }
    }

    fn mark(at: i64, until: Option<i64>) -> Mark {
        Mark { by: "ops".into(), at, reason: "on it".into(), until }
    }

    fn fired(a: &mut Aggregator) -> String {
        let mut out = Changes::default();
        a.failure(failure("r1"), 0, &mut out);
        a.flush_due(MIN, &mut out);
        out.fire.pop().expect("fired")
    }

    #[test]
    fn an_acknowledged_alert_is_not_reminded_but_still_updated_when_it_grows() {
        let mut a = agg();
        let id = fired(&mut a);
        a.mark(&id, MarkKind::Acknowledge, mark(2 * MIN, None), &mut Changes::default()).expect("open");
        let mut out = Changes::default();
        a.flush_due(MIN + 240 * MIN, &mut out);
        assert!(out.remind.is_empty(), "no reminder once acknowledged: {out:?}");
        a.failure(failure("r2"), 300 * MIN, &mut out);
        a.flush_due(310 * MIN, &mut out);
        assert_eq!(out.update, vec![id.clone()], "it grew: the update goes out");
        assert_eq!(a.get(&id).and_then(|x| x.acknowledged.as_ref()).map(|m| m.by.as_str()), Some("ops"));
    }

    #[test]
    fn a_silenced_alert_says_nothing_until_the_silence_ends() {
        let mut a = agg();
        let id = fired(&mut a);
        a.mark(&id, MarkKind::Silence, mark(2 * MIN, Some(120 * MIN)), &mut Changes::default())
            .expect("open");
        let mut out = Changes::default();
        a.failure(failure("r2"), 3 * MIN, &mut out);
        a.flush_due(100 * MIN, &mut out);
        assert!(out.update.is_empty() && out.remind.is_empty(), "silenced: {out:?}");
        a.flush_due(121 * MIN, &mut out);
        assert_eq!(out.update, vec![id], "after the silence the growth is told");
    }

    #[test]
    fn a_mark_on_an_unknown_or_resolved_alert_is_refused() {
        let mut a = agg();
        let err = a.mark("nope", MarkKind::Acknowledge, mark(0, None), &mut Changes::default());
        assert!(matches!(err, Err(AlertError::NotOpen(_))));
    }
}
