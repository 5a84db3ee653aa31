//! Builtin executors for tests and demos: noop (succeeds at once and prints
//! nothing), sleep and fail (optionally failing only the first `times` attempts).

use madeira_core::model::{BuiltinDef, BuiltinKind};
use tokio_util::sync::CancellationToken;

use super::AttemptResult;

pub(super) async fn run(def: &BuiltinDef, attempt: u32, cancel: &CancellationToken) -> AttemptResult {
    match &def.kind {
        BuiltinKind::Noop => AttemptResult::Success { outputs: def.outputs.clone(), log: String::new() },
        BuiltinKind::Sleep(duration) => {
            tokio::select! {
                _ = tokio::time::sleep(*duration) => AttemptResult::Success {
                    outputs: def.outputs.clone(),
                    log: format!("slept {} ms\n", duration.as_millis()),
                },
                _ = cancel.cancelled() => AttemptResult::failure("aborted", false),
            }
        }
        BuiltinKind::Fail { message, times } => match times {
            Some(times) if attempt > *times => AttemptResult::Success {
                outputs: def.outputs.clone(),
                log: format!("attempt {attempt} succeeds after {times} failure(s)\n"),
            },
            _ => AttemptResult::Failure {
                error: message.clone(),
                retryable: true,
                log: format!("{message}\n"),
            },
        },
    }
}
