//! Bit-packing with a frame of reference, in the FastLanes layout.
//!
//! Each value is stored as `value - reference` in `width` bits. Values are packed 1024 at a
//! time with the `fastlanes` crate's interleaved layout (lanes of u32 when `width <= 32`, else
//! u64), so one vector unpacks with SIMD and one value can be read alone. Body:
//! `reference: i64 | width: u8 | ceil(len / 1024) vectors of 128 * width bytes`.

use std::ops::Range;

use fastlanes::BitPacking;

use super::{Cascade, Encoding, EncodingId, Ints, VECTOR_LEN, vector_count, vectors_of};
use crate::error::{Result, corrupt};
use crate::predicate::IntMatcher;
use crate::simd::avx2_dispatch;

pub struct BitPacked;

/// A lane type the packer works in.
pub(crate) trait Lane: BitPacking + Copy + Default {
    const BYTES: usize;
    fn lane_from_u64(v: u64) -> Self;
    fn lane_to_u64(self) -> u64;
    fn lane_from_le(b: &[u8]) -> Self;
    fn lane_extend_le(self, out: &mut Vec<u8>);
}

impl Lane for u32 {
    const BYTES: usize = 4;
    fn lane_from_u64(v: u64) -> Self {
        v as u32
    }
    fn lane_to_u64(self) -> u64 {
        u64::from(self)
    }
    fn lane_from_le(b: &[u8]) -> Self {
        u32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
    fn lane_extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Lane for u64 {
    const BYTES: usize = 8;
    fn lane_from_u64(v: u64) -> Self {
        v
    }
    fn lane_to_u64(self) -> u64 {
        self
    }
    fn lane_from_le(b: &[u8]) -> Self {
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn lane_extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// Bytes one packed vector of `width`-bit values takes.
pub fn vector_bytes(width: u8) -> usize {
    VECTOR_LEN * width as usize / 8
}

/// The bit width needed for offsets from `min` up to `max`.
pub fn width_for(min: i64, max: i64) -> u8 {
    let range = max.wrapping_sub(min) as u64;
    (64 - range.leading_zeros()) as u8
}

fn pack<T: Lane>(values: &[i64], reference: i64, width: u8, out: &mut Vec<u8>) {
    let words = VECTOR_LEN * width as usize / (T::BYTES * 8);
    let mut input = [T::default(); VECTOR_LEN];
    let mut packed = vec![T::default(); words];
    for chunk in values.chunks(VECTOR_LEN) {
        for (slot, v) in input
            .iter_mut()
            .zip(chunk.iter().chain(std::iter::repeat(&reference)))
        {
            *slot = T::lane_from_u64(v.wrapping_sub(reference) as u64);
        }
        // SAFETY: input holds 1024 lanes and packed holds 1024 * width / bits(T) lanes.
        unsafe { T::unchecked_pack(width as usize, &input, &mut packed) };
        for w in &packed {
            w.lane_extend_le(out);
        }
    }
}

/// Parsed header of a bit-packed body.
pub(crate) struct Packed<'a> {
    pub reference: i64,
    pub width: u8,
    data: &'a [u8],
}

impl<'a> Packed<'a> {
    /// The header of `node` if it is a bit-packed stream node, for decoders (ALP) that turn
    /// the offsets straight into their own values instead of rebuilding i64s first.
    pub(crate) fn of_node(node: &'a [u8], len: usize) -> Result<Option<Self>> {
        match super::split_node(node)? {
            (EncodingId::BITPACKED, body) => Self::parse(body, len).map(Some),
            _ => Ok(None),
        }
    }

    fn parse(body: &'a [u8], len: usize) -> Result<Self> {
        if body.len() < 9 {
            return corrupt("bit-packed header ends early");
        }
        let reference = i64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let width = body[8];
        if width > 64 {
            return corrupt(format!("bit width {width}"));
        }
        let data = &body[9..];
        let expected = vector_count(len) * vector_bytes(width);
        if data.len() != expected {
            return corrupt(format!(
                "bit-packed stream of {len} values at width {width} has {} bytes, expected {expected}",
                data.len()
            ));
        }
        Ok(Self {
            reference,
            width,
            data,
        })
    }

    /// Unpacks vector `v` into `out` as offsets from the reference.
    fn unpack_vector<T: Lane>(&self, v: usize, words: &mut [T], out: &mut [T; VECTOR_LEN]) {
        let bytes = vector_bytes(self.width);
        let src = &self.data[v * bytes..(v + 1) * bytes];
        for (w, b) in words.iter_mut().zip(src.chunks_exact(T::BYTES)) {
            *w = T::lane_from_le(b);
        }
        // SAFETY: words holds exactly 1024 * width / bits(T) lanes (checked in parse), out 1024.
        unsafe { T::unchecked_unpack(self.width as usize, words, out) };
    }

    fn single<T: Lane>(&self, row: usize) -> i64 {
        let bytes = vector_bytes(self.width);
        let v = row / VECTOR_LEN;
        let words: Vec<T> = self.data[v * bytes..(v + 1) * bytes]
            .chunks_exact(T::BYTES)
            .map(T::lane_from_le)
            .collect();
        // SAFETY: as in unpack_vector; the index is below 1024.
        let offset =
            unsafe { T::unchecked_unpack_single(self.width as usize, &words, row % VECTOR_LEN) };
        self.reference.wrapping_add(offset.lane_to_u64() as i64)
    }

    /// Calls `visit(offsets)` for the part of each vector that `rows` covers. `T` must be
    /// `u32` for widths up to 32, else `u64`.
    pub(crate) fn for_each_vector<T: Lane>(
        &self,
        rows: &Range<usize>,
        mut visit: impl FnMut(&[T]),
    ) {
        // Unpacking wider values than the lane holds would read past the packed words.
        assert!(self.width as usize <= T::BYTES * 8, "lane too narrow");
        let mut words = vec![T::default(); VECTOR_LEN * self.width as usize / (T::BYTES * 8)];
        let mut buf = [T::default(); VECTOR_LEN];
        for v in vectors_of(rows) {
            self.unpack_vector(v, &mut words, &mut buf);
            let start = rows.start.max(v * VECTOR_LEN) - v * VECTOR_LEN;
            let end = rows.end.min((v + 1) * VECTOR_LEN) - v * VECTOR_LEN;
            visit(&buf[start..end]);
        }
    }

    fn decode<T: Lane>(&self, rows: Range<usize>, out: &mut Vec<i64>) {
        if rows.len() == 1 {
            out.push(self.single::<T>(rows.start));
            return;
        }
        let reference = self.reference;
        self.for_each_vector::<T>(&rows, |offsets| offsets_to_ints(offsets, reference, out));
    }

    fn filter_range<T: Lane>(&self, rows: Range<usize>, lo: u64, hi: u64, out: &mut Vec<bool>) {
        self.for_each_vector::<T>(&rows, |offsets| {
            out.extend(offsets.iter().map(|o| {
                let o = o.lane_to_u64();
                (o >= lo) & (o <= hi)
            }))
        });
    }
}

avx2_dispatch! {
    /// Appends `reference + offset` for each offset.
    fn offsets_to_ints<T: Lane>(offsets: &[T], reference: i64, out: &mut Vec<i64>)
        => offsets_to_ints_kernel
}

#[inline(always)]
fn offsets_to_ints_kernel<T: Lane>(offsets: &[T], reference: i64, out: &mut Vec<i64>) {
    out.extend(
        offsets
            .iter()
            .map(|o| reference.wrapping_add(o.lane_to_u64() as i64)),
    )
}

impl Encoding<Ints> for BitPacked {
    const ID: EncodingId = EncodingId::BITPACKED;
    fn encode(values: &[i64], _: Cascade) -> Option<Vec<u8>> {
        let min = values.iter().copied().min().unwrap_or(0);
        let max = values.iter().copied().max().unwrap_or(0);
        let width = width_for(min, max);
        let mut out = Vec::with_capacity(9 + vector_count(values.len()) * vector_bytes(width));
        out.extend_from_slice(&min.to_le_bytes());
        out.push(width);
        if width > 32 {
            pack::<u64>(values, min, width, &mut out);
        } else if width > 0 {
            pack::<u32>(values, min, width, &mut out);
        }
        Some(out)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        let p = Packed::parse(body, len)?;
        match p.width {
            0 => out.extend(std::iter::repeat_n(p.reference, rows.len())),
            1..=32 => p.decode::<u32>(rows, out),
            _ => p.decode::<u64>(rows, out),
        }
        Ok(())
    }

    /// Ranges compare on the packed offsets: the bounds move into offset space once, and no value
    /// is rebuilt.
    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &IntMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let p = Packed::parse(body, len)?;
        let IntMatcher::Range(lo, hi) = m else {
            let mut values = Vec::with_capacity(rows.len());
            Self::decode(body, len, rows, &mut values)?;
            out.extend(values.iter().map(|v| m.matches(*v)));
            return Ok(());
        };
        let max_offset = if p.width == 64 {
            u64::MAX as i128
        } else {
            (1i128 << p.width) - 1
        };
        let lo = (*lo as i128 - p.reference as i128).clamp(0, max_offset + 1);
        let hi = (*hi as i128 - p.reference as i128).clamp(-1, max_offset);
        if lo > hi || p.width == 0 {
            let hit = p.width == 0 && m.matches(p.reference);
            out.extend(std::iter::repeat_n(hit, rows.len()));
            return Ok(());
        }
        let (lo, hi) = (lo as u64, hi as u64);
        if p.width <= 32 {
            p.filter_range::<u32>(rows, lo, hi, out);
        } else {
            p.filter_range::<u64>(rows, lo, hi, out);
        }
        Ok(())
    }
}
