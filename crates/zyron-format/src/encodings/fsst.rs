//! FSST (Fast Static Symbol Table, Boncz et al., VLDB 2020) for strings, through the `fsst-rs`
//! crate: up to 255 symbols of 1 to 8 bytes, each string compressed to one-byte codes. The
//! table is trained on a sample of the block. Uncompressed ends are stored too, so a range of
//! rows decompresses in one call. Equality and IN compare compressed bytes: the needle is
//! compressed with the same table, and equal strings have equal codes.
//!
//! Two layouts share the table and the decompressed ends:
//! - `fsst`: `symbols: u8 | symbols x u64 | symbols x u8 lengths | ends node (len values) |
//!   compressed ends node (len values) | compressed bytes`.
//! - `fsst_lz4`: the same table and ends, then the codes of each 1,024-value vector as its own
//!   LZ4 block, and no compressed ends. The first vectors of the block (up to 64 KiB of codes)
//!   form one block that serves as the dictionary of all the others: LZ4 (high-compression
//!   mode when writing) copies whole phrases from it and from earlier in the vector, and still
//!   decodes at about 2 GB/s. On TPC-H `l_comment` the codes shrink from 55.7 MB to 38.5 MB
//!   (zstd level 3 over 150 KB frames reaches 37.5 MB but decodes at 0.5 GB/s here, which
//!   would cost a lineitem scan a fifth of its speed; LZ4 without a dictionary needs 32-vector
//!   frames for 38.8 MB, and then one row costs 32 vectors). A row costs its vector plus the
//!   dictionary, as a dictionary-encoded row does. Rows are cut from a vector by the
//!   decompressed ends. A block takes this layout only where LZ4 shrinks its codes to
//!   [`PACKED_MAX_RATIO`] or less, measured on the block itself: a 1,024-value sample is too
//!   small to show the repeats LZ4 finds across vectors.

use std::ops::Range;

use fsst::{Compressor, Decompressor, Symbol};

use super::lz4_dict::{HcWithDictionary, decompress_after};
use super::plain::ends_for_rows;
use super::{
    Bytes, BytesRef, BytesVec, Cascade, Domain, Encoding, EncodingId, Ints, VECTOR_LEN,
    decode_stream, encode_stream, read_child, vector_count, vectors_of, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::predicate::BytesMatcher;

pub struct Fsst;
pub struct FsstLz4;

/// `fsst_lz4` is kept only where LZ4 shrinks the codes to at most this fraction.
pub const PACKED_MAX_RATIO: f64 = 0.85;

/// LZ4's high-compression level (its default, `LZ4HC_CLEVEL_DEFAULT`).
const LZ4_HC_LEVEL: i32 = 9;

/// The dictionary is the codes of the block's first vectors, as many as fit in LZ4's 64 KiB
/// window (at least one, at most eight). On `l_comment` a dictionary of 1, 2, 4 and 7 vectors
/// gives 43.5, 41.7, 39.8 and 38.5 MB.
const DICTIONARY_MAX_BYTES: usize = 64 << 10;
const DICTIONARY_MAX_VECTORS: usize = 8;

/// Below this many code bytes a block keeps plain codes: too little to be worth packing.
const PACKED_MIN_CODE_BYTES: usize = 16 << 10;

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
    /// `fsst` only.
    compressed_ends_node: &'a [u8],
    /// Everything before the compressed ends: the same in both layouts.
    table_and_ends_len: usize,
    codes: Codes<'a>,
}

enum Codes<'a> {
    Raw(&'a [u8]),
    Lz4(Lz4Codes<'a>),
}

struct Lz4Codes<'a> {
    /// Vectors `0..dictionary_vectors` live in the dictionary block.
    dictionary_vectors: usize,
    /// Per vector: the length of its codes.
    codes_lens: Vec<usize>,
    dictionary_block: &'a [u8],
    /// Vectors `dictionary_vectors..`.
    blocks: Vec<&'a [u8]>,
}

