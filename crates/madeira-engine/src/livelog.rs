//! Live output of running attempts (issue 14, "Live job output"): the sidecar
//! link appends each chunk of a job's stdout/stderr as it arrives; readers (the
//! console, `logs -f`) read from a byte offset and wait for more. Each attempt
//! keeps up to `max_bytes` (default 1 MiB); older bytes are dropped, and a reader
//! whose offset fell behind gets a marker saying how many. Buffers outlive the
//! attempt (a cancel or a timeout keeps its output) and the last `KEEP_FINISHED`
//! finished ones are kept; all buffers together hold at most `MAX_TOTAL_BYTES`
//! (finished ones are evicted first, then the growing one drops its oldest bytes).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Default bytes kept per attempt.
pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
/// Finished attempts whose output is kept in memory.
const KEEP_FINISHED: usize = 256;
/// Most attempts with a live buffer at once (the oldest finished ones go first).
const MAX_BUFFERS: usize = 4096;
/// Bytes held by all buffers together.
const MAX_TOTAL_BYTES: usize = 256 * 1024 * 1024;

/// (run id, node, attempt).
pub type AttemptKey = (String, String, u32);

/// What a read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSlice {
    /// The bytes from the offset asked for (after a drop marker if bytes were lost).
    pub data: Vec<u8>,
    /// Offset to ask for next.
    pub next_offset: u64,
    /// Bytes between the offset asked for and the oldest byte kept, dropped.
    pub dropped: u64,
    /// The attempt has ended: no more bytes will come.
    pub finished: bool,
}

struct Buffer {
    bytes: VecDeque<u8>,
    /// Offset of `bytes[0]` since the attempt started.
    start: u64,
    finished: bool,
    /// The total written so far (the end offset); changes wake readers.
    end: watch::Sender<u64>,
}

impl Buffer {
    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

#[derive(Default)]
struct Inner {
    buffers: HashMap<AttemptKey, Buffer>,
    finished: VecDeque<AttemptKey>,
    total: usize,
}

impl Inner {
    fn evict_oldest_finished(&mut self) -> bool {
        match self.finished.pop_front() {
            Some(old) => {
                if let Some(b) = self.buffers.remove(&old) {
                    self.total -= b.bytes.len();
                }
                true
            }
            None => false,
        }
    }
}

/// Cheap-to-clone store of live attempt output.
#[derive(Clone)]
pub struct LiveLogs {
    inner: Arc<Mutex<Inner>>,
    max_bytes: usize,
    /// Counts the buffers ever created; a change wakes readers waiting for an
    /// attempt's first output.
    created: Arc<watch::Sender<u64>>,
}

impl Default for LiveLogs {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_BYTES)
    }
}

