//! The one checksum Zyron writes everywhere: XXH3-64, stored as its low 32
//! bits. `.zyr` blocks, footers and WAL records all use it, so one fast,
//! well-distributed function covers every byte Zyron puts on disk.
//!
//! ```
//! use zyron_common::checksum::checksum32;
//! assert_ne!(checksum32(b"zyron"), checksum32(b"zyroN"));
//! ```

/// XXH3-64 of `data`.
pub fn checksum64(data: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(data)
}

/// The 32-bit form stored on disk: the low half of XXH3-64.
pub fn checksum32(data: &[u8]) -> u32 {
    checksum64(data) as u32
}