impl<'a> Lz4Codes<'a> {
    fn parse(r: &mut ByteReader<'a>, len: usize) -> Result<Self> {
        let vectors = vector_count(len);
        let dictionary_vectors = r.u8()? as usize;
        if dictionary_vectors == 0 || dictionary_vectors > vectors.max(1) {
            return corrupt(format!(
                "FSST dictionary of {dictionary_vectors} vectors in a stream of {vectors}"
            ));
        }
        let others = vectors.saturating_sub(dictionary_vectors);
        if (vectors + 1 + others).saturating_mul(4) > r.remaining() {
            return corrupt("FSST block table ends early");
        }
        let codes_lens = (0..vectors)
            .map(|_| r.u32().map(|n| n as usize))
            .collect::<Result<_>>()?;
        let dictionary_len = r.u32()? as usize;
        let block_lens: Vec<usize> = (0..others)
            .map(|_| r.u32().map(|n| n as usize))
            .collect::<Result<_>>()?;
        let dictionary_block = r.take(dictionary_len)?;
        let blocks = block_lens
            .into_iter()
            .map(|n| r.take(n))
            .collect::<Result<_>>()?;
        Ok(Self {
            dictionary_vectors,
            codes_lens,
            dictionary_block,
            blocks,
        })
    }
}

impl<'a> Parsed<'a> {
    fn parse(body: &'a [u8], packed: bool, len: usize) -> Result<Self> {
        let mut r = ByteReader::new(body, "FSST stream");
        let table = Table::read(&mut r)?;
        let ends_node = read_child(&mut r)?;
        let table_and_ends_len = body.len() - r.remaining();
        if !packed {
            let compressed_ends_node = read_child(&mut r)?;
            return Ok(Self {
                table,
                ends_node,
                compressed_ends_node,
                table_and_ends_len,
                codes: Codes::Raw(r.rest()),
            });
        }
        let codes = Codes::Lz4(Lz4Codes::parse(&mut r, len)?);
        Ok(Self {
            table,
            ends_node,
            compressed_ends_node: &[],
            table_and_ends_len,
            codes,
        })
    }

    fn decompressor(&self) -> Decompressor<'_> {
        Decompressor::new(&self.table.symbols, &self.table.lengths)
    }
}

/// FSST-decompresses `codes` onto `out`, which must grow by exactly `expected` bytes.
fn decompress_codes(
    decompressor: &Decompressor<'_>,
    codes: &[u8],
    expected: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    // fsst-rs panics on codes that end in a lone escape. Escapes pair up from the last byte
    // that is not 0xFF (a code or a literal, after which a code starts), so an odd run of
    // trailing 0xFF bytes ends in one.
    let trailing_escapes = codes.iter().rev().take_while(|c| **c == 0xFF).count();
    if trailing_escapes % 2 == 1 {
        return corrupt("FSST codes end in an escape with no literal after it");
    }
    // Decompress straight into the output; reserving the worst case (8 bytes per code)
    // keeps hostile codes inside the buffer.
    let base = out.len();
    out.reserve(decompressor.max_decompression_capacity(codes) + 8);
    let n = decompressor.decompress_into(codes, out.spare_capacity_mut());
    // SAFETY: decompress_into initialised the n bytes after the old length.
    unsafe { out.set_len(base + n) };
    if n != expected {
        out.truncate(base);
        return corrupt(format!(
            "FSST codes decompress to {n} bytes, the ends say {expected}"
        ));
    }
    if out.len() > i32::MAX as usize {
        return corrupt("decoded strings exceed 2 GiB in one batch");
    }
    Ok(())
}

