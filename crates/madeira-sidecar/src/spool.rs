//! The disk spool: every report (result, refusal, exec report) is written here
//! before it is sent and removed only when the control plane acknowledges it, so a
//! report survives a lost connection, a control-plane outage and a sidecar restart.
//!
//! Reports live in slot files (`slot-NNNNN.spool`, `slots.rs`), reused: a report is
//! written over a free slot and synced with one `fdatasync`, so the usual report
//! makes no directory entry and no journal commit (a new slot file, made only when
//! every slot is taken, is synced with its directory). A job's report is written
//! into its slot first (the page cache: it survives the sidecar's own death), then
//! its sync runs on the blocking pool while the report travels (`Spool::begin`):
//! until the sync completes the report is volatile whether it waits for the sync
//! or not, and the control plane acknowledges only what it committed. A slot is
//! free again only once both its sync and the report's acknowledgement are done.
//! An acknowledged report's slot is marked free, unsynced, as the file of a
//! removed report was unlinked unsynced before: after a host crash it may be
//! delivered again, and the control plane takes a report id once. `*.report` files of earlier versions are still
//! read and delivered. The directory is 0700 and every file 0600 (reports carry job
//! output). A report the disk refuses (full, read-only, removed) is kept in memory
//! instead, delivered and acknowledged like the others: it is lost only if the
//! sidecar stops before the control plane has it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use madeira_proto::SidecarMessage;
use prometheus_client::metrics::gauge::Gauge;
use prost::Message;

use crate::slots::{self, Order};

/// Spool errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.display().to_string(), source }
}

/// Where a pending report is.
#[derive(Clone)]
enum Place {
    Slot(usize),
    /// A file of an earlier version.
    File(String),
    /// The encoded report, which the disk refused.
    Memory(Arc<[u8]>),
}

struct Entry {
    order: Order,
    place: Place,
}

#[derive(Default)]
struct Index {
    /// report id → where it is.
    reports: BTreeMap<String, Entry>,
    /// Report ids being written (a second put of one is a no-op).
    writing: std::collections::HashSet<String>,
    /// Open slot files; `None` for a number being created.
    slots: Vec<Option<Arc<std::fs::File>>>,
    free: Vec<usize>,
    /// Slots whose sync is in flight → whether their report was acknowledged
    /// meanwhile (then the slot is freed when the sync ends).
    syncing: std::collections::HashMap<usize, bool>,
    seq: u64,
}

/// Pending reports on disk, oldest first.
pub struct Spool {
    dir: PathBuf,
    index: Mutex<Index>,
    pending: Gauge,
}

/// A report written into its slot whose sync is still to be done (`Spool::begin`).
pub struct Unsynced {
    spool: Arc<Spool>,
    id: String,
    slot: usize,
    file: Arc<std::fs::File>,
    /// The slot file was made for this report: synced with its directory.
    new_file: bool,
    /// The encoded report, kept in memory should the sync fail.
    bytes: Vec<u8>,
}

impl Unsynced {
    /// Starts the sync on the blocking pool; the handle answers once it is done.
    pub fn start(self) -> tokio::task::JoinHandle<Result<(), SpoolError>> {
        tokio::task::spawn_blocking(move || self.sync())
    }

    /// Syncs the slot (a new file with its directory), then frees it if the
    /// report was acknowledged meanwhile. A sync the disk refuses keeps the
    /// report in memory, still delivered, as a refused write does.
    pub fn sync(self) -> Result<(), SpoolError> {
        let path = self.spool.dir.join(slots::slot_name(self.slot));
        let synced = if self.new_file {
            self.file.sync_all().map(|()| {
                if let Ok(d) = std::fs::File::open(&self.spool.dir) {
                    let _ = d.sync_all();
                }
            })
        } else {
            self.file.sync_data()
        };
        let mut index = self.spool.lock();
        let acked = index.syncing.remove(&self.slot).unwrap_or(false);
        match synced {
            Ok(()) if acked => {
                let marked = slots::mark_free(&self.file);
                index.free.push(self.slot);
                marked.map_err(io(&path))
            }
            Ok(()) => Ok(()),
            Err(e) => {
                // The slot's content is unknown: its number is free to be written again.
                index.free.push(self.slot);
                if !acked {
                    let order = index.reports.get(&self.id).map(|e| e.order);
                    if let Some(order) = order {
                        let place = Place::Memory(self.bytes.into());
                        index.reports.insert(self.id.clone(), Entry { order, place });
                    }
                }
                Err(io(&path)(e))
            }
        }
    }
}

/// A slot taken for one write.
struct Claim {
    slot: usize,
    /// `None`: the slot file is to be created.
    file: Option<Arc<std::fs::File>>,
    order: Order,
}

