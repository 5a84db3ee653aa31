//! Attempt directories, recycled. Removing a directory frees its block, and on a
//! file system mounted with `discard` (common on cloud disks) that free waits for
//! a discard request to the device: `rmdir` measured 1.8–3.7 ms here, against
//! ~20 µs for a `mkdir` and ~10 µs for a `rename`, and it blocked the runtime
//! worker that ran it once per job. So an attempt's directory, once its result is
//! on its way, is emptied (its input, the output the job wrote, whatever else it
//! left) and renamed to a spare (`.spare-<pid>-<n>` in the work root, a name no
//! attempt has: theirs are `[A-Za-z0-9_-]`); the next attempt's directory is a
//! spare renamed into place, emptied and 0700 as a new one is. Only a directory
//! owned by the sidecar's own user is recycled (one handed to a job's `user` is
//! removed as before), at most `MAX_SPARES` per work root; spares left by an
//! earlier process are removed at start (`clear_spares`).
//!
//! The input file is kept through the recycling (a regular file of the sidecar's
//! user with no other link; anything else there is removed) and written over by
//! the next attempt, so a job that finds a spare (the usual case once a sidecar has
//! run as many jobs at once as it runs now) makes no inode of the sidecar's own:
//! on ext4 without a journal, creating a file looks past every inode deleted in the
//! last minute or more for a free one (`recently_deleted`),
//! and with one file made and removed per job that search grew with the jobs run
//! (`find_inode_bit`, `recently_deleted` in a profile of a busy sidecar). A spare
//! holds its last job's input until the next attempt writes its own, in the
//! sidecar's 0700 work root, as the spool holds the results.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Spares kept per work root (the rest are removed as before).
const MAX_SPARES: usize = 32;
const SPARE_PREFIX: &str = ".spare-";
/// The one entry a spare keeps (`spawn.rs` writes it over).
pub(super) const INPUT: &str = "input.json";

/// Spare directories of every work root in this process, by path.
static SPARES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

fn spares() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    SPARES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `dir` from a spare of its work root when there is one; false when there
/// is none (the caller makes it anew). The spare is empty (`recycle` emptied it).
pub(super) fn reuse(dir: &Path) -> bool {
    let Some(root) = dir.parent() else {
        return false;
    };
    loop {
        let spare = {
            let mut spares = spares();
            match spares.iter().position(|s| s.parent() == Some(root)) {
                Some(i) => spares.swap_remove(i),
                None => return false,
            }
        };
        match std::fs::rename(&spare, dir) {
            // Checked again: a job's stray grandchild (outside its process group)
            // may have written into it since; then it is not used.
            Ok(()) if is_fresh(dir) => return true,
            Ok(()) => {
                tracing::warn!(dir = %dir.display(), "a spare attempt directory was written to after it was emptied; made anew");
                let _ = std::fs::remove_dir_all(dir);
                return false;
            }
            // A spare that vanished is dropped; try the next.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // `dir` is there already, and not empty: it is made (and found) as before.
            Err(_) => {
                spares().push(spare);
                return false;
            }
        }
    }
}

/// Empties `dir` and keeps it as a spare of `work_root`; false when it is not
/// recycled (another user's, not a plain directory, the pool full, an entry that
/// cannot be removed): the caller removes it.
pub(super) fn recycle(work_root: &Path, dir: &Path) -> bool {
    if spares().iter().filter(|s| s.parent() == Some(work_root)).count() >= MAX_SPARES {
        return false;
    }
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    // SAFETY: geteuid(2) has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != euid {
        return false;
    }
    if !empty_but_input(dir) {
        return false;
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let spare = work_root.join(format!("{SPARE_PREFIX}{}-{n}", std::process::id()));
    if std::fs::rename(dir, &spare).is_err() {
        return false;
    }
    spares().push(spare);
    true
}

/// The input file a spare may keep: a regular file (not a link) of this user
/// with no other name.
fn kept_input(entry: &std::fs::DirEntry) -> bool {
    // SAFETY: geteuid(2) has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    entry.file_name() == INPUT
        && entry.metadata().is_ok_and(|m| m.file_type().is_file() && m.uid() == euid && m.nlink() == 1)
}

/// Holds nothing but a kept input file.
fn is_fresh(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| entries.into_iter().all(|e| e.is_ok_and(|e| kept_input(&e))))
}

/// Removes every entry of `dir` but a kept input file (never following a
/// symbolic link out of it).
fn empty_but_input(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries {
        let Ok(entry) = entry else {
            return false;
        };
        if kept_input(&entry) {
            continue;
        }
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        if removed.is_err() {
            return false;
        }
    }
    true
}

/// Removes the spares an earlier process left in `work_root` (and forgets any of
/// this process's, for a sidecar started again in the same process).
pub fn clear_spares(work_root: &Path) {
    spares().retain(|s| s.parent() != Some(work_root));
    let Ok(entries) = std::fs::read_dir(work_root) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(SPARE_PREFIX) {
            let path = entry.path();
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::warn!(dir = %path.display(), error = %e, "cannot remove a spare attempt directory");
            }
        }
    }
}

/// How many spares `work_root` has (tests).
#[cfg(test)]
pub(super) fn spare_count(work_root: &Path) -> usize {
    spares().iter().filter(|s| s.parent() == Some(work_root)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_written_to_after_it_was_emptied_is_not_used() {
        let root = tempfile::tempdir().expect("tempdir");
        let first = root.path().join("a-1");
        std::fs::create_dir(&first).expect("dir");
        std::fs::write(first.join("output.json"), b"{}").expect("output");
        assert!(recycle(root.path(), &first), "emptied and kept");
        let spare = std::fs::read_dir(root.path())
            .expect("root")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(SPARE_PREFIX)))
            .expect("a spare");
        assert!(is_fresh(&spare));
        // A stray grandchild of the last job writes into it.
        std::fs::write(spare.join("late"), b"x").expect("late write");
        let next = root.path().join("a-2");
        assert!(!reuse(&next), "not used");
        assert!(!next.exists(), "removed: the caller makes the directory anew");
        assert_eq!(spare_count(root.path()), 0);
    }
}