fn decode_raw(
    p: &Parsed<'_>,
    data: &[u8],
    len: usize,
    rows: Range<usize>,
    out: &mut BytesVec,
) -> Result<()> {
    let (start, ends) = ends_for_rows(p.ends_node, len, &rows, i32::MAX as usize)?;
    let Some(&end) = ends.last() else {
        return Ok(());
    };
    // The rows' codes are decompressed in one call: only where they start and end matter.
    let codes = span_of_rows(p.compressed_ends_node, len, &rows, data.len())?;
    let base = out.data.len();
    decompress_codes(
        &p.decompressor(),
        &data[codes],
        end as usize - start,
        &mut out.data,
    )?;
    out.note_ascii_from(base);
    let shift = base as i64 - start as i64;
    out.offsets.extend(ends.iter().map(|e| (e + shift) as i32));
    Ok(())
}

/// Where the bytes of a non-empty range of `rows` lie, from an `ends` child: the end of the
/// row before (0 for the first) to the end of the last row, checked to be in order and
/// within `data_len`. Decodes two ends, not one per row.
fn span_of_rows(
    ends_node: &[u8],
    len: usize,
    rows: &Range<usize>,
    data_len: usize,
) -> Result<Range<usize>> {
    let mut ends = Vec::with_capacity(2);
    if rows.start > 0 {
        decode_stream::<Ints>(ends_node, len, rows.start - 1..rows.start, &mut ends)?;
    } else {
        ends.push(0);
    }
    decode_stream::<Ints>(ends_node, len, rows.end - 1..rows.end, &mut ends)?;
    let (start, end) = (ends[0], ends[1]);
    if start < 0 || end < start || end as u64 > data_len as u64 {
        return corrupt(format!(
            "FSST rows span code bytes {start}..{end}, the block has {data_len}"
        ));
    }
    Ok(start as usize..end as usize)
}

/// The decompressed (plain) byte offsets of rows, from the `ends` child.
struct PlainEnds {
    first_row: usize,
    start: usize,
    ends: Vec<i64>,
}

impl PlainEnds {
    fn of(ends_node: &[u8], len: usize, rows: Range<usize>) -> Result<Self> {
        let (start, ends) = ends_for_rows(ends_node, len, &rows, i32::MAX as usize)?;
        Ok(Self {
            first_row: rows.start,
            start,
            ends,
        })
    }
    fn end_of(&self, row: usize) -> usize {
        self.ends[row - self.first_row] as usize
    }
    fn start_of(&self, row: usize) -> usize {
        if row == self.first_row {
            self.start
        } else {
            self.end_of(row - 1)
        }
    }
    fn bytes(&self, rows: &Range<usize>) -> usize {
        self.end_of(rows.end - 1) - self.start_of(rows.start)
    }
}

/// FSST's worst case is two code bytes per byte (an escape and the literal): this bounds what
/// a hostile length could make the reader allocate.
/// `vector` names the vector in the error (`None`: the dictionary).
fn check_codes_len(codes_len: usize, plain_bytes: usize, vector: Option<usize>) -> Result<()> {
    if codes_len > 2 * plain_bytes {
        let what = vector.map_or("dictionary".to_string(), |v| format!("vector {v}"));
        return corrupt(format!(
            "FSST {what}: {codes_len} code bytes for {plain_bytes} decompressed bytes"
        ));
    }
    Ok(())
}

