//! Encodings: one module each, all behind the [`Encoding`] trait, chosen per block by sampling.
//!
//! A *stream* is a sequence of values of one [`Domain`] (64-bit integers, floats, or byte
//! strings). A stream is stored as a *node*: one byte naming the encoding (SPEC.md,
//! "Encodings") and a body. Bodies of cascading encodings (delta, run-length, dictionary, ALP,
//! FSST) contain child nodes, each prefixed by its length, so that dictionary codes and run
//! lengths are themselves bit-packed when that pays.
//!
//! Selection follows BtrBlocks: take a sample (up to 16 slices of 64 consecutive values), encode
//! it with every candidate that applies, and keep the smallest. zstd must beat the best
//! lightweight encoding by [`ZSTD_MUST_WIN_BY`] (strings) or [`ZSTD_MUST_WIN_BY_NUMBERS`]
//! (numbers) to be chosen, since it decodes several times slower.

pub mod alp;
pub mod bitpacked;
pub mod constant;
pub mod delta;
pub mod dictionary;
pub mod fsst;
mod lz4_dict;
pub mod plain;
pub mod rle;
pub mod zstd;

use std::ops::Range;

use crate::error::{FormatError, Result, corrupt};
use crate::io::{ByteReader, ByteWriter};
use crate::predicate::{BytesMatcher, FloatMatcher, IntMatcher};

pub use alp::FloatLane;

/// Values per vector: the unit of bit-packing, zone maps and random access.
pub const VECTOR_LEN: usize = 1024;
/// zstd is kept only when its sample is at most this fraction of the best lightweight
/// encoding's, for byte strings (where FSST and dictionaries are the alternatives).
pub const ZSTD_MUST_WIN_BY: f64 = 0.6;
/// The same bar for integers and floats, set lower: bit-packed numbers decode at several GB/s,
/// zstd frames at a few hundred MB/s, so zstd must save more than half to be worth it.
pub const ZSTD_MUST_WIN_BY_NUMBERS: f64 = 0.35;
/// Depth of cascading below a block's top-level stream.
pub const MAX_CASCADE_DEPTH: u8 = 3;
/// Most values one stream may hold; bounds every allocation a reader makes for a stream.
pub const MAX_STREAM_VALUES: usize = 1 << 26;

/// Encoding identifiers as stored in the first byte of a node (SPEC.md, "Encodings").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EncodingId(pub u8);

impl EncodingId {
    pub const PLAIN: Self = Self(0);
    pub const CONSTANT: Self = Self(1);
    pub const BITPACKED: Self = Self(2);
    pub const DELTA: Self = Self(3);
    pub const RUN_LENGTH: Self = Self(4);
    pub const DICTIONARY: Self = Self(5);
    pub const ALP: Self = Self(6);
    pub const FSST: Self = Self(7);
    pub const ZSTD: Self = Self(8);
    pub const FSST_LZ4: Self = Self(9);

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "plain",
            1 => "constant",
            2 => "bitpacked",
            3 => "delta",
            4 => "run_length",
            5 => "dictionary",
            6 => "alp",
            7 => "fsst",
            8 => "zstd",
            9 => "fsst_lz4",
            _ => "unknown",
        }
    }
}

/// How much deeper child streams may cascade.
#[derive(Clone, Copy, Debug)]
pub struct Cascade {
    pub depth: u8,
}

impl Cascade {
    pub const TOP: Cascade = Cascade {
        depth: MAX_CASCADE_DEPTH,
    };
    pub fn child(self) -> Cascade {
        Cascade {
            depth: self.depth.saturating_sub(1),
        }
    }
}

/// Byte strings as Arrow lays them out: `offsets` has one more entry than there are values.
#[derive(Clone, Copy, Debug)]
pub struct BytesRef<'a> {
    pub offsets: &'a [i32],
    pub data: &'a [u8],
}

