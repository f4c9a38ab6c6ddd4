//! Reads `.zyr` files: opens with at most two reads, loads column records on demand, decodes
//! only projected columns and only the vectors a request touches, prunes with zone maps and
//! bloom filters, and evaluates filters on encoded data before materialising other columns.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{
    ArrayRef, BooleanArray, ListArray, RecordBatch, RecordBatchOptions, StructArray,
};
use arrow::buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use bytes::Bytes;

use crate::bloom::{Bloom, hash_bytes, hash_int};
use crate::encodings::{self, BytesVec, Floats, Ints, VECTOR_LEN, decode_stream, filter_stream};
use crate::error::{FormatError, Result, corrupt};
use crate::io::ByteReader;
use crate::lanes;
use crate::layout::{
    ColumnMeta, Footer, HEADER_LEN, MAX_COLUMN_RECORD_BYTES, TRAILER_LEN, Trailer, verify,
};
use crate::predicate::{
    BytesMatcher, CmpOp, ColumnPredicate, FloatMatcher, IntMatcher, PredicateOp, Scalar,
};
use crate::stats::{Stat, ZoneMap};
use crate::types::Physical;

/// Bytes read from the end of a file when opening it; the footer of a file with a few dozen
/// columns, and often their column records, fit.
pub const TAIL_READ_BYTES: u64 = 64 * 1024;

/// Random-access bytes a file is read from.
pub trait Source: Send + Sync {
    fn len(&self) -> u64;
    fn read(&self, range: Range<u64>) -> Result<Bytes>;
    /// Whether the bytes can never change under this source (memory), so a block whose
    /// checksum matched once need not be checked again. Files and object stores say no.
    fn immutable(&self) -> bool {
        false
    }
}

impl Source for Bytes {
    fn len(&self) -> u64 {
        Bytes::len(self) as u64
    }
    fn read(&self, range: Range<u64>) -> Result<Bytes> {
        if range.end > Bytes::len(self) as u64 || range.start > range.end {
            return corrupt(format!(
                "read of {range:?} past the end of a {}-byte file",
                Bytes::len(self)
            ));
        }
        Ok(self.slice(range.start as usize..range.end as usize))
    }
    fn immutable(&self) -> bool {
        true
    }
}

impl Source for std::fs::File {
    fn len(&self) -> u64 {
        self.metadata().map(|m| m.len()).unwrap_or(0)
    }
    fn read(&self, range: Range<u64>) -> Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; (range.end - range.start) as usize];
        self.read_exact_at(&mut buf, range.start)?;
        Ok(buf.into())
    }
}

/// How one read or scan fetches and decodes blocks: whether it verifies their checksums,
/// whether strings come back as views, and the bytes of the block each column node is at, so a
/// scan that returns a block in several batches reads and verifies each of its column blocks
/// once. Holds at most one block per column node.
struct BlockReads {
    verify_checksums: bool,
    string_views: bool,
    current: RefCell<HashMap<usize, (usize, Bytes)>>,
}

impl BlockReads {
    fn new(verify_checksums: bool, string_views: bool) -> Self {
        Self {
            verify_checksums,
            string_views,
            current: RefCell::default(),
        }
    }

    /// The type a node stored as `stored` decodes to in this read.
    fn output_type<'a>(&self, stored: &'a DataType) -> Cow<'a, DataType> {
        match self.string_views {
            true => Cow::Owned(lanes::with_string_views(stored)),
            false => Cow::Borrowed(stored),
        }
    }
}

/// How a scan uses its predicates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FilterMode {
    /// Evaluate on encoded data while it pays: once the rows passing a batch's filters exceed
    /// [`AUTO_PUSHDOWN_MAX_SELECTIVITY`], later batches only prune by zone maps.
    #[default]
    Auto,
    /// Always evaluate predicates and return only matching rows.
    Pushdown,
    /// Only skip blocks and vectors by zone maps and bloom filters; rows are not filtered.
    ZoneMapsOnly,
}

/// Above this fraction of rows passing, late materialisation saves less than the filter costs.
pub const AUTO_PUSHDOWN_MAX_SELECTIVITY: f64 = 0.5;

/// Below this fraction of a filtered batch's decoded rows passing, the other columns pick the
/// passing rows out of their decoded lanes; above it, whole Arrow arrays are built and
/// filtered, which Arrow does faster for dense masks than a gather by offsets.
const PICK_MAX_FRACTION: f64 = 0.25;

/// What to read.
#[derive(Clone, Debug)]
pub struct ScanOptions {
    /// Top-level column indices to return; `None` for all.
    pub projection: Option<Vec<usize>>,
    pub predicates: Vec<ColumnPredicate>,
    pub filter_mode: FilterMode,
    pub verify_checksums: bool,
    /// Rows per returned batch at most, rounded up to whole vectors of [`VECTOR_LEN`]; a
    /// filtered batch holds the rows of that many candidates that pass. Batches this size
    /// (DataFusion's default) reuse the allocator's freed memory, where one batch per block
    /// would fault fresh pages in for every block.
    pub batch_rows: usize,
    /// Return `Utf8` columns (at any depth) as `Utf8View`, as DataFusion's Parquet reader
    /// does by default: a dictionary block then hands out 16-byte views into its values
    /// instead of copying every string, and other blocks get views over the decoded bytes.
    pub string_views: bool,
}

/// [`ScanOptions::batch_rows`] by default: DataFusion's default batch size.
pub const DEFAULT_BATCH_ROWS: usize = 8192;

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            projection: None,
            predicates: vec![],
            filter_mode: FilterMode::Auto,
            verify_checksums: true,
            batch_rows: DEFAULT_BATCH_ROWS,
            string_views: false,
        }
    }
}

/// Counters a scan keeps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanMetrics {
    pub blocks: u64,
    pub blocks_skipped: u64,
    pub vectors: u64,
    pub vectors_skipped: u64,
    /// Vectors whose zone maps proved every row matches, so no predicate column was decoded.
    pub vectors_matched_by_zone_maps: u64,
    pub bloom_skips: u64,
    /// Batches whose predicates ran on encoded data (several per block when a block is cut into batches).
    pub batches_filtered_encoded: u64,
    pub rows_returned: u64,
}

