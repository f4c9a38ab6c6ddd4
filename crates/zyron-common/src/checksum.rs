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

/// [`checksum32`] of `parts` laid end to end, without copying them together first: a
/// checkpoint section's checksum covers its 5-byte head and its body of up to 64 MiB.
///
/// ```
/// use zyron_common::checksum::{checksum32, checksum32_of_parts};
/// assert_eq!(checksum32_of_parts(&[b"zy", b"ron"]), checksum32(b"zyron"));
/// ```
pub fn checksum32_of_parts(parts: &[&[u8]]) -> u32 {
    use std::hash::Hasher;
    let mut hasher = twox_hash::XxHash3_64::with_seed(0);
    for part in parts {
        hasher.write(part);
    }
    hasher.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Images written before [`checksum32_of_parts`] hashed their sections copied together:
    /// the two must agree for every split, short inputs and XXH3's long-input path alike.
    #[test]
    fn parts_hash_as_their_concatenation() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 5, 16, 128, 240, 241, 1024, 70_000, 300_000] {
            let whole = checksum32(&data[..len]);
            for cut in [0, 1, 5, len / 3, len / 2, len.saturating_sub(1), len] {
                let (a, b) = data[..len].split_at(cut.min(len));
                assert_eq!(checksum32_of_parts(&[a, b]), whole, "len {len}, cut {cut}");
            }
        }
    }
}
