//! The spool's slot files: one report per file, written in place over a free
//! slot (so the usual report changes no directory and no file size and is made
//! durable by one `fdatasync`). A record is a header (magic, checksum, order, id
//! and payload lengths), the report id and the encoded report; a torn write fails
//! its checksum and the slot counts as free. A free slot has a zero magic.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

const MAGIC: [u8; 4] = *b"MDS1";
const HEADER: usize = 36;
/// Largest record read back (a result carries at most 64 KiB of log and 1 MiB of outputs).
const MAX_RECORD: u64 = 8 * 1024 * 1024;

/// Where a report sits among the pending ones: time of spooling, then sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Order {
    pub millis: u64,
    pub seq: u64,
}

impl Order {
    pub fn now(seq: u64) -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self { millis, seq }
    }

    /// The order of an earlier version's `<millis:15><seq:6>-<seq>-<id>` file name.
    pub fn of_legacy_name(stem: &str) -> Self {
        let digits = |r: std::ops::Range<usize>| stem.get(r).and_then(|d| d.parse().ok()).unwrap_or(0);
        Self { millis: digits(0..15), seq: digits(15..21) }
    }
}

/// A report read from a slot.
pub(crate) struct Record {
    pub order: Order,
    pub id: String,
    pub payload: Vec<u8>,
}

pub(crate) fn slot_name(n: usize) -> String {
    format!("slot-{n:05}.spool")
}

pub(crate) fn slot_number(name: &str) -> Option<usize> {
    name.strip_prefix("slot-")?.strip_suffix(".spool")?.parse().ok()
}

pub(crate) fn open_slot(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(true).open(path)
}

/// Creates slot file `path` (0600).
pub(crate) fn create_slot(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)
}

/// FNV-1a, 64 bits: enough to tell a torn write.
fn checksum(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Writes the record at the start of `file` (not synced).
pub(crate) fn write_record(
    file: &std::fs::File,
    order: Order,
    id: &str,
    payload: &[u8],
) -> std::io::Result<()> {
    let too_big = || std::io::Error::other("report too large for the spool");
    let id_len = u32::try_from(id.len()).map_err(|_| too_big())?;
    let len = u32::try_from(payload.len()).map_err(|_| too_big())?;
    let mut body = Vec::with_capacity(HEADER + id.len() + payload.len());
    body.extend_from_slice(&MAGIC);
    body.extend_from_slice(&[0; 8]);
    body.extend_from_slice(&order.millis.to_le_bytes());
    body.extend_from_slice(&order.seq.to_le_bytes());
    body.extend_from_slice(&id_len.to_le_bytes());
    body.extend_from_slice(&len.to_le_bytes());
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(payload);
    let sum = checksum(&[&body[12..]]);
    body[4..12].copy_from_slice(&sum.to_le_bytes());
    file.write_all_at(&body, 0)
}

/// Marks the slot free (not synced).
pub(crate) fn mark_free(file: &std::fs::File) -> std::io::Result<()> {
    file.write_all_at(&[0; 4], 0)
}

/// The record in `file`; `None` when the slot is free or its record torn.
pub(crate) fn read_record(file: &std::fs::File) -> std::io::Result<Option<Record>> {
    let size = file.metadata()?.len().min(MAX_RECORD);
    if size < HEADER as u64 {
        return Ok(None);
    }
    let mut head = [0u8; HEADER];
    file.read_exact_at(&mut head, 0)?;
    if head[..4] != MAGIC {
        return Ok(None);
    }
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]) as u64;
    let long = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or([0; 8]));
    let (id_len, len) = (word(28), word(32));
    if HEADER as u64 + id_len + len > size {
        return Ok(None);
    }
    let mut rest = vec![0u8; (id_len + len) as usize];
    file.read_exact_at(&mut rest, HEADER as u64)?;
    if checksum(&[&head[12..], &rest]) != long(4) {
        return Ok(None);
    }
    let payload = rest.split_off(id_len as usize);
    let Ok(id) = String::from_utf8(rest) else {
        return Ok(None);
    };
    Ok(Some(Record { order: Order { millis: long(12), seq: long(20) }, id, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_torn_or_freed_one_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(slot_name(0));
        let file = create_slot(&path).expect("create");
        let order = Order { millis: 7, seq: 3 };
        write_record(&file, order, "r1", &[1; 300]).expect("write");
        let record = read_record(&file).expect("read").expect("a record");
        assert_eq!((record.order, record.id.as_str(), record.payload.len()), (order, "r1", 300));
        // A shorter record over a longer one: the stale tail is ignored.
        write_record(&file, order, "r2", b"xy").expect("write");
        assert_eq!(read_record(&file).expect("read").expect("a record").payload, b"xy");
        // A torn write: one payload byte differs.
        file.write_all_at(b"z", HEADER as u64 + 2).expect("tear");
        assert!(read_record(&file).expect("read").is_none(), "a torn record is not taken");
        write_record(&file, order, "r3", b"ok").expect("write");
        mark_free(&file).expect("free");
        assert!(read_record(&file).expect("read").is_none(), "a freed slot holds nothing");
    }

    #[test]
    fn legacy_names_keep_their_order() {
        let a = Order::of_legacy_name("001700000000000000001-1-id");
        let b = Order::of_legacy_name("001700000000001000000-0-id");
        assert_eq!(a, Order { millis: 1_700_000_000_000, seq: 1 });
        assert!(a < b);
    }
}