impl LiveLogs {
    pub fn new(max_bytes: usize) -> Self {
        Self { inner: Arc::default(), max_bytes: max_bytes.max(1), created: Arc::new(watch::Sender::new(0)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a chunk of the attempt's output, dropping the oldest bytes past the cap.
    pub fn append(&self, key: &AttemptKey, data: &[u8]) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if !inner.buffers.contains_key(key)
            && inner.buffers.len() >= MAX_BUFFERS
            && !inner.evict_oldest_finished()
        {
            return;
        }
        while inner.total + data.len() > MAX_TOTAL_BYTES && inner.evict_oldest_finished() {}
        let created = !inner.buffers.contains_key(key);
        let buffer = inner.buffers.entry(key.clone()).or_insert_with(|| Buffer {
            bytes: VecDeque::new(),
            start: 0,
            finished: false,
            end: watch::Sender::new(0),
        });
        if buffer.finished {
            return;
        }
        let before = buffer.bytes.len();
        buffer.bytes.extend(data);
        let others = inner.total - before;
        let cap = self.max_bytes.min(MAX_TOTAL_BYTES.saturating_sub(others));
        let over = buffer.bytes.len().saturating_sub(cap);
        if over > 0 {
            buffer.bytes.drain(..over);
            buffer.start += over as u64;
        }
        inner.total = others + buffer.bytes.len();
        let end = buffer.end();
        buffer.end.send_replace(end);
        drop(guard);
        if created {
            self.created.send_modify(|n| *n += 1);
        }
    }

    /// A receiver woken whenever some attempt shows its first output: a reader
    /// waiting for an attempt that has printed nothing yet waits on it.
    pub fn watch_new(&self) -> watch::Receiver<u64> {
        self.created.subscribe()
    }

    /// Marks the attempt ended (readers stop waiting); kept among the last finished.
    pub fn finish(&self, key: &AttemptKey) {
        let mut inner = self.lock();
        let Some(buffer) = inner.buffers.get_mut(key) else {
            return;
        };
        if buffer.finished {
            return;
        }
        buffer.finished = true;
        let end = buffer.end();
        buffer.end.send_replace(end);
        inner.finished.push_back(key.clone());
        while inner.finished.len() > KEEP_FINISHED {
            inner.evict_oldest_finished();
        }
    }

    /// The output from byte `offset` on, or `None` when nothing was seen of the attempt.
    pub fn read(&self, key: &AttemptKey, offset: u64) -> Option<LogSlice> {
        let inner = self.lock();
        let buffer = inner.buffers.get(key)?;
        let end = buffer.end();
        let from = offset.max(buffer.start).min(end);
        let dropped = buffer.start.saturating_sub(offset);
        let skip = usize::try_from(from - buffer.start).unwrap_or(usize::MAX);
        let mut data = Vec::new();
        if dropped > 0 {
            data.extend_from_slice(format!("[madeira] {dropped} earlier bytes dropped\n").as_bytes());
        }
        data.extend(buffer.bytes.iter().skip(skip));
        Some(LogSlice { data, next_offset: end, dropped, finished: buffer.finished })
    }

    /// A receiver woken whenever the attempt's output grows or it ends (its value is
    /// the end offset); `None` when nothing was seen of the attempt yet.
    pub fn subscribe(&self, key: &AttemptKey) -> Option<watch::Receiver<u64>> {
        self.lock().buffers.get(key).map(|b| b.end.subscribe())
    }

    /// The latest attempt of `node` in `run` with live output.
    pub fn latest_attempt(&self, run_id: &str, node: &str) -> Option<u32> {
        self.lock().buffers.keys().filter(|(r, n, _)| r == run_id && n == node).map(|(_, _, a)| *a).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AttemptKey {
        ("run".into(), "n".into(), 1)
    }

    #[test]
    fn reads_resume_from_an_offset_and_past_the_cap_say_what_was_dropped() {
        let logs = LiveLogs::new(8);
        logs.append(&key(), b"hello ");
        let first = logs.read(&key(), 0).expect("seen");
        assert_eq!((first.data.as_slice(), first.next_offset, first.finished), (&b"hello "[..], 6, false));
        logs.append(&key(), b"world");
        let next = logs.read(&key(), first.next_offset).expect("seen");
        assert_eq!((next.data.as_slice(), next.next_offset, next.dropped), (&b"world"[..], 11, 0));
        let behind = logs.read(&key(), 0).expect("seen");
        assert_eq!(behind.dropped, 3, "only the last 8 bytes are kept");
        assert_eq!(behind.data, b"[madeira] 3 earlier bytes dropped\nlo world".to_vec());
        assert!(logs.read(&("other".into(), "n".into(), 1), 0).is_none());
    }

    #[tokio::test]
    async fn readers_are_woken_by_new_output_and_by_the_end() {
        let logs = LiveLogs::default();
        logs.append(&key(), b"a");
        let mut rx = logs.subscribe(&key()).expect("seen");
        rx.borrow_and_update();
        let writer = logs.clone();
        tokio::spawn(async move { writer.append(&key(), b"b") });
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("woken")
            .expect("open");
        assert_eq!(*rx.borrow_and_update(), 2);
        logs.finish(&key());
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("woken")
            .expect("open");
        let end = logs.read(&key(), 2).expect("seen");
        assert!(end.finished && end.data.is_empty());
        logs.append(&key(), b"late");
        assert_eq!(logs.read(&key(), 0).expect("seen").next_offset, 2, "nothing is appended after the end");
        assert_eq!(logs.latest_attempt("run", "n"), Some(1));
    }

    #[tokio::test]
    async fn a_first_output_wakes_readers_waiting_for_new_attempts() {
        let logs = LiveLogs::default();
        let mut created = logs.watch_new();
        created.borrow_and_update();
        logs.append(&key(), b"a");
        assert!(created.has_changed().expect("open"), "the first chunk announces the attempt");
        created.borrow_and_update();
        logs.append(&key(), b"b");
        assert!(!created.has_changed().expect("open"), "later chunks do not");
    }
}
