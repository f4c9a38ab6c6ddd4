//! The `.zyr` format suites: `columnar`, `encoding`, `format`, `pruning`, `encoded_filter` and
//! `checksum` (see `docs/benchmarks.md`). Each compares `.zyr` side by side, in the same run and
//! on the same data, with Parquet written by arrow-rs (zstd level 3, and snappy) and, where the
//! Python package `vortex-data` imports, with Vortex. Every suite checks answers (rows, sums,
//! whole decoded tables) against the peer's before reporting a number.
//!
//! Data: TPC-H `lineitem` from tpchgen (SF 0.01 smoke, SF 1 full), and two generated tables:
//! `strings` (URLs, e-mail addresses, UUIDs, log levels, user agents, free text) and `floats`
//! (prices with 2 decimals, coordinates with 6, f32 temperatures with 1, integral counters
//! stored as doubles, and uniformly random doubles that no encoding can shrink).
//!
//! The suites run one at a time (they share a lock), each single-threaded where it times
//! decoding, so they do not compete for the machine's two cores. The one exception is
//! `columnar`'s two-thread `.zyr` scan, the like-for-like peer of Vortex, which decodes on two
//! threads although asked for one.
//!
//! The suites run under mimalloc, the allocator the `zyron` server ships with, so that the
//! times are those of the product; Parquet and DataFusion run under the same allocator.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::metadata::ParquetMetaDataReader;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::file::statistics::Statistics as ParquetStatistics;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use serde_json::json;
use zyron_bench::vortex::{Vortex, cpu_ms, times_ms};
use zyron_bench::{Metric, Samples, Scale, SuiteRun, process_cpu_time};
use zyron_format::lanes::schema_with_string_views;
use zyron_format::{
    CmpOp, ColumnPredicate, FilterMode, PredicateOp, Scalar, ScanOptions, VectorPos, WriterOptions,
    ZyrFile, ZyrWriter,
};

/// The suites take turns: timings from two at once would measure each other.
static TURN: Mutex<()> = Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn rounds(scale: Scale) -> usize {
    scale.pick(2, 5)
}

/// Rounds of the selective queries: each takes milliseconds, where this shared machine's
/// noise moves a single sample by half, so their medians need more samples than a full scan's.
fn query_rounds(scale: Scale) -> usize {
    scale.pick(2, 25)
}

/// Full scans per round of `columnar`, for each reader: this shared machine moves single
/// samples by a third, and five rounds alone left the median unsettled.
const SCANS_PER_ROUND: usize = 3;

// ---------------------------------------------------------------- data

/// A table for the suites, with its size as Arrow holds it.
struct Table {
    name: &'static str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
    /// Bytes of the values as Arrow lays them out (offsets + data for strings, width x rows
    /// otherwise, plus validity), the measure pyarrow's `nbytes` reports.
    arrow_bytes: u64,
}

impl Table {
    fn new(name: &'static str, batches: Vec<RecordBatch>) -> Table {
        // Strings as Utf8 (what pyarrow reads, and what `.zyr` and Parquet decode to here;
        // Vortex hands back string views, see docs/benchmarks.md).
        let batches: Vec<RecordBatch> = batches.iter().map(to_utf8).collect();
        let schema = batches[0].schema();
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        let arrow_bytes = batches.iter().map(arrow_nbytes).sum();
        Table {
            name,
            schema,
            batches,
            rows,
            arrow_bytes,
        }
    }

    fn mb(&self) -> f64 {
        self.arrow_bytes as f64 / 1e6
    }
}

fn to_utf8(batch: &RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            if *c.data_type() == DataType::Utf8View {
                cast(c, &DataType::Utf8).unwrap()
            } else {
                c.clone()
            }
        })
        .collect();
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn arrow_nbytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| {
            let validity = if c.null_count() > 0 {
                c.len().div_ceil(8)
            } else {
                0
            };
            let values = match c.data_type() {
                DataType::Utf8 => {
                    // The offsets, not value_data(): a sliced array shares its whole buffer.
                    let offsets = c.as_string::<i32>().value_offsets();
                    (offsets[offsets.len() - 1] - offsets[0]) as usize + 4 * (c.len() + 1)
                }
                DataType::Boolean => c.len().div_ceil(8),
                dt => dt.primitive_width().unwrap_or(8) * c.len(),
            };
            (validity + values) as u64
        })
        .sum()
}

fn lineitem(scale: Scale) -> &'static Table {
    static DATA: OnceLock<Table> = OnceLock::new();
    DATA.get_or_init(|| {
        let (_, batches) =
            zyron_engine::demo::tpch::generate("lineitem", scale.pick(0.01, 1.0)).unwrap();
        Table::new("lineitem", batches)
    })
}

/// A deterministic pseudo-random sequence (xorshift), so every run writes the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn strings(scale: Scale) -> &'static Table {
    static DATA: OnceLock<Table> = OnceLock::new();
    DATA.get_or_init(|| {
        let rows = scale.pick(60_000, 2_000_000);
        let mut rng = Rng(0x2545F4914F6CDD1D);
        let hosts = ["example.com", "shop.example.org", "api.service.io", "cdn.static.net", "news.site.co.uk"];
        let words = ["order", "customer", "payment", "refund", "session", "timeout", "retry", "cache", "miss", "user", "login", "failed", "accepted", "shipment", "delayed"];
        let agents: Vec<String> = (0..20).map(|i| format!("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.{i} (KHTML, like Gecko) Chrome/12{i}.0 Safari/537.{i}")).collect();
        let levels = ["INFO", "WARN", "ERROR", "DEBUG", "TRACE"];
        let mut columns: Vec<Vec<String>> = vec![Vec::with_capacity(rows); 6];
        for _ in 0..rows {
            let host = hosts[rng.below(5) as usize];
            columns[0].push(format!("https://{host}/{}/{}?id={}", words[rng.below(15) as usize], words[rng.below(15) as usize], rng.below(1_000_000)));
            columns[1].push(format!("{}.{}{}@{}", words[rng.below(15) as usize], words[rng.below(15) as usize], rng.below(10_000), hosts[rng.below(5) as usize]));
            columns[2].push(format!("{:016x}{:016x}", rng.next(), rng.next()));
            columns[3].push(levels[(rng.below(100) as usize).min(99) / 40].to_string());
            columns[4].push(agents[rng.below(20) as usize].clone());
            let n = 3 + rng.below(12) as usize;
            columns[5].push((0..n).map(|_| words[rng.below(15) as usize]).collect::<Vec<_>>().join(" "));
        }
        let names = ["url", "email", "uuid", "level", "user_agent", "message"];
        let schema = Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::Utf8, false)).collect::<Vec<_>>()));
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|c| Arc::new(StringArray::from(c)) as ArrayRef).collect();
        Table::new("strings", split(RecordBatch::try_new(schema, arrays).unwrap()))
    })
}

