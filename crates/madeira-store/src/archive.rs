//! The run archive's document: a finished run's nodes, attempts, node outputs and
//! packed transition rows, folded into one `run_archive` row by the archiver
//! (`sql/archive.rs`) and unfolded back into rows when the run is claimed again.
//!
//! The document is MessagePack (`rmp-serde`, structs as arrays: no field names)
//! of the rows as they are stored, times as offsets from the run's creation, then
//! LZ4-compressed (`lz4_flex`, block format). It starts with a two-byte tag
//! (`MAGIC`) and the length of the uncompressed document (little-endian `u32`),
//! which is bounded (`MAX_DOC`) before anything is allocated. Anything that does
//! not decode is a corrupt row (`StoreError::Corrupt`), never a panic.

use madeira_core::state::NodeState;
use serde::{Deserialize, Serialize};

use crate::{AttemptRecord, NodeRow, OutputWrite, StoreError};

/// The tag of format 1 (MessagePack + LZ4 block, length prefixed).
const MAGIC: [u8; 2] = *b"A1";
/// Largest uncompressed document decoded (a run has at most a few thousand nodes).
const MAX_DOC: usize = 64 << 20;

/// One transition row as stored (`transitions`: its id, `at` and packed `entries`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TransitionRow {
    pub id: i64,
    pub at: i64,
    pub entries: String,
}

/// Everything of one run the archive holds, as rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Folded {
    /// By `idx`.
    pub nodes: Vec<NodeRow>,
    /// By node, then attempt.
    pub attempts: Vec<AttemptRecord>,
    pub outputs: Vec<OutputWrite>,
    /// By id (the order they were written).
    pub transitions: Vec<TransitionRow>,
}

#[derive(Serialize, Deserialize)]
struct Doc {
    /// Times below are offsets from this (the run's creation).
    base: i64,
    nodes: Vec<NodeDoc>,
    attempts: Vec<AttemptDoc>,
    outputs: Vec<OutputDoc>,
    transitions: Vec<(i64, i64, String)>,
}

