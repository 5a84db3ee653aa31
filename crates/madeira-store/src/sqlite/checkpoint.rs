//! WAL checkpoints off the write path. By default SQLite checkpoints inside the
//! commit that crosses 1,000 WAL pages, so one commit in a thousand pages waits
//! for the database file to be written and synced (tens of milliseconds, which
//! every caller queued behind the single writer also waits). The writer runs with
//! `wal_autocheckpoint = 0` instead, and this task checkpoints from its own
//! connection (PASSIVE: it never waits for, nor blocks, the writer or readers)
//! every `EVERY`, so the WAL stays small and commits stay one WAL fsync each.

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::task::JoinHandle;

/// How often the WAL is checkpointed.
const EVERY: Duration = Duration::from_millis(500);

/// Aborts the checkpoint task when the store is dropped.
pub(super) struct Checkpointer(JoinHandle<()>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Checkpointer {
    /// Starts checkpointing the database `options` open (its own connection,
    /// opened again after an error).
    pub(super) fn spawn(options: SqliteConnectOptions) -> Self {
        Self(tokio::spawn(async move {
            let mut conn: Option<SqliteConnection> = None;
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if conn.is_none() {
                    conn = options.connect().await.ok();
                }
                let Some(c) = conn.as_mut() else { continue };
                let done: Result<(i64, i64, i64), sqlx::Error> =
                    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(&mut *c).await;
                if let Err(e) = done {
                    // A full disk, a deleted file: the writer reports those; try
                    // again on a fresh connection at the next tick.
                    tracing::debug!(error = %e, "WAL checkpoint failed");
                    if let Some(c) = conn.take() {
                        let _ = c.close().await;
                    }
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::SqliteStore;
    use crate::FlowStore;

    /// The writer never checkpoints (`wal_autocheckpoint = 0`), so the database
    /// file only grows when the checkpointer copies the WAL's pages into it.
    #[tokio::test]
    async fn the_wal_reaches_the_database_file_without_the_writer_checkpointing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.db");
        let store = SqliteStore::open_path(&path).await.expect("open");
        let (auto,): (i64,) =
            sqlx::query_as("PRAGMA wal_autocheckpoint").fetch_one(&store.writer).await.expect("pragma");
        assert_eq!(auto, 0, "the writer must not checkpoint");
        let big = "x".repeat(4096);
        for i in 0..300 {
            store.put_flow("f", &format!("{big}{i}"), &format!("h{i}"), i).await.expect("put");
        }
        let (pages,): (i64,) =
            sqlx::query_as("PRAGMA page_count").fetch_one(&store.reader).await.expect("pages");
        let (size,): (i64,) =
            sqlx::query_as("PRAGMA page_size").fetch_one(&store.reader).await.expect("size");
        assert!(pages > 300, "the writes span the WAL: {pages} pages");
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let on_disk = std::fs::metadata(&path).expect("db file").len() as i64;
            if on_disk >= pages * size {
                break;
            }
            assert!(Instant::now() < deadline, "database file {on_disk} bytes, want {}", pages * size);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