impl<'a> BytesRef<'a> {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// Each value's end offset relative to the first value's start: the `ends` stream that plain,
/// FSST and zstd byte-string bodies begin with.
pub(crate) fn relative_ends(values: BytesRef<'_>) -> Vec<i64> {
    let base = values.offsets[0];
    values.offsets[1..]
        .iter()
        .map(|o| i64::from(o - base))
        .collect()
}

/// Owned byte strings; `offsets` starts with 0.
#[derive(Clone, Debug)]
pub struct BytesVec {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    /// `data[..ascii_len]` is known to be ASCII, hence valid UTF-8 split anywhere. Decoders
    /// that see their output while it is still in cache (or whose source proves it, like an
    /// ASCII dictionary) record it, so that building a string array need not read hundreds of
    /// megabytes again. Appending keeps it true; only [`BytesVec::note_ascii_from`] and
    /// [`BytesVec::mark_ascii_from`] raise it.
    ascii_len: usize,
}

impl PartialEq for BytesVec {
    fn eq(&self, other: &Self) -> bool {
        self.offsets == other.offsets && self.data == other.data
    }
}

impl Eq for BytesVec {}

impl Default for BytesVec {
    fn default() -> Self {
        Self {
            offsets: vec![0],
            data: vec![],
            ascii_len: 0,
        }
    }
}

impl BytesVec {
    /// Records that `data[base..]` is ASCII if it is (checked here, best while it is in
    /// cache) and everything before `base` is known to be.
    pub fn note_ascii_from(&mut self, base: usize) {
        if self.ascii_len == base && self.data[base..].is_ascii() {
            self.ascii_len = self.data.len();
        }
    }

    /// Records that `data[base..]` is ASCII, which the caller has proven (for example, it was
    /// gathered from ASCII dictionary values).
    pub fn mark_ascii_from(&mut self, base: usize) {
        if self.ascii_len == base {
            self.ascii_len = self.data.len();
        }
    }

    /// The bytes not yet known to be ASCII.
    pub fn unchecked_tail(&self) -> &[u8] {
        &self.data[self.ascii_len.min(self.data.len())..]
    }

    pub fn as_ref(&self) -> BytesRef<'_> {
        BytesRef {
            offsets: &self.offsets,
            data: &self.data,
        }
    }
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn push(&mut self, value: &[u8]) -> Result<()> {
        self.data.extend_from_slice(value);
        let end = i32::try_from(self.data.len())
            .map_err(|_| FormatError::Corrupt("a block's strings exceed 2 GiB".into()))?;
        self.offsets.push(end);
        Ok(())
    }
    pub fn from_iter<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Self> {
        let mut out = Self::default();
        for v in values {
            out.push(v)?;
        }
        Ok(out)
    }
}

/// A kind of value a stream holds, with the encodings that apply to it.
pub trait Domain: Sized + 'static {
    type Input<'a>: Copy;
    type Owned: Default;
    type Matcher;
    const NAME: &'static str;
    /// How much smaller than the best lightweight encoding zstd must be to be chosen.
    const ZSTD_MUST_WIN_BY: f64 = ZSTD_MUST_WIN_BY_NUMBERS;
    /// Where the sample comes from: 16 slices of 64 values spread over the stream.
    fn sample_ranges(len: usize) -> Vec<Range<usize>> {
        sample_ranges(len)
    }
    fn len(input: Self::Input<'_>) -> usize;
    fn as_input(owned: &Self::Owned) -> Self::Input<'_>;
    fn owned_len(owned: &Self::Owned) -> usize;
    /// Copies `ranges` of `input`, concatenated (used for samples).
    fn gather(input: Self::Input<'_>, ranges: &[Range<usize>]) -> Self::Owned;
    /// The encodings that may be tried at `cascade` depth.
    fn candidates(cascade: Cascade) -> Vec<Candidate<Self>>;
    fn decode_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        out: &mut Self::Owned,
    ) -> Result<()>;
    fn filter_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &Self::Matcher,
        out: &mut Vec<bool>,
    ) -> Result<()>;
    /// Decodes with encoding `id`, then evaluates `m`: for encodings without a faster way.
    fn filter_by_decoding(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &Self::Matcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let mut values = Self::Owned::default();
        Self::decode_node(id, body, len, rows, &mut values)?;
        Self::filter_decoded(&values, m, out);
        Ok(())
    }
    /// Evaluates `m` on decoded values (the fallback of every encoding without a faster way).
    fn filter_decoded(values: &Self::Owned, m: &Self::Matcher, out: &mut Vec<bool>);
}

