//! Calendars through the engine's handle: the server's calendars as flows see
//! them, applying a calendar file (audited), and reading the applied ones again
//! (every replica, every few seconds), each change rescheduling every flow.

use std::sync::Arc;

use crate::{ApplyOutcome, EngineError, EngineHandle, now_ms};

impl EngineHandle {
    /// The server's calendars (cron triggers' `calendar:`, CEL date functions).
    pub fn calendars(&self) -> Arc<madeira_calendar::Calendars> {
        self.flows.calendars()
    }

    /// Where the calendar `name` comes from (built in, config, applied).
    pub fn calendar_origin(&self, name: &str) -> Option<crate::CalendarOrigin> {
        self.flows.calendar_origin(name)
    }

    /// Validates and stores a calendar file (one `calendar: NAME` definition),
    /// audited `calendar_apply` by `actor`; the schedules of every flow are
    /// looked at again when it changed.
    pub async fn apply_calendar(
        &self,
        file: &str,
        source: &str,
        actor: &str,
    ) -> Result<ApplyOutcome, EngineError> {
        madeira_core::text::check_text(file, source).map_err(EngineError::BadText)?;
        let outcome = self.flows.apply_calendar(self.store.as_ref(), file, source).await?;
        let audit = madeira_store::AuditRecord {
            at: now_ms(),
            actor: actor.to_string(),
            action: "calendar_apply".to_string(),
            run_id: None,
            node: None,
            reason: None,
            details: Some(serde_json::json!({
                "calendar": outcome.flow, "version": outcome.version, "created": outcome.created
            })),
        };
        self.store.commit(&madeira_store::Batch { audit: vec![audit], ..Default::default() }).await?;
        if outcome.created {
            self.reschedule_all().await;
        }
        Ok(outcome)
    }

    /// Reads the applied calendars from the store (the source across replicas);
    /// when they changed, every flow's schedule is looked at again.
    pub async fn refresh_calendars(&self) -> Result<bool, EngineError> {
        let changed = self.flows.refresh_calendars(self.store.as_ref()).await?;
        if changed {
            self.reschedule_all().await;
        }
        Ok(changed)
    }

    /// Refreshes the applied calendars every `every` until cancelled.
    pub async fn watch_calendars(
        self,
        every: std::time::Duration,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.refresh_calendars().await {
                        tracing::debug!(error = %e, "cannot read the applied calendars; trying again");
                    }
                }
            }
        }
    }

    /// Tells the scheduler every flow's schedule may have changed.
    async fn reschedule_all(&self) {
        if let Ok(flows) = self.store.list_flows().await {
            for flow in flows {
                let _ = self.flow_changes.send(flow.name);
            }
        }
    }
}