fn floats(scale: Scale) -> &'static Table {
    static DATA: OnceLock<Table> = OnceLock::new();
    DATA.get_or_init(|| {
        let rows = scale.pick(60_000, 4_000_000);
        let mut rng = Rng(0x9E3779B97F4A7C15);
        let mut price = Vec::with_capacity(rows);
        let mut lat = Vec::with_capacity(rows);
        let mut lon = Vec::with_capacity(rows);
        let mut temperature = Vec::with_capacity(rows);
        let mut counter = Vec::with_capacity(rows);
        let mut random = Vec::with_capacity(rows);
        let mut walk = 1_000_000i64;
        for i in 0..rows {
            price.push((rng.below(10_000_000) + 100) as f64 / 100.0);
            lat.push((rng.below(180_000_000) as i64 - 90_000_000) as f64 / 1e6);
            lon.push((rng.below(360_000_000) as i64 - 180_000_000) as f64 / 1e6);
            walk += rng.below(21) as i64 - 10;
            temperature.push((walk.rem_euclid(600) as f32) / 10.0);
            counter.push((i as u64 * 3 + rng.below(3)) as f64);
            random.push(f64::from_bits(0x3FF0_0000_0000_0000 | (rng.next() >> 12)) - 1.0);
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Float64, false),
            Field::new("lat", DataType::Float64, false),
            Field::new("lon", DataType::Float64, false),
            Field::new("temperature", DataType::Float32, false),
            Field::new("counter", DataType::Float64, false),
            Field::new("random", DataType::Float64, false),
        ]));
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(price)),
            Arc::new(Float64Array::from(lat)),
            Arc::new(Float64Array::from(lon)),
            Arc::new(Float32Array::from(temperature)),
            Arc::new(Float64Array::from(counter)),
            Arc::new(Float64Array::from(random)),
        ];
        Table::new(
            "floats",
            split(RecordBatch::try_new(schema, arrays).unwrap()),
        )
    })
}

fn split(batch: RecordBatch) -> Vec<RecordBatch> {
    (0..batch.num_rows())
        .step_by(65_536)
        .map(|s| batch.slice(s, 65_536.min(batch.num_rows() - s)))
        .collect()
}

// ---------------------------------------------------------------- writers and readers

#[derive(Clone, Copy, Debug, PartialEq)]
enum Codec {
    Zstd,
    Snappy,
}

impl Codec {
    fn label(self) -> &'static str {
        match self {
            Codec::Zstd => "parquet (arrow-rs 59, zstd 3)",
            Codec::Snappy => "parquet (arrow-rs 59, snappy)",
        }
    }
}

fn write_zyr(t: &Table, options: WriterOptions) -> Bytes {
    let mut w = ZyrWriter::new(
        Vec::with_capacity(t.arrow_bytes as usize / 4),
        t.schema.clone(),
        options,
    )
    .unwrap();
    for b in &t.batches {
        w.write(b).unwrap();
    }
    Bytes::from(w.finish().unwrap().0)
}

/// With `ZYRON_BENCH_KEEP=DIR`, a suite leaves the `.zyr` files it measured in `DIR`, for
/// `zyr_inspect` (per-column encodings and decode speed) or a profiler.
fn keep_file(name: &str, bytes: &[u8]) {
    if let Some(dir) = std::env::var_os("ZYRON_BENCH_KEEP") {
        let path = Path::new(&dir).join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

fn one_thread() -> WriterOptions {
    WriterOptions {
        threads: 1,
        ..WriterOptions::default()
    }
}

fn parquet_properties(codec: Codec, bloom_columns: &[&str]) -> WriterProperties {
    let compression = match codec {
        Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(3).unwrap()),
        Codec::Snappy => Compression::SNAPPY,
    };
    let mut p = WriterProperties::builder()
        .set_compression(compression)
        .set_statistics_enabled(EnabledStatistics::Page);
    for c in bloom_columns {
        p = p.set_column_bloom_filter_enabled((*c).into(), true);
    }
    p.build()
}

fn write_parquet(t: &Table, codec: Codec) -> Bytes {
    let mut out = Vec::with_capacity(t.arrow_bytes as usize / 4);
    let mut w = ArrowWriter::try_new(
        &mut out,
        t.schema.clone(),
        Some(parquet_properties(codec, &[])),
    )
    .unwrap();
    for b in &t.batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
    Bytes::from(out)
}

/// Rows per batch both readers return in the decode suites: DataFusion's default batch size,
/// what either reader produces inside a query.
const SCAN_BATCH_ROWS: usize = 8192;

/// How a decode suite asks a reader for string columns.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Strings {
    /// Contiguous `Utf8`, as the tables hold them.
    Utf8,
    /// `Utf8View`: what DataFusion asks of Parquet by default and what Vortex always returns.
    Views,
}

fn zyr_scan_options(strings: Strings) -> ScanOptions {
    ScanOptions {
        batch_rows: SCAN_BATCH_ROWS,
        string_views: strings == Strings::Views,
        ..Default::default()
    }
}

/// Every row of every column, decoded batch by batch.
fn zyr_batches(bytes: &Bytes, strings: Strings) -> impl Iterator<Item = RecordBatch> + use<> {
    let file = Arc::new(ZyrFile::open(bytes.clone()).unwrap());
    file.scan(zyr_scan_options(strings))
        .unwrap()
        .map(|b| b.unwrap())
}

/// The rows of `span`, every column, decoded batch by batch.
fn zyr_span_batches(
    file: &Arc<ZyrFile>,
    strings: Strings,
    span: std::ops::Range<VectorPos>,
) -> impl Iterator<Item = RecordBatch> + use<> {
    file.scan(zyr_scan_options(strings))
        .unwrap()
        .with_span(span)
        .map(|b| b.unwrap())
}

/// Threads of [`File::ZyrTwoThreads`]: this machine's two cores.
const SCAN_THREADS: usize = 2;

/// `file` cut at block boundaries into at most `parts` spans of as many blocks each, as the
/// DataFusion table provider cuts an unfiltered scan into partitions.
fn block_spans(file: &ZyrFile, parts: usize) -> Vec<std::ops::Range<VectorPos>> {
    let blocks = file.block_count().unwrap();
    let per = blocks.div_ceil(parts).max(1);
    (0..blocks)
        .step_by(per)
        .map(|b| VectorPos::block_start(b)..VectorPos::block_start((b + per).min(blocks)))
        .collect()
}