/// An open `.zyr` file.
pub struct ZyrFile {
    source: Arc<dyn Source>,
    len: u64,
    footer: Footer,
    /// The bytes read when opening, which may already hold column records.
    tail: Bytes,
    tail_start: u64,
    records: Vec<OnceLock<Arc<ColumnMeta>>>,
    reads: AtomicU64,
    /// Bloom filters already read, by (node, block).
    blooms: Mutex<std::collections::HashMap<(usize, usize), Arc<Bloom>>>,
    /// Blocks whose checksum matched, when the source is immutable.
    verified: Mutex<std::collections::HashSet<(usize, usize)>>,
}

impl std::fmt::Debug for ZyrFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZyrFile")
            .field("len", &self.len)
            .field("rows", &self.footer.num_rows)
            .finish()
    }
}

impl ZyrFile {
    /// Opens a file: one read of the last [`TAIL_READ_BYTES`], and a second only if the footer is larger.
    pub fn open(source: impl Source + 'static) -> Result<ZyrFile> {
        Self::open_arc(Arc::new(source))
    }

    pub fn open_arc(source: Arc<dyn Source>) -> Result<ZyrFile> {
        let len = source.len();
        if len < HEADER_LEN + TRAILER_LEN {
            return corrupt(format!(
                "a .zyr file has at least {} bytes, this one {len}",
                HEADER_LEN + TRAILER_LEN
            ));
        }
        let tail_start = len - len.min(TAIL_READ_BYTES);
        let tail = source.read(tail_start..len)?;
        Self::from_tail(source, len, tail, tail_start)
    }

