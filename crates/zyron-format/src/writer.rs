//! Writes `.zyr` files: buffers rows into blocks, picks encodings per block by sampling, records
//! zone maps and bloom filters, then writes column records, the footer and the trailer.

use std::collections::BTreeMap;
use std::io::Write;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{Float32Type, Float64Type, SchemaRef};

use crate::bloom::{Bloom, hash_bytes, hash_int};
use crate::encodings::{self, BytesVec, Cascade, Floats, Ints, VECTOR_LEN};
use crate::error::{FormatError, Result};
use crate::io::{ByteWriter, checksum32};
use crate::lanes;
use crate::layout::{
    BlockMeta, BloomRef, ColumnMeta, ColumnRecordRef, DEFAULT_BLOCK_ROWS, Footer, Trailer,
    VERSION_MAJOR, VERSION_MINOR, header,
};
use crate::stats::{Stat, ZoneMap};
use crate::types::{ColumnNode, Physical, column_nodes};

/// Choices a writer makes.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Rows per block of top-level columns; a multiple of 1024.
    pub block_rows: usize,
    /// Top-level columns (by name) that get a bloom filter per block.
    pub bloom_filter_columns: Vec<String>,
    /// Threads that encode a block's columns side by side (at most [`MAX_WRITER_THREADS`]; one
    /// for blocks under [`PARALLEL_MIN_ROWS`]). The file's bytes do not depend on it. Default:
    /// the cores available.
    pub threads: usize,
}

/// Most threads one writer encodes with.
pub const MAX_WRITER_THREADS: usize = 16;
/// Blocks of fewer rows are encoded on the writer's own thread: starting threads costs tens of
/// microseconds, about what encoding a few thousand rows takes (a small lake commit, say).
pub const PARALLEL_MIN_ROWS: usize = 8 * 1024;

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            block_rows: DEFAULT_BLOCK_ROWS,
            bloom_filter_columns: vec![],
            threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(MAX_WRITER_THREADS),
        }
    }
}

/// What a finished file holds, for logs and reports.
#[derive(Clone, Debug, Default)]
pub struct WriteSummary {
    pub rows: u64,
    pub bytes: u64,
    /// Per column node: how many blocks chose each top-level encoding.
    pub encodings: Vec<BTreeMap<&'static str, usize>>,
}

/// Streams record batches into a `.zyr` file.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use arrow::datatypes::{DataType, Field, Schema};
/// use zyron_format::{ZyrFile, ZyrWriter, WriterOptions};
///
/// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
/// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..10_000))]).unwrap();
/// let mut writer = ZyrWriter::new(Vec::new(), schema, WriterOptions::default()).unwrap();
/// writer.write(&batch).unwrap();
/// let (bytes, summary) = writer.finish().unwrap();
/// assert_eq!(summary.rows, 10_000);
/// let file = ZyrFile::open(bytes::Bytes::from(bytes)).unwrap();
/// assert_eq!(file.num_rows(), 10_000);
/// ```
pub struct ZyrWriter<W: Write> {
    out: W,
    position: u64,
    schema: SchemaRef,
    nodes: Vec<ColumnNode>,
    options: WriterOptions,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    rows: u64,
    blocks: Vec<Vec<BlockMeta>>,
    /// Values written so far per column node (the next block's first value index).
    written_values: Vec<u64>,
    /// Nanoseconds each top-level column took to encode in the last block: the next block
    /// hands out the slowest first, so that no thread is left with a long column at the end.
    root_encode_ns: Vec<u64>,
    summary: WriteSummary,
}