/// [`File::ZyrTwoThreads`]'s spans, decoded one after the other (for checking answers).
fn zyr_spans_in_turn(bytes: &Bytes, strings: Strings) -> impl Iterator<Item = RecordBatch> + use<> {
    let file = Arc::new(ZyrFile::open(bytes.clone()).unwrap());
    block_spans(&file, SCAN_THREADS)
        .into_iter()
        .flat_map(move |span| zyr_span_batches(&file, strings, span))
}

/// [`SCAN_THREADS`] worker threads that stay up between scans, as a query runtime's do
/// (threads spawned for each scan start on cold allocator heaps).
fn scan_workers() -> &'static tokio::runtime::Runtime {
    static WORKERS: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    WORKERS.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(SCAN_THREADS)
            .build()
            .unwrap()
    })
}

/// Rows of a whole `.zyr` file decoded as one task per span on [`scan_workers`], each
/// span's batches dropped as they come, as DataFusion's partitions consume them.
fn zyr_rows_on_threads(bytes: &Bytes, strings: Strings) -> usize {
    let file = Arc::new(ZyrFile::open(bytes.clone()).unwrap());
    let workers = scan_workers();
    let tasks: Vec<_> = block_spans(&file, SCAN_THREADS)
        .into_iter()
        .map(|span| {
            let file = file.clone();
            workers.spawn(async move { rows_decoded(zyr_span_batches(&file, strings, span)) })
        })
        .collect();
    workers.block_on(async {
        let mut rows = 0;
        for task in tasks {
            rows += task.await.unwrap();
        }
        rows
    })
}

fn parquet_batches(bytes: &Bytes, strings: Strings) -> impl Iterator<Item = RecordBatch> + use<> {
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
    if strings == Strings::Views {
        // The schema hint DataFusion's `schema_force_view_types` gives the reader.
        let views = Arc::new(schema_with_string_views(builder.schema()));
        let options = ArrowReaderOptions::new().with_schema(views);
        builder =
            ParquetRecordBatchReaderBuilder::try_new_with_options(bytes.clone(), options).unwrap();
    }
    builder
        .with_batch_size(SCAN_BATCH_ROWS)
        .build()
        .unwrap()
        .map(|b| b.unwrap())
}

/// The files `columnar` decodes, and how.
#[derive(Clone, Copy, Debug, PartialEq)]
enum File {
    /// `.zyr` on one thread.
    Zyr,
    /// The same `.zyr` file on [`SCAN_THREADS`] threads, one per span of blocks: a query's
    /// partitions. The like-for-like peer of Vortex, which decodes on two threads although
    /// asked for one (see `zyron_bench::vortex`).
    ZyrTwoThreads,
    Zstd,
    Snappy,
}

fn batches_of(
    file: File,
    strings: Strings,
    bytes: &Bytes,
) -> Box<dyn Iterator<Item = RecordBatch>> {
    match file {
        File::Zyr => Box::new(zyr_batches(bytes, strings)),
        File::ZyrTwoThreads => Box::new(zyr_spans_in_turn(bytes, strings)),
        File::Zstd | File::Snappy => Box::new(parquet_batches(bytes, strings)),
    }
}

/// Rows of a whole file, decoded as `file` says (on threads for [`File::ZyrTwoThreads`]).
fn rows_scanned(file: File, strings: Strings, bytes: &Bytes) -> usize {
    match file {
        File::ZyrTwoThreads => zyr_rows_on_threads(bytes, strings),
        _ => rows_decoded(batches_of(file, strings, bytes)),
    }
}