    /// Opens from bytes already read from the end of the file (`tail` starts at `tail_start`).
    pub fn from_tail(
        source: Arc<dyn Source>,
        len: u64,
        tail: Bytes,
        tail_start: u64,
    ) -> Result<ZyrFile> {
        let mut reads = 1;
        let trailer = Trailer::parse(&tail[tail.len() - TRAILER_LEN as usize..], len)?;
        let footer_range = trailer.footer_offset..len - TRAILER_LEN;
        let footer_bytes = if footer_range.start >= tail_start {
            tail.slice(
                (footer_range.start - tail_start) as usize
                    ..(footer_range.end - tail_start) as usize,
            )
        } else {
            reads += 1;
            source.read(footer_range.clone())?
        };
        verify(|| "footer".into(), &footer_bytes, trailer.footer_checksum)?;
        let footer = Footer::parse(&footer_bytes, trailer.footer_offset)?;
        let records = (0..footer.nodes.len()).map(|_| OnceLock::new()).collect();
        Ok(ZyrFile {
            source,
            len,
            footer,
            tail,
            tail_start,
            records,
            reads: AtomicU64::new(reads),
            blooms: Mutex::default(),
            verified: Mutex::default(),
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.footer.schema.clone()
    }
    pub fn num_rows(&self) -> u64 {
        self.footer.num_rows
    }
    pub fn file_len(&self) -> u64 {
        self.len
    }
    /// Reads issued against the source so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes> {
        if range.start >= self.tail_start && range.end <= self.len {
            return Ok(self.tail.slice(
                (range.start - self.tail_start) as usize..(range.end - self.tail_start) as usize,
            ));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.source.read(range)
    }

    /// The column record of column node `node`, read and checked on first use.
    pub fn column_meta(&self, node: usize) -> Result<Arc<ColumnMeta>> {
        if let Some(m) = self.records[node].get() {
            return Ok(m.clone());
        }
        let r = self.footer.columns[node];
        if u64::from(r.len) > MAX_COLUMN_RECORD_BYTES {
            return corrupt(format!("column record of {} bytes", r.len));
        }
        let bytes = self.read(r.offset..r.offset + u64::from(r.len))?;
        let meta = self.parse_record(node, &bytes)?;
        Ok(self.records[node].get_or_init(|| meta).clone())
    }

    /// Loads the column records of `nodes` (one read when they are contiguous, as writers lay them out).
    pub fn load_column_meta(&self, nodes: &[usize]) -> Result<()> {
        let missing: Vec<usize> = nodes
            .iter()
            .copied()
            .filter(|n| self.records[*n].get().is_none())
            .collect();
        let (Some(first), Some(last)) = (
            missing.iter().map(|n| self.footer.columns[*n].offset).min(),
            missing
                .iter()
                .map(|n| {
                    let c = self.footer.columns[*n];
                    c.offset + u64::from(c.len)
                })
                .max(),
        ) else {
            return Ok(());
        };
        if first < self.tail_start && last - first <= 4 * MAX_COLUMN_RECORD_BYTES {
            let bytes = self.read(first..last)?;
            for n in missing {
                let c = self.footer.columns[n];
                let slice = bytes.slice(
                    (c.offset - first) as usize..(c.offset - first + u64::from(c.len)) as usize,
                );
                let meta = self.parse_record(n, &slice)?;
                let _ = self.records[n].set(meta);
            }
            return Ok(());
        }
        for n in missing {
            self.column_meta(n)?;
        }
        Ok(())
    }

    /// Checks and parses the column record of `node` from its bytes.
    fn parse_record(&self, node: usize, bytes: &[u8]) -> Result<Arc<ColumnMeta>> {
        let stored = self.footer.columns[node].checksum;
        verify(
            || format!("column record of {}", self.footer.nodes[node].field.name()),
            bytes,
            stored,
        )?;
        // Blocks lie before the first column record.
        let data_end = self
            .footer
            .columns
            .iter()
            .map(|c| c.offset)
            .min()
            .unwrap_or(self.len);
        let meta = Arc::new(ColumnMeta::parse(bytes, data_end)?);
        self.check_meta(node, &meta)?;
        Ok(meta)
    }

    fn check_meta(&self, node: usize, meta: &ColumnMeta) -> Result<()> {
        let n = &self.footer.nodes[node];
        if n.depth == 0 && meta.values != self.footer.num_rows {
            return corrupt(format!(
                "column {} holds {} values, the file {} rows",
                n.field.name(),
                meta.values,
                self.footer.num_rows
            ));
        }
        Ok(())
    }

    /// Exact file-level statistics of top-level column `column`: values, nulls, min and max,
    /// answered from the column record alone.
    pub fn column_statistics(&self, column: usize) -> Result<ZoneMap> {
        let meta = self.column_meta(self.footer.roots[column])?;
        Ok(ZoneMap {
            values: meta.values,
            nulls: meta.nulls,
            stat: meta.stat.clone(),
        })
    }

    /// The top-level encoding of each block of top-level column `column`.
    pub fn column_encodings(&self, column: usize) -> Result<Vec<&'static str>> {
        let node = self.footer.roots[column];
        let meta = self.column_meta(node)?;
        let mut names = vec![];
        for b in 0..meta.blocks.len() {
            let bytes = self.block_bytes(node, b, false)?;
            let mut r = ByteReader::new(&bytes, "block");
            read_validity(&mut r, meta.blocks[b].values as usize)?;
            let first = if r.remaining() > 0 { r.bytes()? } else { &[] };
            names.push(
                first
                    .first()
                    .map_or("none", |id| encodings::EncodingId(*id).name()),
            );
        }
        Ok(names)
    }

    fn block_bytes(&self, node: usize, block: usize, verify_checksum: bool) -> Result<Bytes> {
        let meta = self.column_meta(node)?;
        let b = &meta.blocks[block];
        let bytes = self.read(b.offset..b.offset + u64::from(b.len))?;
        let immutable = self.source.immutable();
        let seen = || {
            self.verified
                .lock()
                .expect("verified set")
                .contains(&(node, block))
        };
        if verify_checksum && !(immutable && seen()) {
            let what = || {
                format!(
                    "block {block} of column {}",
                    self.footer.nodes[node].field.name()
                )
            };
            verify(what, &bytes, b.checksum)?;
            if immutable {
                self.verified
                    .lock()
                    .expect("verified set")
                    .insert((node, block));
            }
        }
        Ok(bytes)
    }

    /// The bytes of block `block` of node `node`, from `reads` if it holds them.
    fn block_bytes_via(&self, reads: &BlockReads, node: usize, block: usize) -> Result<Bytes> {
        if let Some((b, bytes)) = reads.current.borrow().get(&node)
            && *b == block
        {
            return Ok(bytes.clone());
        }
        let bytes = self.block_bytes(node, block, reads.verify_checksums)?;
        reads
            .current
            .borrow_mut()
            .insert(node, (block, bytes.clone()));
        Ok(bytes)
    }

    /// Reads rows `rows` of top-level columns `projection`, decoding only the vectors they touch.
    pub fn read_rows(&self, projection: &[usize], rows: Range<u64>) -> Result<RecordBatch> {
        if rows.end > self.num_rows() || rows.start > rows.end {
            return corrupt(format!(
                "rows {rows:?} of a file with {} rows",
                self.num_rows()
            ));
        }
        let reads = BlockReads::new(true, false);
        let columns = projection
            .iter()
            .map(|c| self.read_node(self.root(*c)?, rows.clone(), &reads))
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(self.footer.schema.project(projection)?);
        batch(schema, columns, rows.end - rows.start)
    }

    fn root(&self, column: usize) -> Result<usize> {
        self.footer
            .roots
            .get(column)
            .copied()
            .ok_or_else(|| FormatError::Corrupt(format!("no column {column}")))
    }

    /// Decodes values `rows` of column node `node`.
    fn read_node(&self, node: usize, rows: Range<u64>, reads: &BlockReads) -> Result<ArrayRef> {
        let meta = self.column_meta(node)?;
        if rows.end > meta.values {
            return corrupt(format!("values {rows:?} of a column with {}", meta.values));
        }
        let mut pieces = vec![];
        let first = meta
            .block_starts
            .partition_point(|s| *s <= rows.start)
            .saturating_sub(1);
        for b in first..meta.blocks.len() {
            let (start, end) = (meta.block_starts[b], meta.block_starts[b + 1]);
            if start >= rows.end && !pieces.is_empty() {
                break;
            }
            let from = rows.start.max(start) - start;
            let to = rows.end.min(end).max(start) - start;
            if to > from || (pieces.is_empty() && rows.is_empty()) {
                pieces.push(self.decode_block(node, b, from as usize..to as usize, reads, None)?);
            }
            if end >= rows.end {
                break;
            }
        }
        match pieces.len() {
            0 => Ok(arrow::array::new_empty_array(
                &reads.output_type(self.footer.nodes[node].field.data_type()),
            )),
            1 => Ok(pieces.pop().expect("one piece")),
            _ => Ok(arrow::compute::concat(
                &pieces.iter().map(|p| p.as_ref()).collect::<Vec<_>>(),
            )?),
        }
    }

    /// Decodes rows `range` (relative to the block) of block `block` of node `node`; with
    /// `keep`, only the rows at those offsets into `range` (ascending). Numbers are picked
    /// from their decoded lanes before an Arrow array is built, so a selective filter does not
    /// pay for widening and copying the rows it drops.
    fn decode_block(
        &self,
        node: usize,
        block: usize,
        range: Range<usize>,
        reads: &BlockReads,
        keep: Option<&[u32]>,
    ) -> Result<ArrayRef> {
        let meta = self.column_meta(node)?;
        let b = &meta.blocks[block];
        let values = b.values as usize;
        let bytes = self.block_bytes_via(reads, node, block)?;
        let mut r = ByteReader::new(&bytes, "block");
        let validity = read_validity(&mut r, values)?;
        let nulls = validity.map(|v| NullBuffer::new(v.slice(range.start, range.len())));
        let n = &self.footer.nodes[node];
        let dt = &*reads.output_type(n.field.data_type());
        let picked_nulls = || pick_nulls(nulls.clone(), keep);
        let rows = range.len();
        let array: ArrayRef = match n.physical {
            Physical::Bool | Physical::Int => {
                let mut lanes = Vec::with_capacity(range.len());
                decode_stream::<Ints>(r.bytes()?, values, range, &mut lanes)?;
                return lanes::ints_to_array(dt, pick(lanes, keep, rows)?, picked_nulls());
            }
            Physical::Float32 => {
                let mut v = Vec::with_capacity(range.len());
                decode_stream::<Floats<f32>>(r.bytes()?, values, range, &mut v)?;
                return Ok(Arc::new(arrow::array::Float32Array::new(
                    ScalarBuffer::from(pick(v, keep, rows)?),
                    picked_nulls(),
                )));
            }
            Physical::Float64 => {
                let mut v = Vec::with_capacity(range.len());
                decode_stream::<Floats<f64>>(r.bytes()?, values, range, &mut v)?;
                return Ok(Arc::new(arrow::array::Float64Array::new(
                    ScalarBuffer::from(pick(v, keep, rows)?),
                    picked_nulls(),
                )));
            }
            Physical::Wide => {
                let (low, high) = decode_wide(&mut r, values, range)?;
                // A constant upper half is one value standing for every row.
                let high = match high.len() {
                    1 => high,
                    _ => pick(high, keep, rows)?,
                };
                return lanes::wide_to_array(dt, &pick(low, keep, rows)?, &high, picked_nulls());
            }
            Physical::Bytes => {
                let node = r.bytes()?;
                let (id, body) = encodings::split_node(node)?;
                if *dt == DataType::Utf8View && id == encodings::EncodingId::DICTIONARY {
                    let (dictionary, codes) = encodings::dictionary::values_and_codes::<
                        encodings::Bytes,
                    >(body, values, range)?;
                    lanes::dictionary_views(dictionary, &codes, nulls)?
                } else {
                    let mut v = BytesVec::default();
                    decode_stream::<encodings::Bytes>(node, values, range, &mut v)?;
                    lanes::bytes_to_array(dt, v, nulls)?
                }
            }
            Physical::List => {
                let ends = r.bytes()?;
                self.decode_list(node, b.first_child, ends, values, range, nulls, reads)?
            }
            Physical::Struct => {
                let start = meta.block_starts[block] + range.start as u64;
                let rows = start..start + range.len() as u64;
                let children = n
                    .children
                    .iter()
                    .map(|c| self.read_node(*c, rows.clone(), reads))
                    .collect::<Result<Vec<_>>>()?;
                let DataType::Struct(fields) = dt else {
                    return corrupt("struct node without struct type");
                };
                Arc::new(StructArray::try_new(fields.clone(), children, nulls)?)
            }
        };
        Ok(match keep {
            Some(keep) => arrow::compute::take(
                &array,
                &arrow::array::UInt32Array::from(keep.to_vec()),
                None,
            )?,
            None => array,
        })
    }

    fn decode_list(
        &self,
        node: usize,
        first_child: u64,
        ends_node: &[u8],
        values: usize,
        range: Range<usize>,
        nulls: Option<NullBuffer>,
        reads: &BlockReads,
    ) -> Result<ArrayRef> {
        let n = &self.footer.nodes[node];
        let child = n.children[0];
        let mut ends = Vec::with_capacity(range.len() + 1);
        let from = range.start.saturating_sub(1);
        decode_stream::<Ints>(ends_node, values, from..range.end, &mut ends)?;
        let start = if range.start == 0 {
            first_child as i64
        } else {
            ends.remove(0)
        };
        let child_values = self.column_meta(child)?.values as i64;
        let mut offsets = Vec::with_capacity(ends.len() + 1);
        offsets.push(0i32);
        let mut previous = start;
        for e in &ends {
            if *e < previous || *e > child_values || e - start > i32::MAX as i64 {
                return corrupt(format!(
                    "list end {e} after {previous} with {child_values} child values"
                ));
            }
            previous = *e;
            offsets.push((e - start) as i32);
        }
        if start < 0 {
            return corrupt("negative list offset");
        }
        let child_array = self.read_node(child, start as u64..previous as u64, reads)?;
        let DataType::List(field) = &*reads.output_type(n.field.data_type()) else {
            return corrupt("list node without list type");
        };
        Ok(Arc::new(ListArray::try_new(
            field.clone(),
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            child_array,
            nulls,
        )?))
    }

    /// Scans the file block by block.
    pub fn scan(self: &Arc<Self>, options: ScanOptions) -> Result<Scan> {
        let projection = options
            .projection
            .clone()
            .unwrap_or_else(|| (0..self.footer.roots.len()).collect());
        let prepared = options
            .predicates
            .iter()
            .map(|p| self.prepare(p))
            .collect::<Result<Vec<_>>>()?;
        let mut needed: Vec<usize> = projection
            .iter()
            .chain(options.predicates.iter().map(|p| &p.column))
            .map(|c| self.footer.roots[*c])
            .collect();
        needed.sort_unstable();
        needed.dedup();
        self.load_column_meta(&needed)?;
        let boundaries = match self.footer.roots.first() {
            Some(root) => self.column_meta(*root)?.block_starts.clone(),
            None => vec![0],
        };
        let schema = Arc::new(scan_schema(&self.footer.schema, &projection, &options)?);
        Ok(Scan {
            file: self.clone(),
            projection,
            schema,
            predicates: options.predicates.clone(),
            prepared,
            batch_vectors: options.batch_rows.div_ceil(VECTOR_LEN).max(1),
            reads: BlockReads::new(options.verify_checksums, options.string_views),
            options,
            span: VectorPos::block_start(0)..VectorPos::block_start(boundaries.len() - 1),
            boundaries,
            next_block: 0,
            open: None,
            pushdown: true,
            metrics: ScanMetrics::default(),
        })
    }

    fn prepare(&self, p: &ColumnPredicate) -> Result<Prepared> {
        let node = self.root(p.column)?;
        let n = &self.footer.nodes[node];
        let dt = n.field.data_type();
        let mismatch = || {
            FormatError::Unsupported(format!(
                "predicate {:?} does not fit column {} of type {dt}",
                p.op,
                n.field.name()
            ))
        };
        let ints = |v: &Scalar| match v {
            Scalar::Int(i) => Ok(*i),
            _ => Err(mismatch()),
        };
        let float = |v: &Scalar| match v {
            Scalar::Float(f) => Ok(*f),
            Scalar::Int(i) => Ok(*i as f64),
            _ => Err(mismatch()),
        };
        let bytes = |v: &Scalar| match v {
            Scalar::Bytes(b) => Ok(b.clone()),
            _ => Err(mismatch()),
        };
        Ok(match (&p.op, n.physical) {
            (PredicateOp::IsNull, _) => Prepared::IsNull,
            (PredicateOp::IsNotNull, _) => Prepared::IsNotNull,
            (PredicateOp::Cmp(op, v), Physical::Int | Physical::Bool) => {
                let (lo, hi, to_lane) = lanes::lane_domain(dt);
                Prepared::Int(IntMatcher::for_cmp(*op, ints(v)?, lo, hi, to_lane))
            }
            (PredicateOp::In(list), Physical::Int | Physical::Bool) => {
                let (lo, hi, to_lane) = lanes::lane_domain(dt);
                Prepared::Int(IntMatcher::for_in(
                    list.iter().map(ints).collect::<Result<Vec<_>>>()?,
                    lo,
                    hi,
                    to_lane,
                ))
            }
            (PredicateOp::Cmp(op, v), Physical::Float32 | Physical::Float64) => {
                Prepared::Float(FloatMatcher::for_cmp(*op, float(v)?))
            }
            (PredicateOp::In(list), Physical::Float32 | Physical::Float64) => Prepared::Float(
                FloatMatcher::In(list.iter().map(float).collect::<Result<_>>()?),
            ),
            (PredicateOp::Cmp(op, v), Physical::Bytes) => {
                Prepared::Bytes(BytesMatcher::for_cmp(*op, bytes(v)?))
            }
            (PredicateOp::In(list), Physical::Bytes) => {
                let mut set = list.iter().map(bytes).collect::<Result<Vec<_>>>()?;
                set.sort();
                set.dedup();
                Prepared::Bytes(BytesMatcher::In(set))
            }
            (PredicateOp::Cmp(op, v), Physical::Wide) => {
                let v = ints(v)?;
                Prepared::Wide {
                    tests: vec![(*op, v)],
                    on_low: IntMatcher::for_cmp(*op, v, I64_MIN, I64_MAX, |x| x as i64),
                }
            }
            (PredicateOp::In(list), Physical::Wide) => {
                let values = list.iter().map(ints).collect::<Result<Vec<_>>>()?;
                Prepared::Wide {
                    on_low: IntMatcher::for_in(values.clone(), I64_MIN, I64_MAX, |x| x as i64),
                    tests: values.into_iter().map(|i| (CmpOp::Eq, i)).collect(),
                }
            }
            _ => return Err(mismatch()),
        })
    }

    fn bloom(&self, node: usize, block: usize) -> Result<Option<Arc<Bloom>>> {
        let meta = self.column_meta(node)?;
        let Some(r) = meta.blocks[block].bloom else {
            return Ok(None);
        };
        if let Some(b) = self.blooms.lock().expect("bloom cache").get(&(node, block)) {
            return Ok(Some(b.clone()));
        }
        let bytes = self.read(r.offset..r.offset + u64::from(r.len))?;
        let what = || {
            format!(
                "bloom filter of block {block} of column {}",
                self.footer.nodes[node].field.name()
            )
        };
        verify(what, &bytes, r.checksum)?;
        let bloom = Arc::new(Bloom::from_bytes(&bytes)?);
        self.blooms
            .lock()
            .expect("bloom cache")
            .insert((node, block), bloom.clone());
        Ok(Some(bloom))
    }

    /// Evaluates a prepared predicate on rows `range` of block `block` of top-level column node `node`.
    fn evaluate(
        &self,
        node: usize,
        block: usize,
        range: Range<usize>,
        p: &Prepared,
        reads: &BlockReads,
    ) -> Result<Vec<bool>> {
        let meta = self.column_meta(node)?;
        let values = meta.blocks[block].values as usize;
        let bytes = self.block_bytes_via(reads, node, block)?;
        let mut r = ByteReader::new(&bytes, "block");
        let validity = read_validity(&mut r, values)?.map(|v| v.slice(range.start, range.len()));
        let mut out = Vec::with_capacity(range.len());
        match p {
            Prepared::IsNull => {
                return Ok(
                    validity.map_or(vec![false; range.len()], |v| v.iter().map(|b| !b).collect())
                );
            }
            Prepared::IsNotNull => {
                return Ok(validity.map_or(vec![true; range.len()], |v| v.iter().collect()));
            }
            Prepared::Int(m) => filter_stream::<Ints>(r.bytes()?, values, range, m, &mut out)?,
            Prepared::Float(m) => match self.footer.nodes[node].physical {
                Physical::Float32 => {
                    filter_stream::<Floats<f32>>(r.bytes()?, values, range, m, &mut out)?
                }
                _ => filter_stream::<Floats<f64>>(r.bytes()?, values, range, m, &mut out)?,
            },
            Prepared::Bytes(m) => {
                filter_stream::<encodings::Bytes>(r.bytes()?, values, range, m, &mut out)?
            }
            Prepared::Wide { on_low, .. } if fits_i64(&meta.blocks[block].zones, &range) => {
                // Every value of these vectors fits 64 bits, so the low half is the value:
                // filter it on encoded data as an integer column.
                filter_stream::<Ints>(r.bytes()?, values, range, on_low, &mut out)?
            }
            Prepared::Wide { tests, .. } => {
                let (low, high) = decode_wide(&mut r, values, range)?;
                out.extend(
                    lanes::wide_values(&low, &high)?
                        .iter()
                        .map(|v| tests.iter().any(|(op, x)| op.holds(v.cmp(x)))),
                );
            }
        }
        if let Some(v) = validity {
            out.iter_mut()
                .zip(v.iter())
                .for_each(|(o, valid)| *o &= valid);
        }
        Ok(out)
    }
}

/// A predicate turned into a matcher for its column's stream domain.
#[derive(Debug)]
enum Prepared {
    Int(IntMatcher),
    Float(FloatMatcher),
    Bytes(BytesMatcher),
    /// 128-bit columns: any of `tests` (one for a comparison, several for IN); `on_low` is the
    /// same test on the low half, valid where every value fits 64 bits.
    Wide {
        tests: Vec<(CmpOp, i128)>,
        on_low: IntMatcher,
    },
    IsNull,
    IsNotNull,
}

const I64_MIN: i128 = i64::MIN as i128;
const I64_MAX: i128 = i64::MAX as i128;

/// The schema of a scan's batches.
fn scan_schema(stored: &Schema, projection: &[usize], options: &ScanOptions) -> Result<Schema> {
    let projected = stored.project(projection)?;
    Ok(match options.string_views {
        true => lanes::schema_with_string_views(&projected),
        false => projected,
    })
}

/// A batch of `rows` rows (explicit, so a batch with no columns keeps its count).
fn batch(schema: SchemaRef, columns: Vec<ArrayRef>, rows: u64) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows as usize));
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}

