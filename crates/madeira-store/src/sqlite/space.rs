//! The space a SQLite store file takes, measured on a compacted copy (`VACUUM
//! INTO`, so free pages and the WAL do not count): the copy's size, the node rows
//! it holds, and the bytes of each table and index (SQLite's `dbstat` virtual
//! table, which the bundled SQLite has). The bench reports bytes per node from it.

use std::path::{Path, PathBuf};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::{Result, StoreError};

/// The space of one store file, as compacted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Space {
    /// Size of the compacted copy.
    pub file_bytes: u64,
    /// Nodes of every stored run: rows of `nodes`, and those folded into `run_archive`.
    pub nodes: u64,
    /// Every table and index with the pages it takes, largest first.
    pub objects: Vec<SpaceObject>,
}

/// One table or index of a `Space`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceObject {
    /// The table's or index's name (`sqlite_autoindex_…` for a key's own index).
    pub name: String,
    /// The table it belongs to (its own name for a table).
    pub table: String,
    /// Bytes of its pages (whole pages, free space in them included).
    pub bytes: u64,
}

impl Space {
    /// Bytes of `table`'s own pages and of its indexes' pages.
    pub fn table_bytes(&self, table: &str) -> (u64, u64) {
        let of = |own: bool| -> u64 {
            self.objects
                .iter()
                .filter(|o| o.table == table && (o.name == table) == own)
                .map(|o| o.bytes)
                .sum()
        };
        (of(true), of(false))
    }

    /// The tables, each once, largest (with its indexes) first.
    pub fn tables(&self) -> Vec<&str> {
        let mut tables: Vec<&str> = Vec::new();
        for o in &self.objects {
            if !tables.contains(&o.table.as_str()) {
                tables.push(o.table.as_str());
            }
        }
        let total = |t: &str| {
            let (own, idx) = self.table_bytes(t);
            own + idx
        };
        tables.sort_by_key(|t| std::cmp::Reverse(total(t)));
        tables
    }
}

/// Measures the store file at `path` (which may be open and written meanwhile:
/// the copy is of one read transaction). The copy is written next to it and
/// removed again.
pub async fn measure(path: &Path) -> Result<Space> {
    let copy = copy_path(path);
    remove(&copy)?;
    let result = measure_copy(path, &copy).await;
    let removed = remove(&copy);
    let space = result?;
    removed?;
    Ok(space)
}

fn copy_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".space-{}", std::process::id()));
    path.with_file_name(name)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::Db(sqlx::Error::Io(e))),
        _ => Ok(()),
    }
}

async fn measure_copy(path: &Path, copy: &Path) -> Result<Space> {
    let source = SqliteConnectOptions::new().filename(path).read_only(true);
    let mut conn = source.connect().await?;
    sqlx::query("VACUUM INTO $1").bind(copy.to_string_lossy().into_owned()).execute(&mut conn).await?;
    conn.close().await?;
    let file_bytes = std::fs::metadata(copy).map_err(|e| StoreError::Db(sqlx::Error::Io(e)))?.len();
    let mut conn = SqliteConnectOptions::new().filename(copy).read_only(true).connect().await?;
    let (nodes,): (i64,) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM nodes) + (SELECT COALESCE(SUM(nodes), 0) FROM run_archive)",
    )
    .fetch_one(&mut conn)
    .await?;
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT d.name, COALESCE(s.tbl_name, d.name), SUM(d.pgsize) FROM dbstat d \
         LEFT JOIN sqlite_schema s ON s.name = d.name GROUP BY d.name ORDER BY 3 DESC, 1",
    )
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    let objects = rows
        .into_iter()
        .map(|(name, table, bytes)| SpaceObject { name, table, bytes: u64::try_from(bytes).unwrap_or(0) })
        .collect();
    Ok(Space { file_bytes, nodes: u64::try_from(nodes).unwrap_or(0), objects })
}