/// Decodes a whole file as a query consumes it: each batch is dropped before the next is
/// decoded, so the allocator hands the same memory back. (Keeping the whole output made the
/// kernel zero fresh pages for it, up to 70% of a `.zyr` scan's time and varying from round
/// to round; that is the cost of holding a table in memory, not of decoding it.)
fn rows_decoded(batches: impl Iterator<Item = RecordBatch>) -> usize {
    batches.map(|b| b.num_rows()).sum()
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

/// `b` holds `a`'s values, read back as `a`'s types (so string views compare with `Utf8`).
fn same_table(schema: &SchemaRef, a: &[RecordBatch], b: &[RecordBatch], what: &str) {
    let a = concat_batches(schema, a).unwrap();
    let b = concat_batches(&b[0].schema(), b).unwrap();
    assert_eq!(a.num_rows(), b.num_rows(), "{what}: row counts differ");
    for i in 0..a.num_columns() {
        assert_eq!(
            a.column(i).as_ref(),
            cast(b.column(i), a.column(i).data_type()).unwrap().as_ref(),
            "{what}: column {} differs",
            schema.field(i).name()
        );
    }
}

/// A Vortex worker, or the reason there is none (recorded once per suite as skipped).
fn vortex(run: &mut SuiteRun) -> Option<Vortex> {
    match Vortex::start() {
        Ok(v) => Some(v),
        Err(reason) => {
            run.skip(format!("Vortex comparison: {reason}"));
            None
        }
    }
}

fn vortex_label(v: &Vortex) -> String {
    format!("vortex (vortex-data {}, Python)", v.version)
}

/// Writes `t` as a Parquet file (for Vortex to read) and converts it; returns the Vortex path
/// and (write ms, bytes).
fn vortex_file(v: &mut Vortex, t: &Table, dir: &Path) -> Result<(PathBuf, f64, u64), String> {
    let parquet = dir.join(format!("{}.parquet", t.name));
    std::fs::write(&parquet, write_parquet(t, Codec::Zstd)).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{}.vortex", t.name));
    let (ms, bytes) = v.write(parquet.to_str().unwrap(), path.to_str().unwrap())?;
    Ok((path, ms, bytes))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ---------------------------------------------------------------- columnar

/// File size, write speed and full-scan decode speed on three tables.
#[test]
fn columnar() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("columnar");
    let scale = run.scale();
    let dir = tempfile::tempdir().unwrap();
    let mut vortex = vortex(&mut run);
    for t in [lineitem(scale), strings(scale), floats(scale)] {
        let params = |m: Metric| {
            m.param("table", t.name)
                .param("rows", t.rows as u64)
                .param("arrow_mb", (t.mb() * 10.0).round() / 10.0)
        };
        let (mut zyr_write, mut zyr_write_one, mut zstd_write, mut snappy_write) = (
            Samples::for_values(),
            Samples::for_values(),
            Samples::for_values(),
            Samples::for_values(),
        );
        // Full-scan samples per (file, strings) reader; views against views, Utf8 against Utf8.
        // Each reader keeps two: GB/s of wall-clock time, and GB per second of the process's
        // CPU time (all threads).
        let mut scans = [
            (File::Zyr, Strings::Utf8),
            (File::Zstd, Strings::Utf8),
            (File::Snappy, Strings::Utf8),
            (File::Zyr, Strings::Views),
            (File::Zstd, Strings::Views),
            (File::ZyrTwoThreads, Strings::Views),
        ]
        .map(|reader| (reader, Samples::for_values(), Samples::for_values()));
        let mut files = (Bytes::new(), Bytes::new(), Bytes::new());
        for round in 0..rounds(scale) {
            let (d, zyr) = time(|| write_zyr(t, WriterOptions::default()));
            zyr_write.record_value(t.mb() / d.as_secs_f64());
            // arrow-rs's ArrowWriter encodes on one thread: the per-core comparison.
            let (d, zyr_one) = time(|| write_zyr(t, one_thread()));
            zyr_write_one.record_value(t.mb() / d.as_secs_f64());
            assert!(zyr_one == zyr, "the thread count must not change the file");
            let (d, zstd) = time(|| write_parquet(t, Codec::Zstd));
            zstd_write.record_value(t.mb() / d.as_secs_f64());
            let (d, snappy) = time(|| write_parquet(t, Codec::Snappy));
            snappy_write.record_value(t.mb() / d.as_secs_f64());
            let gb_per_s = |d: Duration| t.mb() / 1e3 / d.as_secs_f64();
            let file_bytes = |file: File| match file {
                File::Zyr | File::ZyrTwoThreads => &zyr,
                File::Zstd => &zstd,
                File::Snappy => &snappy,
            };
            if round == 0 {
                // Every reader's answer, Utf8 or views, against the table.
                for ((file, strings), _, _) in &scans {
                    same_table(
                        &t.schema,
                        &t.batches,
                        &batches_of(*file, *strings, file_bytes(*file)).collect::<Vec<_>>(),
                        &format!("{}: {file:?} read as {strings:?}", t.name),
                    );
                }
            }
            for scan in 0..SCANS_PER_ROUND {
                // Each scan starts with another reader, as in `encoded_filter`.
                let first = round * SCANS_PER_ROUND + scan;
                let readers = scans.len();
                for k in (first..first + readers).map(|k| k % readers) {
                    let ((file, strings), wall, cpu) = &mut scans[k];
                    let bytes = file_bytes(*file);
                    let cpu_before = process_cpu_time();
                    let (d, rows) = time(|| rows_scanned(*file, *strings, bytes));
                    cpu.record_value(gb_per_s(process_cpu_time() - cpu_before));
                    assert_eq!(rows, t.rows, "{}: rows decoded", t.name);
                    wall.record_value(gb_per_s(d));
                }
            }
            files = (zyr, zstd, snappy);
        }
        keep_file(&format!("{}.zyr", t.name), &files.0);
        let mb = |b: &Bytes| b.len() as f64 / 1e6;
        let size = |peer: &str, v: f64| {
            params(Metric::single(
                &format!("{}_size", t.name),
                "MB",
                false,
                mb(&files.0),
            ))
            .with_peer(peer, v)
        };
        run.push(
            size(Codec::Zstd.label(), mb(&files.1)).renamed(&format!("{}_size_vs_zstd", t.name)),
        );
        run.push(
            size(Codec::Snappy.label(), mb(&files.2))
                .renamed(&format!("{}_size_vs_snappy", t.name)),
        );
        for (samples, threads, suffix) in [
            (&zyr_write, WriterOptions::default().threads, ""),
            (&zyr_write_one, 1, "_one_thread"),
        ] {
            let write = params(Metric::throughput(
                &format!("{}_write", t.name),
                "MB/s",
                samples,
            ))
            .param("threads", threads as u64);
            run.push(
                write
                    .clone()
                    .with_peer(Codec::Zstd.label(), zstd_write.spread(1.0).p50)
                    .renamed(&format!("{}_write{suffix}_vs_zstd", t.name)),
            );
            run.push(
                write
                    .with_peer(Codec::Snappy.label(), snappy_write.spread(1.0).p50)
                    .renamed(&format!("{}_write{suffix}_vs_snappy", t.name)),
            );
        }
        let scan_of = |reader: (File, Strings)| {
            let (_, wall, cpu) = scans
                .iter()
                .find(|(r, _, _)| *r == reader)
                .expect("a reader");
            (wall, cpu)
        };
        let samples = |reader| scan_of(reader).0;
        let p50 = |reader| samples(reader).spread(1.0).p50;
        let scan_metric = |strings: Strings| {
            params(Metric::throughput(
                &format!("{}_full_scan", t.name),
                "GB/s",
                samples((File::Zyr, strings)),
            ))
            .param("strings", format!("{strings:?}"))
        };
        for (peer, strings, name) in [
            (File::Zstd, Strings::Utf8, "vs_zstd"),
            (File::Snappy, Strings::Utf8, "vs_snappy"),
            (File::Zstd, Strings::Views, "views_vs_zstd"),
        ] {
            let codec = match peer {
                File::Snappy => Codec::Snappy,
                _ => Codec::Zstd,
            };
            run.push(
                scan_metric(strings)
                    .with_peer(codec.label(), p50((peer, strings)))
                    .renamed(&format!("{}_full_scan_{name}", t.name)),
            );
        }
        if let Some(v) = vortex.as_mut() {
            match vortex_columnar(v, t, dir.path(), rounds(scale)) {
                Ok((bytes, write_ms, scan_ms, scan_cpu_ms)) => {
                    let label = vortex_label(v);
                    run.push(
                        size(&label, bytes as f64 / 1e6)
                            .renamed(&format!("{}_size_vs_vortex", t.name)),
                    );
                    run.push(
                        params(Metric::throughput(
                            &format!("{}_write", t.name),
                            "MB/s",
                            &zyr_write,
                        ))
                        .with_peer(&label, t.mb() / (write_ms / 1e3))
                        .renamed(&format!("{}_write_vs_vortex", t.name)),
                    );
                    // Vortex returns strings as views: like for like against `.zyr`'s views, and
                    // (as before) against its Utf8.
                    let gb_per = |ms: &[f64]| t.mb() / 1e3 / (median(ms) / 1e3);
                    let vortex_gb_per_s = gb_per(&scan_ms);
                    for (strings, name) in [
                        (Strings::Views, "vs_vortex"),
                        (Strings::Utf8, "utf8_vs_vortex"),
                    ] {
                        run.push(
                            scan_metric(strings)
                                .with_peer(&label, vortex_gb_per_s)
                                .renamed(&format!("{}_full_scan_{name}", t.name)),
                        );
                    }
                    // Vortex decodes on two threads: against `.zyr` on two, and per CPU-second.
                    let two = (File::ZyrTwoThreads, Strings::Views);
                    let spans = block_spans(&ZyrFile::open(files.0.clone()).unwrap(), SCAN_THREADS);
                    run.push(
                        params(Metric::throughput(
                            &format!("{}_full_scan", t.name),
                            "GB/s",
                            samples(two),
                        ))
                        .param("strings", "Views")
                        .param("threads", spans.len() as u64)
                        .with_peer(&label, vortex_gb_per_s)
                        .renamed(&format!("{}_full_scan_two_threads_vs_vortex", t.name)),
                    );
                    run.push(
                        params(Metric::throughput(
                            &format!("{}_full_scan", t.name),
                            "GB per CPU-second",
                            scan_of((File::Zyr, Strings::Views)).1,
                        ))
                        .param("strings", "Views")
                        .with_peer(&label, gb_per(&scan_cpu_ms))
                        .renamed(&format!("{}_full_scan_cpu_vs_vortex", t.name)),
                    );
                }
                Err(reason) => run.skip(format!("Vortex on {}: {reason}", t.name)),
            }
        }
    }
    run.finish().unwrap();
}

/// Vortex's file of `t`: its size, its write time, and per full scan the wall-clock and the
/// process CPU milliseconds.
fn vortex_columnar(
    v: &mut Vortex,
    t: &Table,
    dir: &Path,
    rounds: usize,
) -> Result<(u64, f64, Vec<f64>, Vec<f64>), String> {
    let (path, write_ms, bytes) = vortex_file(v, t, dir)?;
    let reply =
        v.request(json!({"op": "scan", "vortex": path.to_str().unwrap(), "repeat": rounds}))?;
    if reply["rows"].as_u64() != Some(t.rows as u64) {
        return Err(format!(
            "Vortex returned {} rows, expected {}",
            reply["rows"], t.rows
        ));
    }
    Ok((bytes, write_ms, times_ms(&reply), cpu_ms(&reply)))
}

// ---------------------------------------------------------------- encoding

/// Per column of the three tables: the encoding `.zyr` chose, its size against Parquet's
/// column chunk (zstd), and how fast the column alone decodes against Parquet's.
#[test]
fn encoding() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("encoding");
    let scale = run.scale();
    for t in [lineitem(scale), strings(scale), floats(scale)] {
        let zyr = write_zyr(t, WriterOptions::default());
        let parquet = write_parquet(t, Codec::Zstd);
        let file = Arc::new(ZyrFile::open(zyr.clone()).unwrap());
        let metadata = ParquetMetaDataReader::new()
            .parse_and_finish(&parquet)
            .unwrap();
        for (c, field) in t.schema.fields().iter().enumerate() {
            let ours_bytes: u64 = file
                .column_meta(c)
                .unwrap()
                .blocks
                .iter()
                .map(|b| u64::from(b.len))
                .sum();
            let theirs_bytes: i64 = metadata
                .row_groups()
                .iter()
                .map(|rg| rg.column(c).compressed_size())
                .sum();
            let mut encodings = file.column_encodings(c).unwrap();
            encodings.sort();
            encodings.dedup();
            let column_mb = t
                .batches
                .iter()
                .map(|b| arrow_nbytes(&b.project(&[c]).unwrap()))
                .sum::<u64>() as f64
                / 1e6;
            let (mut ours, mut theirs) = (Samples::for_values(), Samples::for_values());
            for _ in 0..rounds(scale) {
                let (d, rows) = time(|| {
                    file.scan(ScanOptions {
                        projection: Some(vec![c]),
                        batch_rows: SCAN_BATCH_ROWS,
                        ..Default::default()
                    })
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum::<usize>()
                });
                assert_eq!(rows, t.rows);
                ours.record_value(column_mb / 1e3 / d.as_secs_f64());
                let (d, rows) = time(|| {
                    let builder =
                        ParquetRecordBatchReaderBuilder::try_new(parquet.clone()).unwrap();
                    let mask = datafusion::parquet::arrow::ProjectionMask::roots(
                        builder.parquet_schema(),
                        [c],
                    );
                    builder
                        .with_projection(mask)
                        .with_batch_size(SCAN_BATCH_ROWS)
                        .build()
                        .unwrap()
                        .map(|b| b.unwrap().num_rows())
                        .sum::<usize>()
                });
                assert_eq!(rows, t.rows);
                theirs.record_value(column_mb / 1e3 / d.as_secs_f64());
            }
            let name = format!("{}.{}", t.name, field.name());
            let params = |m: Metric| {
                m.param("table", t.name)
                    .param("column", field.name().as_str())
                    .param("type", field.data_type().to_string())
                    .param("encodings", encodings.join("+"))
            };
            run.push(
                params(Metric::single(
                    &format!("{name}_size"),
                    "MB",
                    false,
                    ours_bytes as f64 / 1e6,
                ))
                .with_peer(Codec::Zstd.label(), theirs_bytes as f64 / 1e6),
            );
            run.push(
                params(Metric::throughput(&format!("{name}_decode"), "GB/s", &ours))
                    .with_peer(Codec::Zstd.label(), theirs.spread(1.0).p50),
            );
        }
    }
    run.finish().unwrap();
}

