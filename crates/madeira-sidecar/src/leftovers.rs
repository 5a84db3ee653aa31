//! The job process groups a sidecar leaves behind when it dies without a
//! shutdown (`kill -9`, OOM killer, crash). Each job's process group id, its
//! leader's start time and the attempt it runs are recorded in the spool
//! (`<spool_dir>/jobs/<assignment>.job`, 0600 in a 0700 directory) as soon as the
//! job is spawned, and removed once its result is spooled.
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

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use madeira_proto::v1::{Assignment, AttemptResult, Outcome};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::runner::group;
use crate::spool::SpoolError;

/// Grace for a leftover job whose job is no longer declared.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// Largest record read.
const MAX_RECORD: u64 = 64 * 1024;

/// One started job, as recorded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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

/// The records directory.
pub struct Leftovers {
    dir: PathBuf,
}

impl Leftovers {
    pub fn open(dir: &Path) -> Result<Self, SpoolError> {
        crate::spool::private_dir(dir, 0o700)?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    fn path(&self, assignment_id: &str) -> PathBuf {
        let name: String = assignment_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        self.dir.join(format!("{name}.job"))
    }

    /// Records that `a` runs as process group `pgid`. Written and renamed into
    /// place before returning, not fsynced: the record serves the next start of a
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
        let path = self.path(&a.assignment_id);
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec(&record).map_err(std::io::Error::other).and_then(|bytes| {
            use std::io::Write;
            let mut file =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            file.write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        });
        if let Err(e) = written {
            warn!(file = %path.display(), error = %e, "cannot record a started job; a kill -9 now would leave it unsupervised");
        }
    }

    /// The job's result is spooled: forget it.
    pub fn clear(&self, assignment_id: &str) {
        let path = self.path(assignment_id);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(file = %path.display(), error = %e, "cannot remove a finished job's record");
        }
    }

    /// What an earlier process recorded and did not clear.
    pub fn left(&self) -> Vec<JobRecord> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
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

/// Field 22 (starttime) of /proc/PID/stat.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
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
}