impl<W: Write> ZyrWriter<W> {
    pub fn new(mut out: W, schema: SchemaRef, options: WriterOptions) -> Result<Self> {
        if options.block_rows == 0
            || options.block_rows % VECTOR_LEN != 0
            || options.block_rows > encodings::MAX_STREAM_VALUES
        {
            return Err(FormatError::Unwritable(format!(
                "block_rows must be a positive multiple of {VECTOR_LEN}"
            )));
        }
        if options.threads == 0 || options.threads > MAX_WRITER_THREADS {
            return Err(FormatError::Unwritable(format!(
                "threads must be between 1 and {MAX_WRITER_THREADS}, got {}",
                options.threads
            )));
        }
        let nodes = column_nodes(&schema)?;
        for name in &options.bloom_filter_columns {
            if schema.field_with_name(name).is_err() {
                return Err(FormatError::Unwritable(format!(
                    "bloom filter column {name} is not in the schema"
                )));
            }
        }
        out.write_all(&header())?;
        let n = nodes.len();
        let roots = schema.fields().len();
        Ok(Self {
            out,
            position: header().len() as u64,
            schema,
            nodes,
            options,
            pending: vec![],
            pending_rows: 0,
            rows: 0,
            blocks: vec![vec![]; n],
            written_values: vec![0; n],
            root_encode_ns: vec![0; roots],
            summary: WriteSummary {
                encodings: vec![BTreeMap::new(); n],
                ..Default::default()
            },
        })
    }

    /// Buffers `batch`; full blocks are encoded and written as they fill.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(FormatError::Unwritable(format!(
                "batch schema {} differs from the file's {}",
                batch.schema(),
                self.schema
            )));
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch.clone());
        while self.pending_rows >= self.options.block_rows {
            self.flush_block(self.options.block_rows)?;
        }
        Ok(())
    }

    /// Writes what is buffered, the column records, the footer and the trailer.
    pub fn finish(mut self) -> Result<(W, WriteSummary)> {
        if self.pending_rows > 0 {
            self.flush_block(self.pending_rows)?;
        }
        let mut records = Vec::with_capacity(self.nodes.len());
        for blocks in std::mem::take(&mut self.blocks) {
            let record = ColumnMeta::new(blocks).write();
            records.push(ColumnRecordRef {
                offset: self.position,
                len: record.len() as u32,
                checksum: checksum32(&record),
            });
            self.emit(&record)?;
        }
        let footer = Footer::write(&self.schema, self.rows, &records)?;
        let trailer = Trailer {
            footer_offset: self.position,
            footer_len: footer.len() as u32,
            footer_checksum: checksum32(&footer),
            major: VERSION_MAJOR,
            minor: VERSION_MINOR,
        };
        self.emit(&footer)?;
        self.emit(&trailer.to_bytes())?;
        self.out.flush()?;
        self.summary.rows = self.rows;
        self.summary.bytes = self.position;
        Ok((self.out, self.summary))
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<u64> {
        let at = self.position;
        self.out.write_all(bytes)?;
        self.position += bytes.len() as u64;
        Ok(at)
    }

    /// Encodes the first `rows` buffered rows as one block per column, the columns side by
    /// side on up to `threads` threads, then writes the blocks in column order.
    fn flush_block(&mut self, rows: usize) -> Result<()> {
        let all = arrow::compute::concat_batches(&self.schema, &self.pending)?;
        let block = all.slice(0, rows);
        let rest = all.slice(rows, all.num_rows() - rows);
        self.pending_rows = rest.num_rows();
        self.pending = if rest.num_rows() > 0 {
            vec![rest]
        } else {
            vec![]
        };
        let roots = self.roots();
        let jobs: Vec<ColumnJob> = roots
            .iter()
            .enumerate()
            .map(|(i, root)| ColumnJob {
                node: *root,
                array: block.column(i),
                bloom: self
                    .options
                    .bloom_filter_columns
                    .iter()
                    .any(|n| n == self.schema.field(i).name()),
            })
            .collect();
        let threads = if rows < PARALLEL_MIN_ROWS {
            1
        } else {
            self.options.threads
        };
        let encoded = encode_columns(
            &self.nodes,
            &self.written_values,
            &jobs,
            &self.root_encode_ns,
            threads,
        );
        for (i, column) in encoded.into_iter().enumerate() {
            let (pieces, encode_ns) = column?;
            self.root_encode_ns[i] = encode_ns;
            for piece in pieces {
                self.emit_block(piece)?;
            }
        }
        self.rows += rows as u64;
        Ok(())
    }

    fn roots(&self) -> Vec<usize> {
        let mut roots = vec![];
        let mut next = 0;
        while next < self.nodes.len() {
            roots.push(next);
            next = subtree_end(&self.nodes, next);
        }
        roots
    }

    /// Writes one encoded block (and its bloom filter) and records where it went.
    fn emit_block(&mut self, block: EncodedBlock) -> Result<()> {
        let bloom = match &block.bloom {
            Some(bytes) => Some(BloomRef {
                offset: self.emit(bytes)?,
                len: bytes.len() as u32,
                checksum: checksum32(bytes),
            }),
            None => None,
        };
        let checksum = checksum32(&block.bytes);
        let offset = self.emit(&block.bytes)?;
        if let Some(top) = block.top_encoding {
            *self.summary.encodings[block.node]
                .entry(top.name())
                .or_default() += 1;
        }
        self.blocks[block.node].push(BlockMeta {
            offset,
            len: u32::try_from(block.bytes.len())
                .map_err(|_| FormatError::Unwritable("a block exceeds 4 GiB".into()))?,
            checksum,
            values: block.values,
            first_child: block.first_child,
            bloom,
            zones: block.zones,
        });
        self.written_values[block.node] += block.values;
        Ok(())
    }
}

