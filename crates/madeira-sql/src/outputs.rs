//! A SQL node's outputs from the rows of its last statement, bounded: the first
//! row's columns, up to `max_rows` rows, or the affected count; more than
//! `MAX_OUTPUT_BYTES` of JSON is an error that says how to select less.

use madeira_core::model::SqlOutputs;
use serde_json::{Map, Value as Json};

use crate::MAX_OUTPUT_BYTES;

/// Rows gathered so far.
pub(crate) struct Collector {
    mode: SqlOutputs,
    rows: Vec<Map<String, Json>>,
    bytes: usize,
    truncated: bool,
}

impl Collector {
    pub fn new(mode: SqlOutputs) -> Self {
        Self { mode, rows: Vec::new(), bytes: 0, truncated: false }
    }

    /// How many rows to read at most (one more than kept, to see truncation).
    pub fn wanted(&self) -> usize {
        match self.mode {
            SqlOutputs::FirstRow => 1,
            SqlOutputs::Rows(n) => n as usize + 1,
            SqlOutputs::Affected => 0,
        }
    }

    /// Adds a row; `Ok(false)` once no more rows are wanted.
    pub fn push(&mut self, row: Map<String, Json>) -> Result<bool, String> {
        let keep = match self.mode {
            SqlOutputs::FirstRow => 1,
            SqlOutputs::Rows(n) => n as usize,
            SqlOutputs::Affected => 0,
        };
        if self.rows.len() >= keep {
            self.truncated = true;
            return Ok(false);
        }
        self.bytes += serde_json::to_string(&row).map(|s| s.len() + 1).unwrap_or(0);
        if self.bytes > MAX_OUTPUT_BYTES {
            return Err(format!(
                "the outputs are over the {} KiB output limit after {} rows; select fewer rows or columns \
                 (or lower `max_rows`)",
                MAX_OUTPUT_BYTES / 1024,
                self.rows.len() + 1
            ));
        }
        self.rows.push(row);
        Ok(self.rows.len() < self.wanted())
    }

    /// The node's outputs.
    pub fn finish(self, affected: u64) -> Map<String, Json> {
        match self.mode {
            SqlOutputs::FirstRow => self.rows.into_iter().next().unwrap_or_default(),
            SqlOutputs::Rows(_) => {
                let mut out = Map::new();
                out.insert("count".into(), Json::from(self.rows.len()));
                out.insert("truncated".into(), Json::Bool(self.truncated));
                out.insert("rows".into(), Json::Array(self.rows.into_iter().map(Json::Object).collect()));
                out
            }
            SqlOutputs::Affected => {
                let mut out = Map::new();
                out.insert("affected".into(), Json::from(affected));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Json) -> Map<String, Json> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn rows_are_bounded_by_count_and_bytes() {
        let mut c = Collector::new(SqlOutputs::Rows(2));
        assert_eq!(c.push(row(json!({"a": 1}))), Ok(true));
        assert_eq!(c.push(row(json!({"a": 2}))), Ok(true));
        assert_eq!(c.push(row(json!({"a": 3}))), Ok(false));
        assert_eq!(
            Json::Object(c.finish(0)),
            json!({"count": 2, "truncated": true, "rows": [{"a": 1}, {"a": 2}]})
        );
        let mut c = Collector::new(SqlOutputs::Rows(1000));
        let big = "x".repeat(1000);
        let e = (0..100).find_map(|_| c.push(row(json!({"v": big}))).err()).expect("over the limit");
        assert!(e.contains("64 KiB output limit"), "{e}");
        let mut first = Collector::new(SqlOutputs::FirstRow);
        assert_eq!(first.push(row(json!({"total": 5}))), Ok(false));
        assert_eq!(Json::Object(first.finish(0)), json!({"total": 5}));
    }
}