/// One encoding of one domain. Implementations live one per module.
pub trait Encoding<D: Domain> {
    const ID: EncodingId;
    /// Encodes `values` into a body (without the id byte); `None` when the encoding does not apply.
    fn encode(values: D::Input<'_>, cascade: Cascade) -> Option<Vec<u8>>;
    /// Given the body `encode` made for a whole stream of `len` values (not a sample), may
    /// return a better layout under another id: for choices a sample cannot show.
    fn refine(body: Vec<u8>, len: usize) -> (EncodingId, Vec<u8>) {
        let _ = len;
        (Self::ID, body)
    }
    /// Appends the values at `rows` of a stream of `len` values to `out`, decoding only the
    /// vectors that `rows` touches where the layout allows it.
    fn decode(body: &[u8], len: usize, rows: Range<usize>, out: &mut D::Owned) -> Result<()>;
    /// Appends, for each row in `rows`, whether its value satisfies `m`, working on encoded data.
    /// The default decodes first.
    fn filter(
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &D::Matcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let mut values = D::Owned::default();
        Self::decode(body, len, rows, &mut values)?;
        D::filter_decoded(&values, m, out);
        Ok(())
    }
}

/// An encoding offered to the sampler.
pub struct Candidate<D: Domain> {
    pub id: EncodingId,
    pub encode: fn(D::Input<'_>, Cascade) -> Option<Vec<u8>>,
    pub refine: fn(Vec<u8>, usize) -> (EncodingId, Vec<u8>),
}

pub(crate) fn candidate<D: Domain, E: Encoding<D>>() -> Candidate<D> {
    Candidate {
        id: E::ID,
        encode: E::encode,
        refine: E::refine,
    }
}

/// Encodes a stream: picks an encoding by sampling, returns the node (id byte + body).
pub fn encode_stream<D: Domain>(values: D::Input<'_>, cascade: Cascade) -> Vec<u8> {
    let len = D::len(values);
    let candidates = D::candidates(cascade);
    let chosen = if len <= 2 * 16 * 64 || candidates.len() == 1 {
        best_of(&candidates, values)
    } else {
        let sample = D::gather(values, &D::sample_ranges(len));
        best_of(&candidates, D::as_input(&sample))
    };
    let encoded =
        chosen.and_then(|c| (c.encode)(values, cascade).map(|body| (c.refine)(body, len)));
    let (id, body) = encoded.unwrap_or_else(|| {
        let plain = candidates
            .iter()
            .find(|c| c.id == EncodingId::PLAIN)
            .expect("plain is always a candidate");
        (
            EncodingId::PLAIN,
            (plain.encode)(values, cascade).expect("plain always applies"),
        )
    });
    let mut node = Vec::with_capacity(body.len() + 1);
    node.push(id.0);
    node.extend_from_slice(&body);
    node
}

fn best_of<'c, D: Domain>(
    candidates: &'c [Candidate<D>],
    values: D::Input<'_>,
) -> Option<&'c Candidate<D>> {
    let mut best: Option<(&Candidate<D>, f64)> = None;
    for c in candidates {
        let Some(body) = (c.encode)(values, Cascade { depth: 1 }) else {
            continue;
        };
        let cost = if c.id == EncodingId::ZSTD {
            body.len() as f64 / D::ZSTD_MUST_WIN_BY
        } else {
            body.len() as f64
        };
        if best.is_none_or(|(_, b)| cost < b) {
            best = Some((c, cost));
        }
    }
    best.map(|(c, _)| c)
}

/// 16 slices of 64 consecutive values spread evenly over `len` values.
fn sample_ranges(len: usize) -> Vec<Range<usize>> {
    const SLICES: usize = 16;
    const SLICE_LEN: usize = 64;
    let stride = len / SLICES;
    (0..SLICES)
        .map(|i| i * stride..(i * stride + SLICE_LEN).min(len))
        .collect()
}

/// Splits a node into its encoding id and body.
pub fn split_node(node: &[u8]) -> Result<(EncodingId, &[u8])> {
    match node.split_first() {
        Some((id, body)) => Ok((EncodingId(*id), body)),
        None => corrupt("empty stream node"),
    }
}

/// Decodes the values at `rows` of the stream stored in `node` (which holds `len` values).
pub fn decode_stream<D: Domain>(
    node: &[u8],
    len: usize,
    rows: Range<usize>,
    out: &mut D::Owned,
) -> Result<()> {
    check_rows(len, &rows)?;
    let (id, body) = split_node(node)?;
    D::decode_node(id, body, len, rows, out)
}

/// Evaluates `m` for the values at `rows`, on encoded data where the encoding allows.
pub fn filter_stream<D: Domain>(
    node: &[u8],
    len: usize,
    rows: Range<usize>,
    m: &D::Matcher,
    out: &mut Vec<bool>,
) -> Result<()> {
    check_rows(len, &rows)?;
    let (id, body) = split_node(node)?;
    D::filter_node(id, body, len, rows, m, out)
}

/// Decodes a whole stream.
pub fn decode_all<D: Domain>(node: &[u8], len: usize) -> Result<D::Owned> {
    let mut out = D::Owned::default();
    decode_stream::<D>(node, len, 0..len, &mut out)?;
    Ok(out)
}

