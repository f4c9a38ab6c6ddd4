//! Delta: each vector of 1024 stores its first value in a `bases` stream and the differences
//! between neighbours in a `deltas` stream (0 at each vector's start), both cascaded. Sorted or
//! slowly changing integers and timestamps shrink to a few bits per value. A vector decodes
//! alone: one base and a prefix sum over its 1024 deltas.
//!
//! Body: `bases node (ceil(len / 1024) values) | deltas node (len values)`.

use std::ops::Range;

use super::{
    Cascade, Encoding, EncodingId, Ints, VECTOR_LEN, decode_stream, encode_stream, read_child,
    vector_count, vectors_of, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

pub struct Delta;

impl Encoding<Ints> for Delta {
    const ID: EncodingId = EncodingId::DELTA;
    fn encode(values: &[i64], cascade: Cascade) -> Option<Vec<u8>> {
        if values.len() < 2 {
            return None;
        }
        let bases: Vec<i64> = values.chunks(VECTOR_LEN).map(|c| c[0]).collect();
        let mut deltas = Vec::with_capacity(values.len());
        for chunk in values.chunks(VECTOR_LEN) {
            deltas.push(0);
            deltas.extend(chunk.windows(2).map(|w| w[1].wrapping_sub(w[0])));
        }
        let mut w = ByteWriter::default();
        write_child(&mut w, &encode_stream::<Ints>(&bases, cascade.child()));
        write_child(&mut w, &encode_stream::<Ints>(&deltas, cascade.child()));
        Some(w.buf)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        let mut r = ByteReader::new(body, "delta stream");
        let bases_node = read_child(&mut r)?;
        let deltas_node = read_child(&mut r)?;
        let vectors = vectors_of(&rows);
        if vectors.is_empty() {
            return Ok(());
        }
        let mut bases = Vec::with_capacity(vectors.len());
        decode_stream::<Ints>(bases_node, vector_count(len), vectors.clone(), &mut bases)?;
        if bases.len() != vectors.len() {
            return corrupt("delta bases decode to the wrong number of values");
        }
        let vector_rows = |v: usize| v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
        let mut whole = vectors.clone();
        let head = rows.start - vectors.start * VECTOR_LEN;
        if head > 0 {
            // A range that starts inside a vector: that vector is summed aside and only its
            // wanted tail copied, so the values after it never move.
            let first = vector_rows(vectors.start);
            let mut sums = Vec::with_capacity(first.len());
            decode_stream::<Ints>(deltas_node, len, first.clone(), &mut sums)?;
            if sums.len() != first.len() {
                return corrupt("delta vector decodes to the wrong number of values");
            }
            prefix_sum(&mut sums, bases[0]);
            out.extend_from_slice(&sums[head..rows.end.min(first.end) - first.start]);
            whole.start += 1;
        }
        if whole.is_empty() {
            return Ok(());
        }
        // All the deltas of the remaining vectors in one call: children such as run-length
        // parse their whole header per call, so one call per vector would cost quadratic time.
        // Summed in place at the end of `out`, so a full scan copies nothing.
        let span = whole.start * VECTOR_LEN..vector_rows(whole.end - 1).end;
        let first = out.len();
        out.reserve(span.len());
        decode_stream::<Ints>(deltas_node, len, span.clone(), out)?;
        let bases = &bases[whole.start - vectors.start..];
        for (chunk, base) in out[first..].chunks_mut(VECTOR_LEN).zip(bases) {
            prefix_sum(chunk, *base);
        }
        out.truncate(first + rows.end - span.start);
        Ok(())
    }
}

/// Turns one vector's deltas into values: the first is `base` (its delta is 0), each next
/// one adds its delta.
fn prefix_sum(vector: &mut [i64], base: i64) {
    let mut acc = base;
    vector[0] = acc;
    for d in &mut vector[1..] {
        acc = acc.wrapping_add(*d);
        *d = acc;
    }
}
