//! zstd, one frame per 1024-value vector so that a single row still decodes only its vector.
//! Chosen only where it beats the best lightweight encoding clearly (see
//! [`super::ZSTD_MUST_WIN_BY`]), since it decodes several times slower.
//!
//! Fixed-width body: `ceil(len / 1024) frame sizes as u32 | frames`, each frame the plain
//! little-endian values of one vector. Bytes body: `ends node (len values) | frame sizes | frames`,
//! each frame the concatenated bytes of one vector's values.

use std::cell::RefCell;
use std::ops::Range;
use std::thread::LocalKey;

use super::plain::{append_slices, ends_for_rows};
use super::{
    Bytes, BytesRef, BytesVec, Cascade, Encoding, EncodingId, FloatLane, Floats, Ints, VECTOR_LEN,
    encode_stream, read_child, vector_count, vectors_of, write_child,
};
use crate::error::{Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

pub struct Zstd;

/// zstd level used for every frame: level 3 is zstd's default and Parquet's usual choice.
pub const ZSTD_LEVEL: i32 = 3;

fn write_frames<'a>(w: &mut ByteWriter, frames: impl Iterator<Item = &'a [u8]>) -> Option<()> {
    let compressed: Vec<Vec<u8>> = frames.map(compress_frame).collect::<Result<_, _>>().ok()?;
    for c in &compressed {
        w.u32(u32::try_from(c.len()).ok()?);
    }
    for c in &compressed {
        w.buf.extend_from_slice(c);
    }
    Some(())
}

/// The frames of a body, located but not yet decompressed.
struct Frames<'a> {
    frames: Vec<&'a [u8]>,
}

impl<'a> Frames<'a> {
    fn parse(r: &mut ByteReader<'a>, count: usize) -> Result<Self> {
        if count.saturating_mul(4) > r.remaining() {
            return corrupt("zstd frame table ends early");
        }
        let sizes: Vec<usize> = (0..count)
            .map(|_| r.u32().map(|s| s as usize))
            .collect::<Result<_>>()?;
        let frames = sizes.iter().map(|s| r.take(*s)).collect::<Result<_>>()?;
        Ok(Self { frames })
    }

    /// Decompresses frame `v`, which must hold exactly `expected` bytes.
    fn decompress(&self, v: usize, expected: usize) -> Result<Vec<u8>> {
        // The frame header states its size; check it before allocating, so a hostile frame
        // cannot make the reader reserve memory the data does not back.
        match zstd::zstd_safe::get_frame_content_size(self.frames[v]) {
            Ok(Some(size)) if size == expected as u64 => {}
            _ => {
                return corrupt(format!(
                    "zstd frame {v} does not declare its {expected}-byte content size"
                ));
            }
        }
        let data = decompress_frame(self.frames[v], expected)
            .map_err(|e| crate::error::FormatError::Corrupt(format!("zstd frame {v}: {e}")))?;
        if data.len() != expected {
            return corrupt(format!(
                "zstd frame {v} holds {} bytes, expected {expected}",
                data.len()
            ));
        }
        Ok(data)
    }
}

thread_local! {
    /// One compression and one decompression context per thread, reused for every frame:
    /// creating a context allocates and clears zstd's tables, which costs more than a
    /// 1,024-value frame (measured: 3.5% of a strings scan went to `ZSTD_createDCtx`).
    /// Each thread that has used them keeps both, about a megabyte at level 3.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Runs `f` on this thread's context in `slot`, made by `new` on first use. A context that
/// failed on damaged input is reused as is: zstd starts every frame from a reset state.
fn with_context<C: 'static, T>(
    slot: &'static LocalKey<RefCell<Option<C>>>,
    new: impl FnOnce() -> std::io::Result<C>,
    f: impl FnOnce(&mut C) -> std::io::Result<T>,
) -> std::io::Result<T> {
    slot.with(|cell| {
        let mut cell = cell.borrow_mut();
        let context = match cell.as_mut() {
            Some(context) => context,
            None => cell.insert(new()?),
        };
        f(context)
    })
}

/// Compresses one frame at [`ZSTD_LEVEL`] with this thread's context.
fn compress_frame(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    with_context(
        &COMPRESSOR,
        || zstd::bulk::Compressor::new(ZSTD_LEVEL),
        |c| c.compress(frame),
    )
}

/// Decompresses one frame of at most `capacity` bytes with this thread's context.
fn decompress_frame(frame: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    with_context(&DECOMPRESSOR, zstd::bulk::Decompressor::new, |d| {
        d.decompress(frame, capacity)
    })
}

fn encode_fixed<T>(values: &[T], width: usize, put: impl Fn(&T, &mut Vec<u8>)) -> Option<Vec<u8>> {
    let chunks: Vec<Vec<u8>> = values
        .chunks(VECTOR_LEN)
        .map(|c| {
            let mut b = Vec::with_capacity(c.len() * width);
            c.iter().for_each(|v| put(v, &mut b));
            b
        })
        .collect();
    let mut w = ByteWriter::default();
    write_frames(&mut w, chunks.iter().map(Vec::as_slice))?;
    Some(w.buf)
}

