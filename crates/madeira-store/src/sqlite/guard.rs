//! What keeps SQLite's single writer honest after a failure:
//! - a write that failed may leave the connection inside its transaction (on a
//!   full disk SQLite rolls the transaction back itself, sqlx's ROLLBACK then fails
//!   and sqlx keeps counting a transaction that no longer exists, so every later
//!   "commit" only releases a savepoint of a transaction that never ends: answered,
//!   never durable). So after any failed write the writer connection is closed
//!   (rolling back whatever it held) and the pool opens a fresh one;
//! - the file the store opened is checked before every write (device and inode):
//!   a store file deleted or replaced under a running process stops writes with
//!   `StoreError::Unavailable` instead of writing into an unlinked inode.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{Result, StoreError};

#[derive(Clone)]
pub(super) struct WriteGuard {
    /// Set by a failed write; the pool's `before_acquire` then closes the writer.
    poisoned: Arc<AtomicBool>,
    /// The database file and its (device, inode) when opened.
    file: (PathBuf, (u64, u64)),
}

impl WriteGuard {
    pub(super) fn new(path: PathBuf, poisoned: Arc<AtomicBool>) -> Result<Self> {
        let meta = std::fs::metadata(&path)
            .map_err(|e| StoreError::Unavailable(format!("store file {}: {e}", path.display())))?;
        Ok(Self { poisoned, file: (path, (meta.dev(), meta.ino())) })
    }

    /// Fails when the store file is gone or is no longer the one opened.
    pub(super) fn check_file(&self) -> Result<()> {
        let (path, identity) = &self.file;
        let gone = |what: String| {
            StoreError::Unavailable(format!(
                "store file {} {what}; writes stopped: restore it or restart madeira",
                path.display()
            ))
        };
        match std::fs::metadata(path) {
            Ok(meta) if (meta.dev(), meta.ino()) == *identity => Ok(()),
            Ok(_) => Err(gone("was replaced by another file".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(gone("was deleted".into())),
            Err(e) => Err(gone(format!("cannot be checked ({e})"))),
        }
    }

    /// Passes `result` through; a database error poisons the writer connection.
    pub(super) fn after<T>(&self, result: Result<T>) -> Result<T> {
        if matches!(result, Err(StoreError::Db(_))) {
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}

/// For `SqlitePoolOptions::before_acquire`: `false` (close it, open another) when
/// the last write on the writer failed.
pub(super) fn healthy(poisoned: &AtomicBool) -> bool {
    !poisoned.swap(false, Ordering::AcqRel)
}
