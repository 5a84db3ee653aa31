//! One process per SQLite store: `madeira dev` (its `--data` directory) and
//! `madeira serve` on a `sqlite://` store take an exclusive `flock(2)` on
//! `<store file>.lock` before opening anything, hold it for the process lifetime
//! and write their pid into it. A second process on the same store is refused,
//! naming the holder's pid, instead of running a second scheduler on the same
//! file (and, for `dev`, removing the first one's exec socket when it exits).
//!
//! The lock is released by the kernel when the process ends, however it ends; the
//! file stays (removing it would let a third process lock a new file while a
//! second still waits on the old one). Its descriptor is close-on-exec, so a job
//! the in-process sidecar starts never inherits it.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The held lock; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "{what} is in use by another madeira process (pid {pid}; lock {lock}): one process per SQLite store; \
         stop that one first{hint}"
    )]
    Held { what: String, pid: String, lock: String, hint: &'static str },
    /// The lock file could not be opened or locked.
    #[error("{lock}: cannot take the store lock: {source}")]
    Io { lock: String, source: std::io::Error },
}

/// The lock file of the SQLite store file `db`: `<db>.lock` beside it.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The file of a `sqlite:` store URL (`sqlite:///abs/file.db`, `sqlite://rel.db`),
/// `None` for another store or one in memory (the store refuses that itself).
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest).split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// Takes the lock of the store file `db` for `what` (named in the refusal), or
/// says who holds it; `hint` ends the refusal (what else the operator may do).
pub fn lock_store(db: &Path, what: &str, hint: &'static str) -> Result<StoreLock, LockError> {
    let path = lock_path(db);
    let io = |source| LockError::Io { lock: path.display().to_string(), source };
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io(err));
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let pid = match text.trim() {
            "" => "not yet written".to_string(),
            pid => pid.chars().take(20).collect(),
        };
        return Err(LockError::Held { what: what.to_string(), pid, lock: path.display().to_string(), hint });
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    tracing::debug!(lock = %path.display(), "store lock taken");
    Ok(StoreLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(sqlite_file("sqlite:///var/lib/m.db"), Some(PathBuf::from("/var/lib/m.db")));
        assert_eq!(sqlite_file("sqlite://rel.db?mode=rwc"), Some(PathBuf::from("rel.db")));
        assert_eq!(sqlite_file("sqlite:rel.db"), Some(PathBuf::from("rel.db")));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://db/m"), None);
        assert_eq!(lock_path(Path::new("/x/madeira.db")), PathBuf::from("/x/madeira.db.lock"));
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("madeira.db");
        let held = lock_store(&db, "data directory d", "").expect("first lock");
        let text = std::fs::read_to_string(lock_path(&db)).expect("lock file");
        assert_eq!(text.trim(), std::process::id().to_string());
        // flock locks belong to the open file: a second open in this process conflicts too.
        let e = lock_store(&db, "data directory d", ", or give another --data").expect_err("second");
        let msg = e.to_string();
        assert!(msg.starts_with("data directory d is in use by another madeira process"), "{msg}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        assert!(msg.ends_with("stop that one first, or give another --data"), "{msg}");
        drop(held);
        lock_store(&db, "data directory d", "").expect("free again after drop");
    }
}