fn check_rows(len: usize, rows: &Range<usize>) -> Result<()> {
    if len > MAX_STREAM_VALUES {
        return corrupt(format!(
            "stream of {len} values exceeds the limit {MAX_STREAM_VALUES}"
        ));
    }
    if rows.start > rows.end || rows.end > len {
        return corrupt(format!("rows {rows:?} outside a stream of {len} values"));
    }
    Ok(())
}

/// Encodings named in a node and its children, for reports (outermost first).
pub fn describe_node(node: &[u8]) -> String {
    match node.first() {
        Some(id) => EncodingId(*id).name().to_string(),
        None => "empty".into(),
    }
}

/// Writes a child node with its length prefix.
pub(crate) fn write_child(w: &mut ByteWriter, node: &[u8]) {
    w.bytes(node);
}

/// Reads a child node written by [`write_child`].
pub(crate) fn read_child<'a>(r: &mut ByteReader<'a>) -> Result<&'a [u8]> {
    r.bytes()
}

fn unknown<T>(domain: &str, id: EncodingId) -> Result<T> {
    Err(FormatError::Unsupported(format!(
        "encoding id {} for {domain} streams is unknown to this reader (written by a newer minor version?)",
        id.0
    )))
}

/// 64-bit integers (also booleans, dates, times, timestamps, and halves of 128-bit values).
pub struct Ints;

impl Domain for Ints {
    type Input<'a> = &'a [i64];
    type Owned = Vec<i64>;
    type Matcher = IntMatcher;
    const NAME: &'static str = "integer";
    /// One whole vector from the middle. Contiguous, because slices glued together would put
    /// jumps between them that make delta encoding look far worse than it is; aligned to a
    /// vector, because delta restarts at each vector, so a jump where the writer's input
    /// batches meet (a parallel query's output, say) costs nothing there but would inflate a
    /// sample that straddles it.
    fn sample_ranges(len: usize) -> Vec<Range<usize>> {
        let start = len / 2 / VECTOR_LEN * VECTOR_LEN;
        vec![start..(start + VECTOR_LEN).min(len)]
    }
    fn len(input: &[i64]) -> usize {
        input.len()
    }
    fn as_input(owned: &Vec<i64>) -> &[i64] {
        owned
    }
    fn owned_len(owned: &Vec<i64>) -> usize {
        owned.len()
    }
    fn gather(input: &[i64], ranges: &[Range<usize>]) -> Vec<i64> {
        ranges
            .iter()
            .flat_map(|r| input[r.clone()].iter().copied())
            .collect()
    }
    fn candidates(cascade: Cascade) -> Vec<Candidate<Self>> {
        let mut c = vec![
            candidate::<Self, plain::Plain>(),
            candidate::<Self, constant::Constant>(),
            candidate::<Self, bitpacked::BitPacked>(),
        ];
        if cascade.depth > 0 {
            c.push(candidate::<Self, delta::Delta>());
            c.push(candidate::<Self, rle::RunLength>());
            c.push(candidate::<Self, dictionary::Dictionary>());
            c.push(candidate::<Self, zstd::Zstd>());
        }
        c
    }
    fn decode_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        out: &mut Vec<i64>,
    ) -> Result<()> {
        match id {
            EncodingId::PLAIN => <plain::Plain as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::BITPACKED => {
                <bitpacked::BitPacked as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::DELTA => <delta::Delta as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::RUN_LENGTH => {
                <rle::RunLength as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::ZSTD => <zstd::Zstd as Encoding<Self>>::decode(body, len, rows, out),
            other => unknown(Self::NAME, other),
        }
    }
    fn filter_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &IntMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        match id {
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::BITPACKED => {
                <bitpacked::BitPacked as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::RUN_LENGTH => {
                <rle::RunLength as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            _ => Self::filter_by_decoding(id, body, len, rows, m, out),
        }
    }
    fn filter_decoded(values: &Vec<i64>, m: &IntMatcher, out: &mut Vec<bool>) {
        out.extend(values.iter().map(|v| m.matches(*v)));
    }
}

/// Floating-point values (`f32` or `f64`).
pub struct Floats<F>(std::marker::PhantomData<F>);

impl<F: FloatLane> Domain for Floats<F> {
    type Input<'a> = &'a [F];
    type Owned = Vec<F>;
    type Matcher = FloatMatcher;
    const NAME: &'static str = "float";
    fn len(input: &[F]) -> usize {
        input.len()
    }
    fn as_input(owned: &Vec<F>) -> &[F] {
        owned
    }
    fn owned_len(owned: &Vec<F>) -> usize {
        owned.len()
    }
    fn gather(input: &[F], ranges: &[Range<usize>]) -> Vec<F> {
        ranges
            .iter()
            .flat_map(|r| input[r.clone()].iter().copied())
            .collect()
    }
    fn candidates(cascade: Cascade) -> Vec<Candidate<Self>> {
        let mut c = vec![
            candidate::<Self, plain::Plain>(),
            candidate::<Self, constant::Constant>(),
        ];
        if cascade.depth > 0 {
            c.push(candidate::<Self, alp::Alp>());
            c.push(candidate::<Self, dictionary::Dictionary>());
            c.push(candidate::<Self, zstd::Zstd>());
        }
        c
    }
    fn decode_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        out: &mut Vec<F>,
    ) -> Result<()> {
        match id {
            EncodingId::PLAIN => <plain::Plain as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::ALP => <alp::Alp as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::ZSTD => <zstd::Zstd as Encoding<Self>>::decode(body, len, rows, out),
            other => unknown(Self::NAME, other),
        }
    }
    fn filter_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &FloatMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        match id {
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            _ => Self::filter_by_decoding(id, body, len, rows, m, out),
        }
    }
    fn filter_decoded(values: &Vec<F>, m: &FloatMatcher, out: &mut Vec<bool>) {
        out.extend(values.iter().map(|v| m.matches(v.to_f64())));
    }
}

