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

/// Folds every finished run of the store into the archive, as the archiver does
/// (`ArchiveStore::fold_finished`), once their holder's lease has lapsed (a run
/// just finished is still held for up to a lease, 15 s): returns how many runs
/// were folded, the time spent folding and the slowest batch (of 500), in ms.
pub(super) async fn fold_all(store: &dyn madeira_store::Store) -> Result<(u64, f64, f64)> {
    let started = std::time::Instant::now();
    let (mut total, mut busy, mut worst) = (0, 0.0f64, 0.0f64);
    loop {
        let t = std::time::Instant::now();
        let n = store.fold_finished(madeira_engine::now_ms(), 500).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        total += n;
        if n > 0 {
            busy += ms;
            worst = worst.max(ms);
        } else {
            if started.elapsed() > std::time::Duration::from_secs(16) {
                return Ok((total, busy, worst));
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}

/// As `add`, for the store once its runs are folded: `storage_folded_*`.
pub(super) fn add_folded(result: &mut Value, before: &Space, after: &Space, fold: (u64, f64, f64)) {
    let mut folded = json!({});
    add(&mut folded, before, after);
    let Some(obj) = result.as_object_mut() else { return };
    let (runs, busy_ms, worst_ms) = fold;
    obj.insert("storage_folded_runs".into(), json!(runs));
    obj.insert("fold_runs_per_s".into(), json!(runs as f64 / (busy_ms / 1000.0).max(1e-9)));
    obj.insert("fold_slowest_batch_ms".into(), json!(worst_ms));
    for (k, v) in folded.as_object().into_iter().flatten() {
        obj.insert(k.replacen("storage_", "storage_folded_", 1), v.clone());
    }
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
    print_one(r, "storage");
    print_one(r, "storage_folded");
    if let Some(rate) = r["fold_runs_per_s"].as_f64() {
        let worst = r["fold_slowest_batch_ms"].as_f64().unwrap_or(0.0);
        println!(
            "{:<11} {} runs at {rate:.0} runs/s, slowest batch of 500 {worst:.0} ms",
            "  fold", r["storage_folded_runs"]
        );
    }
}

fn print_one(r: &Value, prefix: &str) {
    let Some(per_node) = r[format!("{prefix}_bytes_per_node")].as_f64() else { return };
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let mut tables: Vec<(&String, &Value)> =
        r[format!("{prefix}_per_node")].as_object().into_iter().flatten().collect();
    tables.sort_by(|a, b| {
        (f(b.1, "rows") + f(b.1, "indexes")).total_cmp(&(f(a.1, "rows") + f(a.1, "indexes")))
    });
    let tables: Vec<String> = tables
        .iter()
        .map(|&(name, v)| format!("{name} {:.0}+{:.0}", f(v, "rows"), f(v, "indexes")))
        .collect();
    println!(
        "{:<11} {:.0} B/node stored ({} nodes, {:.1} MB compacted); per node, rows+indexes: {}",
        if prefix == "storage" { "  storage" } else { "  folded" },
        per_node,
        r[format!("{prefix}_nodes")],
        r[format!("{prefix}_file_bytes")].as_f64().unwrap_or(0.0) / 1e6,
        tables.join(", "),
    );
}