/// One top-level column of a block, to encode.
struct ColumnJob<'a> {
    node: usize,
    array: &'a ArrayRef,
    bloom: bool,
}

/// One column node's block, encoded but not yet written.
struct EncodedBlock {
    node: usize,
    bytes: Vec<u8>,
    bloom: Option<Vec<u8>>,
    values: u64,
    first_child: u64,
    zones: Vec<ZoneMap>,
    top_encoding: Option<encodings::EncodingId>,
}

/// What encoding one top-level column gave: its subtree's blocks in write order (children
/// before their parent), and the nanoseconds it took.
type EncodedColumn = Result<(Vec<EncodedBlock>, u64)>;

/// Encodes each job's column subtree, on up to `threads` threads. Jobs are handed out slowest
/// first by `last_ns` (longest-processing-time scheduling); results come back in job order, so
/// the file does not depend on the thread count.
fn encode_columns(
    nodes: &[ColumnNode],
    written: &[u64],
    jobs: &[ColumnJob<'_>],
    last_ns: &[u64],
    threads: usize,
) -> Vec<EncodedColumn> {
    let encode_one = |job: &ColumnJob<'_>| -> EncodedColumn {
        let start = std::time::Instant::now();
        let mut pieces = Vec::new();
        encode_block(nodes, written, job.node, job.array, job.bloom, &mut pieces)?;
        Ok((pieces, start.elapsed().as_nanos() as u64))
    };
    let threads = threads.min(jobs.len());
    if threads <= 1 {
        return jobs.iter().map(encode_one).collect();
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(last_ns[*i]));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<std::sync::Mutex<Option<EncodedColumn>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let work = || {
        loop {
            let taken = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(job) = order.get(taken) else { break };
            let result = encode_one(&jobs[*job]);
            *done[*job].lock().expect("no encoder panicked") = Some(result);
        }
    };
    std::thread::scope(|scope| {
        // The calling thread works too, so every job is done even if the system refuses
        // to start a thread (a process or cgroup thread limit): then fewer threads share it.
        for _ in 1..threads {
            let started = std::thread::Builder::new()
                .name("zyr-encode".into())
                .spawn_scoped(scope, work);
            if started.is_err() {
                break;
            }
        }
        work();
    });
    done.into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("no encoder panicked")
                .expect("every job was taken")
        })
        .collect()
}