/// Byte strings (UTF-8 or binary).
pub struct Bytes;

impl Domain for Bytes {
    type Input<'a> = BytesRef<'a>;
    type Owned = BytesVec;
    type Matcher = BytesMatcher;
    const NAME: &'static str = "bytes";
    const ZSTD_MUST_WIN_BY: f64 = ZSTD_MUST_WIN_BY;
    fn len(input: BytesRef<'_>) -> usize {
        input.len()
    }
    fn as_input(owned: &BytesVec) -> BytesRef<'_> {
        owned.as_ref()
    }
    fn owned_len(owned: &BytesVec) -> usize {
        owned.len()
    }
    fn gather(input: BytesRef<'_>, ranges: &[Range<usize>]) -> BytesVec {
        let mut out = BytesVec::default();
        for r in ranges {
            for i in r.clone() {
                out.push(input.get(i))
                    .expect("a sample is smaller than its block");
            }
        }
        out
    }
    fn candidates(cascade: Cascade) -> Vec<Candidate<Self>> {
        let mut c = vec![
            candidate::<Self, plain::Plain>(),
            candidate::<Self, constant::Constant>(),
        ];
        if cascade.depth > 0 {
            c.push(candidate::<Self, dictionary::Dictionary>());
            c.push(candidate::<Self, fsst::Fsst>());
            c.push(candidate::<Self, zstd::Zstd>());
        }
        c
    }
    fn decode_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        out: &mut BytesVec,
    ) -> Result<()> {
        match id {
            EncodingId::PLAIN => <plain::Plain as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::decode(body, len, rows, out)
            }
            EncodingId::FSST => <fsst::Fsst as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::FSST_LZ4 => <fsst::FsstLz4 as Encoding<Self>>::decode(body, len, rows, out),
            EncodingId::ZSTD => <zstd::Zstd as Encoding<Self>>::decode(body, len, rows, out),
            other => unknown(Self::NAME, other),
        }
    }
    fn filter_node(
        id: EncodingId,
        body: &[u8],
        len: usize,
        rows: Range<usize>,
        m: &BytesMatcher,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        match id {
            EncodingId::CONSTANT => {
                <constant::Constant as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::DICTIONARY => {
                <dictionary::Dictionary as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            EncodingId::FSST => <fsst::Fsst as Encoding<Self>>::filter(body, len, rows, m, out),
            EncodingId::FSST_LZ4 => {
                <fsst::FsstLz4 as Encoding<Self>>::filter(body, len, rows, m, out)
            }
            _ => Self::filter_by_decoding(id, body, len, rows, m, out),
        }
    }
    fn filter_decoded(values: &BytesVec, m: &BytesMatcher, out: &mut Vec<bool>) {
        out.extend(values.as_ref().iter().map(|v| m.matches(v)));
    }
}

/// Number of vectors covering `len` values.
pub fn vector_count(len: usize) -> usize {
    len.div_ceil(VECTOR_LEN)
}

/// The vectors that `rows` touches.
pub fn vectors_of(rows: &Range<usize>) -> Range<usize> {
    if rows.is_empty() {
        return 0..0;
    }
    rows.start / VECTOR_LEN..(rows.end - 1) / VECTOR_LEN + 1
}
