//! Run-length: a `values` stream with one value per run and an `ends` stream with each run's
//! exclusive end row, both cascaded (so run ends are usually delta- or bit-packed).
//! Filters evaluate once per run.
//!
//! Body: `runs: uvarint | values node (runs values) | ends node (runs values)`.

use std::ops::Range;

use super::{
    Cascade, Encoding, EncodingId, Ints, decode_all, decode_stream, encode_stream, read_child,
    write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::predicate::IntMatcher;

pub struct RunLength;

struct Runs {
    ends: Vec<i64>,
    values_node: Vec<u8>,
}

impl Runs {
    fn parse(body: &[u8], len: usize) -> Result<Runs> {
        let mut r = ByteReader::new(body, "run-length stream");
        let runs = r.uvarint_max(len as u64, "run count")?;
        let values_node = read_child(&mut r)?.to_vec();
        let ends = decode_all::<Ints>(read_child(&mut r)?, runs)?;
        let mut previous = 0;
        for &end in &ends {
            if end <= previous || end as u64 > len as u64 {
                return corrupt(format!(
                    "run end {end} after {previous} in a stream of {len} values"
                ));
            }
            previous = end;
        }
        if previous as usize != len {
            return corrupt(format!(
                "runs end at {previous}, the stream holds {len} values"
            ));
        }
        Ok(Runs { ends, values_node })
    }

    /// The runs overlapping `rows`, with how many of each run's rows fall in `rows`.
    fn overlapping(&self, rows: &Range<usize>) -> (Range<usize>, Vec<usize>) {
        let first = self.ends.partition_point(|&e| e as usize <= rows.start);
        let mut counts = Vec::new();
        let mut run = first;
        let mut at = rows.start;
        while at < rows.end {
            let end = (self.ends[run] as usize).min(rows.end);
            counts.push(end - at);
            at = end;
            run += 1;
        }
        (first..run, counts)
    }
}

impl Encoding<Ints> for RunLength {
    const ID: EncodingId = EncodingId::RUN_LENGTH;
    fn encode(values: &[i64], cascade: Cascade) -> Option<Vec<u8>> {
        let mut run_values = Vec::new();
        let mut ends = Vec::new();
        for (i, v) in values.iter().enumerate() {
            if run_values.last() != Some(v) || i == 0 {
                if i > 0 {
                    ends.push(i as i64);
                }
                run_values.push(*v);
            }
            if run_values.len() > values.len() / 4 + 1 {
                return None;
            }
        }
        if values.is_empty() {
            return None;
        }
        ends.push(values.len() as i64);
        let mut w = ByteWriter::default();
        w.uvarint(run_values.len() as u64);
        write_child(&mut w, &encode_stream::<Ints>(&run_values, cascade.child()));
        write_child(&mut w, &encode_stream::<Ints>(&ends, cascade.child()));
        Some(w.buf)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        let runs = Runs::parse(body, len)?;
        let (run_range, counts) = runs.overlapping(&rows);
        let mut values = Vec::with_capacity(run_range.len());
        decode_stream::<Ints>(&runs.values_node, runs.ends.len(), run_range, &mut values)?;
        for (v, n) in values.iter().zip(counts) {
            out.extend(std::iter::repeat_n(*v, n));
        }
        Ok(())
    }

    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &IntMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let runs = Runs::parse(body, len)?;
        let (run_range, counts) = runs.overlapping(&rows);
        let mut hits = Vec::with_capacity(run_range.len());
        super::filter_stream::<Ints>(&runs.values_node, runs.ends.len(), run_range, m, &mut hits)?;
        for (hit, n) in hits.iter().zip(counts) {
            out.extend(std::iter::repeat_n(*hit, n));
        }
        Ok(())
    }
}