/// Encodes `array` as one block of column `node` and, first, its children's blocks.
/// `written` holds the values already written per node (a list's first child index).
fn encode_block(
    nodes: &[ColumnNode],
    written: &[u64],
    node: usize,
    array: &ArrayRef,
    bloom: bool,
    out: &mut Vec<EncodedBlock>,
) -> Result<()> {
    let physical = nodes[node].physical;
    let mut w = ByteWriter::default();
    let nulls = array.logical_nulls();
    write_validity(&mut w, array.len(), nulls.as_ref());
    let mut first_child = 0;
    let mut zone_stats: Vec<Stat> = Vec::new();
    let mut hashes: Vec<u64> = Vec::new();
    let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
    let mut top_node: Vec<u8> = Vec::new();
    match physical {
        Physical::Bool | Physical::Int => {
            let lanes = lanes::int_lanes(array.as_ref())?;
            let dt = array.data_type();
            zone_stats = zones(lanes.len(), |r| {
                Stat::of_ints(
                    r.filter(|i| valid(*i))
                        .map(|i| lanes::lane_to_logical(dt, lanes[i])),
                )
            });
            if bloom {
                hashes = (0..lanes.len())
                    .filter(|i| valid(*i))
                    .map(|i| hash_int(lanes::lane_to_logical(dt, lanes[i])))
                    .collect();
            }
            top_node = encodings::encode_stream::<Ints>(&lanes, Cascade::TOP);
            w.bytes(&top_node);
        }
        Physical::Float32 => {
            let values = lanes::float_lanes::<f32, Float32Type>(array.as_ref());
            zone_stats = zones(values.len(), |r| {
                Stat::of_floats(r.filter(|i| valid(*i)).map(|i| f64::from(values[i])))
            });
            top_node = encodings::encode_stream::<Floats<f32>>(&values, Cascade::TOP);
            w.bytes(&top_node);
        }
        Physical::Float64 => {
            let values = lanes::float_lanes::<f64, Float64Type>(array.as_ref());
            zone_stats = zones(values.len(), |r| {
                Stat::of_floats(r.filter(|i| valid(*i)).map(|i| values[i]))
            });
            top_node = encodings::encode_stream::<Floats<f64>>(&values, Cascade::TOP);
            w.bytes(&top_node);
        }
        Physical::Wide => {
            let (low, high) = lanes::wide_lanes(array.as_ref());
            let value = |i: usize| (i128::from(high[i]) << 64) | i128::from(low[i] as u64);
            zone_stats = zones(low.len(), |r| {
                Stat::of_ints(r.filter(|i| valid(*i)).map(value))
            });
            if bloom {
                hashes = (0..low.len())
                    .filter(|i| valid(*i))
                    .map(|i| hash_int(value(i)))
                    .collect();
            }
            top_node = encodings::encode_stream::<Ints>(&low, Cascade::TOP);
            w.bytes(&top_node);
            w.bytes(&encodings::encode_stream::<Ints>(&high, Cascade::TOP));
        }
        Physical::Bytes => {
            let values: BytesVec = lanes::bytes_lanes(array.as_ref())?;
            let v = values.as_ref();
            zone_stats = zones(v.len(), |r| {
                Stat::of_bytes(r.filter(|i| valid(*i)).map(|i| v.get(i)))
            });
            if bloom {
                hashes = (0..v.len())
                    .filter(|i| valid(*i))
                    .map(|i| hash_bytes(v.get(i)))
                    .collect();
            }
            top_node = encodings::encode_stream::<encodings::Bytes>(v, Cascade::TOP);
            w.bytes(&top_node);
        }
        Physical::List => {
            let list = array.as_list::<i32>();
            let child = nodes[node].children[0];
            first_child = written[child];
            let offsets = list.value_offsets();
            let base = offsets[0];
            let ends: Vec<i64> = offsets[1..]
                .iter()
                .map(|o| first_child as i64 + i64::from(o - base))
                .collect();
            top_node = encodings::encode_stream::<Ints>(&ends, Cascade::TOP);
            w.bytes(&top_node);
            let values = list
                .values()
                .slice(base as usize, (offsets[offsets.len() - 1] - base) as usize);
            encode_block(nodes, written, child, &values, false, out)?;
        }
        Physical::Struct => {
            let children = &nodes[node].children;
            for (child, column) in children.iter().zip(array.as_struct().columns()) {
                encode_block(nodes, written, *child, column, false, out)?;
            }
        }
    }
    let zones = build_zones(array.len(), nulls.as_ref(), zone_stats);
    out.push(EncodedBlock {
        node,
        bytes: w.buf,
        bloom: (!hashes.is_empty()).then(|| bloom_bytes(hashes)),
        values: array.len() as u64,
        first_child,
        zones,
        top_encoding: top_node.first().map(|id| encodings::EncodingId(*id)),
    });
    Ok(())
}

