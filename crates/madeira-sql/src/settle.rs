//! The long-transaction check: after a timeout, a cancellation or a lost
//! connection, the session is cancelled on the server, watched in the database's
//! activity view from a separate connection, killed once `grace` is over, and the
//! attempt waits until the view no longer shows it. Every step is written to the
//! attempt log, so why a node is still RUNNING is visible.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use serde_json::{Map, Value as Json};

use crate::backend::{Backend, Source, StmtError};

/// How often the activity view is read while waiting.
const POLL: Duration = Duration::from_millis(200);
/// After a kill, how long the statement and then the session may take to go.
const AFTER_KILL: Duration = Duration::from_secs(10);

type Work<'a> = Pin<Box<dyn Future<Output = Result<Map<String, Json>, StmtError>> + Send + 'a>>;

/// The attempt's log: one line per step, with the time since the attempt began.
pub(crate) struct Log {
    started: Instant,
    lines: Vec<String>,
}

impl Log {
    pub fn new() -> Self {
        Self { started: Instant::now(), lines: Vec::new() }
    }

    pub fn line(&mut self, text: impl AsRef<str>) {
        let at = self.started.elapsed().as_secs_f64();
        tracing::debug!(target: "madeira_sql", "{}", text.as_ref());
        self.lines.push(format!("[sql +{at:.3}s] {}", text.as_ref()));
    }

    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// `2s`, `1500ms`.
pub(crate) fn human(d: Duration) -> String {
    if d.as_millis() >= 1000 && d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Cancels the statement of session `id` while `work` (the statements' future)
/// still runs, then waits for it within `grace`; kills the session after that.
pub(crate) async fn interrupt<D: Backend>(
    d: &Source<D>,
    id: u64,
    mut work: Work<'_>,
    grace: Duration,
    log: &mut Log,
) {
    let mut ctl = match d.control().await {
        Ok(ctl) => Some(ctl),
        Err(e) => {
            log.line(format!("cannot open a control connection: {}", crate::classify::describe(&e)));
            None
        }
    };
    if let Some(ctl) = ctl.as_mut()
        && let Err(e) = d.cancel(ctl, id).await
    {
        log.line(format!("{} failed: {}", d.cancel_sql(id), crate::classify::describe(&e)));
    }
    let until = tokio::time::Instant::now() + grace;
    let mut last = String::new();
    loop {
        tokio::select! {
            _ = &mut work => {
                log.line(format!("session {id}: the statement ended after the cancel"));
                return;
            }
            _ = tokio::time::sleep(POLL) => {}
        }
        if tokio::time::Instant::now() >= until {
            break;
        }
        if let Some(ctl) = ctl.as_mut()
            && let Ok(Some(activity)) = d.activity(ctl, id).await
            && activity.text != last
        {
            log.line(format!(
                "session {id} still in the database after the cancel ({}, {}); waiting up to grace {}",
                if activity.busy { "busy" } else { "idle" },
                activity.text,
                human(grace)
            ));
            last = activity.text;
        }
    }
    log.line(format!("grace {} over: killing session {id} ({})", human(grace), d.kill_sql(id)));
    if let Some(ctl) = ctl.as_mut()
        && let Err(e) = d.kill(ctl, id).await
    {
        log.line(format!("{} failed: {}", d.kill_sql(id), crate::classify::describe(&e)));
    }
    if tokio::time::timeout(AFTER_KILL, &mut work).await.is_err() {
        log.line(format!(
            "session {id}: no answer {} after the kill; dropping the connection",
            human(AFTER_KILL)
        ));
    }
}

/// After the attempt's connection is closed: waits until the activity view no
/// longer shows session `id`, killing it once `grace` is over. An error when the
/// session cannot be seen gone (the attempt must then not be retried).
pub(crate) async fn confirm_gone<D: Backend>(
    d: &Source<D>,
    id: u64,
    grace: Duration,
    log: &mut Log,
) -> Result<(), String> {
    let mut ctl = d.control().await.map_err(|e| {
        format!(
            "cannot check the activity view for session {id} ({}); not retried, so no attempt overlaps it",
            crate::classify::describe(&e)
        )
    })?;
    let started = tokio::time::Instant::now();
    let mut killed = false;
    let mut last = String::new();
    loop {
        match d.activity(&mut ctl, id).await {
            Ok(None) => {
                log.line(format!("session {id} is gone from the activity view"));
                return Ok(());
            }
            Ok(Some(activity)) => {
                if activity.text != last {
                    log.line(format!("session {id} still in the activity view ({})", activity.text));
                    last = activity.text;
                }
            }
            Err(e) => log.line(format!("activity view: {}", crate::classify::describe(&e))),
        }
        let waited = started.elapsed();
        if !killed && waited >= grace {
            log.line(format!("grace {} over: killing session {id} ({})", human(grace), d.kill_sql(id)));
            if let Err(e) = d.kill(&mut ctl, id).await {
                log.line(format!("{} failed: {}", d.kill_sql(id), crate::classify::describe(&e)));
            }
            killed = true;
        }
        if killed && waited >= grace + AFTER_KILL {
            return Err(format!(
                "session {id} is still in the database {} after it was killed; not retried, so no attempt overlaps it",
                human(AFTER_KILL)
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