/// Decompresses the dictionary block and then each vector that `rows` touches.
fn decode_lz4(
    p: &Parsed<'_>,
    c: &Lz4Codes<'_>,
    len: usize,
    rows: Range<usize>,
    out: &mut BytesVec,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let vectors = vectors_of(&rows);
    let vector_rows = |v: usize| v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
    let span = vectors.start * VECTOR_LEN..vector_rows(vectors.end - 1).end;
    let plain = PlainEnds::of(p.ends_node, len, span)?;
    // The dictionary's codes, then (overwritten vector by vector) the codes of one vector.
    let mut dictionary = RecentDictionary::take(p, c, len)?;
    let codes_buf = &mut dictionary.codes;
    let dictionary_len = codes_buf.len();
    let wanted_bytes = plain.bytes(&rows);
    if out.data.len() + wanted_bytes > i32::MAX as usize {
        return corrupt("decoded strings exceed 2 GiB in one batch");
    }
    let most_codes = c.codes_lens[vectors.clone()]
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    // One reservation for the call: the wanted bytes plus room for one vector's worst case
    // (8 bytes a code), which decompress_codes needs to be safe on hostile codes.
    out.data
        .reserve(wanted_bytes + 8 * most_codes.min(i32::MAX as usize) + 8);
    out.offsets.reserve(rows.len());
    let decompressor = p.decompressor();
    let mut dictionary_at: usize = c.codes_lens[..c.dictionary_vectors.min(vectors.start)]
        .iter()
        .sum();
    for v in vectors {
        let vrows = vector_rows(v);
        let vector_bytes = plain.bytes(&vrows);
        let codes_len = c.codes_lens[v];
        check_codes_len(codes_len, vector_bytes, Some(v))?;
        let codes = if v < c.dictionary_vectors {
            let at = dictionary_at;
            dictionary_at += codes_len;
            codes_buf[..dictionary_len]
                .get(at..at + codes_len)
                .ok_or_else(|| {
                    crate::error::FormatError::Corrupt(format!(
                        "FSST vector {v} runs past its dictionary"
                    ))
                })?
        } else {
            let block = c.blocks[v - c.dictionary_vectors];
            decompress_after(block, codes_buf, dictionary_len, codes_len)?;
            &codes_buf[dictionary_len..]
        };
        let base = out.data.len();
        decompress_codes(&decompressor, codes, vector_bytes, &mut out.data)?;
        // Keep only the wanted rows' bytes (the whole vector, except at the ends of `rows`).
        let wanted = rows.start.max(vrows.start)..rows.end.min(vrows.end);
        let keep = plain.start_of(wanted.start) - plain.start_of(vrows.start)
            ..plain.end_of(wanted.end - 1) - plain.start_of(vrows.start);
        if keep.start > 0 {
            out.data
                .copy_within(base + keep.start..base + keep.end, base);
        }
        out.data.truncate(base + keep.len());
        // Checked now, while the bytes are in cache, instead of when the array is built.
        out.note_ascii_from(base);
        let shift = base as i64 - plain.start_of(wanted.start) as i64;
        out.offsets
            .extend(wanted.map(|row| (plain.end_of(row) as i64 + shift) as i32));
    }
    codes_buf.truncate(dictionary_len);
    dictionary.keep();
    Ok(())
}

/// The dictionary codes this thread decompressed lately, keyed by the exact compressed block
/// each came from. A scan reads a block in several batches (a 65,536-row block is eight of
/// DataFusion's 8,192-row batches), and each batch needs the block's dictionary: without
/// this, every batch decompressed it again, an eighth of an `l_comment` scan. A scan decodes
/// its columns batch by batch, so there is one entry per `fsst_lz4` column being scanned, up
/// to [`RECENT_DICTIONARIES`] (the least recently used goes first). The key is the whole
/// compressed block, compared byte for byte (tens of KiB, far cheaper than LZ4), so a hit
/// returns exactly what decompressing would; the expected length is checked again too. The
/// memory is bounded: each entry holds at most 64 KiB of codes and its compressed block.
struct RecentDictionary {
    compressed: Vec<u8>,
    codes: Vec<u8>,
}

/// Dictionaries kept per thread: enough for a scan of that many `fsst_lz4` columns.
const RECENT_DICTIONARIES: usize = 8;