/// Whether the zone maps of the vectors `range` touches prove every value fits an i64 (where a
/// 128-bit value's low half equals the value).
fn fits_i64(zones: &[ZoneMap], range: &Range<usize>) -> bool {
    encodings::vectors_of(range).all(|v| {
        zones.get(v).is_some_and(|z| match z.stat {
            Stat::Int { min, max } => min >= I64_MIN && max <= I64_MAX,
            Stat::None => true,
            _ => false,
        })
    })
}

/// The low and high halves of rows `range` of a 128-bit column's block. A constant high half
/// is returned as its one value (see [`lanes::wide_values`]).
fn decode_wide(
    r: &mut ByteReader<'_>,
    values: usize,
    range: Range<usize>,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let (low_node, high_node) = (r.bytes()?, r.bytes()?);
    let mut low = Vec::with_capacity(range.len());
    decode_stream::<Ints>(low_node, values, range.clone(), &mut low)?;
    let mut high = Vec::new();
    let constant = encodings::split_node(high_node)?.0 == encodings::EncodingId::CONSTANT;
    let high_rows = if constant && !range.is_empty() {
        range.start..range.start + 1
    } else {
        range
    };
    decode_stream::<Ints>(high_node, values, high_rows, &mut high)?;
    Ok((low, high))
}

