//! Dictionary: the distinct values, sorted, in a `values` stream and one code per row in a
//! `codes` stream (bit-packed by the cascade). Sorting keeps code order equal to value order.
//! Filters evaluate once per distinct value and then look codes up in a table, so a string
//! comparison over a block costs one pass over small integers.
//!
//! Body: `distinct: uvarint | values node (distinct values) | codes node (len values)`.

use std::collections::HashMap;
use std::ops::Range;

use super::{
    Bytes, BytesRef, BytesVec, Cascade, Domain, Encoding, EncodingId, FloatLane, Floats, Ints,
    decode_all, decode_stream, encode_stream, filter_stream, read_child, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

pub struct Dictionary;

/// Most distinct values a dictionary may hold.
pub const MAX_DICTIONARY_VALUES: usize = 1 << 16;

/// What a domain must offer to be dictionary-encoded.
pub trait DictionaryDomain: Domain {
    /// Sorted distinct values and each row's code; `None` above `max_distinct`.
    fn build(values: Self::Input<'_>, max_distinct: usize) -> Option<(Self::Owned, Vec<i64>)>;
    /// Appends `dictionary[code]` for each code (codes already checked to be in range).
    fn lookup(dictionary: &Self::Owned, codes: &[i64], out: &mut Self::Owned) -> Result<()>;
}

fn max_distinct(len: usize) -> usize {
    (len / 2).min(MAX_DICTIONARY_VALUES)
}

impl<D: DictionaryDomain> Encoding<D> for Dictionary
where
    for<'a> D::Input<'a>: Copy,
{
    const ID: EncodingId = EncodingId::DICTIONARY;
    fn encode(values: D::Input<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        let (dictionary, codes) = D::build(values, max_distinct(D::len(values)))?;
        let mut w = ByteWriter::default();
        w.uvarint(D::owned_len(&dictionary) as u64);
        write_child(
            &mut w,
            &encode_stream::<D>(D::as_input(&dictionary), cascade.child()),
        );
        write_child(&mut w, &encode_stream::<Ints>(&codes, cascade.child()));
        Some(w.buf)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut D::Owned) -> Result<()> {
        let (dictionary, codes) = values_and_codes::<D>(body, len, rows)?;
        D::lookup(&dictionary, &codes, out)
    }

    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &D::Matcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let parts = Parts::parse(body, len)?;
        let mut table = Vec::with_capacity(parts.distinct);
        filter_stream::<D>(
            parts.values_node,
            parts.distinct,
            0..parts.distinct,
            m,
            &mut table,
        )?;
        let codes = parts.codes(&rows)?;
        out.extend(codes.iter().map(|c| table[*c as usize]));
        Ok(())
    }
}

/// The distinct values of a dictionary body and the codes of rows `rows`, for a caller that
/// gathers by code itself (string views point into the dictionary instead of copying it).
pub fn values_and_codes<D: Domain>(
    body: &[u8],
    len: usize,
    rows: Range<usize>,
) -> Result<(D::Owned, Vec<i64>)> {
    let parts = Parts::parse(body, len)?;
    let codes = parts.codes(&rows)?;
    let values = decode_all::<D>(parts.values_node, parts.distinct)?;
    // Codes were checked against the declared count; callers index the values with them.
    if D::owned_len(&values) != parts.distinct {
        return corrupt(format!(
            "dictionary declares {} values and holds {}",
            parts.distinct,
            D::owned_len(&values)
        ));
    }
    Ok((values, codes))
}

struct Parts<'a> {
    distinct: usize,
    values_node: &'a [u8],
    codes_node: &'a [u8],
    len: usize,
}

impl<'a> Parts<'a> {
    fn parse(body: &'a [u8], len: usize) -> Result<Self> {
        let mut r = ByteReader::new(body, "dictionary stream");
        let distinct = r.uvarint_max(MAX_DICTIONARY_VALUES as u64, "dictionary size")?;
        let values_node = read_child(&mut r)?;
        let codes_node = read_child(&mut r)?;
        Ok(Self {
            distinct,
            values_node,
            codes_node,
            len,
        })
    }

