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
use crate::error::Result;
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
        let mut bases = Vec::with_capacity(vectors.len());
        decode_stream::<Ints>(bases_node, vector_count(len), vectors.clone(), &mut bases)?;
        let mut deltas = Vec::with_capacity(VECTOR_LEN);
        for (v, base) in vectors.zip(bases) {
            let vector_rows = v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
            deltas.clear();
            decode_stream::<Ints>(deltas_node, len, vector_rows.clone(), &mut deltas)?;
            let mut acc = base;
            for (i, d) in deltas.iter_mut().enumerate() {
                if i > 0 {
                    acc = acc.wrapping_add(*d);
                }
                *d = acc;
            }
            let from = rows.start.max(vector_rows.start) - vector_rows.start;
            let to = rows.end.min(vector_rows.end) - vector_rows.start;
            out.extend_from_slice(&deltas[from..to]);
        }
        Ok(())
    }
}
