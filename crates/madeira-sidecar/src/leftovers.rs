//! The job process groups a sidecar leaves behind when it dies without a
//! shutdown (`kill -9`, OOM killer, crash). Each job's process group id, its
//! leader's start time and the attempt it runs are recorded in the spool
//! (`<spool_dir>/jobs/`, a 0700 directory) as soon as the job is spawned, and
//! forgotten once its result is spooled. A record is written in place over a free
//! slot file (`job-NNNNN.slot`, 0600; the spool's slot format, `slots.rs`) and
//! freed by zeroing its magic, so a job makes no file, rename or unlink: creating
//! a file cost ~20 µs here (ext4 looks past every recently deleted inode for a free
//! one) and a job made and removed two. Records of earlier versions (one
//! `<assignment>.job` file each) are still read and removed.
//!
//! At the next start, before connecting, the sidecar reclaims every recorded
//! group: the exit status of a process is only available to its parent, and the
//! new sidecar is not that parent, so a leftover job's outcome cannot be known.
//! The group gets SIGTERM, the job's `grace`, then SIGKILL, and the sidecar waits
//! until every process of it is gone; then it spools a RETRYABLE result for the
//! attempt ("the sidecar restarted while the job ran"), so the node's retry policy
//! decides what happens next. No job is left running unsupervised, and an attempt
//! never runs twice at once on this host: new work is taken only after the
//! reclaim. A job that had already ended when the sidecar died is reported the
//! same way (its result was never seen).
//!
//! Process ids are not reused while a process group of that id has members, so a
//! live group with the recorded id is the job's unless its leader is alive with a
//! different start time (the group ended and the id was reused), or the host
//! rebooted since (`boot_id` differs).
//!
//! What cannot be covered: the microseconds between `fork` and the record being
//! written — a sidecar killed exactly then leaves that one job unrecorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use madeira_proto::v1::{Assignment, AttemptResult, Outcome};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::runner::group;
use crate::slots::{self, Order};
use crate::spool::SpoolError;

/// Grace for a leftover job whose job is no longer declared.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// Largest record read.
const MAX_RECORD: u64 = 64 * 1024;

/// One started job, as recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct JobRecord {
    pub pgid: u32,
    /// The group leader's start time (clock ticks since boot, /proc/PID/stat).
    pub start_ticks: u64,
    pub boot_id: String,
    pub assignment_id: String,
    pub job: String,
    pub run_id: String,
    pub node: String,
    pub attempt: u32,
    pub idempotency_key: String,
    pub shard_index: u32,
    pub epoch: u64,
}

/// The records directory and its slots.
pub struct Leftovers {
    dir: PathBuf,
    slots: Mutex<Slots>,
}

/// The slot files: open, which are free, and which assignment each other holds.
#[derive(Default)]
struct Slots {
    files: Vec<Option<Arc<std::fs::File>>>,
    free: Vec<usize>,
    held: HashMap<String, usize>,
    seq: u64,
}

fn slot_name(n: usize) -> String {
    format!("job-{n:05}.slot")
}

fn slot_number(name: &str) -> Option<usize> {
    name.strip_prefix("job-")?.strip_suffix(".slot")?.parse().ok()
}

/// The job record in a slot; `None` when the slot is free, torn or unreadable.
fn read_slot(file: &std::fs::File) -> Option<JobRecord> {
    let record = slots::read_record(file).ok()??;
    serde_json::from_slice(&record.payload).ok()
}

