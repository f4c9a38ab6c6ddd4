//! FSST (Fast Static Symbol Table, Boncz et al., VLDB 2020) for strings, through the `fsst-rs`
//! crate: up to 255 symbols of 1 to 8 bytes, each string compressed to one-byte codes. The
//! table is trained on a sample of the block. Uncompressed ends are stored too, so a range of
//! rows decompresses in one call. Equality and IN compare compressed bytes: the needle is
//! compressed with the same table, and equal strings have equal codes.
//!
//! Two layouts share the table and the decompressed ends:
//! - `fsst`: `symbols: u8 | symbols x u64 | symbols x u8 lengths | ends node (len values) |
//!   compressed ends node (len values) | compressed bytes`.
//! - `fsst_lz4`: the same table and ends, then the codes in LZ4 blocks of [`FRAME_VALUES`] rows
//!   each (`frames x (u32 codes bytes, u32 block bytes) | blocks`), and no compressed ends.
//!   FSST removes short repeats; LZ4 (high-compression mode when writing) then removes the
//!   long ones, whole phrases, and still decodes at about 2 GB/s. On TPC-H `l_comment` the
//!   codes shrink from 55.7 MB to 38.8 MB (zstd reaches 37.5 MB but decodes at 0.5 GB/s here,
//!   which would cost a lineitem scan a fifth of its speed). Without compressed ends a frame
//!   is decompressed whole and rows are cut from it by the decompressed ends; reading one row
//!   costs one frame (about 300 KB of codes for comments). A block takes this layout only where
//!   LZ4 shrinks its codes to [`FRAMED_MAX_RATIO`] or less, measured on the block itself: a
//!   1,024-value sample is too small to show the repeats LZ4 finds in a frame.

use std::ops::Range;

use fsst::{Compressor, Decompressor, Symbol};

