//! FSST (Fast Static Symbol Table, Boncz et al., VLDB 2020) for strings, through the `fsst-rs`
//! crate: up to 255 symbols of 1 to 8 bytes, each string compressed to one-byte codes. The
//! table is trained on a sample of the block. Uncompressed ends are stored too, so a range of
//! rows decompresses in one call. Equality and IN compare compressed bytes: the needle is
//! compressed with the same table, and equal strings have equal codes.
//!
//! Body: `symbols: u8 | symbols x u64 | symbols x u8 lengths | ends node (len values) |
//! compressed ends node (len values) | compressed bytes`.

use std::ops::Range;

use fsst::{Compressor, Decompressor, Symbol};

use super::plain::ends_for_rows;
use super::{
    Bytes, BytesRef, BytesVec, Cascade, Encoding, EncodingId, Ints, encode_stream, read_child,
    write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::predicate::BytesMatcher;

pub struct Fsst;

/// Strings the symbol table is trained on.
const TRAINING_SAMPLE: usize = 2048;

struct Table {
    symbols: [Symbol; 255],
    lengths: [u8; 255],
    count: usize,
}

impl Table {
    fn read(r: &mut ByteReader<'_>) -> Result<Table> {
        let count = r.u8()? as usize;
        let mut symbols = [Symbol::from_u8(0); 255];
        let mut lengths = [1u8; 255];
        for s in symbols.iter_mut().take(count) {
            *s = Symbol::from_slice(&r.u64()?.to_le_bytes());
        }
        for l in lengths.iter_mut().take(count) {
            *l = r.u8()?;
            if !(1..=8).contains(l) {
                return corrupt(format!("FSST symbol of length {l}"));
            }
        }
        Ok(Table {
            symbols,
            lengths,
            count,
        })
    }

    /// fsst-rs requires lengths ordered 2,3,...,8 then 1; a table out of that order cannot be
    /// rebuilt into a compressor (it would panic), so filters then fall back to decoding.
    fn compressor(&self) -> Option<Compressor> {
        let lengths = &self.lengths[..self.count];
        let mut expected = 2;
        for &len in lengths {
            if expected == 1 && len != 1 {
                return None;
            }
            if expected != 1 {
                if len == 1 {
                    expected = 1;
                } else if len < expected {
                    return None;
                } else {
                    expected = len;
                }
            }
        }
        Some(Compressor::rebuild_from(
            &self.symbols[..self.count],
            lengths,
        ))
    }
}

struct Parsed<'a> {
    table: Table,
    ends_node: &'a [u8],
    compressed_ends_node: &'a [u8],
    data: &'a [u8],
}

impl<'a> Parsed<'a> {
    fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = ByteReader::new(body, "FSST stream");
        let table = Table::read(&mut r)?;
        let ends_node = read_child(&mut r)?;
        let compressed_ends_node = read_child(&mut r)?;
        Ok(Self {
            table,
            ends_node,
            compressed_ends_node,
            data: r.rest(),
        })
    }
}

impl Encoding<Bytes> for Fsst {
    const ID: EncodingId = EncodingId::FSST;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        if values.is_empty() {
            return None;
        }
        let step = (values.len() / TRAINING_SAMPLE).max(1);
        let sample: Vec<&[u8]> = values.iter().step_by(step).collect();
        let compressor = Compressor::train(&sample);
        let mut compressed = Vec::new();
        let mut compressed_ends = Vec::with_capacity(values.len());
        for v in values.iter() {
            compressed.extend_from_slice(&compressor.compress(v));
            compressed_ends.push(compressed.len() as i64);
        }
        let ends = super::relative_ends(values);
        let mut w = ByteWriter::default();
        w.u8(compressor.n_symbols() as u8);
        for s in compressor.symbol_table() {
            w.u64(s.to_u64());
        }
        w.buf.extend_from_slice(compressor.symbol_lengths());
        write_child(&mut w, &encode_stream::<Ints>(&ends, cascade.child()));
        write_child(
            &mut w,
            &encode_stream::<Ints>(&compressed_ends, cascade.child()),
        );
        w.buf.extend_from_slice(&compressed);
        Some(w.buf)
    }

    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        let p = Parsed::parse(body)?;
        let (start, ends) = ends_for_rows(p.ends_node, len, &rows, i32::MAX as usize)?;
        let (cstart, cends) = ends_for_rows(p.compressed_ends_node, len, &rows, p.data.len())?;
        let Some(&cend) = cends.last() else {
            return Ok(());
        };
        let compressed = &p.data[cstart..cend as usize];
        let expected = *ends.last().expect("as many ends as compressed ends") as usize - start;
        let decompressor = Decompressor::new(&p.table.symbols, &p.table.lengths);
        // Decompress straight into the output; reserving the worst case (8 bytes per code)
        // keeps hostile codes inside the buffer.
        let base = out.data.len();
        out.data
            .reserve(decompressor.max_decompression_capacity(compressed) + 8);
        let n = decompressor.decompress_into(compressed, out.data.spare_capacity_mut());
        // SAFETY: decompress_into initialised the n bytes after the old length.
        unsafe { out.data.set_len(base + n) };
        if n != expected {
            out.data.truncate(base);
            return corrupt(format!(
                "FSST rows decompress to {n} bytes, the ends say {expected}"
            ));
        }
        if out.data.len() > i32::MAX as usize {
            return corrupt("decoded strings exceed 2 GiB in one batch");
        }
        let shift = base as i64 - start as i64;
        out.offsets.extend(ends.iter().map(|e| (e + shift) as i32));
        Ok(())
    }

    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &BytesMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let p = Parsed::parse(body)?;
        let (Some(needles), Some(compressor)) = (m.equality_values(), p.table.compressor()) else {
            let mut values = BytesVec::default();
            Self::decode(body, len, rows, &mut values)?;
            out.extend(values.as_ref().iter().map(|v| m.matches(v)));
            return Ok(());
        };
        let needles: Vec<Vec<u8>> = needles.iter().map(|n| compressor.compress(n)).collect();
        let (cstart, cends) = ends_for_rows(p.compressed_ends_node, len, &rows, p.data.len())?;
        let mut at = cstart;
        for end in cends {
            let codes = &p.data[at..end as usize];
            out.push(needles.iter().any(|n| n.as_slice() == codes));
            at = end as usize;
        }
        Ok(())
    }
}