impl Leftovers {
    /// Opens the directory (made 0700) and its slot files: a slot holding a
    /// record stays held by its assignment until `clear`, the others are free.
    pub fn open(dir: &Path) -> Result<Self, SpoolError> {
        crate::spool::private_dir(dir, 0o700)?;
        let mut slots = Slots::default();
        let entries = std::fs::read_dir(dir).map_err(crate::spool::io(dir))?;
        for entry in entries.flatten() {
            let Some(n) = entry.file_name().to_str().and_then(slot_number) else {
                continue;
            };
            let path = entry.path();
            let file = match slots::open_slot(&path) {
                Ok(file) => file,
                Err(e) => {
                    warn!(file = %path.display(), error = %e, "cannot open a job record slot; it is not used");
                    continue;
                }
            };
            if slots.files.len() <= n {
                slots.files.resize(n + 1, None);
            }
            match read_slot(&file) {
                Some(record) => {
                    slots.held.insert(record.assignment_id, n);
                }
                None => slots.free.push(n),
            }
            slots.files[n] = Some(Arc::new(file));
        }
        Ok(Self { dir: dir.to_path_buf(), slots: Mutex::new(slots) })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An earlier version's record file of `assignment_id`.
    fn legacy_path(&self, assignment_id: &str) -> PathBuf {
        let name: String = assignment_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        self.dir.join(format!("{name}.job"))
    }

    /// Records that `a` runs as process group `pgid`: written over a free slot
    /// before returning, not fsynced: the record serves the next start of a
    /// sidecar process that died (its writes are in the page cache, which outlives
    /// the process); after a host crash there is nothing to reclaim (the job died
    /// with the host, and a record of an earlier boot is not taken for a live
    /// group), and the control plane moves the attempt the sidecar comes back
    /// without. An fsync here cost one disk flush per job on the dispatch path.
    pub fn record(&self, a: &Assignment, pgid: u32) {
        let record = JobRecord {
            pgid,
            start_ticks: start_ticks(pgid).unwrap_or(0),
            boot_id: boot_id(),
            assignment_id: a.assignment_id.clone(),
            job: a.job.clone(),
            run_id: a.run_id.clone(),
            node: a.node.clone(),
            attempt: a.attempt,
            idempotency_key: a.idempotency_key.clone(),
            shard_index: a.shard_index,
            epoch: a.epoch,
        };
        let (n, file, order) = {
            let mut slots = self.slots();
            let n = slots.free.pop().unwrap_or_else(|| {
                slots.files.push(None);
                slots.files.len() - 1
            });
            slots.seq += 1;
            let file = slots.files[n].clone();
            (n, file, Order::now(slots.seq))
        };
        let path = self.dir.join(slot_name(n));
        let written = serde_json::to_vec(&record).map_err(std::io::Error::other).and_then(|bytes| {
            let file = match file {
                Some(file) => file,
                None => Arc::new(slots::create_slot(&path)?),
            };
            slots::write_record(&file, order, &a.assignment_id, &bytes).map(|()| file)
        });
        let mut slots = self.slots();
        match written {
            Ok(file) => {
                slots.files[n] = Some(file);
                slots.held.insert(a.assignment_id.clone(), n);
            }
            Err(e) => {
                // The slot's content is unknown: it is taken again only once it has a file.
                if slots.files[n].is_some() {
                    slots.free.push(n);
                }
                warn!(file = %path.display(), error = %e, "cannot record a started job; a kill -9 now would leave it unsupervised");
            }
        }
    }

    /// The job's result is spooled: forget it.
    pub fn clear(&self, assignment_id: &str) {
        let held = {
            let mut slots = self.slots();
            slots.held.remove(assignment_id).and_then(|n| slots.files[n].clone().map(|f| (n, f)))
        };
        let Some((n, file)) = held else {
            let path = self.legacy_path(assignment_id);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                warn!(file = %path.display(), error = %e, "cannot remove a finished job's record");
            }
            return;
        };
        match slots::mark_free(&file) {
            Ok(()) => self.slots().free.push(n),
            // Left held: its record would be reclaimed (and refused) after a restart.
            Err(e) => {
                warn!(file = %self.dir.join(slot_name(n)).display(), error = %e, "cannot free a finished job's record")
            }
        }
    }