/// `(idx, node, state, reason, attempt, series_start, data_version, outputs JSON,
/// reads, stale, fallback, next_attempt_at, started_at, finished_at)`.
#[derive(Serialize, Deserialize)]
struct NodeDoc(
    u32,
    String,
    u8,
    Option<String>,
    u32,
    u32,
    u32,
    String,
    Vec<(u32, u32)>,
    bool,
    bool,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// `(node, attempt, started_at, finished_at, outcome, error, host)`.
#[derive(Serialize, Deserialize)]
struct AttemptDoc(String, u32, i64, Option<i64>, Option<String>, Option<String>, Option<String>);

/// `(node, data_version, key, value JSON)`.
#[derive(Serialize, Deserialize)]
struct OutputDoc(String, u32, String, String);

fn corrupt(run_id: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { table: "run_archive", detail: format!("run {run_id}: {detail}") }
}

impl Folded {
    /// The compressed document of this run (created at `base`).
    pub(crate) fn encode(&self, run_id: &str, base: i64) -> Result<Vec<u8>, StoreError> {
        let off = |t: i64| t.saturating_sub(base);
        let opt = |t: Option<i64>| t.map(off);
        let doc = Doc {
            base,
            nodes: self
                .nodes
                .iter()
                .map(|n| {
                    NodeDoc(
                        n.idx,
                        n.node.clone(),
                        crate::packed::node_state(n.state) as u8,
                        n.reason.clone(),
                        n.attempt,
                        n.series_start,
                        n.data_version,
                        serde_json::Value::Object(n.outputs.clone()).to_string(),
                        n.reads.iter().map(|(u, v)| (*u as u32, *v)).collect(),
                        n.stale,
                        n.fallback,
                        opt(n.next_attempt_at),
                        opt(n.started_at),
                        opt(n.finished_at),
                    )
                })
                .collect(),
            attempts: self
                .attempts
                .iter()
                .map(|a| {
                    AttemptDoc(
                        a.node.clone(),
                        a.attempt,
                        off(a.started_at),
                        opt(a.finished_at),
                        a.outcome.clone(),
                        a.error.clone(),
                        a.host.clone(),
                    )
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|o| OutputDoc(o.node.clone(), o.data_version, o.key.clone(), o.value.to_string()))
                .collect(),
            transitions: self.transitions.iter().map(|t| (t.id, off(t.at), t.entries.clone())).collect(),
        };
        let plain = rmp_serde::to_vec(&doc).map_err(|e| corrupt(run_id, e))?;
        let len = u32::try_from(plain.len()).map_err(|_| corrupt(run_id, "document too large"))?;
        let mut out = Vec::with_capacity(plain.len() / 2 + 8);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&lz4_flex::block::compress(&plain));
        Ok(out)
    }

    /// The rows of `run_id` held in `doc`.
    pub(crate) fn decode(run_id: &str, doc: &[u8]) -> Result<Folded, StoreError> {
        let (tag, rest) = doc.split_at_checked(2).ok_or_else(|| corrupt(run_id, "document too short"))?;
        if tag != MAGIC {
            return Err(corrupt(run_id, format!("unknown document format {tag:?}")));
        }
        let (len, body) =
            rest.split_first_chunk::<4>().ok_or_else(|| corrupt(run_id, "document too short"))?;
        let len = u32::from_le_bytes(*len) as usize;
        if len > MAX_DOC {
            return Err(corrupt(run_id, format!("document of {len} bytes")));
        }
        let plain = lz4_flex::block::decompress(body, len).map_err(|e| corrupt(run_id, e))?;
        let doc: Doc = rmp_serde::from_slice(&plain).map_err(|e| corrupt(run_id, e))?;
        let at = |t: i64| doc.base.saturating_add(t);
        let opt = |t: Option<i64>| t.map(at);
        let nodes = doc
            .nodes
            .into_iter()
            .map(|n| {
                let state = NodeState::ALL
                    .into_iter()
                    .find(|s| crate::packed::node_state(*s) == i64::from(n.2))
                    .ok_or_else(|| corrupt(run_id, format!("node state code {}", n.2)))?;
                let outputs = match serde_json::from_str(&n.7).map_err(|e| corrupt(run_id, e))? {
                    serde_json::Value::Object(map) => map,
                    other => return Err(corrupt(run_id, format!("outputs {other} of node {}", n.1))),
                };
                Ok(NodeRow {
                    run_id: run_id.to_string(),
                    idx: n.0,
                    node: n.1,
                    state,
                    reason: n.3,
                    attempt: n.4,
                    series_start: n.5,
                    data_version: n.6,
                    outputs,
                    reads: n.8.into_iter().map(|(u, v)| (u as usize, v)).collect(),
                    stale: n.9,
                    fallback: n.10,
                    next_attempt_at: opt(n.11),
                    started_at: opt(n.12),
                    finished_at: opt(n.13),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let attempts = doc
            .attempts
            .into_iter()
            .map(|a| AttemptRecord {
                run_id: run_id.to_string(),
                node: a.0,
                attempt: a.1,
                started_at: at(a.2),
                finished_at: opt(a.3),
                outcome: a.4,
                error: a.5,
                host: a.6,
            })
            .collect();
        let outputs = doc
            .outputs
            .into_iter()
            .map(|o| {
                Ok(OutputWrite {
                    run_id: run_id.to_string(),
                    node: o.0,
                    data_version: o.1,
                    key: o.2,
                    value: serde_json::from_str(&o.3).map_err(|e| corrupt(run_id, e))?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let transitions = doc
            .transitions
            .into_iter()
            .map(|(id, t, entries)| TransitionRow { id, at: at(t), entries })
            .collect();
        Ok(Folded { nodes, attempts, outputs, transitions })
    }

    /// The SUCCESS nodes as `run_archive.succeeded` holds them: `,a,b!c,` (node ids
    /// are `[a-z][a-z0-9_]*`; `_`, a `LIKE` wildcard, is written `!`), which
    /// node-level `after` waits match with `LIKE CONCAT('%,', REPLACE(node, '_', '!'), ',%')`.
    pub(crate) fn succeeded(&self) -> String {
        let mut out = String::from(",");
        for n in self.nodes.iter().filter(|n| n.state == NodeState::Success) {
            out.push_str(&n.node.replace('_', "!"));
            out.push(',');
        }
        out
    }

    /// The run's transition log, in order.
    pub(crate) fn log(&self, run_id: &str) -> Result<Vec<crate::TransitionRecord>, StoreError> {
        let mut log = Vec::new();
        for t in &self.transitions {
            log.extend(crate::packed::unpack(run_id, t.at, &t.entries)?);
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Folded {
        let mut outputs = serde_json::Map::new();
        outputs.insert("rows".into(), serde_json::json!(12));
        outputs.insert("ratio".into(), serde_json::json!(1.5));
        let node = |idx: u32, name: &str, state: NodeState| NodeRow {
            run_id: "r".into(),
            idx,
            node: name.into(),
            state,
            reason: (state == NodeState::Failed).then(|| "exit 1\n\"quoted\"".into()),
            attempt: 2,
            series_start: 1,
            data_version: 3,
            outputs: outputs.clone(),
            reads: vec![(0, 1), (4, 2)],
            stale: idx == 1,
            fallback: false,
            next_attempt_at: None,
            started_at: Some(1_733_000_000_100),
            finished_at: Some(1_733_000_000_900),
        };
        Folded {
            nodes: NodeState::ALL
                .iter()
                .enumerate()
                .map(|(i, s)| node(i as u32, &format!("n_{i}"), *s))
                .collect(),
            attempts: vec![AttemptRecord {
                run_id: "r".into(),
                node: "n_0".into(),
                attempt: 1,
                started_at: 1_733_000_000_100,
                finished_at: Some(1_732_999_999_000),
                outcome: Some("FAILED".into()),
                error: Some("boom".into()),
                host: Some("sidecar-a".into()),
            }],
            outputs: vec![OutputWrite {
                run_id: "r".into(),
                node: "n_0".into(),
                data_version: 3,
                key: "rows".into(),
                value: serde_json::json!({"a": [1, null, "x"]}),
            }],
            transitions: vec![TransitionRow { id: 7, at: 1_733_000_000_000, entries: "[]".into() }],
        }
    }

    #[test]
    fn a_document_round_trips_every_field() {
        let folded = sample();
        let doc = folded.encode("r", 1_733_000_000_000).expect("encodes");
        assert_eq!(Folded::decode("r", &doc).expect("decodes"), folded);
    }

    #[test]
    fn succeeded_lists_success_nodes_with_underscores_escaped() {
        assert_eq!(sample().succeeded(), ",n!2,");
    }

    #[test]
    fn corrupt_and_unknown_documents_are_errors() {
        let doc = sample().encode("r", 0).expect("encodes");
        let mut huge = doc.clone();
        huge[2..6].copy_from_slice(&u32::MAX.to_le_bytes());
        let garbage = [b'A', b'1', 40, 0, 0, 0, 0xf0, 0xff, 0xff, 0x01];
        let not_msgpack =
            [&MAGIC[..], &3u32.to_le_bytes(), &lz4_flex::block::compress(b"\xc1\xc1\xc1")].concat();
        for bad in [&b""[..], b"A", b"Z1\0\0\0\0", &huge, &doc[..doc.len() / 2], &garbage, &not_msgpack] {
            assert!(
                matches!(Folded::decode("r", bad), Err(StoreError::Corrupt { table: "run_archive", .. })),
                "{bad:?}"
            );
        }
    }
}