fn decode_fixed<T>(
    body: &[u8],
    len: usize,
    rows: Range<usize>,
    width: usize,
    get: impl Fn(&[u8]) -> T,
    out: &mut Vec<T>,
) -> Result<()> {
    let mut r = ByteReader::new(body, "zstd stream");
    let frames = Frames::parse(&mut r, vector_count(len))?;
    for v in vectors_of(&rows) {
        let vector_rows = v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
        let data = frames.decompress(v, vector_rows.len() * width)?;
        let from = rows.start.max(vector_rows.start) - vector_rows.start;
        let to = rows.end.min(vector_rows.end) - vector_rows.start;
        out.extend(data[from * width..to * width].chunks_exact(width).map(&get));
    }
    Ok(())
}

impl Encoding<Ints> for Zstd {
    const ID: EncodingId = EncodingId::ZSTD;
    fn encode(values: &[i64], _: Cascade) -> Option<Vec<u8>> {
        encode_fixed(values, 8, |v, b| b.extend_from_slice(&v.to_le_bytes()))
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<i64>) -> Result<()> {
        decode_fixed(
            body,
            len,
            rows,
            8,
            |b| i64::from_le_bytes(b.try_into().expect("8 bytes")),
            out,
        )
    }
}

impl<F: FloatLane> Encoding<Floats<F>> for Zstd {
    const ID: EncodingId = EncodingId::ZSTD;
    fn encode(values: &[F], _: Cascade) -> Option<Vec<u8>> {
        encode_fixed(values, F::BYTES, |v, b| v.write_le(b))
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut Vec<F>) -> Result<()> {
        decode_fixed(body, len, rows, F::BYTES, F::from_le, out)
    }
}

impl Encoding<Bytes> for Zstd {
    const ID: EncodingId = EncodingId::ZSTD;
    fn encode(values: BytesRef<'_>, cascade: Cascade) -> Option<Vec<u8>> {
        let ends = super::relative_ends(values);
        let mut w = ByteWriter::default();
        write_child(&mut w, &encode_stream::<Ints>(&ends, cascade.child()));
        let frames = (0..vector_count(values.len())).map(|v| {
            let first = values.offsets[v * VECTOR_LEN] as usize;
            let last = values.offsets[((v + 1) * VECTOR_LEN).min(values.len())] as usize;
            &values.data[first..last]
        });
        write_frames(&mut w, frames)?;
        Some(w.buf)
    }
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut BytesVec) -> Result<()> {
        let mut r = ByteReader::new(body, "zstd bytes stream");
        let ends_node = read_child(&mut r)?;
        let frames = Frames::parse(&mut r, vector_count(len))?;
        for v in vectors_of(&rows) {
            let vector_rows = v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
            let (vector_start, vector_ends) =
                ends_for_rows(ends_node, len, &vector_rows, usize::MAX >> 1)?;
            let vector_bytes =
                (*vector_ends.last().unwrap_or(&(vector_start as i64)) as usize) - vector_start;
            let data = frames.decompress(v, vector_bytes)?;
            let from = rows.start.max(vector_rows.start) - vector_rows.start;
            let to = rows.end.min(vector_rows.end) - vector_rows.start;
            let start = if from == 0 {
                0
            } else {
                vector_ends[from - 1] as usize - vector_start
            };
            let ends: Vec<i64> = vector_ends[from..to]
                .iter()
                .map(|e| e - vector_start as i64)
                .collect();
            append_slices(&data, start, &ends, out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if i % 7 < 4 {
                    b'a' + (x >> 60) as u8
                } else {
                    (x >> 56) as u8
                }
            })
            .collect()
    }

    #[test]
    fn a_reused_context_writes_the_bytes_of_a_fresh_one() {
        for (seed, len) in [(1, 8192), (2, 10), (3, 0), (4, 65536), (5, 8192)] {
            let data = sample(seed, len);
            let reused = compress_frame(&data).unwrap();
            assert_eq!(reused, zstd::bulk::compress(&data, ZSTD_LEVEL).unwrap());
            assert_eq!(decompress_frame(&reused, len).unwrap(), data);
        }
    }

    #[test]
    fn a_damaged_frame_fails_and_the_next_frame_still_decodes() {
        let data = sample(9, 8192);
        let frame = compress_frame(&data).unwrap();
        let mut flipped = frame.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x5A;
        let damaged = [
            &frame[..frame.len() - 3],
            &flipped[..],
            &[0x28, 0xB5, 0x2F, 0xFD, 0xFF][..],
        ];
        for bad in damaged {
            let decoded = decompress_frame(bad, data.len());
            assert!(decoded.is_err() || decoded.unwrap() != data);
            assert_eq!(decompress_frame(&frame, data.len()).unwrap(), data);
        }
    }
}