use super::plain::ends_for_rows;
use super::{
    Bytes, BytesRef, BytesVec, Cascade, Encoding, EncodingId, Ints, VECTOR_LEN, decode_stream,
    encode_stream, read_child, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::predicate::BytesMatcher;

pub struct Fsst;
pub struct FsstLz4;

/// Rows per LZ4 block of codes in `fsst_lz4`. LZ4 looks back at most 64 KiB, so longer blocks
/// gain only fewer cold starts: on TPC-H comments 8, 16, 32 and 64 vectors give 41.1, 39.6,
/// 38.8 and 38.5 MB. 32 vectors keep one row's read to about 300 KB of codes.
pub const FRAME_VALUES: usize = 32 * VECTOR_LEN;

/// `fsst_lz4` is kept only where LZ4 shrinks the codes to at most this fraction.
pub const FRAMED_MAX_RATIO: f64 = 0.85;

/// LZ4's high-compression level (its default, `LZ4HC_CLEVEL_DEFAULT`).
const LZ4_HC_LEVEL: i32 = 9;

/// Below this many code bytes a block keeps plain codes: too little to be worth a frame.
const FRAMED_MIN_CODE_BYTES: usize = 16 << 10;

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
    /// Per frame: codes bytes and the LZ4 block.
    Lz4(Vec<(usize, &'a [u8])>),
}

impl<'a> Parsed<'a> {
    fn parse(body: &'a [u8], framed: bool, len: usize) -> Result<Self> {
        let mut r = ByteReader::new(body, "FSST stream");
        let table = Table::read(&mut r)?;
        let ends_node = read_child(&mut r)?;
        let table_and_ends_len = body.len() - r.remaining();
        if !framed {
            let compressed_ends_node = read_child(&mut r)?;
            return Ok(Self {
                table,
                ends_node,
                compressed_ends_node,
                table_and_ends_len,
                codes: Codes::Raw(r.rest()),
            });
        }
        let frames = len.div_ceil(FRAME_VALUES);
        if frames.saturating_mul(8) > r.remaining() {
            return corrupt("FSST frame table ends early");
        }
        let sizes: Vec<(usize, usize)> = (0..frames)
            .map(|_| Ok((r.u32()? as usize, r.u32()? as usize)))
            .collect::<Result<_>>()?;
        let blocks = sizes
            .into_iter()
            .map(|(codes, block)| Ok((codes, r.take(block)?)))
            .collect::<Result<_>>()?;
        Ok(Self {
            table,
            ends_node,
            compressed_ends_node: &[],
            table_and_ends_len,
            codes: Codes::Lz4(blocks),
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
    let (cstart, cends) = ends_for_rows(p.compressed_ends_node, len, &rows, data.len())?;
    let (Some(&cend), Some(&end)) = (cends.last(), ends.last()) else {
        return Ok(());
    };
    let base = out.data.len();
    decompress_codes(
        &p.decompressor(),
        &data[cstart..cend as usize],
        end as usize - start,
        &mut out.data,
    )?;
    out.note_ascii_from(base);
    let shift = base as i64 - start as i64;
    out.offsets.extend(ends.iter().map(|e| (e + shift) as i32));
    Ok(())
}

/// Decompresses each frame that `rows` touches and keeps the rows' bytes.
fn decode_lz4(
    p: &Parsed<'_>,
    blocks: &[(usize, &[u8])],
    len: usize,
    rows: Range<usize>,
    out: &mut BytesVec,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let first_frame = rows.start / FRAME_VALUES;
    let end_frame = (rows.end - 1) / FRAME_VALUES + 1;
    let span = first_frame * FRAME_VALUES..(end_frame * FRAME_VALUES).min(len);
    let (span_start, span_ends) = ends_for_rows(p.ends_node, len, &span, i32::MAX as usize)?;
    let end_of = |row: usize| span_ends[row - span.start] as usize;
    let start_of = |row: usize| {
        if row == span.start {
            span_start
        } else {
            end_of(row - 1)
        }
    };
    let decompressor = p.decompressor();
    let wanted_bytes = end_of(rows.end - 1) - start_of(rows.start);
    if out.data.len() + wanted_bytes > i32::MAX as usize {
        return corrupt("decoded strings exceed 2 GiB in one batch");
    }
    // One reservation for the whole call: the wanted bytes plus room for the worst case of one
    // frame (8 bytes a code), which decompress_codes needs to be safe on hostile codes.
    let most_codes = blocks[first_frame..end_frame]
        .iter()
        .map(|(codes_len, _)| *codes_len)
        .max()
        .unwrap_or(0);
    out.data
        .reserve(wanted_bytes + 8 * most_codes.min(2 * (i32::MAX as usize)) + 8);
    out.offsets.reserve(rows.len());
    let mut codes = Vec::new();
    for f in first_frame..end_frame {
        let frame = f * FRAME_VALUES..((f + 1) * FRAME_VALUES).min(len);
        let (codes_len, block) = blocks[f];
        let frame_bytes = end_of(frame.end - 1) - start_of(frame.start);
        // FSST's worst case is two code bytes per byte (an escape and the literal): this
        // bounds what a hostile size could make the reader allocate.
        if codes_len > 2 * frame_bytes {
            return corrupt(format!(
                "FSST frame {f}: {codes_len} code bytes for {frame_bytes} decompressed bytes"
            ));
        }
        codes.resize(codes_len, 0);
        match lz4::block::decompress_to_buffer(block, Some(codes_len as i32), &mut codes) {
            Ok(n) if n == codes_len => {}
            _ => return corrupt(format!("FSST frame {f}: damaged LZ4 block")),
        }
        let wanted = rows.start.max(frame.start)..rows.end.min(frame.end);
        let base = out.data.len();
        decompress_codes(&decompressor, &codes, frame_bytes, &mut out.data)?;
        // Keep only the wanted rows' bytes (a whole frame, except at the ends of `rows`).
        let keep = start_of(wanted.start) - start_of(frame.start)
            ..end_of(wanted.end - 1) - start_of(frame.start);
        if keep.start > 0 {
            out.data
                .copy_within(base + keep.start..base + keep.end, base);
        }
        out.data.truncate(base + keep.len());
        // Checked now, while the bytes are in cache, instead of when the array is built.
        out.note_ascii_from(base);
        let shift = base as i64 - start_of(wanted.start) as i64;
        out.offsets
            .extend(wanted.map(|row| (end_of(row) as i64 + shift) as i32));
    }
    Ok(())
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
/// up (`None`) as soon as the first frame, or the whole, shrinks less than that.
fn frame_codes(body: &[u8], len: usize, max_ratio: Option<f64>) -> Option<Vec<u8>> {
    let parsed = Parsed::parse(body, false, len).ok()?;
    let Codes::Raw(data) = parsed.codes else {
        return None;
    };
    let mut ends = Vec::with_capacity(len);
    decode_stream::<Ints>(parsed.compressed_ends_node, len, 0..len, &mut ends).ok()?;
    let frame_end = |f: usize| ends[((f + 1) * FRAME_VALUES).min(len) - 1] as usize;
    let frames: Vec<&[u8]> = (0..len.div_ceil(FRAME_VALUES))
        .map(|f| &data[if f == 0 { 0 } else { frame_end(f - 1) }..frame_end(f)])
        .collect();
    let lz4 = |codes: &[u8]| {
        lz4::block::compress(
            codes,
            Some(lz4::block::CompressionMode::HIGHCOMPRESSION(LZ4_HC_LEVEL)),
            false,
        )
        .ok()
    };
    let too_big = |packed: usize, codes: usize| {
        max_ratio.is_some_and(|ratio| packed as f64 > ratio * codes as f64)
    };
    let mut blocks = vec![lz4(frames[0])?];
    if too_big(blocks[0].len(), frames[0].len()) {
        return None;
    }
    for frame in &frames[1..] {
        blocks.push(lz4(frame)?);
    }
    let packed: usize = blocks.iter().map(|b| b.len() + 8).sum();
    if too_big(packed, data.len()) {
        return None;
    }
    let mut w = ByteWriter::default();
    w.buf.extend_from_slice(&body[..parsed.table_and_ends_len]);
    for (frame, block) in frames.iter().zip(&blocks) {
        w.u32(u32::try_from(frame.len()).ok()?);
        w.u32(u32::try_from(block.len()).ok()?);
    }
    for block in &blocks {
        w.buf.extend_from_slice(block);
    }
    Some(w.buf)
}

fn decode_any(
    body: &[u8],
    framed: bool,
    len: usize,
    rows: Range<usize>,
    out: &mut BytesVec,
) -> Result<()> {
    let p = Parsed::parse(body, framed, len)?;
    match &p.codes {
        Codes::Raw(data) => decode_raw(&p, data, len, rows, out),
        Codes::Lz4(blocks) => decode_lz4(&p, blocks, len, rows, out),
    }
}

impl Encoding<Bytes> for Fsst {
    const ID: EncodingId = EncodingId::FSST;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        encode_raw(values, cascade)
    }
    /// Packs the codes with LZ4 where that pays (see the module docs).
    fn refine(body: Vec<u8>, len: usize) -> (EncodingId, Vec<u8>) {
        let code_bytes = match Parsed::parse(&body, false, len) {
            Ok(Parsed {
                codes: Codes::Raw(data),
                ..
            }) => data.len(),
            _ => 0,
        };
        if code_bytes < FRAMED_MIN_CODE_BYTES {
            return (Self::ID, body);
        }
        match frame_codes(&body, len, Some(FRAMED_MAX_RATIO)) {
            Some(framed) => (FsstLz4::ID, framed),
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
            let mut values = BytesVec::default();
            Self::decode(body, len, rows, &mut values)?;
            out.extend(values.as_ref().iter().map(|v| m.matches(v)));
            return Ok(());
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
/// LZ4 on the whole block. `encode` frames unconditionally (for tests and tools). Filters
/// decode first: without compressed ends, codes cannot be compared row by row.
impl Encoding<Bytes> for FsstLz4 {
    const ID: EncodingId = EncodingId::FSST_LZ4;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        frame_codes(&encode_raw(values, cascade)?, values.len(), None)
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

    fn decode_framed(body: &[u8], len: usize, rows: Range<usize>) -> Result<Vec<Vec<u8>>> {
        let mut out = BytesVec::default();
        <FsstLz4 as Encoding<Bytes>>::decode(body, len, rows, &mut out)?;
        Ok(out.as_ref().iter().map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn framed_codes_round_trip_across_frame_boundaries_and_filter_on_codes() {
        let len = 2 * FRAME_VALUES + 1500;
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
        let expected: Vec<Vec<u8>> = values.as_ref().iter().map(<[u8]>::to_vec).collect();
        for rows in [
            0..len,
            0..1,
            FRAME_VALUES - 1..FRAME_VALUES + 1,
            FRAME_VALUES..FRAME_VALUES,
            FRAME_VALUES + 7..2 * FRAME_VALUES + 3,
            len - 1..len,
        ] {
            assert_eq!(
                decode_framed(&body, len, rows.clone()).unwrap(),
                expected[rows.clone()],
                "{rows:?}"
            );
        }
        let needle = expected[FRAME_VALUES + 5].clone();
        let m = BytesMatcher::for_cmp(CmpOp::Eq, needle.clone());
        let mut hits = Vec::new();
        <FsstLz4 as Encoding<Bytes>>::filter(&body, len, 10..len, &m, &mut hits).unwrap();
        let want: Vec<bool> = expected[10..].iter().map(|v| *v == needle).collect();
        assert_eq!(hits, want);
        assert_eq!(hits.iter().filter(|h| **h).count(), 1);
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

    #[test]
    fn damaged_frames_are_errors_not_panics() {
        let len = FRAME_VALUES + 100;
        let body =
            <FsstLz4 as Encoding<Bytes>>::encode(comments(len).as_ref(), Cascade::TOP).unwrap();
        for cut in [1, 100, body.len() / 2] {
            assert!(decode_framed(&body[..body.len() - cut], len, 0..len).is_err());
        }
        let mut flipped = body.clone();
        let at = body.len() - 50;
        flipped[at] ^= 0xFF;
        // A flipped byte inside a frame either fails zstd's checks or changes the codes; it
        // must never panic or read outside the buffers.
        let _ = decode_framed(&flipped, len, 0..len);
    }
}
