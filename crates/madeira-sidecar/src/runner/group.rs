//! Process groups: signal a whole group, and tell when every process of it is gone
//! (zombies waiting for a reaper do not count: they no longer run).

use std::time::{Duration, Instant};

/// Sends `signal` to every process of group `pgid`. False when the group is empty.
pub fn signal(pgid: u32, signal: i32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid only sends a signal; it touches no memory.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// Whether any process of group `pgid` still runs.
pub fn alive(pgid: u32) -> bool {
    if !signal(pgid, 0) {
        return false;
    }
    live_members(pgid).unwrap_or(true)
}

/// Linux: whether /proc lists a member of `pgid` that is not a zombie. `None` when
/// /proc cannot be read (then the signal-0 probe alone decides).
fn live_members(pgid: u32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<u32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            return Some(true);
        }
    }
    Some(false)
}

/// Waits until group `pgid` is gone or `deadline` passes; true when gone.
pub async fn wait_gone(pgid: u32, deadline: Instant) -> bool {
    let mut pause = Duration::from_millis(2);
    loop {
        if !alive(pgid) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// SIGTERM to the group, up to `grace` for it to go, then SIGKILL; returns once
/// every process of the group is gone. True when SIGKILL was needed.
pub async fn terminate(pgid: u32, grace: Duration) -> bool {
    if !signal(pgid, libc::SIGTERM) {
        return false;
    }
    if wait_gone(pgid, Instant::now() + grace).await {
        return false;
    }
    loop {
        signal(pgid, libc::SIGKILL);
        if wait_gone(pgid, Instant::now() + Duration::from_secs(5)).await {
            return true;
        }
        tracing::warn!(pgid, "process group survives SIGKILL (stuck in the kernel?); still waiting");
    }
}
