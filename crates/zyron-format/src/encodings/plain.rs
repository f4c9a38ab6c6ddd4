//! Plain: values as they are. Integers as 8 little-endian bytes, floats at their width,
//! byte strings as an end-offset stream followed by the concatenated bytes.

use std::ops::Range;

use super::{
    Bytes, BytesRef, BytesVec, Cascade, Encoding, EncodingId, FloatLane, Floats, Ints,
    decode_stream, encode_stream, read_child, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

pub struct Plain;

fn fixed_width_slice<'a>(
    body: &'a [u8],
    len: usize,
    width: usize,
    rows: &Range<usize>,
) -> Result<&'a [u8]> {
    if body.len() != len * width {
        return corrupt(format!(
            "plain stream of {len} values has {} bytes, expected {}",
            body.len(),
            len * width
        ));
    }
    Ok(&body[rows.start * width..rows.end * width])
}

impl Encoding<Ints> for Plain {
    const ID: EncodingId = EncodingId::PLAIN;
    fn encode(values: &[i64], _: Cascade) -> Option<Vec<u8>> {
        Some(values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        let bytes = fixed_width_slice(body, len, 8, &rows)?;
        out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
        Ok(())
    }
}

impl<F: FloatLane> Encoding<Floats<F>> for Plain {
    const ID: EncodingId = EncodingId::PLAIN;
    fn encode(values: &[F], _: Cascade) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(values.len() * F::BYTES);
        for v in values {
            v.write_le(&mut out);
        }
        Some(out)
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<F>) -> Result<()> {
        let bytes = fixed_width_slice(body, len, F::BYTES, &rows)?;
        out.extend(bytes.chunks_exact(F::BYTES).map(F::from_le));
        Ok(())
    }
}

impl Encoding<Bytes> for Plain {
    const ID: EncodingId = EncodingId::PLAIN;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        let base = values.offsets[0];
        let ends = super::relative_ends(values);
        let mut w = ByteWriter::default();
        write_child(&mut w, &encode_stream::<Ints>(&ends, cascade.child()));
        w.buf
            .extend_from_slice(&values.data[base as usize..values.offsets[values.len()] as usize]);
        Some(w.buf)
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        let mut r = ByteReader::new(body, "plain bytes stream");
        let ends_node = read_child(&mut r)?;
        let data = r.rest();
        let (start, ends) = ends_for_rows(ends_node, len, &rows, data.len())?;
        append_slices(data, start, &ends, out)
    }
}

/// Decodes the end offsets of `rows` and the start of the first, checking they are ordered and
/// within `data_len`.
pub(crate) fn ends_for_rows(
    ends_node: &[u8],
    len: usize,
    rows: &Range<usize>,
    data_len: usize,
) -> Result<(usize, Vec<i64>)> {
    // The end before the first row is its start. Decoded on its own: decoding it with the
    // rows and removing it would move every end.
    let mut start = 0;
    if rows.start > 0 {
        let mut before = Vec::with_capacity(1);
        decode_stream::<Ints>(ends_node, len, rows.start - 1..rows.start, &mut before)?;
        start = before[0];
    }
    let mut ends = Vec::with_capacity(rows.len());
    decode_stream::<Ints>(ends_node, len, rows.clone(), &mut ends)?;
    if start < 0 {
        return corrupt("negative string offset");
    }
    // In order, then within the data: the last end bounds them all. Accumulated without an
    // early exit, so that the compiler can vectorise it.
    let out_of_order = ends.first().is_some_and(|&first| first < start)
        | ends.windows(2).fold(false, |bad, w| bad | (w[1] < w[0]));
    if out_of_order {
        return corrupt(format!("string end offsets out of order after {start}"));
    }
    if let Some(&last) = ends.last()
        && last as u64 > data_len as u64
    {
        return corrupt(format!(
            "string end offset {last}, data has {data_len} bytes"
        ));
    }
    Ok((start as usize, ends))
}

/// Appends `data[start..ends[0]]`, `data[ends[0]..ends[1]]`, ... to `out` (offsets already checked).
pub(crate) fn append_slices(
    data: &[u8],
    start: usize,
    ends: &[i64],
    out: &mut BytesVec,
) -> Result<()> {
    let Some(&last) = ends.last() else {
        return Ok(());
    };
    let shift = out.data.len() as i64 - start as i64;
    out.data.extend_from_slice(&data[start..last as usize]);
    if out.data.len() > i32::MAX as usize {
        return corrupt("decoded strings exceed 2 GiB in one batch");
    }
    out.offsets.extend(ends.iter().map(|e| (e + shift) as i32));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ends must ascend from the row before and stay within the data, wherever the fault is.
    #[test]
    fn string_ends_out_of_order_or_past_the_data_are_errors() {
        let node = |ends: &[i64]| encode_stream::<Ints>(ends, Cascade::TOP);
        let good = node(&[2, 4, 4, 9]);
        assert_eq!(
            ends_for_rows(&good, 4, &(1..4), 9).unwrap(),
            (2, vec![4, 4, 9])
        );
        assert!(
            ends_for_rows(&good, 4, &(0..4), 8).is_err(),
            "past the data"
        );
        for bad in [[2, 1, 4, 9], [2, 4, 3, 9], [2, 4, 9, 8]] {
            assert!(
                ends_for_rows(&node(&bad), 4, &(0..4), 9).is_err(),
                "{bad:?}"
            );
        }
        assert!(
            ends_for_rows(&node(&[5, 3]), 2, &(1..2), 9).is_err(),
            "below its start"
        );
        assert!(
            ends_for_rows(&node(&[-1, 3]), 2, &(1..2), 9).is_err(),
            "negative start"
        );
    }
}