// ---------------------------------------------------------------- format

/// Opening a 1,000-column file, and reading one row at random.
#[test]
fn format() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("format");
    let scale = run.scale();
    let dir = tempfile::tempdir().unwrap();
    let mut vortex = vortex(&mut run);

    let wide = wide_table(1_000, 4_096);
    let zyr = write_zyr(&wide, WriterOptions::default());
    let parquet = write_parquet(&wide, Codec::Zstd);
    let (mut ours, mut theirs) = (Samples::new(), Samples::new());
    for _ in 0..scale.pick(50, 300) {
        let (d, file) = time(|| ZyrFile::open(zyr.clone()).unwrap());
        assert_eq!(file.schema().fields().len(), 1_000);
        ours.record_duration(d);
        let (d, meta) = time(|| {
            ParquetMetaDataReader::new()
                .parse_and_finish(&parquet)
                .unwrap()
        });
        assert_eq!(meta.file_metadata().schema_descr().num_columns(), 1_000);
        theirs.record_duration(d);
    }
    let params = |m: Metric| m.param("columns", 1_000).param("rows", 4_096);
    run.push(
        params(Metric::latency_ms("footer_open_1000_columns", &ours))
            .with_peer(Codec::Zstd.label(), theirs.spread_ms().p50)
            .renamed("footer_open_1000_columns_vs_parquet"),
    );
    if let Some(v) = vortex.as_mut() {
        let result = vortex_file(v, &wide, dir.path()).and_then(|(path, _, _)| v.request(json!({"op": "open", "vortex": path.to_str().unwrap(), "repeat": scale.pick(20, 100)})));
        match result {
            Ok(reply) => run.push(
                params(Metric::latency_ms("footer_open_1000_columns", &ours))
                    .with_peer(&vortex_label(v), median(&times_ms(&reply)))
                    .renamed("footer_open_1000_columns_vs_vortex"),
            ),
            Err(reason) => run.skip(format!("Vortex footer open: {reason}")),
        }
    }

    // One random row of lineitem, all 16 columns, from files already in memory.
    let t = lineitem(scale);
    let zyr = write_zyr(t, WriterOptions::default());
    let file = Arc::new(ZyrFile::open(zyr).unwrap());
    let parquet = write_parquet(t, Codec::Zstd);
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(datafusion::parquet::file::metadata::PageIndexPolicy::Required);
    let metadata = ArrowReaderMetadata::load(&parquet, options).unwrap();
    let all: Vec<usize> = (0..t.schema.fields().len()).collect();
    let mut rng = Rng(42);
    let rows: Vec<u64> = (0..scale.pick(100, 500))
        .map(|_| rng.below(t.rows as u64))
        .collect();
    let (mut ours, mut theirs) = (Samples::new(), Samples::new());
    for &row in &rows {
        let (d, got) = time(|| file.read_rows(&all, row..row + 1).unwrap());
        ours.record_duration(d);
        let (d, expected) = time(|| {
            let selection = RowSelection::from(vec![
                RowSelector::skip(row as usize),
                RowSelector::select(1),
            ]);
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                parquet.clone(),
                metadata.clone(),
            )
            .with_row_selection(selection)
            .build()
            .unwrap();
            reader.map(|b| b.unwrap()).collect::<Vec<_>>()
        });
        theirs.record_duration(d);
        same_table(&t.schema, &expected, &[got], &format!("row {row}"));
    }
    let params = |m: Metric| {
        m.param("table", "lineitem")
            .param("columns", 16)
            .param("reads", rows.len() as u64)
    };
    run.push(
        params(Metric::latency_ms("random_row", &ours))
            .with_peer(
                "parquet (arrow-rs 59, zstd 3, page index + row selection)",
                theirs.spread_ms().p50,
            )
            .renamed("random_row_vs_parquet"),
    );
    if let Some(v) = vortex.as_mut() {
        let indices: Vec<u64> = rows.iter().take(100).copied().collect();
        let result = vortex_file(v, t, dir.path()).and_then(|(path, _, _)| {
            v.request(json!({"op": "take", "vortex": path.to_str().unwrap(), "indices": indices}))
        });
        match result {
            Ok(reply) => run.push(
                params(Metric::latency_ms("random_row", &ours))
                    .with_peer(&vortex_label(v), median(&times_ms(&reply)))
                    .renamed("random_row_vs_vortex"),
            ),
            Err(reason) => run.skip(format!("Vortex random row: {reason}")),
        }
    }
    run.finish().unwrap();
}

