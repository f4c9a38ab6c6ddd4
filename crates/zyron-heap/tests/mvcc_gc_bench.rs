//! Suite `mvcc_gc`: how fast garbage collection reclaims row versions no
//! snapshot can see, next to PostgreSQL 15's VACUUM reclaiming the same
//! number of dead tuples of the same table shape, in the same run.
//!
//! Each round builds a table of `rows` rows updated `updates` times each
//! (so `rows * updates` dead versions), then collects garbage once with a
//! horizon above every update. GC runs on one thread: the figure is per
//! core. PostgreSQL's table gets the same rows and the same UPDATEs, with
//! autovacuum off, and `VACUUM` is timed by psql's `\timing`.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-heap --test mvcc_gc_bench -- --nocapture`

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use zyron_bench::postgres::{TempPostgres, bin_dir, wait_until_accepting};
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_heap::catalog::{DEFAULT_SCHEMA, TableDef};
use zyron_heap::table::{GcStats, HeapTable, MemoryBudget};
use zyron_txn::Snapshot;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
}

/// A table of `rows` rows, each updated `updates` times at increasing
/// commit timestamps; returns it and the newest timestamp.
fn versioned_table(rows: i64, updates: i64) -> (HeapTable, u64) {
    let def = TableDef {
        id: 1,
        schema: DEFAULT_SCHEMA.into(),
        name: "gc".into(),
        columns: TableDef::columns_from(&schema()),
        primary_key: vec![0],
        checks: vec![],
        fillfactor: None,
    };
    let table = HeapTable::new(def, MemoryBudget::new(usize::MAX / 2)).unwrap();
    let encode = |v: i64| {
        let ids = Int64Array::from_iter_values(0..rows);
        let values = Int64Array::from_iter_values((0..rows).map(|_| v));
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(values)]).unwrap();
        table.codec().encode(&batch).unwrap()
    };
    let first = encode(0);
    let refs: Vec<&[u8]> = first.iter().map(|r| r.as_slice()).collect();
    let keys = table.keys_of(&refs).unwrap();
    let mut ts = 1;
    let placed: Vec<(u64, &[u8])> = (0..).zip(refs.iter().copied()).collect();
    table.redo_inserts(&placed, &keys, ts);
    for update in 1..=updates {
        ts += 1;
        for (slot, row) in encode(update).into_iter().enumerate() {
            table.redo_update(slot as u64, row, ts).unwrap();
        }
    }
    (table, ts)
}

/// Sum of `v` over the rows a snapshot at `read_ts` sees.
fn visible_sum(table: &HeapTable, read_ts: u64) -> i64 {
    let snapshot = Snapshot { read_ts, txn: 0 };
    (0..table.page_count())
        .map(|page| {
            let (_, batch) = table.scan_page(&snapshot, page, None).unwrap();
            batch
                .column(1)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .sum::<i64>()
        })
        .sum()
}

/// PostgreSQL: the same table, the same updates, then a timed VACUUM.
struct PostgresPeer {
    pg: TempPostgres,
}

impl PostgresPeer {
    fn start() -> Result<Self, String> {
        bin_dir()?;
        let mut pg = TempPostgres::init()?;
        pg.spawn(&[("shared_buffers", "1GB"), ("autovacuum", "off")])?;
        wait_until_accepting(pg.port(), Duration::from_secs(60))?;
        Ok(Self { pg })
    }