thread_local! {
    /// Most recently used last.
    static RECENT: std::cell::RefCell<Vec<RecentDictionary>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl RecentDictionary {
    /// The dictionary of `c`: taken from this thread's recent ones if one came from the same
    /// block, else freshly decompressed.
    fn take(p: &Parsed<'_>, c: &Lz4Codes<'_>, len: usize) -> Result<RecentDictionary> {
        let expected: usize = c.codes_lens[..c.dictionary_vectors].iter().sum();
        let hit = RECENT.with_borrow_mut(|recent| {
            let at = recent
                .iter()
                .position(|d| d.codes.len() == expected && d.compressed == c.dictionary_block)?;
            Some(recent.remove(at))
        });
        match hit {
            Some(dictionary) => Ok(dictionary),
            None => Ok(RecentDictionary {
                compressed: c.dictionary_block.to_vec(),
                codes: decompress_dictionary(p, c, len)?,
            }),
        }
    }

    /// Keeps this dictionary (its codes only, nothing after them) as the most recently used.
    fn keep(self) {
        RECENT.with_borrow_mut(|recent| {
            if recent.len() == RECENT_DICTIONARIES {
                recent.remove(0);
            }
            recent.push(self);
        });
    }
}

/// The codes of the dictionary vectors (the first ones of the stream).
fn decompress_dictionary(p: &Parsed<'_>, c: &Lz4Codes<'_>, len: usize) -> Result<Vec<u8>> {
    let rows = 0..(c.dictionary_vectors * VECTOR_LEN).min(len);
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let plain_bytes = PlainEnds::of(p.ends_node, len, rows.end - 1..rows.end)?.end_of(rows.end - 1);
    let codes_len: usize = c.codes_lens[..c.dictionary_vectors].iter().sum();
    check_codes_len(codes_len, plain_bytes, None)?;
    let mut dictionary = Vec::new();
    decompress_after(c.dictionary_block, &mut dictionary, 0, codes_len)?;
    Ok(dictionary)
}

/// Trains a table on a sample of `values` and compresses them: the `fsst` body.
fn encode_raw(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
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

/// Re-lays an `fsst` body's codes as LZ4 blocks: the `fsst_lz4` body. With `max_ratio`, gives
/// up (`None`) on codes under [`PACKED_MIN_CODE_BYTES`], and as soon as the dictionary and the
/// first vector after it, or the whole, shrink less than that.
fn pack_codes(body: &[u8], len: usize, max_ratio: Option<f64>) -> Option<Vec<u8>> {
    let parsed = Parsed::parse(body, false, len).ok()?;
    let Codes::Raw(data) = parsed.codes else {
        return None;
    };
    if max_ratio.is_some() && data.len() < PACKED_MIN_CODE_BYTES {
        return None;
    }
    let mut ends = Vec::with_capacity(len);
    decode_stream::<Ints>(parsed.compressed_ends_node, len, 0..len, &mut ends).ok()?;
    let vector_end = |v: usize| ends[((v + 1) * VECTOR_LEN).min(len) - 1] as usize;
    let vectors: Vec<&[u8]> = (0..vector_count(len))
        .map(|v| &data[if v == 0 { 0 } else { vector_end(v - 1) }..vector_end(v)])
        .collect();
    let mut dictionary_vectors = 1;
    while dictionary_vectors < vectors.len().min(DICTIONARY_MAX_VECTORS)
        && vector_end(dictionary_vectors) <= DICTIONARY_MAX_BYTES
    {
        dictionary_vectors += 1;
    }
    let dictionary = &data[..vector_end(dictionary_vectors - 1)];
    let dictionary_block = lz4::block::compress(
        dictionary,
        Some(lz4::block::CompressionMode::HIGHCOMPRESSION(LZ4_HC_LEVEL)),
        false,
    )
    .ok()?;
    let hc = HcWithDictionary::new(dictionary, LZ4_HC_LEVEL)?;
    let too_big = |packed: usize, codes: usize| {
        max_ratio.is_some_and(|ratio| packed as f64 > ratio * codes as f64)
    };
    let mut blocks = Vec::with_capacity(vectors.len() - dictionary_vectors);
    for (i, codes) in vectors[dictionary_vectors..].iter().enumerate() {
        blocks.push(hc.compress(codes)?);
        if i == 0
            && too_big(
                dictionary_block.len() + blocks[0].len(),
                dictionary.len() + codes.len(),
            )
        {
            return None;
        }
    }
    let tables = 4 * (vectors.len() + 1 + blocks.len()) + 1;
    let packed = tables + dictionary_block.len() + blocks.iter().map(Vec::len).sum::<usize>();
    if too_big(packed, data.len()) {
        return None;
    }
    let mut w = ByteWriter::default();
    w.buf.extend_from_slice(&body[..parsed.table_and_ends_len]);
    w.u8(dictionary_vectors as u8);
    for codes in &vectors {
        w.u32(u32::try_from(codes.len()).ok()?);
    }
    w.u32(u32::try_from(dictionary_block.len()).ok()?);
    for block in &blocks {
        w.u32(u32::try_from(block.len()).ok()?);
    }
    w.buf.extend_from_slice(&dictionary_block);
    for block in &blocks {
        w.buf.extend_from_slice(block);
    }
    Some(w.buf)
}

fn decode_any(
    body: &[u8],
    packed: bool,
    len: usize,
    rows: Range<usize>,
    out: &mut BytesVec,
) -> Result<()> {
    let p = Parsed::parse(body, packed, len)?;
    match &p.codes {
        Codes::Raw(data) => decode_raw(&p, data, len, rows, out),
        Codes::Lz4(c) => decode_lz4(&p, c, len, rows, out),
    }
}

impl Encoding<Bytes> for Fsst {
    const ID: EncodingId = EncodingId::FSST;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        encode_raw(values, cascade)
    }
    /// Packs the codes with LZ4 where that pays (see the module docs).
    fn refine(body: Vec<u8>, len: usize) -> (EncodingId, Vec<u8>) {
        match pack_codes(&body, len, Some(PACKED_MAX_RATIO)) {
            Some(packed) => (FsstLz4::ID, packed),
            None => (Self::ID, body),
        }
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        decode_any(body, false, len, rows, out)
    }
    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &BytesMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let p = Parsed::parse(body, false, len)?;
        let (Some(needles), Some(compressor), Codes::Raw(data)) =
            (m.equality_values(), p.table.compressor(), &p.codes)
        else {
            return Bytes::filter_by_decoding(Self::ID, body, len, rows, m, out);
        };
        let needles: Vec<Vec<u8>> = needles.iter().map(|n| compressor.compress(n)).collect();
        let (cstart, cends) = ends_for_rows(p.compressed_ends_node, len, &rows, data.len())?;
        let mut at = cstart;
        for end in cends {
            let codes = &data[at..end as usize];
            out.push(needles.iter().any(|n| n.as_slice() == codes));
            at = end as usize;
        }
        Ok(())
    }
}