fn wide_table(columns: usize, rows: usize) -> Table {
    let fields: Vec<Field> = (0..columns)
        .map(|i| Field::new(format!("metric_{i:04}"), DataType::Int64, true))
        .collect();
    let arrays: Vec<ArrayRef> = (0..columns)
        .map(|i| {
            Arc::new(Int64Array::from_iter_values(
                (0..rows as i64).map(|r| r * (i as i64 + 1) % 1_000),
            )) as ArrayRef
        })
        .collect();
    Table::new(
        "wide",
        vec![RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()],
    )
}

// ---------------------------------------------------------------- pruning

/// How much of lineitem zone maps and bloom filters let a scan skip, against what Parquet's
/// row-group statistics allow (arrow-rs default: row groups of 1Mi rows) and its page index.
#[test]
fn pruning() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("pruning");
    let scale = run.scale();
    let t = lineitem(scale);
    let zyr = write_zyr(
        t,
        WriterOptions {
            bloom_filter_columns: vec!["l_comment".into()],
            ..Default::default()
        },
    );
    let file = Arc::new(ZyrFile::open(zyr).unwrap());
    let parquet = write_parquet(t, Codec::Zstd);
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&parquet)
        .unwrap();
    let orderkey = t.schema.index_of("l_orderkey").unwrap();
    let max_key = t
        .batches
        .iter()
        .map(|b| {
            datafusion::arrow::compute::max(b.column(orderkey).as_primitive::<Int64Type>()).unwrap()
        })
        .max()
        .unwrap();
    let comment = t.schema.index_of("l_comment").unwrap();
    let some_comment = t.batches[t.batches.len() / 2]
        .column(comment)
        .as_string::<i32>()
        .value(7)
        .to_owned();
    let shipdate = t.schema.index_of("l_shipdate").unwrap();
    let cases: Vec<(&str, ColumnPredicate)> = vec![
        (
            "orderkey_lt_1pct",
            ColumnPredicate {
                column: orderkey,
                op: PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(i128::from(max_key / 100))),
            },
        ),
        (
            "orderkey_eq",
            ColumnPredicate {
                column: orderkey,
                op: PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(i128::from(max_key / 2 + 1))),
            },
        ),
        (
            "shipdate_eq",
            ColumnPredicate {
                column: shipdate,
                op: PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(9_300)),
            },
        ),
        (
            "comment_eq",
            ColumnPredicate {
                column: comment,
                op: PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(some_comment.as_bytes().to_vec())),
            },
        ),
    ];
    for (name, p) in cases {
        let mut scan = file
            .scan(ScanOptions {
                projection: Some(vec![orderkey]),
                predicates: vec![p.clone()],
                filter_mode: FilterMode::Pushdown,
                ..Default::default()
            })
            .unwrap();
        let rows: usize = scan.by_ref().map(|b| b.unwrap().num_rows()).sum();
        let m = scan.metrics().clone();
        let expected = count_matching(t, &p);
        assert_eq!(
            rows, expected,
            "{name}: the scan must return exactly the matching rows"
        );
        let read = 1.0 - m.vectors_skipped as f64 / m.vectors as f64;
        let parquet_read = parquet_rows_skipped(&metadata, &p, t.rows).map(|skipped| 1.0 - skipped);
        let metric = Metric::single(&format!("{name}_rows_read"), "fraction", false, read)
            .param("matching_rows", expected as u64)
            .param("blocks_skipped", m.blocks_skipped)
            .param("blocks", m.blocks)
            .param("bloom_skips", m.bloom_skips);
        match parquet_read {
            Some(pr) => {
                run.push(metric.with_peer("parquet (arrow-rs 59 row-group statistics)", pr))
            }
            None => run.push(metric),
        }
    }

    // Files: lineitem split into 8 files by l_orderkey; a 1% range on it should leave 7 unread.
    let per_file = t.batches.len().div_ceil(8);
    let files: Vec<Arc<ZyrFile>> = t
        .batches
        .chunks(per_file)
        .map(|chunk| {
            let part = Table::new("part", chunk.to_vec());
            Arc::new(ZyrFile::open(write_zyr(&part, WriterOptions::default())).unwrap())
        })
        .collect();
    let p = ColumnPredicate {
        column: orderkey,
        op: PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(i128::from(max_key / 100))),
    };
    let untouched = files
        .iter()
        .filter(|f| {
            let mut scan = f
                .scan(ScanOptions {
                    projection: Some(vec![orderkey]),
                    predicates: vec![p.clone()],
                    ..Default::default()
                })
                .unwrap();
            scan.by_ref().for_each(|b| drop(b.unwrap()));
            scan.metrics().blocks_skipped == scan.metrics().blocks
        })
        .count();
    run.push(
        Metric::single(
            "files_skipped_orderkey_1pct",
            "fraction",
            true,
            untouched as f64 / files.len() as f64,
        )
        .param("files", files.len() as u64),
    );
    run.finish().unwrap();
}