    fn psql(&self, commands: &[&str]) -> Result<String, String> {
        let mut command = Command::new(bin_dir()?.join("psql"));
        command.args([
            "-X",
            "-q",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ]);
        command.args([
            "-p",
            &self.pg.port().to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
        ]);
        for c in commands {
            command.args(["-c", c]);
        }
        let out = command.output().map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Builds the dead tuples, vacuums; returns (VACUUM time, sum of v).
    fn round(&self, rows: i64, updates: i64) -> Result<(Duration, i64), String> {
        let mut setup = vec![
            "DROP TABLE IF EXISTS gc".to_owned(),
            "CREATE TABLE gc (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
             WITH (autovacuum_enabled = off)"
                .to_owned(),
            format!(
                "INSERT INTO gc SELECT i, 0 FROM generate_series(0, {}) i",
                rows - 1
            ),
        ];
        setup.extend((1..=updates).map(|u| format!("UPDATE gc SET v = {u}")));
        // Make every update's transaction old enough for VACUUM to reclaim.
        setup.push("CHECKPOINT".to_owned());
        let refs: Vec<&str> = setup.iter().map(String::as_str).collect();
        self.psql(&refs)?;
        let out = self.psql(&["\\timing on", "VACUUM gc", "SELECT sum(v) FROM gc"])?;
        let millis: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("Time: "))
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("no VACUUM timing in psql's output: {out}"))?;
        let sum = out
            .lines()
            .find_map(|l| l.trim().parse::<i64>().ok())
            .ok_or_else(|| format!("no sum in psql's output: {out}"))?;
        Ok((Duration::from_secs_f64(millis / 1000.0), sum))
    }
}

#[test]
fn mvcc_gc_suite() {
    let mut run = SuiteRun::new("mvcc_gc");
    let rows: i64 = run.scale().pick(20_000, 1_000_000);
    let updates: i64 = run.scale().pick(3, 5);
    let rounds = run.scale().pick(2, 5);
    let dead = (rows * updates) as u64;
    let expected_sum = rows * updates;

    let peer = match PostgresPeer::start() {
        Ok(peer) => Some(peer),
        Err(reason) => {
            run.skip(format!("PostgreSQL 15: {reason}"));
            None
        }
    };
    let mut ours = Samples::for_values();
    let mut clean_pass = Samples::for_values();
    let mut theirs = Samples::for_values();
    zyron_bench::interleave::<String>(
        rounds,
        |_| {
            let (table, newest) = versioned_table(rows, updates);
            let started = Instant::now();
            let stats = table.collect_garbage(newest);
            let elapsed = started.elapsed();
            assert_eq!(stats.versions_removed, dead, "every dead version reclaimed");
            assert_eq!(stats.slots_freed, 0, "no live row lost");
            assert_eq!(visible_sum(&table, newest + 1), expected_sum);
            ours.record_value(dead as f64 / elapsed.as_secs_f64());
            // A second pass finds nothing, and no slot is marked for a look at its versions:
            // what the background collector costs a table nobody updates.
            let started = Instant::now();
            let again = table.collect_garbage(newest);
            assert_eq!(
                again,
                GcStats::default(),
                "a clean table has no slot marked"
            );
            clean_pass.record_value(rows as f64 / started.elapsed().as_secs_f64());
            Ok(())
        },
        |_| {
            if let Some(peer) = &peer {
                let (elapsed, sum) = peer.round(rows, updates)?;
                assert_eq!(sum, expected_sum, "PostgreSQL's answer equals ours");
                theirs.record_value(dead as f64 / elapsed.as_secs_f64());
            }
            Ok(())
        },
    )
    .unwrap();

    let mut reclaim = Metric::throughput("gc_reclaim_per_core", "tuples/s", &ours)
        .param("rows", rows)
        .param("versions_per_row", updates + 1)
        .param("dead_versions", dead)
        .param("threads", 1);
    if peer.is_some() {
        reclaim = reclaim.with_peer(
            "PostgreSQL 15 VACUUM (autovacuum off, same rows and updates)",
            Metric::throughput("pg", "tuples/s", &theirs).value,
        );
    }
    run.push(reclaim);
    run.push(
        Metric::throughput("gc_clean_pass_per_core", "rows/s", &clean_pass)
            .param("rows", rows)
            .param(
                "note",
                "a pass over a table with nothing to reclaim (no slot marked)",
            ),
    );
    let path = run.finish().unwrap();
    println!("mvcc_gc results: {}", path.display());
}