fn read_validity(r: &mut ByteReader<'_>, values: usize) -> Result<Option<BooleanBuffer>> {
    Ok(match r.u8()? {
        0 => None,
        1 => Some(BooleanBuffer::new_unset(values)),
        2 => {
            let bits = r.take(values.div_ceil(8))?;
            Some(BooleanBuffer::new(
                arrow::buffer::Buffer::from(bits),
                0,
                values,
            ))
        }
        other => return corrupt(format!("validity kind {other}")),
    })
}

/// A place in a file's data in scan order: vector `vector` of block `block`. Spans of these
/// split a file between partitions at vector boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct VectorPos {
    pub block: usize,
    pub vector: usize,
}

impl VectorPos {
    pub fn block_start(block: usize) -> VectorPos {
        VectorPos { block, vector: 0 }
    }
}

impl ZyrFile {
    /// Blocks in the file.
    pub fn block_count(&self) -> Result<usize> {
        Ok(match self.footer.roots.first() {
            Some(root) => self.column_meta(*root)?.blocks.len(),
            None => 0,
        })
    }

    /// Per vector of `block`: whether the zone maps of `predicates` leave it a candidate
    /// (bloom filters are not read). Needs only the column records.
    pub fn zone_candidates(
        &self,
        predicates: &[ColumnPredicate],
        block: usize,
    ) -> Result<Vec<bool>> {
        let root = self.column_meta(self.root(0)?)?;
        let Some(&[start, end]) = root.block_starts.get(block..block + 2) else {
            return Err(FormatError::Unsupported(format!(
                "block {block} of a file of {} blocks",
                root.blocks.len()
            )));
        };
        let rows = end - start;
        let mut keep = vec![true; (rows as usize).div_ceil(VECTOR_LEN)];
        for p in predicates {
            let meta = self.column_meta(self.root(p.column)?)?;
            let block_zone = &meta.block_zones[block];
            if !p.might_match(&block_zone.stat, block_zone.nulls, block_zone.values) {
                // The whole block is ruled out: its vectors' zone maps need not be read.
                keep.fill(false);
                break;
            }
            for (k, z) in keep.iter_mut().zip(&meta.blocks[block].zones) {
                *k &= p.might_match(&z.stat, z.nulls, z.values);
            }
        }
        Ok(keep)
    }
}