fn bloom_bytes(mut hashes: Vec<u64>) -> Vec<u8> {
    hashes.sort_unstable();
    hashes.dedup();
    let mut bloom = Bloom::with_capacity(hashes.len());
    hashes.iter().for_each(|h| bloom.insert(*h));
    bloom.to_bytes()
}

fn subtree_end(nodes: &[ColumnNode], index: usize) -> usize {
    nodes[index]
        .children
        .last()
        .map_or(index + 1, |last| subtree_end(nodes, *last))
}

/// Validity: 0 = all valid, 1 = all null, 2 = a bitmap of ceil(len / 8) bytes (LSB first).
fn write_validity(w: &mut ByteWriter, len: usize, nulls: Option<&arrow::buffer::NullBuffer>) {
    match nulls {
        None => w.u8(0),
        Some(n) if n.null_count() == 0 => w.u8(0),
        Some(n) if n.null_count() == len => w.u8(1),
        Some(n) => {
            w.u8(2);
            let bits = n.inner().sliced();
            w.buf.extend_from_slice(&bits[..len.div_ceil(8)]);
        }
    }
}

/// Computes one statistic per 1024-value vector.
fn zones(len: usize, stat_of: impl Fn(std::ops::Range<usize>) -> Stat) -> Vec<Stat> {
    (0..len.div_ceil(VECTOR_LEN))
        .map(|v| stat_of(v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len)))
        .collect()
}

fn build_zones(
    len: usize,
    nulls: Option<&arrow::buffer::NullBuffer>,
    stats: Vec<Stat>,
) -> Vec<ZoneMap> {
    let mut stats = stats.into_iter();
    (0..len.div_ceil(VECTOR_LEN))
        .map(|v| {
            let range = v * VECTOR_LEN..((v + 1) * VECTOR_LEN).min(len);
            let null_count = nulls.map_or(0, |n| range.clone().filter(|i| n.is_null(*i)).count());
            ZoneMap {
                values: range.len() as u64,
                nulls: null_count as u64,
                stat: stats.next().unwrap_or(Stat::None),
            }
        })
        .collect()
}

/// Writes `batches` to `path` and fsyncs it: when this returns, the file is durable.
pub fn write_file(
    path: &std::path::Path,
    schema: SchemaRef,
    batches: &[RecordBatch],
    options: WriterOptions,
) -> Result<WriteSummary> {
    let file = std::fs::File::create(path)?;
    let mut writer = ZyrWriter::new(
        std::io::BufWriter::with_capacity(1 << 20, file),
        schema,
        options,
    )?;
    for b in batches {
        writer.write(b)?;
    }
    let (out, summary) = writer.finish()?;
    let file = out
        .into_inner()
        .map_err(|e| FormatError::Io(e.into_error()))?;
    file.sync_all()?;
    Ok(summary)
}
