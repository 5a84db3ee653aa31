//! The JSON of XXL-JOB's executor protocol (2.3 – 3.x), field names as
//! `xxl-job-core` and pyxxl send them. Executor → admin: `RegistryParam`
//! (`/api/registry`, `/api/registryRemove`) and a list of `HandleCallbackParam`
//! (`/api/callback`; 2.2 executors send `executeResult: {code, msg}` instead of
//! `handleCode`/`handleMsg`). Admin → executor: `TriggerParam` (`/run`),
//! `IdleBeatParam` (`/idleBeat`), `KillParam` (`/kill`), `LogParam` (`/log`), and
//! `/beat` with no body. Every answer is a `ReturnT` (`{code, msg, content}`; 3.3
//! answers `data` instead of `content`).

use serde::{Deserialize, Serialize};

/// `ReturnT.SUCCESS_CODE`.
pub const SUCCESS: i32 = 200;
/// `ReturnT.FAIL_CODE`.
pub const FAIL: i32 = 500;

/// The access-token header (both directions).
pub const TOKEN_HEADER: &str = "XXL-JOB-ACCESS-TOKEN";

/// `/api/registry` and `/api/registryRemove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryParam {
    /// `EXECUTOR` (executors) or `ADMIN` (admin replicas, refused here).
    pub registry_group: String,
    /// The executor app name (`xxl.job.executor.appname`).
    pub registry_key: String,
    /// The executor's address, e.g. `http://10.0.0.7:9999/`.
    pub registry_value: String,
}

/// One element of `/api/callback`'s list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleCallbackParam {
    pub log_id: i64,
    /// Sic: XXL-JOB's field is `logDateTim`.
    #[serde(default)]
    pub log_date_tim: Option<i64>,
    #[serde(default)]
    pub handle_code: Option<i32>,
    #[serde(default)]
    pub handle_msg: Option<String>,
    /// XXL-JOB ≤ 2.2: the result as a `ReturnT`.
    #[serde(default)]
    pub execute_result: Option<ExecuteResult>,
}

/// `executeResult` of a 2.2 callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResult {
    pub code: i32,
    #[serde(default)]
    pub msg: Option<String>,
}

impl HandleCallbackParam {
    /// The handle code (`handleCode`, else `executeResult.code`; neither: a failure).
    pub fn code(&self) -> i32 {
        self.handle_code.or(self.execute_result.as_ref().map(|r| r.code)).unwrap_or(FAIL)
    }

    /// The handle message (`handleMsg`, else `executeResult.msg`).
    pub fn message(&self) -> Option<&str> {
        self.handle_msg.as_deref().or(self.execute_result.as_ref().and_then(|r| r.msg.as_deref()))
    }
}

/// `/run`'s body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerParam {
    /// XXL-JOB's job id (an `int`): the executor keeps one job thread per id.
    pub job_id: i32,
    pub executor_handler: String,
    pub executor_params: String,
    pub executor_block_strategy: String,
    /// Seconds; 0: no timeout on the executor.
    pub executor_timeout: i64,
    pub log_id: i64,
    /// Epoch milliseconds.
    pub log_date_time: i64,
    pub glue_type: String,
    pub glue_source: String,
    pub glue_updatetime: i64,
    pub broadcast_index: i32,
    pub broadcast_total: i32,
}

/// `/idleBeat`'s body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleBeatParam {
    pub job_id: i32,
}

/// `/kill`'s body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KillParam {
    pub job_id: i32,
}

/// `/log`'s body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogParam {
    pub log_date_tim: i64,
    pub log_id: i64,
    /// 1-based.
    pub from_line_num: i32,
}

/// `/log`'s answer content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LogResult {
    #[serde(default)]
    pub from_line_num: i32,
    #[serde(default)]
    pub to_line_num: i32,
    #[serde(default)]
    pub log_content: Option<String>,
    #[serde(default)]
    pub is_end: bool,
}

/// Every answer: `{code, msg, content}` (≤ 3.2) or `{code, msg, data}` (3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReturnT<T> {
    pub code: i32,
    #[serde(default)]
    pub msg: Option<String>,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub content: Option<T>,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
}

impl<T> ReturnT<T> {
    pub fn ok() -> Self {
        Self { code: SUCCESS, msg: None, content: None, data: None }
    }

    pub fn fail(msg: impl Into<String>) -> Self {
        Self { code: FAIL, msg: Some(msg.into()), content: None, data: None }
    }

    /// `content`, else `data`.
    pub fn into_payload(self) -> Option<T> {
        self.content.or(self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_of_both_generations_read_the_same() {
        let new: Vec<HandleCallbackParam> =
            serde_json::from_str(r#"[{"logId":7,"logDateTim":1,"handleCode":500,"handleMsg":"boom"}]"#)
                .unwrap();
        let old: Vec<HandleCallbackParam> =
            serde_json::from_str(r#"[{"logId":7,"logDateTim":1,"executeResult":{"code":500,"msg":"boom"}}]"#)
                .unwrap();
        assert_eq!((new[0].code(), new[0].message()), (500, Some("boom")));
        assert_eq!((old[0].code(), old[0].message()), (500, Some("boom")));
        let bare: HandleCallbackParam = serde_json::from_str(r#"{"logId":7}"#).unwrap();
        assert_eq!(bare.code(), FAIL, "a callback without a code is a failure, never a success");
    }

    #[test]
    fn trigger_param_uses_xxl_job_field_names() {
        let t = TriggerParam {
            job_id: 1,
            executor_handler: "h".into(),
            executor_params: String::new(),
            executor_block_strategy: "SERIAL_EXECUTION".into(),
            executor_timeout: 0,
            log_id: 2,
            log_date_time: 3,
            glue_type: "BEAN".into(),
            glue_source: String::new(),
            glue_updatetime: 0,
            broadcast_index: 0,
            broadcast_total: 1,
        };
        let json = serde_json::to_value(&t).unwrap();
        for field in
            ["jobId", "executorHandler", "executorBlockStrategy", "logDateTime", "glueType", "broadcastTotal"]
        {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
    }

    #[test]
    fn log_answers_of_both_generations_read_the_same() {
        let old: ReturnT<LogResult> = serde_json::from_str(
            r#"{"code":200,"msg":null,"content":{"fromLineNum":1,"toLineNum":2,"logContent":"a\nb\n","isEnd":false}}"#,
        )
        .unwrap();
        let new: ReturnT<LogResult> = serde_json::from_str(
            r#"{"code":200,"data":{"fromLineNum":1,"toLineNum":2,"logContent":"a\nb\n","isEnd":false}}"#,
        )
        .unwrap();
        assert_eq!(old.into_payload(), new.into_payload());
    }
}
