//! Bind values of one attempt: each `params` CEL expression evaluated over the
//! job's `params` and `nodes` (and `biz_date`), plus `run_id`, `idempotency_key` and `biz_date`. Values are
//! only ever bound as parameters, never spliced into the SQL text.

use std::collections::BTreeMap;

use madeira_core::model::SqlDef;
use madeira_engine::Job;
use serde_json::Value as Json;

/// Largest bind value, as JSON text.
const MAX_BIND_BYTES: usize = 1024 * 1024;

/// Every value the statements may bind, by name.
pub(crate) fn evaluate(def: &SqlDef, job: &Job) -> Result<BTreeMap<String, Json>, String> {
    let null = Json::Null;
    let params = job.input.get("params").unwrap_or(&null);
    let nodes = job.input.get("nodes").unwrap_or(&null);
    let biz_date = job.input.get("biz_date").unwrap_or(&null);
    let mut out = BTreeMap::new();
    for (name, expr) in &def.params {
        let value =
            expr.eval_dated(params, nodes, biz_date.as_str()).map_err(|e| format!("params.{name}: {e}"))?;
        let size = serde_json::to_string(&value).map(|s| s.len()).unwrap_or(0);
        if size > MAX_BIND_BYTES {
            return Err(format!("params.{name} is {size} bytes; at most {MAX_BIND_BYTES} are bound"));
        }
        out.insert(name.clone(), value);
    }
    out.insert("run_id".into(), Json::String(job.run_id.clone()));
    out.insert("idempotency_key".into(), Json::String(job.idempotency_key.clone()));
    out.insert("biz_date".into(), biz_date.clone());
    Ok(out)
}

/// The values for `names` (placeholder order), or which one is missing.
pub(crate) fn ordered<'a>(
    values: &'a BTreeMap<String, Json>,
    names: &[String],
) -> Result<Vec<&'a Json>, String> {
    names
        .iter()
        .map(|n| values.get(n).ok_or_else(|| format!("`:{n}` has no value; add it to `params`")))
        .collect()
}
