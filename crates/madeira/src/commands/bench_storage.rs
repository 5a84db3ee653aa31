//! The storage figure of `madeira bench`: what a scenario's runs leave in the
//! embedded SQLite store, in bytes per node. The store file is measured before and
//! after the scenario on a compacted copy (`VACUUM INTO`, so free pages and the
//! WAL do not count; `madeira_store::sqlite::space`), and the difference is
//! divided by the node rows the scenario added; the same per table and index
//! (SQLite's `dbstat`).

use std::path::Path;

use anyhow::{Context, Result};
use madeira_store::sqlite::space::{self, Space};
use serde_json::{Map, Value, json};

/// Measures the store file at `path`.
pub(super) async fn measure(path: &Path) -> Result<Space> {
    space::measure(path).await.with_context(|| format!("measuring the space of {}", path.display()))
}

/// Adds `storage_bytes_per_node` (and the compacted size, and each table's rows
/// and indexes per node) to the scenario's `result`, from the store's space
/// `before` and `after` it.
pub(super) fn add(result: &mut Value, before: &Space, after: &Space) {
    let nodes = after.nodes.saturating_sub(before.nodes);
    if nodes == 0 {
        return;
    }
    let per_node = |after: u64, before: u64| after.saturating_sub(before) as f64 / nodes as f64;
    let mut tables = Map::new();
    for table in after.tables() {
        let (rows, indexes) = after.table_bytes(table);
        let (rows_before, indexes_before) = before.table_bytes(table);
        let (rows, indexes) = (per_node(rows, rows_before), per_node(indexes, indexes_before));
        if rows + indexes > 0.0 {
            tables.insert(table.to_string(), json!({"rows": rows, "indexes": indexes}));
        }
    }
    let Some(obj) = result.as_object_mut() else { return };
    obj.insert("storage_nodes".into(), json!(nodes));
    obj.insert("storage_file_bytes".into(), json!(after.file_bytes.saturating_sub(before.file_bytes)));
    obj.insert("storage_bytes_per_node".into(), json!(per_node(after.file_bytes, before.file_bytes)));
    obj.insert("storage_per_node".into(), Value::Object(tables));
}

/// Prints the storage line of a scenario that has the figure.
pub(super) fn print(r: &Value) {
    let Some(per_node) = r["storage_bytes_per_node"].as_f64() else { return };
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let mut tables: Vec<(&String, &Value)> =
        r["storage_per_node"].as_object().into_iter().flatten().collect();
    tables.sort_by(|a, b| {
        (f(b.1, "rows") + f(b.1, "indexes")).total_cmp(&(f(a.1, "rows") + f(a.1, "indexes")))
    });
    let tables: Vec<String> = tables
        .iter()
        .map(|&(name, v)| format!("{name} {:.0}+{:.0}", f(v, "rows"), f(v, "indexes")))
        .collect();
    println!(
        "{:<11} {:.0} B/node stored ({} nodes, {:.1} MB compacted); per node, rows+indexes: {}",
        "  storage",
        per_node,
        r["storage_nodes"],
        r["storage_file_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        tables.join(", "),
    );
}
