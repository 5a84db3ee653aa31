//! The disk spool: every report (result, refusal, exec report) is written here
//! before it is sent and removed only when the control plane acknowledges it, so a
//! report survives a lost connection, a control-plane outage and a sidecar restart.
//! Files are written to a temporary name, synced, then renamed; the directory is
//! 0700 and every file 0600 (reports carry job output).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use madeira_proto::SidecarMessage;
use prometheus_client::metrics::gauge::Gauge;
use prost::Message;

/// Spool errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.display().to_string(), source }
}

/// Pending reports on disk, oldest first.
pub struct Spool {
    dir: PathBuf,
    /// report id → file name, ordered by file name (time, then sequence).
    index: Mutex<BTreeMap<String, String>>,
    seq: AtomicU64,
    pending: Gauge,
}

impl Spool {
    /// Opens (creating) the spool in `dir` and indexes what an earlier process left.
    pub fn open(dir: &Path, pending: Gauge) -> Result<Self, SpoolError> {
        private_dir(dir, 0o700)?;
        let mut index = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(".report")
                && let Some(id) = stem.splitn(3, '-').nth(2)
            {
                index.insert(id.to_string(), name);
            } else if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        pending.set(i64::try_from(index.len()).unwrap_or(i64::MAX));
        Ok(Self { dir: dir.to_path_buf(), index: Mutex::new(index), seq: AtomicU64::new(0), pending })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Durably stores `msg` under `id` (a second put of the same id is a no-op).
    pub fn put(&self, id: &str, msg: &SidecarMessage) -> Result<(), SpoolError> {
        let Some(name) = self.name_for(id) else {
            return Ok(());
        };
        write_durably(&self.dir, &name, &msg.encode_to_vec())?;
        self.indexed(id, name);
        Ok(())
    }

    /// `put` from async code: the writes and their fsyncs run on the blocking
    /// pool, so they neither stall the runtime's worker threads (which, in
    /// `madeira dev --jobs`, also run the control plane) nor wait for each other
    /// when several jobs end at once. Returns once the report is durable.
    pub async fn put_async(&self, id: &str, msg: &SidecarMessage) -> Result<(), SpoolError> {
        let Some(name) = self.name_for(id) else {
            return Ok(());
        };
        let (dir, file, bytes) = (self.dir.clone(), name.clone(), msg.encode_to_vec());
        tokio::task::spawn_blocking(move || write_durably(&dir, &file, &bytes)).await.map_err(|e| {
            SpoolError::Io { path: self.dir.display().to_string(), source: std::io::Error::other(e) }
        })??;
        self.indexed(id, name);
        Ok(())
    }

    /// A new file name for `id`; `None` when `id` is already spooled.
    fn name_for(&self, id: &str) -> Option<String> {
        if self.lock().contains_key(id) {
            return None;
        }
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        Some(format!("{millis:015}{seq:06}-{seq}-{}.report", sanitize(id)))
    }

    fn indexed(&self, id: &str, name: String) {
        let mut index = self.lock();
        index.insert(id.to_string(), name);
        self.pending.set(i64::try_from(index.len()).unwrap_or(i64::MAX));
    }

    /// Forgets `id` once the control plane has it.
    pub fn remove(&self, id: &str) -> Result<(), SpoolError> {
        let name = {
            let mut index = self.lock();
            let name = index.remove(&sanitize(id)).or_else(|| index.remove(id));
            self.pending.set(i64::try_from(index.len()).unwrap_or(i64::MAX));
            name
        };
        if let Some(name) = name {
            let path = self.dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        Ok(())
    }

    /// Every pending report, oldest first. Unreadable files are skipped and logged.
    pub fn pending(&self) -> Vec<(String, SidecarMessage)> {
        let mut entries: Vec<(String, String)> =
            self.lock().iter().map(|(id, name)| (id.clone(), name.clone())).collect();
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        entries
            .into_iter()
            .filter_map(|(id, name)| {
                let path = self.dir.join(&name);
                match std::fs::read(&path).map(|bytes| SidecarMessage::decode(bytes.as_slice())) {
                    Ok(Ok(msg)) => Some((id, msg)),
                    Ok(Err(e)) => {
                        tracing::error!(file = %path.display(), error = %e, "corrupt spool file skipped");
                        None
                    }
                    Err(e) => {
                        tracing::error!(file = %path.display(), error = %e, "unreadable spool file skipped");
                        None
                    }
                }
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes `bytes` to `dir/name` durably: a temporary file, synced, renamed into
/// place, and the directory synced (so the new name survives a host crash).
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), SpoolError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates `dir` (and its parents) and sets its mode, e.g. 0700.
pub fn private_dir(dir: &Path, mode: u32) -> Result<(), SpoolError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io(dir))
}

/// Report ids are UUIDs; anything else is made file-name safe.
fn sanitize(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use madeira_proto::SidecarMsg;
    use madeira_proto::v1::Heartbeat;

    fn msg(n: u32) -> SidecarMessage {
        SidecarMessage { msg: Some(SidecarMsg::Heartbeat(Heartbeat { running: n })) }
    }

    #[test]
    fn survives_a_reopen_in_order_and_forgets_acked_reports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Spool::open(dir.path(), Gauge::default()).expect("open");
        for i in 0..3 {
            spool.put(&format!("r{i}"), &msg(i)).expect("put");
        }
        spool.put("r1", &msg(99)).expect("duplicate put is a no-op");
        spool.remove("r0").expect("remove");
        drop(spool);
        let gauge = Gauge::default();
        let spool = Spool::open(dir.path(), gauge.clone()).expect("reopen");
        assert_eq!(gauge.get(), 2);
        let pending = spool.pending();
        let ids: Vec<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["r1", "r2"]);
        assert_eq!(pending[0].1, msg(1));
    }

    #[test]
    fn the_spool_is_0700_and_its_files_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let spool_dir = dir.path().join("reports");
        let spool = Spool::open(&spool_dir, Gauge::default()).expect("open");
        spool.put("r0", &msg(0)).expect("put");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&spool_dir), 0o700);
        let files: Vec<_> =
            std::fs::read_dir(&spool_dir).expect("list").flatten().map(|e| e.path()).collect();
        assert_eq!(files.len(), 1);
        assert_eq!(mode(&files[0]), 0o600, "a report carries job output: owner only");
    }
}