    /// What an earlier process recorded and did not clear.
    pub fn left(&self) -> Vec<JobRecord> {
        let held: Vec<Arc<std::fs::File>> = {
            let slots = self.slots();
            slots.held.values().filter_map(|n| slots.files[*n].clone()).collect()
        };
        let mut out: Vec<JobRecord> = held.iter().filter_map(|f| read_slot(f)).collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("job") => {}
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                _ => continue,
            }
            let read =
                entry.metadata().ok().filter(|m| m.is_file() && m.len() <= MAX_RECORD).and_then(|_| {
                    std::fs::read(&path)
                        .ok()
                        .and_then(|bytes| serde_json::from_slice::<JobRecord>(&bytes).ok())
                });
            match read {
                Some(record) => out.push(record),
                None => {
                    warn!(file = %path.display(), "unreadable job record removed");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out
    }

    /// Stops every process group left by an earlier process (SIGTERM, `grace_of`
    /// its job, SIGKILL) and returns the RETRYABLE results to spool for them;
    /// their records are removed once the caller has spooled the results
    /// (`clear`). `spooled(assignment)` says a result of it is already spooled.
    pub async fn reclaim(
        &self,
        grace_of: impl Fn(&str) -> Option<Duration>,
        spooled: impl Fn(&str) -> bool,
    ) -> Vec<AttemptResult> {
        let boot = boot_id();
        let mut results = Vec::new();
        for r in self.left() {
            let ours = r.boot_id == boot && owns_group(&r);
            let started = Instant::now();
            let killed = ours && group::alive(r.pgid);
            if killed {
                let grace = grace_of(&r.job).unwrap_or(DEFAULT_GRACE);
                warn!(
                    pgid = r.pgid, job = %r.job, run_id = %r.run_id, node = %r.node, attempt = r.attempt,
                    "a job left running by an earlier sidecar process: stopping its process group"
                );
                group::terminate(r.pgid, grace).await;
            }
            if spooled(&r.assignment_id) {
                // It ended and its result was spooled just before the sidecar died.
                self.clear(&r.assignment_id);
                continue;
            }
            let what = if killed { "its process group was stopped" } else { "its process had already ended" };
            let error = format!(
                "the sidecar restarted while the job ran (pid {}); {what}. A job's exit status is known only to \
                 its parent, so this attempt is reported lost and retried per the node's retry policy",
                r.pgid
            );
            info!(job = %r.job, run_id = %r.run_id, node = %r.node, attempt = r.attempt, killed, "leftover job reported lost");
            results.push(AttemptResult {
                report_id: uuid::Uuid::now_v7().to_string(),
                assignment_id: r.assignment_id,
                run_id: r.run_id,
                node: r.node,
                attempt: r.attempt,
                idempotency_key: r.idempotency_key,
                shard_index: r.shard_index,
                outcome: Outcome::Retryable as i32,
                exit_code: None,
                log_tail: format!("[madeira] {error}\n").into_bytes(),
                error,
                outputs_json: "{}".into(),
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                job: r.job,
                epoch: r.epoch,
            });
        }
        results
    }
}

/// The group is still the job's: its leader is gone (the id cannot be reused while
/// the group has members) or is the very process recorded.
fn owns_group(r: &JobRecord) -> bool {
    match start_ticks(r.pgid) {
        Some(now) => r.start_ticks == 0 || now == r.start_ticks,
        None => true,
    }
}

/// Field 22 (starttime) of /proc/PID/stat, read into a buffer that holds the
/// whole line (`read_to_string` sizes its buffer from the file's size, which
/// procfs reports as 0, and grew it over six reads: this runs once per job).
fn start_ticks(pid: u32) -> Option<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    let stat = std::str::from_utf8(&buf[..len]).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // After `comm`: state is field 3, so starttime (22) is the 20th from here.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// This boot's id, read once: it cannot change while the process lives.
fn boot_id() -> String {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[tokio::test]
    async fn a_recorded_group_is_stopped_and_reported_lost_unless_its_result_is_spooled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let leftovers = Leftovers::open(&dir.path().join("jobs")).expect("open");
        let child =
            std::process::Command::new("/bin/sleep").arg("60").process_group(0).spawn().expect("spawn sleep");
        let pid = child.id();
        let a = Assignment {
            assignment_id: "a/1".into(),
            job: "work".into(),
            run_id: "r".into(),
            node: "n".into(),
            attempt: 2,
            idempotency_key: "r:n:v1".into(),
            epoch: 7,
            ..Default::default()
        };
        leftovers.record(&a, pid);
        let done = Assignment { assignment_id: "a/2".into(), ..a.clone() };
        leftovers.record(&done, pid);
        assert_eq!(leftovers.left().len(), 2);
        assert!(start_ticks(pid).is_some_and(|t| t > 0));

        let results = leftovers.reclaim(|_| Some(Duration::from_millis(200)), |id| id == "a/2").await;
        assert!(!group::alive(pid), "the leftover group is gone");
        assert_eq!(results.len(), 1, "the one whose result was spooled is not reported again");
        let r = &results[0];
        assert_eq!((r.assignment_id.as_str(), r.attempt, r.epoch), ("a/1", 2, 7));
        assert_eq!(r.outcome, Outcome::Retryable as i32);
        assert!(r.error.contains("sidecar restarted"), "{}", r.error);
        leftovers.clear("a/1");
        assert!(leftovers.left().is_empty());
        // Reap our own child (the test process is its parent).
        let mut child = child;
        let _ = child.wait();
    }

    #[test]
    fn records_reuse_their_slots_and_a_new_process_reads_them_and_old_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let jobs = dir.path().join("jobs");
        let leftovers = Leftovers::open(&jobs).expect("open");
        let a = |id: &str| Assignment { assignment_id: id.into(), job: "work".into(), ..Default::default() };
        for i in 0..5 {
            let id = format!("done/{i}");
            leftovers.record(&a(&id), 4_000_000);
            leftovers.clear(&id);
        }
        leftovers.record(&a("left/1"), 4_000_001);
        leftovers.record(&a("left/2"), 4_000_002);
        let files = || std::fs::read_dir(&jobs).expect("read jobs").count();
        assert_eq!(files(), 2, "one slot file per job running at once, none made per job");
        // An earlier version's record, one file per job.
        let legacy = JobRecord { pgid: 4_000_003, assignment_id: "old/1".into(), ..Default::default() };
        std::fs::write(jobs.join("old_1.job"), serde_json::to_vec(&legacy).expect("json")).expect("write");
        drop(leftovers);

        // The next process: what was left, its own records and the old file.
        let leftovers = Leftovers::open(&jobs).expect("open again");
        let mut left: Vec<String> = leftovers.left().into_iter().map(|r| r.assignment_id).collect();
        left.sort();
        assert_eq!(left, ["left/1", "left/2", "old/1"]);
        for id in &left {
            leftovers.clear(id);
        }
        assert!(leftovers.left().is_empty());
        assert_eq!(files(), 2, "the old file is removed, the slots stay for reuse");
        leftovers.record(&a("next/1"), 4_000_004);
        assert_eq!(files(), 2, "a freed slot is written over");
        assert_eq!(leftovers.left().len(), 1);
    }
}
