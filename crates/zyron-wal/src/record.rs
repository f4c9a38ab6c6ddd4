//! Record framing: every record is a 20-byte header and its payload.
//!
//! ```text
//! offset size field
//!      0    4 checksum   low 32 bits of XXH3-64 over bytes 4..20+len
//!      4    4 len        payload length in bytes (u32 LE)
//!      8    8 lsn        the record's own LSN (u64 LE): its position in the log
//!     16    1 kind       caller-defined record type
//!     17    3 reserved   zero
//!     20  len payload
//! ```
//!
//! A record is valid only if its checksum matches *and* its `lsn` field equals
//! the position it was read from. The second rule makes stale bytes harmless:
//! a recycled segment or an old tail still holds records, but with the LSNs of
//! their old positions, so a reader never mistakes them for the log's
//! continuation.

use zyron_common::checksum::checksum32;

/// Bytes before the payload.
pub const RECORD_HEADER_BYTES: usize = 20;

/// A record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where the record starts.
    pub lsn: u64,
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl Record {
    /// The LSN just past this record: flushing to here makes it durable.
    pub fn end_lsn(&self) -> u64 {
        self.lsn + framed_len(self.payload.len()) as u64
    }
}

/// Bytes a record with `payload_len` bytes of payload occupies in the log.
pub fn framed_len(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// Appends the framed record to `out`.
pub fn encode(out: &mut Vec<u8>, lsn: u64, kind: u8, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&[kind, 0, 0, 0]);
    out.extend_from_slice(payload);
    let checksum = checksum32(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&checksum.to_le_bytes());
}

/// Why bytes at a position are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Fewer bytes left than a header, or than the header's length says.
    Truncated,
    /// The `lsn` field names another position: zeroes, or stale bytes.
    WrongLsn,
    /// The bytes were changed after they were written, or never fully written.
    BadChecksum,
}

/// Decodes the record at the start of `bytes`, which sits at log position `lsn`.
pub fn decode(bytes: &[u8], lsn: u64) -> Result<(u8, &[u8]), Invalid> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(Invalid::Truncated);
    }
    let read_u32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let stored_lsn = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    if stored_lsn != lsn {
        return Err(Invalid::WrongLsn);
    }
    let len = read_u32(4) as usize;
    let end = RECORD_HEADER_BYTES
        .checked_add(len)
        .filter(|&end| end <= bytes.len())
        .ok_or(Invalid::Truncated)?;
    if checksum32(&bytes[4..end]) != read_u32(0) {
        return Err(Invalid::BadChecksum);
    }
    Ok((bytes[16], &bytes[RECORD_HEADER_BYTES..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_caught() {
        let mut log = Vec::new();
        encode(&mut log, 4096, 7, b"hello wal");
        assert_eq!(log.len(), framed_len(9));
        assert_eq!(decode(&log, 4096), Ok((7, &b"hello wal"[..])));
        assert_eq!(decode(&log, 4097), Err(Invalid::WrongLsn));
        assert_eq!(decode(&log[..log.len() - 1], 4096), Err(Invalid::Truncated));
        for byte in (0..log.len()).filter(|b| !(8..16).contains(b)) {
            let mut damaged = log.clone();
            damaged[byte] ^= 0x10;
            assert!(
                decode(&damaged, 4096).is_err(),
                "flip in byte {byte} undetected"
            );
        }
        assert_eq!(decode(&[0; 64], 64), Err(Invalid::WrongLsn));
    }
}
