//! One attempt of a SQL node, for either database (`Backend`): wait for a pooled
//! connection within the timeout, open a transaction with the server-side statement
//! timeout, run the statements, commit. A timeout, a cancellation or a lost
//! connection hand the session to `settle`, and the attempt is classified only once
//! the database shows the session gone.

use std::time::{Duration, Instant};

use madeira_core::model::SqlDef;
use madeira_engine::{AttemptResult, Job};
use serde_json::{Map, Value as Json};
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, Conn, Source, StmtError};
use crate::classify::{Class, classify, describe};
use crate::settle::{self, Log};
use crate::{Datasource, Pool};

/// How long past the timeout the client waits before cancelling on its own, in
/// case the server-side timeout does not fire (MySQL 8 times out only SELECTs).
const CLIENT_MARGIN: Duration = Duration::from_millis(500);
/// Bound on a COMMIT or ROLLBACK.
const FINISH_LIMIT: Duration = Duration::from_secs(10);

pub(crate) async fn run(
    ds: &Datasource,
    def: &SqlDef,
    job: &Job,
    cancel: &CancellationToken,
) -> AttemptResult {
    match &ds.pool {
        Pool::Pg(pg) => drive(pg, ds, def, job, cancel).await,
        Pool::My(my) => drive(my, ds, def, job, cancel).await,
    }
}

/// Counts a held connection for the pool gauges until dropped.
struct InUse<'a>(&'a Datasource);

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.0.leave_use();
    }
}

enum Ended {
    Finished(Result<Map<String, Json>, StmtError>),
    Cancelled,
    TimedOut,
}

