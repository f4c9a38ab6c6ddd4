//! Suite `storage`: the row heap as a table store, against PostgreSQL 15's
//! heap on the same disk, through the same client code over pgwire:
//! - `copy_load`: `COPY items FROM STDIN` of generated rows (rows/s);
//! - `bytes_per_row`: what the table occupies on disk after a CHECKPOINT
//!   (Zyron: the data directory without its WAL; PostgreSQL:
//!   `pg_total_relation_size`, table plus primary-key index);
//! - `full_scan`: `count(*)`, `sum(qty)`, `count(price)` over every row (rows/s);
//! - `range_scan`: 1,000-key primary-key ranges (rows/s).
//!
//! Every answer is checked against the one computed from the generator, on
//! both systems. The table has five columns of four kinds:
//! `id BIGINT PRIMARY KEY, qty INTEGER NOT NULL, price DOUBLE PRECISION`
//! (NULL in every tenth row), `name TEXT` (17 to 19 bytes),
//! `created TIMESTAMP`.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-server --test storage_bench -- --nocapture`

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use futures::SinkExt;
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use common::pgbench::{connect, start_peer};
use common::process::ZyronProcess;
use zyron_bench::{Metric, Samples, SuiteRun};

const PEER: &str = "PostgreSQL 15 (heap + btree)";
const RANGE_KEYS: i64 = 1_000;
const COPY_CHUNK_BYTES: usize = 1 << 20;

const CREATE: &str = "CREATE TABLE items (id BIGINT PRIMARY KEY, qty INTEGER NOT NULL, \
                      price DOUBLE PRECISION, name TEXT, created TIMESTAMP)";

fn qty(id: i64) -> i64 {
    id * 7 % 1000
}

/// Row `id` in COPY's text format.
fn row_text(id: i64, out: &mut String) {
    use std::fmt::Write;
    let price = if id % 10 == 0 {
        "\\N".to_owned()
    } else {
        format!("{:.2}", (id % 10_007) as f64 * 0.25)
    };
    let colour = ["red", "green", "blue"][(id % 3) as usize];
    let created = chrono::DateTime::from_timestamp(1_767_225_600 + id, 0)
        .unwrap()
        .naive_utc();
    writeln!(
        out,
        "{id}\t{}\t{price}\titem-{id:08}-{colour}\t{created}",
        qty(id)
    )
    .unwrap();
}

/// Loads rows `1..=rows` with COPY FROM STDIN; the time it took.
async fn copy_load(client: &Client, rows: i64) -> Duration {
    let started = Instant::now();
    let sink = client
        .copy_in("COPY items FROM STDIN")
        .await
        .expect("COPY starts");
    let mut sink = std::pin::pin!(sink);
    let mut chunk = String::with_capacity(COPY_CHUNK_BYTES + 256);
    for id in 1..=rows {
        row_text(id, &mut chunk);
        if chunk.len() >= COPY_CHUNK_BYTES {
            let bytes = bytes::Bytes::from(std::mem::take(&mut chunk));
            sink.send(bytes).await.expect("COPY data accepted");
        }
    }
    sink.send(bytes::Bytes::from(chunk)).await.unwrap();
    let copied = sink.as_mut().finish().await.expect("COPY completes");
    assert_eq!(copied, rows as u64, "COPY reports every row");
    started.elapsed()
}

/// `(count(*), sum(qty), count(price))` over ids `lo..=hi`, as the generator made them.
fn expected(lo: i64, hi: i64) -> (i64, i64, i64) {
    let ids = lo..=hi;
    let count = hi - lo + 1;
    let nulls = ids.clone().filter(|id| id % 10 == 0).count() as i64;
    (count, ids.map(qty).sum(), count - nulls)
}

async fn answer(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> (i64, i64, i64) {
    let row = client.query_one(sql, params).await.unwrap();
    (row.get(0), row.get(1), row.get(2))
}

const FULL_SCAN: &str = "SELECT count(*), CAST(sum(qty) AS BIGINT), count(price) FROM items";
const RANGE_SCAN: &str = "SELECT count(*), CAST(sum(qty) AS BIGINT), count(price) FROM items \
                          WHERE id BETWEEN $1 AND $2";

/// One full scan, checked; its time.
async fn full_scan(client: &Client, rows: i64) -> Duration {
    let started = Instant::now();
    let got = answer(client, FULL_SCAN, &[]).await;
    let elapsed = started.elapsed();
    assert_eq!(got, expected(1, rows), "full scan answer");
    elapsed
}

/// `queries` range scans at spread-out starting keys, each checked; their total time.
async fn range_scans(client: &Client, rows: i64, queries: i64) -> Duration {
    let statement = client.prepare(RANGE_SCAN).await.unwrap();
    let mut elapsed = Duration::ZERO;
    for q in 0..queries {
        let lo = 1 + (q * 7_919 * RANGE_KEYS) % (rows - RANGE_KEYS).max(1);
        let hi = lo + RANGE_KEYS - 1;
        let started = Instant::now();
        let row = client.query_one(&statement, &[&lo, &hi]).await.unwrap();
        elapsed += started.elapsed();
        let got: (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(got, expected(lo, hi.min(rows)), "range [{lo}, {hi}]");
    }
    elapsed
}

fn dir_bytes(path: &Path, skip: &str) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            if entry.file_name() != skip {
                total += dir_bytes(&entry.path(), skip);
            }
        } else {
            total += meta.len();
        }
    }
    total
}