    fn codes(&self, rows: &Range<usize>) -> Result<Vec<i64>> {
        let mut codes = Vec::with_capacity(rows.len());
        decode_stream::<Ints>(self.codes_node, self.len, rows.clone(), &mut codes)?;
        // A code is valid when both `c` and `distinct - 1 - c` are non-negative: one OR of
        // their sign bits per code, a pass the compiler vectorises. The error path then
        // finds the culprit.
        let last = self.distinct as i64 - 1;
        let signs = codes
            .iter()
            .fold(0i64, |acc, c| acc | c | last.wrapping_sub(*c));
        if signs < 0
            && let Some(bad) = codes.iter().find(|c| **c < 0 || **c > last)
        {
            return corrupt(format!(
                "dictionary code {bad} with {} values",
                self.distinct
            ));
        }
        Ok(codes)
    }
}

/// Sorted distinct values of `keys` and each key's code (its rank among them), in one hash
/// per key: codes are first given in order of first appearance, then renumbered by rank.
/// `None` once more than `max` distinct values appear. foldhash, seeded per process, is the
/// hasher: SipHash was a fifth of a lineitem write, and a fixed seed would let crafted input
/// pile keys into one bucket.
fn sorted_dictionary<K: std::hash::Hash + Eq + Copy>(
    keys: impl ExactSizeIterator<Item = K>,
    max: usize,
    mut order: impl FnMut(&K, &K) -> std::cmp::Ordering,
) -> Option<(Vec<K>, Vec<i64>)> {
    let mut index: HashMap<K, u32, foldhash::fast::RandomState> = HashMap::default();
    let mut first_seen: Vec<K> = Vec::new();
    let mut codes: Vec<i64> = Vec::with_capacity(keys.len());
    for k in keys {
        let next = first_seen.len() as u32;
        let code = *index.entry(k).or_insert(next);
        if code == next {
            if first_seen.len() == max {
                return None;
            }
            first_seen.push(k);
        }
        codes.push(i64::from(code));
    }
    let mut by_rank: Vec<u32> = (0..first_seen.len() as u32).collect();
    by_rank.sort_unstable_by(|a, b| order(&first_seen[*a as usize], &first_seen[*b as usize]));
    let mut rank = vec![0i64; first_seen.len()];
    for (r, code) in by_rank.iter().enumerate() {
        rank[*code as usize] = r as i64;
    }
    codes.iter_mut().for_each(|c| *c = rank[*c as usize]);
    let sorted = by_rank.iter().map(|c| first_seen[*c as usize]).collect();
    Some((sorted, codes))
}

impl DictionaryDomain for Ints {
    fn build(values: &[i64], max: usize) -> Option<(Vec<i64>, Vec<i64>)> {
        sorted_dictionary(values.iter().copied(), max, Ord::cmp)
    }
    fn lookup(dictionary: &Vec<i64>, codes: &[i64], out: &mut Vec<i64>) -> Result<()> {
        out.extend(codes.iter().map(|c| dictionary[*c as usize]));
        Ok(())
    }
}

impl<F: FloatLane> DictionaryDomain for Floats<F> {
    fn build(values: &[F], max: usize) -> Option<(Vec<F>, Vec<i64>)> {
        let value = |bits: &u64| F::from_bits64(*bits).to_f64();
        let (bits, codes) =
            sorted_dictionary(values.iter().map(|v| v.to_bits64()), max, |a, b| {
                value(a).total_cmp(&value(b))
            })?;
        Some((bits.into_iter().map(F::from_bits64).collect(), codes))
    }
    fn lookup(dictionary: &Vec<F>, codes: &[i64], out: &mut Vec<F>) -> Result<()> {
        out.extend(codes.iter().map(|c| dictionary[*c as usize]));
        Ok(())
    }
}

impl DictionaryDomain for Bytes {
    fn build(values: BytesRef<'_>, max: usize) -> Option<(BytesVec, Vec<i64>)> {
        let (dictionary, codes) = sorted_dictionary(values.iter(), max, Ord::cmp)?;
        Some((BytesVec::from_iter(dictionary).ok()?, codes))
    }
    fn lookup(dictionary: &BytesVec, codes: &[i64], out: &mut BytesVec) -> Result<()> {
        let d = dictionary.as_ref();
        let lengths: Vec<usize> = (0..d.len()).map(|i| d.get(i).len()).collect();
        let base = out.data.len();
        let ascii = d.data.is_ascii();
        let result = gather(d, &lengths, codes, out);
        if ascii && result.is_ok() {
            out.mark_ascii_from(base);
        }
        result
    }
}