impl Spool {
    /// Opens (creating) the spool in `dir` and indexes what an earlier process left.
    pub fn open(dir: &Path, pending: Gauge) -> Result<Self, SpoolError> {
        private_dir(dir, 0o700)?;
        let mut index = Index::default();
        let mut max_slot = None;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(n) = slots::slot_number(&name) {
                max_slot = max_slot.max(Some(n));
                found.push(n);
            } else if let Some(stem) = name.strip_suffix(".report")
                && let Some(id) = stem.splitn(3, '-').nth(2)
            {
                let order = Order::of_legacy_name(stem);
                index.reports.insert(id.to_string(), Entry { order, place: Place::File(name) });
            } else if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        index.slots = vec![None; max_slot.map_or(0, |n| n + 1)];
        let mut missing: Vec<usize> = (0..index.slots.len()).collect();
        for n in found {
            let path = dir.join(slots::slot_name(n));
            let file = slots::open_slot(&path).map_err(io(&path))?;
            match slots::read_record(&file) {
                Ok(Some(record)) => {
                    index.seq = index.seq.max(record.order.seq + 1);
                    index.reports.insert(record.id, Entry { order: record.order, place: Place::Slot(n) });
                }
                Ok(None) => index.free.push(n),
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "unreadable spool slot reused");
                    index.free.push(n);
                }
            }
            index.slots[n] = Some(Arc::new(file));
            missing.retain(|&m| m != n);
        }
        // Numbers with no file (removed by hand) are created again when needed.
        index.free.extend(missing);
        pending.set(i64::try_from(index.reports.len()).unwrap_or(i64::MAX));
        Ok(Self { dir: dir.to_path_buf(), index: Mutex::new(index), pending })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Durably stores `msg` under `id` (a second put of the same id is a no-op).
    /// On an error the report is pending all the same, kept in memory.
    pub fn put(&self, id: &str, msg: &SidecarMessage) -> Result<(), SpoolError> {
        let Some(claim) = self.claim(id) else {
            return Ok(());
        };
        let bytes = msg.encode_to_vec();
        let written = self.write(&claim, id, &bytes);
        self.written(id, claim, bytes, written)
    }

    /// Writes `msg` under `id` into a slot now (not synced) and hands back the
    /// sync still to be done; `None` when `id` is already spooled. The report is
    /// pending from here on: `pending` lists it, `remove` acknowledges it (its
    /// slot is freed once the sync is done too). On an error the report is
    /// pending all the same, kept in memory.
    pub fn begin(self: &Arc<Self>, id: &str, msg: &SidecarMessage) -> Result<Option<Unsynced>, SpoolError> {
        let Some(claim) = self.claim(id) else {
            return Ok(None);
        };
        let bytes = msg.encode_to_vec();
        let new_file = claim.file.is_none();
        let slot = claim.slot;
        let written = self.write_record(&claim, id, &bytes);
        let file = match &written {
            Ok(file) => file.clone(),
            Err(_) => return self.written(id, claim, bytes, written).map(|()| None),
        };
        self.lock().syncing.insert(slot, false);
        self.written(id, claim, Vec::new(), written)?;
        Ok(Some(Unsynced { spool: self.clone(), id: id.to_string(), slot, file, new_file, bytes }))
    }

    /// Takes a free slot (or the number of a new one) for `id`; `None` when `id`
    /// is already spooled or being written.
    fn claim(&self, id: &str) -> Option<Claim> {
        let mut index = self.lock();
        if index.reports.contains_key(id) || !index.writing.insert(id.to_string()) {
            return None;
        }
        let slot = match index.free.pop() {
            Some(n) => n,
            None => {
                index.slots.push(None);
                index.slots.len() - 1
            }
        };
        let file = index.slots[slot].clone();
        let order = Order::now(index.seq);
        index.seq += 1;
        Some(Claim { slot, file, order })
    }

    /// Writes the record into its slot (creating a new slot file), not synced.
    fn write_record(&self, claim: &Claim, id: &str, bytes: &[u8]) -> Result<Arc<std::fs::File>, SpoolError> {
        let path = self.dir.join(slots::slot_name(claim.slot));
        let file = match &claim.file {
            Some(file) => file.clone(),
            None => Arc::new(slots::create_slot(&path).map_err(io(&path))?),
        };
        slots::write_record(&file, claim.order, id, bytes).map_err(io(&path))?;
        Ok(file)
    }

    /// Writes the record into its slot and syncs it (a new slot file with its directory).
    fn write(&self, claim: &Claim, id: &str, bytes: &[u8]) -> Result<Arc<std::fs::File>, SpoolError> {
        let path = self.dir.join(slots::slot_name(claim.slot));
        let file = self.write_record(claim, id, bytes)?;
        if claim.file.is_none() {
            file.sync_all().map_err(io(&path))?;
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
        } else {
            file.sync_data().map_err(io(&path))?;
        }
        Ok(file)
    }

    /// Records where the report of `id` now is: its slot, or (the write failed)
    /// memory, which still delivers it.
    fn written(
        &self,
        id: &str,
        claim: Claim,
        bytes: Vec<u8>,
        written: Result<Arc<std::fs::File>, SpoolError>,
    ) -> Result<(), SpoolError> {
        let mut index = self.lock();
        index.writing.remove(id);
        let (place, result) = match written {
            Ok(file) => {
                index.slots[claim.slot] = Some(file);
                (Place::Slot(claim.slot), Ok(()))
            }
            Err(e) => {
                // The slot's content is unknown: its number is free to be written again.
                index.free.push(claim.slot);
                (Place::Memory(bytes.into()), Err(e))
            }
        };
        index.reports.insert(id.to_string(), Entry { order: claim.order, place });
        self.pending.set(i64::try_from(index.reports.len()).unwrap_or(i64::MAX));
        result
    }

    /// Forgets `id` once the control plane has it: its slot is marked free (not
    /// synced) and reused.
    pub fn remove(&self, id: &str) -> Result<(), SpoolError> {
        let mut index = self.lock();
        let entry = index.reports.remove(id).or_else(|| index.reports.remove(&sanitize(id)));
        self.pending.set(i64::try_from(index.reports.len()).unwrap_or(i64::MAX));
        match entry.map(|e| e.place) {
            None | Some(Place::Memory(_)) => Ok(()),
            Some(Place::Slot(n)) => {
                if let Some(acked) = index.syncing.get_mut(&n) {
                    // Freed by its sync once that is done.
                    *acked = true;
                    return Ok(());
                }
                // Under the lock: the slot is reused only once this mark is written.
                let marked = match &index.slots[n] {
                    Some(file) => slots::mark_free(file),
                    None => Ok(()),
                };
                index.free.push(n);
                marked.map_err(io(&self.dir.join(slots::slot_name(n))))
            }
            Some(Place::File(name)) => {
                drop(index);
                let path = self.dir.join(name);
                match std::fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(io(&path)(e)),
                }
            }
        }
    }

    /// Every pending report, oldest first. Unreadable ones are skipped and logged.
    pub fn pending(&self) -> Vec<(String, SidecarMessage)> {
        let mut entries: Vec<(Order, String, Place, Option<Arc<std::fs::File>>)> = {
            let index = self.lock();
            index
                .reports
                .iter()
                .map(|(id, e)| {
                    let file = match e.place {
                        Place::Slot(n) => index.slots[n].clone(),
                        Place::File(_) | Place::Memory(_) => None,
                    };
                    (e.order, id.clone(), e.place.clone(), file)
                })
                .collect()
        };
        entries.sort_by_key(|e| e.0);
        entries
            .into_iter()
            .filter_map(|(_, id, place, file)| {
                let (path, bytes) = match (place, file) {
                    (Place::Slot(n), Some(file)) => {
                        let path = self.dir.join(slots::slot_name(n));
                        match slots::read_record(&file) {
                            Ok(Some(r)) if r.id == id => (path, Ok(r.payload)),
                            // Acknowledged (and its slot reused) since the list was taken.
                            Ok(_) => return None,
                            Err(e) => (path, Err(e)),
                        }
                    }
                    (Place::Slot(n), None) => {
                        (self.dir.join(slots::slot_name(n)), Err(std::io::Error::other("slot not open")))
                    }
                    (Place::File(name), _) => {
                        let path = self.dir.join(name);
                        let bytes = std::fs::read(&path);
                        (path, bytes)
                    }
                    (Place::Memory(bytes), _) => (self.dir.clone(), Ok(bytes.to_vec())),
                };
                match bytes.map(|bytes| SidecarMessage::decode(bytes.as_slice())) {
                    Ok(Ok(msg)) => Some((id, msg)),
                    Ok(Err(e)) => {
                        tracing::error!(file = %path.display(), error = %e, "corrupt spool report skipped");
                        None
                    }
                    Err(e) => {
                        tracing::error!(file = %path.display(), error = %e, "unreadable spool report skipped");
                        None
                    }
                }
            })
            .collect()
    }

    /// Pending reports, those kept in memory included.
    pub fn len(&self) -> usize {
        self.lock().reports.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How many reports wait in the spool directory `dir` (read-only; for tests and
/// diagnostics of a spool another process owns).
pub fn pending_on_disk(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            if slots::slot_number(&name).is_some() {
                std::fs::File::open(e.path())
                    .ok()
                    .and_then(|f| slots::read_record(&f).ok().flatten())
                    .is_some()
            } else {
                name.ends_with(".report")
            }
        })
        .count()
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
    fn a_report_the_disk_refuses_stays_pending_in_memory_until_acknowledged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool_dir = dir.path().join("reports");
        let gauge = Gauge::default();
        let spool = Spool::open(&spool_dir, gauge.clone()).expect("open");
        spool.put("a", &msg(1)).expect("put on disk");
        std::fs::remove_dir_all(&spool_dir).expect("the spool directory goes");
        assert!(spool.put("b", &msg(2)).is_err(), "the disk refused it");
        assert_eq!(gauge.get(), 2, "both pending");
        let pending = spool.pending();
        // `a` is read through its slot file, still open; `b` from memory.
        assert_eq!(pending.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["a", "b"], "oldest first");
        assert_eq!(pending[1].1, msg(2));
        spool.put("b", &msg(3)).expect("a second put of a pending id is a no-op");
        assert_eq!(spool.pending()[1].1, msg(2));
        spool.remove("b").expect("acknowledged");
        assert_eq!(spool.pending().iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(gauge.get(), 1);
    }

    #[test]
    fn slots_are_reused_so_a_report_makes_no_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Spool::open(dir.path(), Gauge::default()).expect("open");
        for i in 0..50 {
            spool.put(&format!("r{i}"), &msg(i)).expect("put");
            spool.remove(&format!("r{i}")).expect("remove");
        }
        spool.put("a", &msg(1)).expect("put");
        spool.put("b", &msg(2)).expect("put");
        let files = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(files, 2, "two slots for two pending reports, whatever came before");
        assert_eq!(pending_on_disk(dir.path()), 2);
        drop(spool);
        let spool = Spool::open(dir.path(), Gauge::default()).expect("reopen");
        let ids: Vec<String> = spool.pending().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["a", "b"], "oldest first");
        spool.put("c", &msg(3)).expect("put after a reopen");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 3);
    }

    #[test]
    fn a_report_is_pending_before_its_sync_and_its_slot_is_freed_only_after_sync_and_ack() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Arc::new(Spool::open(dir.path(), Gauge::default()).expect("open"));
        spool.put("warm", &msg(0)).expect("put");
        spool.remove("warm").expect("remove");
        let unsynced = spool.begin("a", &msg(1)).expect("begin").expect("a new report");
        assert!(spool.begin("a", &msg(9)).expect("begin").is_none(), "a second begin of an id is a no-op");
        // Written before the sync: a sidecar killed now finds it at its next start.
        assert_eq!(pending_on_disk(dir.path()), 1);
        let reopened = Spool::open(dir.path(), Gauge::default()).expect("a second look");
        assert_eq!(reopened.pending(), [("a".to_string(), msg(1))]);
        drop(reopened);
        // Acknowledged before its sync is done: no longer pending, but its slot is kept.
        spool.remove("a").expect("ack");
        assert!(spool.pending().is_empty());
        spool.put("b", &msg(2)).expect("put");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            2,
            "the syncing slot was not reused"
        );
        unsynced.sync().expect("sync");
        assert_eq!(pending_on_disk(dir.path()), 1, "the synced and acknowledged slot is free on disk");
        spool.put("c", &msg(3)).expect("put");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 2, "and reused");
        // Synced first, acknowledged later: freed at the acknowledgement.
        let unsynced = spool.begin("d", &msg(4)).expect("begin").expect("a new report");
        unsynced.sync().expect("sync");
        assert_eq!(spool.pending().len(), 3);
        spool.remove("d").expect("ack");
        let ids: Vec<String> = spool.pending().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["b", "c"]);
        assert_eq!(pending_on_disk(dir.path()), 2);
    }

    #[test]
    fn reports_of_an_earlier_version_are_delivered_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = "001700000000000000000-0-old-1.report";
        std::fs::write(dir.path().join(name), msg(5).encode_to_vec()).expect("legacy file");
        let spool = Spool::open(dir.path(), Gauge::default()).expect("open");
        spool.put("new", &msg(6)).expect("put");
        let pending = spool.pending();
        let ids: Vec<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["old-1", "new"]);
        assert_eq!(pending[0].1, msg(5));
        spool.remove("old-1").expect("remove");
        assert!(!dir.path().join(name).exists());
        assert_eq!(pending_on_disk(dir.path()), 1);
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
