//! Split-block bloom filters (the design Parquet uses): 256-bit blocks of eight 32-bit words,
//! one bit set per word, chosen by eight odd salts. One optional filter per column block
//! answers "is this value certainly absent?" for equality and IN.

use crate::error::{Result, corrupt};

const SALT: [u32; 8] = [
    0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
];
/// Bits per distinct value; 10 gives about 1% false positives.
pub const BITS_PER_VALUE: usize = 10;
/// Largest filter a reader accepts (bytes).
pub const MAX_BLOOM_BYTES: usize = 16 << 20;

/// A split-block bloom filter.
#[derive(Clone, Debug, PartialEq)]
pub struct Bloom {
    blocks: Vec<[u32; 8]>,
}

/// The 64-bit hash the filter uses (XXH64, seed 0), over a value's canonical bytes: 16-byte
/// little-endian for integers in their logical value, raw bytes for strings.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, bytes)
}

pub fn hash_int(v: i128) -> u64 {
    hash_bytes(&v.to_le_bytes())
}

impl Bloom {
    pub fn with_capacity(distinct: usize) -> Bloom {
        let blocks = (distinct * BITS_PER_VALUE)
            .div_ceil(256)
            .next_power_of_two()
            .max(1);
        Bloom {
            blocks: vec![[0; 8]; blocks],
        }
    }

    fn block_of(&self, hash: u64) -> usize {
        (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize
    }

    fn masks(hash: u64) -> [u32; 8] {
        let key = hash as u32;
        SALT.map(|salt| 1u32 << (key.wrapping_mul(salt) >> 27))
    }

    pub fn insert(&mut self, hash: u64) {
        let b = self.block_of(hash);
        for (word, mask) in self.blocks[b].iter_mut().zip(Self::masks(hash)) {
            *word |= mask;
        }
    }

    pub fn might_contain(&self, hash: u64) -> bool {
        let b = self.block_of(hash);
        self.blocks[b]
            .iter()
            .zip(Self::masks(hash))
            .all(|(word, mask)| word & mask != 0)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.blocks
            .iter()
            .flatten()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Bloom> {
        if bytes.is_empty()
            || bytes.len() % 32 != 0
            || bytes.len() > MAX_BLOOM_BYTES
            || !(bytes.len() / 32).is_power_of_two()
        {
            return corrupt(format!("bloom filter of {} bytes", bytes.len()));
        }
        let blocks = bytes
            .chunks_exact(32)
            .map(|c| {
                std::array::from_fn(|i| {
                    u32::from_le_bytes(c[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
                })
            })
            .collect();
        Ok(Bloom { blocks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut bloom = Bloom::with_capacity(10_000);
        for i in 0..10_000 {
            bloom.insert(hash_int(i));
        }
        let bloom = Bloom::from_bytes(&bloom.to_bytes()).unwrap();
        assert!((0..10_000).all(|i| bloom.might_contain(hash_int(i))));
        let false_positives = (10_000..110_000)
            .filter(|i| bloom.might_contain(hash_int(*i)))
            .count();
        assert!(
            false_positives < 3_000,
            "{false_positives} false positives in 100,000"
        );
    }
}