async fn drive<D: Backend>(
    d: &Source<D>,
    ds: &Datasource,
    def: &SqlDef,
    job: &Job,
    cancel: &CancellationToken,
) -> AttemptResult {
    let mut log = Log::new();
    let started = Instant::now();
    let deadline = tokio::time::Instant::from_std(started + job.timeout);
    let binds = match crate::binds::evaluate(def, job) {
        Ok(b) => b,
        Err(e) => return AttemptResult::failure(e, false),
    };
    ds.enter_wait();
    let acquired = tokio::select! {
        c = d.acquire() => c,
        _ = cancel.cancelled() => {
            ds.leave_wait();
            return AttemptResult::failure("cancelled while waiting for a connection", false);
        }
        _ = tokio::time::sleep_until(deadline) => {
            ds.leave_wait();
            return AttemptResult::failure(
                format!(
                    "timed out after {} waiting for a connection of datasource `{}` (max_connections {}, all in use)",
                    settle::human(job.timeout), ds.name, ds.max_connections
                ),
                true,
            );
        }
    };
    let mut conn = match acquired {
        Ok(c) => c,
        Err(e) => {
            ds.leave_wait();
            let retryable = classify(&e) != Class::Permanent;
            return AttemptResult::failure(
                ds.scrub(&format!("datasource `{}`: {}", ds.name, describe(&e))),
                retryable,
            );
        }
    };
    ds.wait_to_use();
    let _in_use = InUse(ds);
    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
    if remaining.is_zero() {
        return AttemptResult::failure(format!("timed out after {}", settle::human(job.timeout)), true);
    }
    let id = match d.begin(&mut conn, remaining, ds.read_only).await {
        Ok(id) => id,
        Err(e) => {
            let class = classify(&e);
            d.close(conn).await;
            return AttemptResult::failure(ds.scrub(&describe(&e)), class != Class::Permanent);
        }
    };
    log.line(format!("session {id}: statement timeout {} set in the database", settle::human(remaining)));
    let mut work = d.statements(&mut conn, def, &binds);
    let ended = tokio::select! {
        r = &mut work => Ended::Finished(r),
        _ = cancel.cancelled() => Ended::Cancelled,
        _ = tokio::time::sleep_until(deadline + CLIENT_MARGIN) => Ended::TimedOut,
    };
    let (why, retryable) = match ended {
        Ended::Finished(result) => {
            drop(work);
            match result {
                // MySQL's SLEEP() returns 1 when interrupted: past the timeout, the
                // statement did not finish on its own, so it is a timeout.
                Ok(_) if started.elapsed() >= job.timeout => {
                    let _ = tokio::time::timeout(FINISH_LIMIT, d.finish(&mut conn, false)).await;
                    let why = format!(
                        "timed out after {}: interrupted in the database",
                        settle::human(job.timeout)
                    );
                    log.line(&why);
                    (why, !cancel.is_cancelled())
                }
                Ok(outputs) => return commit(d, ds, conn, outputs, log).await,
                Err(StmtError::Output(e)) => {
                    let _ = tokio::time::timeout(FINISH_LIMIT, d.finish(&mut conn, false)).await;
                    log.line(&e);
                    return AttemptResult::Failure { error: e, retryable: false, log: log.text() };
                }
                Err(StmtError::Db(e)) => match classify(&e) {
                    Class::Cancelled => {
                        let why = if cancel.is_cancelled() {
                            "cancelled".to_string()
                        } else {
                            format!(
                                "timed out after {}: cancelled by the database's statement timeout",
                                settle::human(job.timeout)
                            )
                        };
                        log.line(format!("{why} ({})", ds.scrub(&describe(&e))));
                        (why, !cancel.is_cancelled())
                    }
                    Class::Connection => {
                        let why = ds.scrub(&format!("connection lost: {}", describe(&e)));
                        log.line(&why);
                        (why, true)
                    }
                    class => {
                        let why = ds.scrub(&describe(&e));
                        log.line(&why);
                        let rolled_back = matches!(
                            tokio::time::timeout(FINISH_LIMIT, d.finish(&mut conn, false)).await,
                            Ok(Ok(()))
                        );
                        if rolled_back {
                            return AttemptResult::Failure {
                                error: why,
                                retryable: class == Class::Retryable,
                                log: log.text(),
                            };
                        }
                        (why, class == Class::Retryable)
                    }
                },
            }
        }
        Ended::Cancelled | Ended::TimedOut => {
            let why = if cancel.is_cancelled() {
                "cancelled".to_string()
            } else {
                format!("timed out after {}", settle::human(job.timeout))
            };
            log.line(format!("{why}: cancelling the statement in the database ({})", d.cancel_sql(id)));
            settle::interrupt(d, id, work, def.grace, &mut log).await;
            (why, !cancel.is_cancelled())
        }
    };
    d.close(conn).await;
    match settle::confirm_gone(d, id, def.grace, &mut log).await {
        Ok(()) => AttemptResult::Failure { error: why, retryable, log: log.text() },
        Err(e) => {
            let error = format!("{why}; {e}");
            log.line(&error);
            AttemptResult::Failure { error, retryable: false, log: log.text() }
        }
    }
}

async fn commit<D: Backend>(
    d: &Source<D>,
    ds: &Datasource,
    mut conn: Conn<D>,
    outputs: Map<String, Json>,
    mut log: Log,
) -> AttemptResult {
    match tokio::time::timeout(FINISH_LIMIT, d.finish(&mut conn, true)).await {
        Ok(Ok(())) => {
            log.line("committed");
            AttemptResult::Success { outputs, log: log.text() }
        }
        Ok(Err(e)) => {
            let class = classify(&e);
            let why = ds.scrub(&format!("commit failed: {}", describe(&e)));
            d.close(conn).await;
            log.line(&why);
            AttemptResult::Failure { error: why, retryable: class != Class::Permanent, log: log.text() }
        }
        Err(_) => {
            d.close(conn).await;
            let why = "commit did not answer within 10s; the outcome is unknown".to_string();
            log.line(&why);
            AttemptResult::Failure { error: why, retryable: false, log: log.text() }
        }
    }
}
