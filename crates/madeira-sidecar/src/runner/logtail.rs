//! The last N bytes of an attempt's interleaved stdout and stderr.

use std::collections::VecDeque;

/// A byte ring keeping only the most recent `max` bytes.
#[derive(Debug)]
pub struct LogTail {
    buf: VecDeque<u8>,
    max: usize,
    /// Bytes seen in total (kept or dropped).
    pub total: u64,
}

impl LogTail {
    pub fn new(max: usize) -> Self {
        Self { buf: VecDeque::with_capacity(max.min(8192)), max, total: 0 }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = if data.len() > self.max { &data[data.len() - self.max..] } else { data };
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.max);
        self.buf.drain(..overflow);
        self.buf.extend(data);
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.buf.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes() {
        let mut t = LogTail::new(4);
        t.push(b"ab");
        t.push(b"cde");
        assert_eq!(t.bytes(), b"bcde");
        t.push(b"0123456789");
        assert_eq!(t.bytes(), b"6789");
        assert_eq!(t.total, 15);
    }
}
