//! Calls to an executor: `/run`, `/beat`, `/idleBeat`, `/kill`, `/log`, each a
//! JSON POST with the app's token, answered by a `ReturnT`.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Xxl;
use crate::protocol::{
    IdleBeatParam, KillParam, LogParam, LogResult, ReturnT, SUCCESS, TOKEN_HEADER, TriggerParam,
};

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// No answer (connection refused, timeout, not JSON): the executor may be dead.
    Unreachable(String),
    /// The executor answered with a code other than 200.
    Refused { code: i32, msg: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(why) => write!(f, "unreachable: {why}"),
            CallError::Refused { code, msg } => write!(f, "answered code {code}: {msg}"),
        }
    }
}

impl Xxl {
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        app: &str,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Option<T>, CallError> {
        let mut req = self.inner.http.post(format!("{address}/{path}")).json(body);
        if let Some(token) = self.token_of(app) {
            req = req.header(TOKEN_HEADER, token).header("XXL-RPC-ACCESS-TOKEN", token);
        }
        let resp = req.send().await.map_err(|e| CallError::Unreachable(e.to_string()))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| CallError::Unreachable(e.to_string()))?;
        let answer: ReturnT<T> = serde_json::from_slice(&bytes).map_err(|e| {
            CallError::Unreachable(format!(
                "HTTP {status}, not a ReturnT: {e}: {}",
                String::from_utf8_lossy(&bytes)
            ))
        })?;
        if answer.code != SUCCESS {
            return Err(CallError::Refused {
                code: answer.code,
                msg: answer.msg.clone().unwrap_or_default(),
            });
        }
        Ok(answer.into_payload())
    }

    pub(crate) async fn run(&self, app: &str, address: &str, t: &TriggerParam) -> Result<(), CallError> {
        self.call::<_, serde_json::Value>(app, address, "run", t).await.map(|_| ())
    }

    pub(crate) async fn beat(&self, app: &str, address: &str) -> Result<(), CallError> {
        self.call::<_, serde_json::Value>(app, address, "beat", &serde_json::json!({})).await.map(|_| ())
    }

    pub(crate) async fn idle_beat(&self, app: &str, address: &str, job_id: i32) -> Result<(), CallError> {
        self.call::<_, serde_json::Value>(app, address, "idleBeat", &IdleBeatParam { job_id })
            .await
            .map(|_| ())
    }

    pub(crate) async fn kill(&self, app: &str, address: &str, job_id: i32) -> Result<(), CallError> {
        self.call::<_, serde_json::Value>(app, address, "kill", &KillParam { job_id }).await.map(|_| ())
    }

    pub(crate) async fn log(&self, app: &str, address: &str, p: &LogParam) -> Result<LogResult, CallError> {
        Ok(self.call::<_, LogResult>(app, address, "log", p).await?.unwrap_or_default())
    }
}
