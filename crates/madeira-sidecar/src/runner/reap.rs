//! Waiting for a job to exit. A thread blocked on the job is woken by the
//! kernel as the job exits; tokio's reaper learns it from the runtime's poller
//! instead, and its spawn registers the child there first: measured on this
//! 2-CPU machine, spawning `/bin/true` and awaiting it cost 0.81–0.93 ms that
//! way against 0.73–0.81 ms spawned by `std` and awaited by a blocking thread
//! (the floor, spawn and a blocking wait on one thread: 0.68–0.75; `madeira
//! bench`, issue 39). So a job's first `FAST_WAIT` is awaited on a blocking
//! thread polling the job's pidfd, for at most `FAST_THREADS` jobs at once; a job
//! still running after it (or beyond that number) is awaited through its pidfd
//! on the runtime's poller, holding no thread. Without pidfds (Linux before
//! 5.3) a blocking thread waits for the whole run.
//!
//! Unlike tokio's `Child`, a `std` child whose supervising future is dropped
//! before it exits is not reaped later by this process (it stays a zombie until
//! the sidecar exits). Attempts are never dropped mid-run: the sidecar cancels
//! them and waits (`worker.rs`); only a runtime shutting down drops them, and
//! then the next start reclaims the group (`leftovers.rs`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// How long a job is awaited on a blocking thread before the poller takes over.
const FAST_WAIT: Duration = Duration::from_millis(50);
/// Jobs awaited on blocking threads at once (the rest go to the poller).
const FAST_THREADS: usize = 4;

static FAST_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// One of the `FAST_THREADS` places, given back when dropped.
struct FastPlace;

impl FastPlace {
    fn take() -> Option<Self> {
        FAST_IN_USE
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < FAST_THREADS).then_some(n + 1))
            .ok()
            .map(|_| FastPlace)
    }
}

impl Drop for FastPlace {
    fn drop(&mut self) {
        FAST_IN_USE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until `child` exits, and reaps it. Dropped before that, it leaves the
/// child unreaped (a blocking poll under way ends within `FAST_WAIT`), so it can
/// be called again, e.g. after the job's group was signalled.
pub(super) async fn exit(child: &mut Child) -> io::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let Some(pidfd) = pidfd_open(child.id()) else {
        let pid = child.id();
        tokio::task::spawn_blocking(move || wait_exited(pid)).await.map_err(io::Error::other)??;
        return child.wait();
    };
    let pidfd = Arc::new(pidfd);
    if let Some(place) = FastPlace::take() {
        let fd = pidfd.clone();
        let exited = tokio::task::spawn_blocking(move || {
            let _place = place;
            readable_within(&fd, FAST_WAIT)
        })
        .await
        .unwrap_or(false);
        if exited {
            return child.wait();
        }
    }
    // SAFETY: the descriptor is an `OwnedFd` behind an `Arc` that the `AsyncFd`
    // holds: open, and the same, for as long as the `AsyncFd` lives.
    let fd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }?;
    loop {
        let mut ready = fd.readable().await?;
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        ready.clear_ready();
    }
}

/// A pidfd of `pid` (a child not reaped yet, so the id is still its own); `None`
/// where the kernel has none.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process behind `pidfd` exits within `limit` (false on a signal).
fn readable_within(pidfd: &OwnedFd, limit: Duration) -> bool {
    let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, for the duration of the call.
    let n = unsafe { libc::poll(&mut poll, 1, ms) };
    n > 0 && poll.revents & libc::POLLIN != 0
}

/// Blocks until `pid` (a child of this process) has exited, leaving it to be
/// reaped by its `Child`.
fn wait_exited(pid: u32) -> io::Result<()> {
    let pid = libc::id_t::from(pid);
    loop {
        // SAFETY: an all-zero siginfo_t is valid for waitid(2) to fill in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` outlives the call; WNOWAIT leaves the child waitable.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Child {
        std::process::Command::new("/bin/sh").args(["-c", script]).spawn().expect("spawn sh")
    }

    #[test]
    fn without_a_pidfd_a_blocking_wait_leaves_the_child_to_be_reaped_by_its_child() {
        // The path for kernels without pidfd_open: waitid(WNOWAIT), then `Child::wait`.
        let mut child = sh("sleep 0.05; exit 7");
        wait_exited(child.id()).expect("waitid");
        assert_eq!(child.wait().expect("reaped").code(), Some(7));
    }

    #[tokio::test]
    async fn a_dropped_wait_can_be_waited_again() {
        let mut child = sh("sleep 0.3; exit 5");
        let first = tokio::time::timeout(Duration::from_millis(20), exit(&mut child)).await;
        assert!(first.is_err(), "still running at 20 ms");
        assert_eq!(exit(&mut child).await.expect("exit").code(), Some(5));
        let alive = pidfd_open(std::process::id()).expect("this process's pidfd");
        assert!(!readable_within(&alive, Duration::ZERO), "a live process's pidfd is not readable");
    }
}