/// Appends the dictionary values that `codes` name (codes already checked in range).
fn gather(d: BytesRef<'_>, lengths: &[usize], codes: &[i64], out: &mut BytesVec) -> Result<()> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    // Short values bound the output by 16 or 32 bytes a row: no exact total needed.
    let fits = |width: usize| {
        longest <= width && out.data.len() + codes.len() * width <= i32::MAX as usize
    };
    if fits(16) {
        lookup_short::<16>(d, codes, out);
        return Ok(());
    }
    if fits(32) {
        lookup_short::<32>(d, codes, out);
        return Ok(());
    }
    let total: usize = codes.iter().map(|c| lengths[*c as usize]).sum();
    if out.data.len() + total > i32::MAX as usize {
        return corrupt("decoded strings exceed 2 GiB in one batch");
    }
    out.offsets.reserve(codes.len());
    out.data.reserve(total);
    for c in codes {
        out.data.extend_from_slice(d.get(*c as usize));
        out.offsets.push(out.data.len() as i32);
    }
    Ok(())
}

/// Gathers short strings (flags, modes, codes: most dictionary columns) by copying a fixed
/// `WIDTH` bytes per value and advancing by the real length, which compiles to a few moves
/// instead of a `memcpy` call per value. The caller checked that every value fits `WIDTH` and
/// that `codes.len() x WIDTH` more bytes keep the output under 2 GiB.
fn lookup_short<const WIDTH: usize>(d: BytesRef<'_>, codes: &[i64], out: &mut BytesVec) {
    let mut padded = d.data.to_vec();
    padded.resize(padded.len() + WIDTH, 0);
    let starts: Vec<(usize, usize)> = (0..d.len())
        .map(|i| (d.offsets[i] as usize, d.get(i).len()))
        .collect();
    let base = out.data.len();
    let capacity = codes.len() * WIDTH + WIDTH;
    out.data.reserve(capacity);
    out.offsets.reserve(codes.len());
    let dst = out.data.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    let mut at = 0;
    for c in codes {
        let (start, len) = starts[*c as usize];
        let src: &[u8; WIDTH] = padded[start..start + WIDTH]
            .try_into()
            .expect("WIDTH bytes");
        assert!(len <= WIDTH && at + WIDTH <= capacity);
        // SAFETY: `at + WIDTH <= capacity` (asserted), and `dst` has `capacity` bytes of spare
        // room reserved above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.add(at), WIDTH) };
        at += len;
        out.offsets.push((base + at) as i32);
    }
    // SAFETY: the first `at` spare bytes were written by the copies above.
    unsafe { out.data.set_len(base + at) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codes are ranks in sorted order, whatever order values first appear in, and a stream
    /// with more distinct values than allowed gets no dictionary.
    #[test]
    fn dictionary_codes_are_ranks_of_sorted_values() {
        let values = [30i64, -5, 30, 7, 7, i64::MIN, 30];
        let (sorted, codes) = Ints::build(&values, 4).unwrap();
        assert_eq!(sorted, vec![i64::MIN, -5, 7, 30]);
        assert_eq!(codes, vec![3, 1, 3, 2, 2, 0, 3]);
        assert!(Ints::build(&values, 3).is_none());
        let floats = [2.5f64, -0.0, f64::NAN, 2.5, -1.0];
        let (sorted, codes) = Floats::<f64>::build(&floats, 8).unwrap();
        assert_eq!(sorted.len(), 4);
        assert_eq!(sorted[..3], [-1.0, -0.0, 2.5]);
        assert!(sorted[3].is_nan());
        assert_eq!(codes, vec![2, 1, 3, 2, 0]);
    }

    /// Each gather path (16-byte, 32-byte and per-value copies) gives back the values.
    #[test]
    fn string_lookup_is_exact_for_every_value_width() {
        for longest in [1, 16, 17, 32, 33, 200] {
            let values: Vec<Vec<u8>> = (0..7)
                .map(|i| vec![b'a' + i as u8; 1 + i * (longest - 1) / 6])
                .collect();
            assert_eq!(values.iter().map(Vec::len).max(), Some(longest));
            let dictionary = BytesVec::from_iter(values.iter().map(Vec::as_slice)).unwrap();
            let codes: Vec<i64> = (0..5000).map(|i| (i * 5 % 7) as i64).collect();
            let mut out = BytesVec::default();
            out.push(b"already here").unwrap();
            Bytes::lookup(&dictionary, &codes, &mut out).unwrap();
            let got: Vec<&[u8]> = out.as_ref().iter().collect();
            assert_eq!(got[0], b"already here");
            for (row, code) in codes.iter().enumerate() {
                assert_eq!(
                    got[row + 1],
                    values[*code as usize].as_slice(),
                    "width {longest}"
                );
            }
        }
    }
}
