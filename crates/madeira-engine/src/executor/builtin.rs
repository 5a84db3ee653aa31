//! Builtin executors for tests and demos: noop (succeeds at once and prints
//! nothing), sleep and fail (optionally failing only the first `times` attempts).

use std::time::Duration;

use madeira_core::model::{BuiltinDef, BuiltinKind};
use serde_json::{Map, Value as Json};
use tokio_util::sync::CancellationToken;

use super::AttemptResult;

/// How a builtin's attempt ends: at once (noop; fail, which fails or, after its
/// `times`, succeeds), or after a sleep.
pub(super) enum Ending {
    Now(AttemptResult),
    After(Duration, Map<String, Json>),
}

pub(super) fn ending(def: &BuiltinDef, attempt: u32) -> Ending {
    match &def.kind {
        BuiltinKind::Noop => {
            Ending::Now(AttemptResult::Success { outputs: def.outputs.clone(), log: String::new() })
        }
        BuiltinKind::Sleep(duration) => Ending::After(*duration, def.outputs.clone()),
        BuiltinKind::Fail { message, times } => Ending::Now(match times {
            Some(times) if attempt > *times => AttemptResult::Success {
                outputs: def.outputs.clone(),
                log: format!("attempt {attempt} succeeds after {times} failure(s)\n"),
            },
            _ => AttemptResult::Failure {
                error: message.clone(),
                retryable: true,
                log: format!("{message}\n"),
            },
        }),
    }
}

pub(super) async fn run(def: &BuiltinDef, attempt: u32, cancel: &CancellationToken) -> AttemptResult {
    match ending(def, attempt) {
        Ending::Now(result) => result,
        Ending::After(duration, outputs) => {
            tokio::select! {
                _ = tokio::time::sleep(duration) => AttemptResult::Success {
                    outputs,
                    log: format!("slept {} ms\n", duration.as_millis()),
                },
                _ = cancel.cancelled() => AttemptResult::failure("aborted", false),
            }
        }
    }
}