fn count_matching(t: &Table, p: &ColumnPredicate) -> usize {
    t.batches
        .iter()
        .map(|b| {
            let c = b.column(p.column);
            (0..b.num_rows())
                .filter(|i| {
                    c.is_valid(*i)
                        && match (&p.op, c.data_type()) {
                            (PredicateOp::Cmp(op, Scalar::Int(v)), DataType::Int64) => {
                                op.holds(i128::from(c.as_primitive::<Int64Type>().value(*i)).cmp(v))
                            }
                            (PredicateOp::Cmp(op, Scalar::Int(v)), DataType::Date32) => op.holds(
                                i128::from(
                                    c.as_primitive::<datafusion::arrow::datatypes::Date32Type>()
                                        .value(*i),
                                )
                                .cmp(v),
                            ),
                            (PredicateOp::Cmp(op, Scalar::Bytes(v)), DataType::Utf8) => {
                                op.holds(c.as_string::<i32>().value(*i).as_bytes().cmp(v))
                            }
                            other => panic!("unhandled {other:?}"),
                        }
                })
                .count()
        })
        .sum()
}

/// The fraction of rows in row groups whose min/max rule the predicate out (integers only).
fn parquet_rows_skipped(
    metadata: &datafusion::parquet::file::metadata::ParquetMetaData,
    p: &ColumnPredicate,
    rows: usize,
) -> Option<f64> {
    let (PredicateOp::Cmp(op, Scalar::Int(v)), c) = (&p.op, p.column) else {
        return None;
    };
    let mut skipped = 0;
    for rg in metadata.row_groups() {
        let (min, max) = match rg.column(c).statistics()? {
            ParquetStatistics::Int64(s) => (i128::from(*s.min_opt()?), i128::from(*s.max_opt()?)),
            ParquetStatistics::Int32(s) => (i128::from(*s.min_opt()?), i128::from(*s.max_opt()?)),
            _ => return None,
        };
        let excluded = match op {
            CmpOp::Eq => *v < min || *v > max,
            CmpOp::Lt => min >= *v,
            CmpOp::LtEq => min > *v,
            CmpOp::Gt => max <= *v,
            CmpOp::GtEq => max < *v,
            CmpOp::NotEq => min == max && min == *v,
        };
        if excluded {
            skipped += rg.num_rows() as usize;
        }
    }
    Some(skipped as f64 / rows as f64)
}

// ---------------------------------------------------------------- encoded_filter