/// A scan in progress: yields batches of at most [`ScanOptions::batch_rows`] rows, block by
/// block, skipping what zone maps and bloom filters rule out.
pub struct Scan {
    file: Arc<ZyrFile>,
    projection: Vec<usize>,
    /// The batches' schema: the projected columns, with views if the options ask for them.
    schema: SchemaRef,
    predicates: Vec<ColumnPredicate>,
    prepared: Vec<Prepared>,
    options: ScanOptions,
    /// Vectors per batch: [`ScanOptions::batch_rows`] in whole vectors.
    batch_vectors: usize,
    reads: BlockReads,
    boundaries: Vec<u64>,
    next_block: usize,
    /// The part of the file this scan covers, from [`Scan::with_span`].
    span: Range<VectorPos>,
    /// The block being returned, batch by batch.
    open: Option<OpenBlock>,
    pushdown: bool,
    metrics: ScanMetrics,
}

/// A block a scan is part-way through.
struct OpenBlock {
    block: usize,
    rows: usize,
    /// Per vector: whether zone maps and bloom filters leave it a candidate.
    candidates: Vec<bool>,
    next_vector: usize,
}

impl Scan {
    pub fn metrics(&self) -> &ScanMetrics {
        &self.metrics
    }

    /// Restricts the scan to the vectors from `span.start` up to `span.end`, so that
    /// partitions can share the candidates of one block. Spans that tile a file count each
    /// vector and each block once in [`ScanMetrics`] (a block in the span holding its first
    /// zone-map candidate).
    pub fn with_span(mut self, span: Range<VectorPos>) -> Scan {
        let blocks = self.block_count();
        let end = span.end.min(VectorPos::block_start(blocks));
        self.next_block = span.start.block;
        // The block `end` lies in is read only when some of its vectors are in the span.
        self.boundaries
            .truncate(end.block + usize::from(end.vector > 0) + 1);
        self.span = span.start..end;
        self
    }

    pub fn block_count(&self) -> usize {
        self.boundaries.len().saturating_sub(1)
    }

    /// Vectors of `block` in the span that zone maps and bloom filters cannot rule out, and
    /// whether this span owns the block's counts (see [`Scan::owns`]).
    fn candidates(&mut self, block: usize, window: Range<usize>) -> Result<(Vec<bool>, bool)> {
        let mut keep = self.file.zone_candidates(&self.predicates, block)?;
        let owns = Self::owns(&keep, &window);
        keep[..window.start].fill(false);
        keep[window.end..].fill(false);
        for p in &self.predicates {
            if !keep.iter().any(|k| *k) {
                break;
            }
            if !bloom_allows(&self.file, self.file.footer.roots[p.column], block, p)? {
                self.metrics.bloom_skips += u64::from(owns);
                keep.fill(false);
            }
        }
        Ok((keep, owns))
    }

    /// Whether the span holding `window` counts the block in [`ScanMetrics`]: the span with
    /// its first zone-map candidate (vector 0 when there is none), so spans that tile a file
    /// count each block, and each bloom-filter skip, once.
    fn owns(zone_candidates: &[bool], window: &Range<usize>) -> bool {
        let first = zone_candidates.iter().position(|k| *k).unwrap_or(0);
        window.contains(&first)
    }

    /// The vectors of `block` (of `vectors`) that lie in the span.
    fn window(&self, block: usize, vectors: usize) -> Range<usize> {
        let start = if block == self.span.start.block {
            self.span.start.vector.min(vectors)
        } else {
            0
        };
        let end = if block == self.span.end.block {
            self.span.end.vector.min(vectors)
        } else {
            vectors
        };
        start..end.max(start)
    }

