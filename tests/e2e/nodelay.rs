//! TCP_NODELAY on the sidecar link, read back from the live sockets of the real
//! processes: `madeira dev --jobs` (its in-process sidecar dials its own link), a
//! separate `madeira sidecar` on a plain link, and (in `tls.rs`) both ends of a TLS
//! link. The option is read with getsockopt on a duplicate of the other process's
//! descriptor (pidfd_getfd), so what is checked is the socket the binary uses, not
//! a copy of its code. Without NODELAY every small report waits for Nagle and the
//! peer's delayed ACK: ~45 ms per sidecar node instead of ~3.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::sidecar::SidecarProc;
use crate::support::{Dev, wait_blocking};

/// TCP_NODELAY of every established TCP socket of process `pid` whose local or
/// remote port is `port`, as `(local port, remote port, nodelay)`.
pub fn link_sockets(pid: u32, port: u16) -> Vec<(u16, u16, bool)> {
    let mut by_inode: HashMap<u64, (u16, u16)> = HashMap::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "01" {
                continue;
            }
            let port_of = |addr: &str| addr.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(local), Some(remote), Ok(inode)) = (port_of(f[1]), port_of(f[2]), f[9].parse())
                && (local == port || remote == port)
            {
                by_inode.insert(inode, (local, remote));
            }
        }
    }
    // SAFETY: pidfd_open on a pid we started; the returned fd is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) } as libc::c_int;
    assert!(pidfd >= 0, "pidfd_open({pid}): {}", std::io::Error::last_os_error());
    let mut found = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("read /proc/PID/fd").flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let target = target.to_string_lossy().to_string();
        let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) else { continue };
        let Some(&(local, remote)) = inode.parse().ok().and_then(|i: u64| by_inode.get(&i)) else { continue };
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<libc::c_int>() else { continue };
        // SAFETY: duplicates the other process's descriptor into ours (we are its
        // parent, or root); the duplicate is closed after one getsockopt.
        let ours = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) } as libc::c_int;
        assert!(ours >= 0, "pidfd_getfd({pid}, {fd}): {}", std::io::Error::last_os_error());
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a c_int-sized buffer on a valid socket fd.
        let rc = unsafe {
            libc::getsockopt(
                ours,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        // SAFETY: closing the duplicate we own.
        unsafe { libc::close(ours) };
        assert_eq!(rc, 0, "getsockopt(TCP_NODELAY): {}", std::io::Error::last_os_error());
        found.push((local, remote, value != 0));
    }
    // SAFETY: closing the pidfd we own.
    unsafe { libc::close(pidfd) };
    found
}

/// Waits until `pid` has at least `n` established sockets on `port`, then returns them.
pub fn wait_link_sockets(pid: u32, port: u16, n: usize) -> Vec<(u16, u16, bool)> {
    let what = format!("pid {pid}: {n} link sockets on :{port}");
    wait_blocking(Duration::from_secs(20), &what, || {
        let sockets = link_sockets(pid, port);
        (sockets.len() >= n).then_some(sockets)
    })
}

pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port in host:port")
}

#[tokio::test]
async fn every_plain_link_socket_has_nodelay_on_both_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let jobs = d.join("jobs.yaml");
    std::fs::write(&jobs, "jobs:\n  ok:\n    command: [\"/bin/true\"]\n").expect("write jobs");
    let dev = Dev::start_with(d, &["--jobs", jobs.to_str().expect("utf-8 path")]);
    let port = port_of(&dev.grpc);
    // The in-process sidecar's dialled socket and the listener's accepted one.
    let own = wait_link_sockets(dev.child.id(), port, 2);
    assert!(own.iter().all(|s| s.2), "dev's link sockets without TCP_NODELAY: {own:?}");

    let sidecar =
        SidecarProc::start(d, "s-nodelay", &dev.grpc, "jobs:\n  ok:\n    command: [\"/bin/true\"]\n");
    let dialled = wait_link_sockets(sidecar.child.id(), port, 1);
    assert!(dialled.iter().all(|s| s.2), "the sidecar's dialled socket without TCP_NODELAY: {dialled:?}");
    let accepted = wait_link_sockets(dev.child.id(), port, own.len() + 1);
    assert!(accepted.iter().all(|s| s.2), "an accepted link socket without TCP_NODELAY: {accepted:?}");

    // And the link answers quickly: a sidecar node runs end to end.
    dev.put_flow("flow: nd\nnodes:\n  a: {run: {sidecar: {group: billing, job: ok}}}\n").await;
    let run = dev.finished(&dev.trigger("nd", json!({})).await).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
}