/// Per system: the samples of each measurement.
struct Tally {
    load: Samples,
    scan: Samples,
    range: Samples,
    bytes_per_row: f64,
}

impl Tally {
    fn new() -> Self {
        Tally {
            load: Samples::for_values(),
            scan: Samples::for_values(),
            range: Samples::for_values(),
            bytes_per_row: 0.0,
        }
    }
}

fn rate(rows: i64, elapsed: Duration) -> f64 {
    rows as f64 / elapsed.as_secs_f64()
}

/// One round on one system: a fresh table, loaded, then scanned.
async fn round(client: &Client, tally: &mut Tally, rows: i64, scans: usize, ranges: i64) {
    client
        .batch_execute("DROP TABLE IF EXISTS items")
        .await
        .unwrap();
    client.batch_execute(CREATE).await.unwrap();
    tally
        .load
        .record_value(rate(rows, copy_load(client, rows).await));
    for _ in 0..scans {
        tally
            .scan
            .record_value(rate(rows, full_scan(client, rows).await));
    }
    let range_rows = ranges * RANGE_KEYS.min(rows);
    tally
        .range
        .record_value(rate(range_rows, range_scans(client, rows, ranges).await));
    client.batch_execute("CHECKPOINT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_suite() {
    let mut run_record = SuiteRun::new("storage");
    let rows: i64 = run_record.scale().pick(100_000, 2_000_000);
    let rounds = run_record.scale().pick(1, 3);
    let scans = run_record.scale().pick(2, 5);
    let ranges = run_record.scale().pick(50, 5_000);
    let zyron_dir = tempfile::tempdir().unwrap();
    let zyron = ZyronProcess::start(zyron_dir.path(), "").unwrap();
    let zyron_client = zyron.connect().await;
    let postgres = start_peer(
        &mut run_record,
        &[("shared_buffers", "1GB"), ("synchronous_commit", "on")],
    )
    .await;
    let pg_client = match &postgres {
        Some(pg) => Some(connect(pg.port()).await.unwrap()),
        None => None,
    };
    let (mut ours, mut theirs) = (Tally::new(), Tally::new());
    for _ in 0..rounds {
        round(&zyron_client, &mut ours, rows, scans, ranges).await;
        if let Some(client) = &pg_client {
            round(client, &mut theirs, rows, scans, ranges).await;
        }
    }
    ours.bytes_per_row = dir_bytes(&zyron_dir.path().join("data"), "wal") as f64 / rows as f64;
    if let Some(client) = &pg_client {
        let bytes: i64 = client
            .query_one("SELECT pg_total_relation_size('items')", &[])
            .await
            .unwrap()
            .get(0);
        theirs.bytes_per_row = bytes as f64 / rows as f64;
    }
    let peer = pg_client.is_some();
    let with_peer = |metric: Metric, value: f64| {
        let metric = metric.param("rows", rows);
        if peer {
            metric.with_peer(PEER, value)
        } else {
            metric
        }
    };
    let p50 = |s: &Samples| {
        if s.is_empty() { 0.0 } else { s.spread(1.0).p50 }
    };
    run_record.push(with_peer(
        Metric::throughput("copy_load", "rows/s", &ours.load),
        p50(&theirs.load),
    ));
    run_record.push(with_peer(
        Metric::single("bytes_per_row", "bytes", false, ours.bytes_per_row),
        theirs.bytes_per_row,
    ));
    run_record.push(with_peer(
        Metric::throughput("full_scan", "rows/s", &ours.scan),
        p50(&theirs.scan),
    ));
    run_record.push(with_peer(
        Metric::throughput("range_scan", "rows/s", &ours.range).param("keys_per_range", RANGE_KEYS),
        p50(&theirs.range),
    ));
    run_record.finish().unwrap();
}