    /// Moves to the next block with candidate vectors; `None` past the last block.
    fn open_next_block(&mut self) -> Result<Option<OpenBlock>> {
        while self.next_block + 1 < self.boundaries.len() {
            let block = self.next_block;
            self.next_block += 1;
            let rows = (self.boundaries[block + 1] - self.boundaries[block]) as usize;
            let vectors = rows.div_ceil(VECTOR_LEN);
            let window = self.window(block, vectors);
            let (candidates, owns_block) = if self.predicates.is_empty() {
                let mut all = vec![false; vectors];
                all[window.clone()].fill(true);
                // Every vector is a candidate, so the owner is the span holding vector 0.
                (all, window.contains(&0))
            } else {
                self.candidates(block, window.clone())?
            };
            debug_assert_eq!(candidates.len(), vectors);
            self.metrics.blocks += u64::from(owns_block);
            self.metrics.vectors += window.len() as u64;
            let kept = candidates.iter().filter(|k| **k).count();
            self.metrics.vectors_skipped += (window.len() - kept) as u64;
            if kept == 0 {
                self.metrics.blocks_skipped += u64::from(owns_block);
                continue;
            }
            return Ok(Some(OpenBlock {
                block,
                rows,
                candidates,
                next_vector: window.start,
            }));
        }
        Ok(None)
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let open = match &mut self.open {
                Some(open) if open.next_vector < open.candidates.len() => open,
                _ => match self.open_next_block()? {
                    Some(next) => self.open.insert(next),
                    None => return Ok(None),
                },
            };
            let end = (open.next_vector + self.batch_vectors).min(open.candidates.len());
            let vectors = open.next_vector..end;
            open.next_vector = end;
            let block = open.block;
            let ranges = vector_ranges(&open.candidates, vectors, open.rows);
            if ranges.is_empty() {
                continue;
            }
            let use_pushdown = !self.predicates.is_empty()
                && match self.options.filter_mode {
                    FilterMode::Pushdown => true,
                    FilterMode::ZoneMapsOnly => false,
                    FilterMode::Auto => self.pushdown,
                };
            let batch = if use_pushdown {
                self.filtered_batch(block, &ranges)?
            } else {
                Some(self.plain_batch(block, &ranges)?)
            };
            if let Some(b) = batch {
                self.metrics.rows_returned += b.num_rows() as u64;
                return Ok(Some(b));
            }
        }
    }

    fn plain_batch(&self, block: usize, ranges: &[Range<usize>]) -> Result<RecordBatch> {
        let base = self.boundaries[block];
        let rows: usize = ranges.iter().map(|r| r.len()).sum();
        self.projected_batch(ranges.len(), rows, |node, i| {
            let r = &ranges[i];
            let rows = base + r.start as u64..base + r.end as u64;
            self.file.read_node(node, rows, &self.reads)
        })
    }

    /// A batch of `rows` rows of the projected columns, each column the concatenation of
    /// `piece(node, i)` for pieces `i` in `0..pieces`.
    fn projected_batch(
        &self,
        pieces: usize,
        rows: usize,
        piece: impl Fn(usize, usize) -> Result<ArrayRef>,
    ) -> Result<RecordBatch> {
        let columns = self
            .projection
            .iter()
            .map(|c| {
                let node = self.file.footer.roots[*c];
                concat(
                    (0..pieces)
                        .map(|i| piece(node, i))
                        .collect::<Result<Vec<_>>>()?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        batch(self.schema.clone(), columns, rows as u64)
    }

    fn filtered_batch(
        &mut self,
        block: usize,
        ranges: &[Range<usize>],
    ) -> Result<Option<RecordBatch>> {
        self.metrics.batches_filtered_encoded += 1;
        let mut selected_ranges = vec![];
        let mut masks = vec![];
        let (mut candidates, mut hits) = (0usize, 0usize);
        for range in ranges {
            let mut mask: Option<Vec<bool>> = None;
            let mut proven = vec![true; encodings::vectors_of(range).len()];
            for (p, prepared) in self.predicates.iter().zip(&self.prepared) {
                let node = self.file.footer.roots[p.column];
                let zones = &self.file.column_meta(node)?.blocks[block].zones;
                let inner = undecided(zones, range, p, &mut proven);
                // Rows outside `inner` match by their zone maps; only `inner` is decoded.
                let mut m = vec![true; range.len()];
                if !inner.is_empty() {
                    let decided =
                        self.file
                            .evaluate(node, block, inner.clone(), prepared, &self.reads)?;
                    m[inner.start - range.start..inner.end - range.start].copy_from_slice(&decided);
                }
                match &mut mask {
                    None => mask = Some(m),
                    Some(mask) => mask.iter_mut().zip(m).for_each(|(a, b)| *a &= b),
                }
            }
            let mask = mask.expect("filtered blocks have at least one predicate");
            self.metrics.vectors_matched_by_zone_maps +=
                proven.iter().filter(|p| **p).count() as u64;
            candidates += range.len();
            // Narrow to the vectors that kept a row, so other columns decode only those.
            for v in (range.start..range.end).step_by(VECTOR_LEN) {
                let part = &mask[v - range.start..(v + VECTOR_LEN).min(range.end) - range.start];
                let n = part.iter().filter(|b| **b).count();
                if n > 0 {
                    hits += n;
                    selected_ranges.push(v..(v + VECTOR_LEN).min(range.end));
                    masks.extend_from_slice(part);
                }
            }
        }
        if self.options.filter_mode == FilterMode::Auto
            && candidates > 0
            && hits as f64 / candidates as f64 > AUTO_PUSHDOWN_MAX_SELECTIVITY
        {
            self.pushdown = false;
        }
        if hits == 0 {
            return Ok(None);
        }
        // Sorted or clustered data keeps one run of rows: decode just that run, no mask.
        if let Some(run) = single_run(&selected_ranges, &masks, hits) {
            return Ok(Some(self.plain_batch(block, &[run])?));
        }
        let merged = merge_ranges(&selected_ranges);
        if (hits as f64) < PICK_MAX_FRACTION * masks.len() as f64 {
            return Ok(Some(self.selected_batch(block, &merged, &masks, hits)?));
        }
        let batch = self.plain_batch(block, &merged)?;
        // Packed 64 rows at a time (BooleanArray::from(Vec<bool>) pushes bit by bit).
        let mask = BooleanArray::new(BooleanBuffer::collect_bool(masks.len(), |i| masks[i]), None);
        Ok(Some(arrow::compute::filter_record_batch(&batch, &mask)?))
    }

    /// The rows of `ranges` (of `block`) that `mask` keeps, `rows` of them; `mask` holds one
    /// flag per row of `ranges`, in order.
    fn selected_batch(
        &self,
        block: usize,
        ranges: &[Range<usize>],
        mask: &[bool],
        rows: usize,
    ) -> Result<RecordBatch> {
        let mut at = 0;
        let keeps: Vec<Vec<u32>> = ranges
            .iter()
            .map(|r| {
                let flags = &mask[at..at + r.len()];
                at += r.len();
                offsets_set(flags)
            })
            .collect();
        self.projected_batch(ranges.len(), rows, |node, i| {
            let keep = Some(keeps[i].as_slice());
            self.file
                .decode_block(node, block, ranges[i].clone(), &self.reads, keep)
        })
    }
}

impl Iterator for Scan {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

fn bloom_allows(file: &ZyrFile, node: usize, block: usize, p: &ColumnPredicate) -> Result<bool> {
    let values: Vec<&Scalar> = match &p.op {
        PredicateOp::Cmp(CmpOp::Eq, v) => vec![v],
        PredicateOp::In(list) => list.iter().collect(),
        _ => return Ok(true),
    };
    let Some(bloom) = file.bloom(node, block)? else {
        return Ok(true);
    };
    Ok(values.iter().any(|v| match v {
        Scalar::Int(i) => bloom.might_contain(hash_int(*i)),
        Scalar::Bytes(b) => bloom.might_contain(hash_bytes(b)),
        Scalar::Float(_) => true,
    }))
}

/// The rows (block positions) that `masks` keeps, if they are one contiguous run. `masks`
/// holds one flag per row of `ranges`, in order; `hits` is how many are set.
/// The part of `range` (a run of whole vectors of a block) whose vectors' zone maps do not
/// prove that every row matches `p`; empty when they all do. Clears `proven[i]` for each
/// vector `i` of the range that `p` needs decoded.
fn undecided(
    zones: &[ZoneMap],
    range: &Range<usize>,
    p: &ColumnPredicate,
    proven: &mut [bool],
) -> Range<usize> {
    let vectors = encodings::vectors_of(range);
    let mut span: Option<(usize, usize)> = None;
    for v in vectors.clone() {
        let proof = zones
            .get(v)
            .is_some_and(|z| p.must_match(&z.stat, z.nulls, z.values));
        if !proof {
            proven[v - vectors.start] = false;
            span = Some(span.map_or((v, v), |(first, _)| (first, v)));
        }
    }
    match span {
        None => range.start..range.start,
        Some((first, last)) => {
            range.start.max(first * VECTOR_LEN)..range.end.min((last + 1) * VECTOR_LEN)
        }
    }
}

fn single_run(ranges: &[Range<usize>], masks: &[bool], hits: usize) -> Option<Range<usize>> {
    let rows = ranges.iter().flat_map(|r| r.clone());
    let mut kept = rows
        .zip(masks)
        .filter(|(_, keep)| **keep)
        .map(|(row, _)| row);
    let first = kept.next()?;
    let last = kept.last().unwrap_or(first);
    (last + 1 - first == hits).then_some(first..last + 1)
}

/// The row ranges of the vectors `vectors` of a block of `rows` rows that `keep` keeps.
fn vector_ranges(keep: &[bool], vectors: Range<usize>, rows: usize) -> Vec<Range<usize>> {
    let ranges: Vec<Range<usize>> = vectors
        .filter(|v| keep[*v])
        .map(|v| v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(rows))
        .collect();
    merge_ranges(&ranges)
}

fn merge_ranges(ranges: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = vec![];
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r.clone()),
        }
    }
    out
}