/// Not offered to the sampler: blocks reach it through [`Fsst`]'s `refine`, which measures
/// LZ4 on the whole block. `encode` packs unconditionally (for tests and tools). Filters
/// decode first: without compressed ends, codes cannot be compared row by row.
impl Encoding<Bytes> for FsstLz4 {
    const ID: EncodingId = EncodingId::FSST_LZ4;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        pack_codes(&encode_raw(values, cascade)?, values.len(), None)
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        decode_any(body, true, len, rows, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predicate::CmpOp;

    /// Comments built from a few long phrases, like TPC-H's: zstd finds the repeats.
    fn comments(n: usize) -> BytesVec {
        const PHRASES: [&str; 6] = [
            "carefully regular packages sleep furiously",
            "among the final ironic deposits",
            "quickly express requests haggle",
            "blithely bold accounts",
            "even foxes nag slyly",
            "pending theodolites cajole",
        ];
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let mut s = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let words = 1 + (s >> 62) as usize;
                (0..words)
                    .map(|_| {
                        s = s
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        PHRASES[(s >> 40) as usize % PHRASES.len()]
                    })
                    .collect::<Vec<_>>()
                    .join(". ")
                    + &format!(" {i}")
            })
            .collect();
        BytesVec::from_iter(rows.iter().map(|r| r.as_bytes())).unwrap()
    }

    fn decode_packed(body: &[u8], len: usize, rows: Range<usize>) -> Result<Vec<Vec<u8>>> {
        let mut out = BytesVec::default();
        <FsstLz4 as Encoding<Bytes>>::decode(body, len, rows, &mut out)?;
        Ok(out.as_ref().iter().map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn packed_codes_round_trip_across_vectors_and_the_dictionary() {
        let len = 20 * VECTOR_LEN + 500;
        let values = comments(len);
        let raw = <Fsst as Encoding<Bytes>>::encode(values.as_ref(), Cascade::TOP).unwrap();
        let (id, body) = <Fsst as Encoding<Bytes>>::refine(raw.clone(), len);
        assert_eq!(id, EncodingId::FSST_LZ4, "phrases repeat: LZ4 must pay");
        assert!(
            body.len() * 10 < raw.len() * 8,
            "{} vs {}",
            body.len(),
            raw.len()
        );
        let parsed = Parsed::parse(&body, true, len).unwrap();
        let Codes::Lz4(codes) = &parsed.codes else {
            panic!("parsed as fsst_lz4")
        };
        // Rows come both from the dictionary block and from blocks decoded through it.
        assert!(
            (2..vector_count(len)).contains(&codes.dictionary_vectors),
            "{} dictionary vectors",
            codes.dictionary_vectors
        );
        let expected: Vec<Vec<u8>> = values.as_ref().iter().map(<[u8]>::to_vec).collect();
        for rows in [
            0..len,
            0..1,
            VECTOR_LEN - 1..VECTOR_LEN + 1,
            VECTOR_LEN..VECTOR_LEN,
            3 * VECTOR_LEN + 7..9 * VECTOR_LEN + 3,
            10 * VECTOR_LEN + 5..10 * VECTOR_LEN + 6,
            len - 1..len,
        ] {
            assert_eq!(
                decode_packed(&body, len, rows.clone()).unwrap(),
                expected[rows.clone()],
                "{rows:?}"
            );
        }
        let needle = expected[12 * VECTOR_LEN + 5].clone();
        let m = BytesMatcher::for_cmp(CmpOp::Eq, needle.clone());
        let mut hits = Vec::new();
        <FsstLz4 as Encoding<Bytes>>::filter(&body, len, 10..len, &m, &mut hits).unwrap();
        let want: Vec<bool> = expected[10..].iter().map(|v| *v == needle).collect();
        assert_eq!(hits, want);
        assert_eq!(hits.iter().filter(|h| **h).count(), 1);
    }

    /// Batches of several blocks decoded in turn, more blocks than the thread keeps
    /// dictionaries for, each get their own block's rows; and a block whose dictionary differs
    /// by one byte from one just decoded decodes as it would on a fresh thread.
    #[test]
    fn recent_dictionaries_serve_only_their_own_block() {
        let len = 12 * VECTOR_LEN;
        let variants: Vec<(Vec<u8>, Vec<Vec<u8>>)> = (0..RECENT_DICTIONARIES + 2)
            .map(|k| {
                let rows: Vec<Vec<u8>> = comments(len)
                    .as_ref()
                    .iter()
                    .map(|r| [format!("v{k} ").as_bytes(), r].concat())
                    .collect();
                let values = BytesVec::from_iter(rows.iter().map(Vec::as_slice)).unwrap();
                let body = <FsstLz4 as Encoding<Bytes>>::encode(values.as_ref(), Cascade::TOP);
                (body.unwrap(), rows)
            })
            .collect();
        for batch in (0..len).step_by(2 * VECTOR_LEN) {
            let rows = batch..batch + 2 * VECTOR_LEN;
            for (body, expected) in variants.iter().chain(&variants[..2]) {
                let got = decode_packed(body, len, rows.clone()).unwrap();
                assert_eq!(got, expected[rows.clone()], "rows {rows:?}");
            }
        }
        let body = &variants[0].0;
        let parsed = Parsed::parse(body, true, len).unwrap();
        let Codes::Lz4(codes) = &parsed.codes else {
            panic!("parsed as fsst_lz4")
        };
        let at = codes.dictionary_block.as_ptr() as usize - body.as_ptr() as usize + 20;
        let mut damaged = body.clone();
        damaged[at] ^= 0x01;
        let tail = len - VECTOR_LEN..len;
        decode_packed(body, len, tail.clone()).unwrap();
        let here = decode_packed(&damaged, len, tail.clone()).map_err(|e| e.to_string());
        let fresh = std::thread::spawn(move || {
            decode_packed(&damaged, len, tail).map_err(|e| e.to_string())
        });
        assert_eq!(here, fresh.join().unwrap());
        assert_ne!(here, Ok(variants[0].1[len - VECTOR_LEN..].to_vec()));
    }

    #[test]
    fn strings_lz4_cannot_shrink_keep_plain_codes() {
        // Distinct pseudo-random words: FSST already takes what little there is.
        let len = 20_000;
        let rows: Vec<String> = (0..len as u64)
            .map(|i| format!("{:x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        let values = BytesVec::from_iter(rows.iter().map(|r| r.as_bytes())).unwrap();
        let raw = <Fsst as Encoding<Bytes>>::encode(values.as_ref(), Cascade::TOP).unwrap();
        let (id, body) = <Fsst as Encoding<Bytes>>::refine(raw.clone(), len);
        assert_eq!(id, EncodingId::FSST);
        assert_eq!(body, raw);
    }

    #[test]
    fn codes_ending_in_a_lone_escape_are_an_error_not_a_panic() {
        let body = <Fsst as Encoding<Bytes>>::encode(comments(100).as_ref(), Cascade::TOP).unwrap();
        let p = Parsed::parse(&body, false, 100).unwrap();
        let d = p.decompressor();
        let mut out = Vec::new();
        assert!(decompress_codes(&d, &[0xFF], 1, &mut out).is_err());
        assert!(decompress_codes(&d, &[0xFF, 0xFF, 0xFF], 2, &mut out).is_err());
        assert!(decompress_codes(&d, &[0xFF, b'x', 0xFF], 2, &mut out).is_err());
        decompress_codes(&d, &[0xFF, 0xFF, 0xFF, b'x'], 2, &mut out).unwrap();
        assert_eq!(out, [0xFF, b'x']);
    }

    /// Raw codes are decompressed as one span per call, from two compressed ends: a span
    /// that runs backwards or past the codes is an error, not a slice out of bounds.
    #[test]
    fn code_spans_are_checked_against_the_codes() {
        let ends = encode_stream::<Ints>(&[5, 3, 10], Cascade::TOP);
        assert_eq!(span_of_rows(&ends, 3, &(0..1), 10).unwrap(), 0..5);
        assert_eq!(span_of_rows(&ends, 3, &(1..3), 10).unwrap(), 5..10);
        assert!(span_of_rows(&ends, 3, &(1..2), 10).is_err(), "backwards");
        assert!(
            span_of_rows(&ends, 3, &(0..3), 9).is_err(),
            "past the codes"
        );
        let negative = encode_stream::<Ints>(&[-1, 4], Cascade::TOP);
        assert!(span_of_rows(&negative, 2, &(1..2), 10).is_err(), "negative");
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let len = 12 * VECTOR_LEN + 100;
        let body =
            <FsstLz4 as Encoding<Bytes>>::encode(comments(len).as_ref(), Cascade::TOP).unwrap();
        for cut in [1, 100, body.len() / 2] {
            assert!(decode_packed(&body[..body.len() - cut], len, 0..len).is_err());
        }
        let mut flipped = body.clone();
        let at = body.len() - 50;
        flipped[at] ^= 0xFF;
        // A flipped byte inside a block either fails LZ4's checks or changes the codes; it
        // must never panic or read outside the buffers.
        let _ = decode_packed(&flipped, len, 0..len);
    }
}