/// Filtered scans through DataFusion: `.zyr` (filters on encoded data, chosen per query) against
/// DataFusion's default Parquet scan and against Parquet with filter pushdown turned on. Answers
/// are compared on every shape; one shape keeps half the rows, to show pushdown does not slow
/// the non-selective case.
#[test]
fn encoded_filter() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("encoded_filter");
    let scale = run.scale();
    let t = lineitem(scale);
    let dir = tempfile::tempdir().unwrap();
    let zyr_path = dir.path().join("lineitem.zyr");
    std::fs::write(
        &zyr_path,
        write_zyr(
            t,
            WriterOptions {
                bloom_filter_columns: vec!["l_comment".into()],
                ..Default::default()
            },
        ),
    )
    .unwrap();
    let parquet_path = dir.path().join("lineitem.parquet");
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(
        &mut out,
        t.schema.clone(),
        Some(parquet_properties(Codec::Zstd, &["l_comment"])),
    )
    .unwrap();
    t.batches.iter().for_each(|b| w.write(b).unwrap());
    w.close().unwrap();
    std::fs::write(&parquet_path, out).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let context = |pushdown: bool| {
        let mut config = SessionConfig::new().with_target_partitions(2);
        config.options_mut().execution.parquet.pushdown_filters = pushdown;
        SessionContext::new_with_config(config)
    };
    let (zyr_ctx, parquet_ctx, pushdown_ctx) = (context(false), context(false), context(true));
    rt.block_on(async {
        zyr_ctx
            .register_table(
                "lineitem",
                // As SQL opens it: strings as views when the session reads Parquet's as views.
                Arc::new(
                    zyron_engine::zyr::ZyrTable::open_for(
                        zyr_path.to_str().unwrap(),
                        &zyr_ctx.state(),
                    )
                    .unwrap(),
                ),
            )
            .unwrap();
        for ctx in [&parquet_ctx, &pushdown_ctx] {
            ctx.register_parquet(
                "lineitem",
                parquet_path.to_str().unwrap(),
                ParquetReadOptions::default(),
            )
            .await
            .unwrap();
        }
    });
    let max_key = t
        .batches
        .iter()
        .map(|b| datafusion::arrow::compute::max(b.column(0).as_primitive::<Int64Type>()).unwrap())
        .max()
        .unwrap();
    let max_part = 200_000.0 * scale.pick(0.01, 1.0);
    let comment = t.batches[t.batches.len() / 3]
        .column(t.schema.index_of("l_comment").unwrap())
        .as_string::<i32>()
        .value(3)
        .replace('\'', "''");
    let shapes = [
        (
            "sorted_range_1pct",
            format!("l_orderkey < {}", max_key / 100),
        ),
        (
            "unsorted_range_1pct",
            format!("l_partkey < {}", (max_part / 100.0) as i64),
        ),
        (
            "dictionary_strings_4pct",
            "l_shipmode = 'MAIL' AND l_shipinstruct = 'NONE'".to_string(),
        ),
        ("string_equality_rare", format!("l_comment = '{comment}'")),
        ("half_the_rows", "l_quantity < 26".to_string()),
    ];
    for (name, predicate) in shapes {
        let sql = format!(
            "SELECT count(*), sum(l_extendedprice), sum(l_quantity * l_discount) FROM lineitem WHERE {predicate}"
        );
        let answer = |ctx: &SessionContext| -> (Duration, String) {
            rt.block_on(async {
                let start = Instant::now();
                let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                (
                    start.elapsed(),
                    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                        .unwrap()
                        .to_string(),
                )
            })
        };
        let (mut ours, mut default, mut pushdown) =
            (Samples::new(), Samples::new(), Samples::new());
        let contexts = [&zyr_ctx, &parquet_ctx, &pushdown_ctx];
        for round in 0..query_rounds(scale) + 1 {
            // Each round starts with another reader: a query right after a heavier one finds
            // its planner's code and data evicted, which a fixed order charges to one side.
            let mut answers: [(Duration, String); 3] = Default::default();
            for k in 0..3 {
                let i = (round + k) % 3;
                answers[i] = answer(contexts[i]);
            }
            let [(d1, a1), (d2, a2), (d3, a3)] = answers;
            assert_eq!(a1, a2, "{name}: .zyr and Parquet disagree");
            assert_eq!(a2, a3, "{name}: Parquet with and without pushdown disagree");
            if round > 0 {
                // The first round warms the page cache and DataFusion's metadata caches.
                ours.record_duration(d1);
                default.record_duration(d2);
                pushdown.record_duration(d3);
            }
        }
        let m = Metric::latency_ms(name, &ours)
            .param("predicate", predicate.as_str())
            .param("rows", t.rows as u64);
        run.push(
            m.clone()
                .with_peer(
                    "datafusion 55 parquet scan (default: no filter pushdown)",
                    default.spread_ms().p50,
                )
                .renamed(&format!("{name}_vs_parquet_default")),
        );
        run.push(
            m.with_peer(
                "datafusion 55 parquet scan (pushdown_filters = true)",
                pushdown.spread_ms().p50,
            )
            .renamed(&format!("{name}_vs_parquet_pushdown")),
        );
    }
    run.finish().unwrap();
}

// ---------------------------------------------------------------- checksum

/// What checking every byte costs, and that it catches damage.
#[test]
fn checksum() {
    let _turn = take_turn();
    let mut run = SuiteRun::new("checksum");
    let scale = run.scale();
    let t = lineitem(scale);
    let zyr = write_zyr(
        t,
        WriterOptions {
            bloom_filter_columns: vec!["l_comment".into()],
            ..Default::default()
        },
    );
    let (mut xxh3, mut crc32) = (Samples::for_values(), Samples::for_values());
    let gb = zyr.len() as f64 / 1e9;
    for _ in 0..scale.pick(5, 20) {
        let (d, a) = time(|| zyron_format::io::checksum64(&zyr));
        xxh3.record_value(gb / d.as_secs_f64());
        let (d, b) = time(|| crc32fast::hash(&zyr));
        crc32.record_value(gb / d.as_secs_f64());
        assert_ne!(a, 0);
        assert_ne!(b, 0);
    }
    run.push(
        Metric::throughput("xxh3_64", "GB/s", &xxh3)
            .param("bytes", zyr.len() as u64)
            .with_peer(
                "crc32 (crc32fast, as arrow-rs Parquet uses it for page checksums in this build)",
                crc32.spread(1.0).p50,
            ),
    );

    let file = Arc::new(ZyrFile::open(zyr.clone()).unwrap());
    let (mut checked, mut unchecked) = (Samples::for_values(), Samples::for_values());
    for _ in 0..rounds(scale) {
        for (verify, samples) in [(true, &mut checked), (false, &mut unchecked)] {
            let (d, rows) = time(|| {
                file.scan(ScanOptions {
                    verify_checksums: verify,
                    ..Default::default()
                })
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum::<usize>()
            });
            assert_eq!(rows, t.rows);
            samples.record_value(t.mb() / 1e3 / d.as_secs_f64());
        }
    }
    run.push(
        Metric::throughput("full_scan_verified", "GB/s", &checked).with_peer(
            "the same scan without verification",
            unchecked.spread(1.0).p50,
        ),
    );

    // Damage: flip one byte at a time after the header (the reserved header bytes and the
    // trailer's minor version are, by design, not checked); every flip must be reported.
    let flips = scale.pick(60, 100);
    let mut rng = Rng(7);
    let all: Vec<usize> = (0..t.schema.fields().len()).collect();
    let comment = t.schema.index_of("l_comment").unwrap();
    // A comment that exists, so zone maps cannot rule blocks out and every bloom filter is read.
    let needle = t.batches[0]
        .column(comment)
        .as_string::<i32>()
        .value(0)
        .as_bytes()
        .to_vec();
    let mut detected = 0;
    for _ in 0..flips {
        let mut damaged = zyr.to_vec();
        let at = 16 + rng.below((damaged.len() - 16 - 24) as u64) as usize;
        damaged[at] ^= 1 << rng.below(8);
        let outcome = ZyrFile::open(Bytes::from(damaged)).and_then(|f| {
            let f = Arc::new(f);
            f.read_rows(&all, 0..f.num_rows())?;
            let p = ColumnPredicate {
                column: comment,
                op: PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(needle.clone())),
            };
            f.scan(ScanOptions {
                projection: Some(vec![0]),
                predicates: vec![p],
                ..Default::default()
            })?
            .try_for_each(|b| b.map(drop))
        });
        if outcome.is_err() {
            detected += 1;
        }
    }
    assert_eq!(detected, flips, "every flipped bit must be reported");
    run.push(
        Metric::single(
            "bit_flips_detected",
            "fraction",
            true,
            detected as f64 / flips as f64,
        )
        .param("flips", flips as u64),
    );
    run.finish().unwrap();
}