/// The offsets of the set flags, in order. Branch-free: each offset is written and the
/// cursor moves past it only if its flag is set, so a mask near half full costs no
/// mispredicted branches.
fn offsets_set(flags: &[bool]) -> Vec<u32> {
    let mut out = vec![0u32; flags.len()];
    let mut n = 0;
    for (i, f) in flags.iter().enumerate() {
        out[n] = i as u32;
        n += usize::from(*f);
    }
    out.truncate(n);
    out
}

/// `values` at the offsets `keep` (all of them without `keep`), once `values` is checked to
/// hold the `decoded` values asked for: a decoder returning fewer is corrupt input, never an
/// index out of bounds.
fn pick<T: Copy>(values: Vec<T>, keep: Option<&[u32]>, decoded: usize) -> Result<Vec<T>> {
    if values.len() != decoded {
        return corrupt(format!("{} values decoded of {decoded}", values.len()));
    }
    Ok(match keep {
        Some(keep) => keep.iter().map(|i| values[*i as usize]).collect(),
        None => values,
    })
}

fn pick_nulls(nulls: Option<NullBuffer>, keep: Option<&[u32]>) -> Option<NullBuffer> {
    match (nulls, keep) {
        (Some(nulls), Some(keep)) => Some(NullBuffer::new(BooleanBuffer::collect_bool(
            keep.len(),
            |j| nulls.is_valid(keep[j] as usize),
        ))),
        (nulls, _) => nulls,
    }
}

fn concat(mut pieces: Vec<ArrayRef>) -> Result<ArrayRef> {
    if pieces.len() == 1 {
        return Ok(pieces.pop().expect("one piece"));
    }
    Ok(arrow::compute::concat(
        &pieces.iter().map(|p| p.as_ref()).collect::<Vec<_>>(),
    )?)
}

impl ZyrFile {
    /// Column nodes of top-level columns `columns` and all their descendants.
    pub fn subtree_nodes(&self, columns: &[usize]) -> Vec<usize> {
        let mut out = vec![];
        let mut stack: Vec<usize> = columns
            .iter()
            .filter_map(|c| self.footer.roots.get(*c).copied())
            .collect();
        while let Some(n) = stack.pop() {
            out.push(n);
            stack.extend(self.footer.nodes[n].children.iter().copied());
        }
        out.sort_unstable();
        out
    }

    /// Byte range of the column record of node `node`.
    pub fn column_record_range(&self, node: usize) -> Range<u64> {
        let c = self.footer.columns[node];
        c.offset..c.offset + u64::from(c.len)
    }

    /// Byte ranges of the blocks and bloom filters of node `node`.
    pub fn data_ranges(&self, node: usize) -> Result<Vec<Range<u64>>> {
        let meta = self.column_meta(node)?;
        let mut ranges = vec![];
        for b in &meta.blocks {
            ranges.push(b.offset..b.offset + u64::from(b.len));
            if let Some(bloom) = b.bloom {
                ranges.push(bloom.offset..bloom.offset + u64::from(bloom.len));
            }
        }
        Ok(ranges)
    }
}
